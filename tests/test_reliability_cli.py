"""The error contract of every command, and ``--debug``.

Bad input: exit 2 and exactly one stderr line ``tracesim: error: FILE: WHERE: WHAT`` that
names the file (or flag) and, where there is one, the key / line / event. A bug: exit 1 and
one line ``tracesim: internal error: ...`` with the hint to rerun with ``--debug``; with
``--debug`` the traceback. tests/test_cli_errors.py covers traces at the command line; this
file goes across the other commands.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, debug: bool = False, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    pre = ["--debug"] if debug else []
    return subprocess.run([sys.executable, "-m", "tracesim.cli", *pre, *args], capture_output=True,
                          text=True, cwd=cwd, timeout=180)


def _files(tmp: Path) -> dict[str, Path]:
    model = yaml.safe_load((ROOT / "workloads" / "gpt-tiny.yaml").read_text())
    model["heads"] = "five"
    cluster = yaml.safe_load((ROOT / "topologies" / "h100x8.yaml").read_text())
    cluster["intra_node"]["bandwidth_GBps"] = -1
    out = {"model": tmp / "bad_model.yaml", "cluster": tmp / "bad_cluster.yaml",
           "space": tmp / "bad_space.yaml", "aicb": tmp / "bad_wl.txt",
           "json": tmp / "not_a_trace.json", "result": tmp / "bad_result"}
    out["model"].write_text(yaml.safe_dump(model))
    out["cluster"].write_text(yaml.safe_dump(cluster))
    out["space"].write_text(yaml.safe_dump({"base": {"model": "gpt-tiny", "cluster": "h100x8"},
                                            "axes": {"tq": [1, 2]}}))
    lines = (ROOT / "tests" / "data" / "interop" / "moe_ep2.txt").read_text().splitlines()
    lines[3] = lines[3].replace("ALLGATHER", "ALLGATHERX", 1)
    out["aicb"].write_text("\n".join(lines) + "\n")
    out["json"].write_text('{"lr": 0.1}')
    out["result"].mkdir()
    (out["result"] / "result.json").write_text("{not json")
    return out


#: (command line with {placeholders}, what must appear in the one error line)
CASES = [
    ("replay --model {model} --cluster h100x8 --dp 2", ["bad_model.yaml", "heads"]),
    ("replay --model gpt-tiny --cluster {cluster} --dp 2", ["bad_cluster.yaml", "bandwidth_GBps"]),
    ("replay --model gpt-tiny --cluster nope-cluster --dp 2", ["--cluster", "nope-cluster"]),
    ("replay --model gpt-tiny --cluster h100x8 --dp 16", ["--dp", "16"]),
    ("replay", ["SOURCE"]),
    ("extract {json} -o {tmp}/w", ["not_a_trace.json", "traceEvents"]),
    ("validate self-replay {json}", ["not_a_trace.json", "traceEvents"]),
    ("netbench --cluster {cluster} --collective all_reduce --ranks 8 --sizes 1M",
     ["bad_cluster.yaml", "bandwidth_GBps"]),
    ("netbench --cluster h100x8 --collective all_reduce --ranks 8 --sizes 1Q", ["--sizes", "1Q"]),
    ("sweep {space} -o {tmp}/sw --dry-run", ["bad_space.yaml", "tq"]),
    ("convert {aicb} --to chakra -o {tmp}/et/wl", ["bad_wl.txt", "line 4"]),
    ("compare {result} {result}", ["result.json"]),
    ("collect --workload nope -o {tmp}/b", ["--workload", "nope"]),
]


@pytest.mark.slow
def test_bad_input_exits_2_with_one_line_naming_file_and_place(tmp_path):
    f = _files(tmp_path)
    cmds = [c.format(tmp=tmp_path, **f).split() for c, _ in CASES]
    with ThreadPoolExecutor(max_workers=4) as pool:
        procs = list(pool.map(lambda a: run(*a), cmds))
    for (cmd, needles), p in zip(CASES, procs, strict=True):
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode == 2, (cmd, p.returncode, p.stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith("tracesim: error: "), (cmd, p.stderr)
        for n in needles:
            assert n in lines[0], (cmd, n, lines[0])
    assert not (tmp_path / "w").exists() and not (tmp_path / "et").exists()


def test_debug_shows_the_traceback_of_an_input_error(tmp_path):
    f = _files(tmp_path)
    p = run("replay", "--model", str(f["model"]), "--cluster", "h100x8", "--dp", "2", debug=True)
    assert p.returncode == 1
    assert "Traceback (most recent call last)" in p.stderr
    assert "tracesim.errors.InputError" in p.stderr and "bad_model.yaml" in p.stderr


_BUG = """
import sys
import tracesim.trace.sources as s
def boom(*a, **k):
    raise ZeroDivisionError("a planted bug")
s.load_source = boom
from tracesim.cli import main
sys.argv = ["tracesim", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
def test_internal_error_exit_1_with_debug_hint(debug, tmp_path):
    """A bug (here a planted one) is exit 1: one line with the hint, or with --debug the
    traceback."""
    args = (["--debug"] if debug else []) + ["validate", "self-replay", str(tmp_path / "x.json")]
    p = subprocess.run([sys.executable, "-c", _BUG, *args], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert p.returncode == 1, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    if debug:
        assert "Traceback (most recent call last)" in p.stderr and "a planted bug" in p.stderr
    else:
        assert len(lines) == 1, p.stderr
        assert lines[0] == ("tracesim: internal error: ZeroDivisionError: a planted bug "
                            "(this is a bug; rerun with --debug for the traceback)")


@pytest.mark.slow
def test_every_command_has_help():
    from tracesim.cli import cli

    names = sorted(cli.commands)
    with ThreadPoolExecutor(max_workers=4) as pool:
        procs = list(pool.map(lambda name: run(name, "--help"), names))
    for name, p in zip(names, procs, strict=True):
        assert p.returncode == 0 and "Usage:" in p.stdout, (name, p.stderr)
