"""Fuzzing at the command line: damaged inputs through real ``tracesim`` subprocesses.

The library-level fuzz tests (test_fuzz_traces.py, test_fuzz_specs.py) run thousands of
cases in-process; this one checks the contract the user sees on a few dozen of the same
kinds of damage: exit code 0 or 2, never 1; on 2 exactly one stderr line
``tracesim: error: ...`` and no traceback; no output written on error; and an answer within
a timeout (a hang fails the test). Cases come from a fixed seed, so every run repeats them;
they run four at a time.
"""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from tests.conftest import PUBLIC_TRACES
from tests.test_fuzz_mutators import (
    ACTIONS,
    BOUNDARY_NUMBERS,
    CASES,
    edit_tree,
    fuzz_report,  # noqa: F401  (module fixture: case counts for docs/reliability.md)
    gz,
    mutate_bytes,
)

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 180
SEED = 20261129

_VALUES = [None, True, -1, 0, 2, 1e999, "x", "", [], {}, [1, 2], {"a": 1}, *BOUNDARY_NUMBERS]
_TOKENS = [b'"', b",", b"{", b"}", b"[", b"]", b":", b"-", b"null", b"\xff", b"\n", b"- ", b"&a"]


def _byte_edits(rng: random.Random) -> list[tuple[str, int, bytes]]:
    return [(rng.choice(["replace", "insert", "delete", "dup"]), rng.randrange(2**31),
             rng.choice(_TOKENS)) for _ in range(rng.randint(1, 3))]


def _tree_edits(rng: random.Random) -> list[tuple[int, str, object, str]]:
    return [(rng.randrange(2**31), rng.choice(ACTIONS), rng.choice(_VALUES), "k")
            for _ in range(rng.randint(1, 3))]


def _cases(tmp: Path) -> list[tuple[str, list[str], Path | None]]:
    """(input class, tracesim arguments, output path that must not appear on error)."""
    rng = random.Random(SEED)
    trace = gzip.decompress((PUBLIC_TRACES / "mi250_minitoy.json.gz").read_bytes())
    trace_tree = json.loads(trace)
    model = yaml.safe_load((ROOT / "workloads" / "gpt-tiny.yaml").read_text())
    cluster = yaml.safe_load((ROOT / "topologies" / "h100x8.yaml").read_text())
    aicb = (ROOT / "tests" / "data" / "interop" / "moe_ep2.txt").read_bytes()
    space = {"base": {"model": "gpt-tiny", "cluster": "h100x8", "global_batch": 16},
             "axes": {"tp": [1, 2], "pp": [1, 2]}, "constraints": ["tp * pp * dp == gpus"]}
    out: list[tuple[str, list[str], Path | None]] = []
    n = 0

    def new(name: str, data: bytes) -> Path:
        nonlocal n
        n += 1
        d = tmp / f"case{n:02d}"
        d.mkdir()
        (d / name).write_bytes(data)
        return d / name

    for i in range(2):  # traces -> replay -o / extract / validate
        cut = trace[: rng.randrange(len(trace))]
        p = new("t.json.gz" if i % 2 else "t.json", gz(cut) if i % 2 else cut)
        out.append(("trace: truncated", ["replay", str(p), "-o", str(p.parent / "out")],
                    p.parent / "out"))
    for _ in range(2):
        p = new("t.json", mutate_bytes(trace, _byte_edits(rng)))
        out.append(("trace: byte edits", ["extract", str(p), "-o", str(p.parent / "w")],
                    p.parent / "w"))
    for i in range(4):
        p = new("t.json", json.dumps(edit_tree(trace_tree, _tree_edits(rng))).encode())
        args = (["replay", str(p), "-o", str(p.parent / "out")] if i % 2
                else ["validate", "self-replay", "--json", str(p)])
        out.append(("trace: type confusion", args, p.parent / "out" if i % 2 else None))
    for _ in range(2):
        p = new("m.yaml", yaml.safe_dump(edit_tree(model, _tree_edits(rng))).encode())
        out.append(("model spec", ["replay", "--model", str(p), "--cluster", "h100x8", "--dp", "2",
                                   "-o", str(p.parent / "out")], p.parent / "out"))
    for _ in range(2):
        p = new("c.yaml", yaml.safe_dump(edit_tree(cluster, _tree_edits(rng))).encode())
        out.append(("cluster spec", ["replay", "--model", "gpt-tiny", "--cluster", str(p),
                                     "--dp", "2", "--json"], None))
    for _ in range(2):
        p = new("w.txt", mutate_bytes(aicb, _byte_edits(rng)))
        out.append(("aicb workload", ["convert", str(p), "--to", "chakra", "-o",
                                      str(p.parent / "et" / "wl")], p.parent / "et"))
    for _ in range(2):
        p = new("space.yaml", yaml.safe_dump(edit_tree(space, _tree_edits(rng))).encode())
        out.append(("sweep space", ["sweep", str(p), "-o", str(p.parent / "sw"), "--dry-run"],
                    None))
    return out


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracesim.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=TIMEOUT_S)


@pytest.mark.slow
@pytest.mark.skipif(not PUBLIC_TRACES.is_dir(), reason=f"no public traces at {PUBLIC_TRACES}")
def test_damaged_inputs_exit_0_or_2_with_one_line(tmp_path):
    cases = _cases(tmp_path)
    with ThreadPoolExecutor(max_workers=4) as pool:
        procs = list(pool.map(lambda c: _run(c[1]), cases))
    for (cls, args, out), p in zip(cases, procs, strict=True):
        what = f"{cls}: tracesim {' '.join(args)}"
        assert p.returncode in (0, 2), f"{what}\nexit {p.returncode}\n{p.stderr[-3000:]}"
        assert "Traceback" not in p.stderr, what
        if p.returncode == 2:
            lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
            assert len(lines) == 1 and lines[0].startswith("tracesim: error: "), (what, p.stderr)
            if out is not None:
                assert not out.exists(), f"{what}: output written despite the error"
        CASES.setdefault(f"CLI: {cls}", {})
        key = f"exit {p.returncode}"
        CASES[f"CLI: {cls}"][key] = CASES[f"CLI: {cls}"].get(key, 0) + 1
