"""Determinism: the same inputs give byte-identical results, whatever PYTHONHASHSEED is.

Subprocess tests run ``tracesim replay ... -o OUT`` under PYTHONHASHSEED=0 and =1 (and
once more under 0) and compare ``result.json`` byte for byte, with one exception: the
retarget result's ``replay.replay_wall_s`` / ``replay.wall_s`` are wall-clock timings of
the run itself and are masked before the comparison. The output directory is the same
path in every run (result.json names it). ``ops.parquet`` and the decompressed timeline are
compared too. Engine-level tests check the documented tie-break order.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PUBLIC_TRACES
from tests.helpers import graph
from tracesim.engine.replay import replay

ROOT = Path(__file__).resolve().parents[1]
#: keys of result.json that hold wall-clock time of the run (masked, see module docstring)
WALL_CLOCK_KEYS = ("replay_wall_s", "wall_s")
_MASK = re.compile(r'("(?:' + "|".join(WALL_CLOCK_KEYS) + r')": )[-0-9.e+]+')


def _run(args: list[str], out: Path, seed: int) -> dict[str, bytes]:
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    p = subprocess.run([sys.executable, "-m", "tracesim.cli", *args, "-o", str(out)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    files = {"result.json": _MASK.sub(r"\1<wall-clock>", (out / "result.json").read_text()).encode()}
    if (out / "ops.parquet").exists():
        files["ops.parquet"] = (out / "ops.parquet").read_bytes()
    if (out / "timeline.json.gz").exists():
        files["timeline.json"] = gzip.decompress((out / "timeline.json.gz").read_bytes())
    return files


def _check_same(args: list[str], out: Path) -> dict[str, bytes]:
    runs = [_run(args, out, seed) for seed in (0, 1, 0)]
    for name in runs[0]:
        for i, r in enumerate(runs[1:], 1):
            assert r[name] == runs[0][name], f"{name} differs between run 0 and run {i}"
    return runs[0]


@pytest.mark.slow
@pytest.mark.skipif(not PUBLIC_TRACES.is_dir(), reason=f"no public traces at {PUBLIC_TRACES}")
def test_self_replay_result_is_byte_identical_across_hash_seeds(tmp_path):
    files = _check_same(["replay", str(PUBLIC_TRACES / "mi250_minitoy.json.gz")], tmp_path / "out")
    assert b"<wall-clock>" not in files["result.json"]  # nothing masked: fully byte-identical
    assert b'"iteration_time_s"' in files["result.json"]


@pytest.mark.slow
def test_retarget_result_is_byte_identical_across_hash_seeds(tmp_path):
    files = _check_same(["replay", "--model", "gpt3-1.7b", "--cluster", "h100x8", "--dp", "8"],
                        tmp_path / "out")
    text = files["result.json"].decode()
    assert text.count("<wall-clock>") == len(WALL_CLOCK_KEYS)  # the only masked values
    assert '"mode": "retarget"' in text and {"ops.parquet", "timeline.json"} <= set(files)


def test_wall_clock_mask_only_touches_its_keys():
    text = '{"wall_s": 0.452, "replay_wall_s": 1e-3, "iteration_time_s": 0.1, "x_wall_s2": 3}'
    assert _MASK.sub(r"\1<wall-clock>", text) == (
        '{"wall_s": <wall-clock>, "replay_wall_s": <wall-clock>, "iteration_time_s": 0.1, '
        '"x_wall_s2": 3}')


# ----------------------------------------------------------------------------- tie-breaks


def T(rank, lane, dur, kind="cpu", name="op", **kw):
    return {"rank": rank, "lane": lane, "kind": kind, "name": name, "dur_ns": dur, **kw}


def test_simultaneous_ends_are_seen_in_lane_index_order():
    """Four lanes whose tasks end at the same instant: observers see them by lane index,
    whatever order the tasks were listed in (the engine docstring's tie-break)."""
    order = [3, 1, 0, 2]
    tasks = [T(0, ln, 10, name=f"t{ln}") for ln in order]
    seen: list[int] = []
    g = graph(tasks)
    replay(g, observers=[lambda t, s, e: seen.append(int(g.tasks["lane"].iat[t]))])
    assert seen == [0, 1, 2, 3]


def test_successors_released_together_start_in_task_id_order():
    """A task that releases three waiting successors at once: they start (and, with equal
    durations, end) in ascending task id, and each gets the same start time."""
    tasks = [T(0, 0, 5, name="root"), T(0, 3, 7, name="c"), T(0, 1, 7, name="a"),
             T(0, 2, 7, name="b")]
    seen: list[int] = []
    g = graph(tasks, edges=[(0, 1), (0, 2), (0, 3)])
    r = replay(g, observers=[lambda t, s, e: seen.append(t)])
    assert r.start_ns[1:].tolist() == [5, 5, 5]
    # released in task id order (1 on lane 3, then 2 on lane 1, then 3 on lane 2), so they
    # end in task id order too, not in lane order
    assert seen == [0, 1, 2, 3]


def test_replay_is_repeatable_in_process():
    tasks = [T(r, r, 10 + 3 * r, gap_ns=r) for r in range(6)] + [
        T(r, r, 5, "coll", "ar", match_key=f"x{r // 3}", group=r // 3) for r in range(6)]
    g = graph(tasks, groups=[(0, 1, 2), (3, 4, 5)])
    a, b = replay(g), replay(g)
    assert a.start_ns.tolist() == b.start_ns.tolist() and a.events == b.events
