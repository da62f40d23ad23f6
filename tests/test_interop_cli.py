"""``tracesim convert`` end to end: exit codes, outputs, replaying imported files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tracesim.cli import cli

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "interop"


class _Result:
    def __init__(self, r: Any):
        self.returncode, self.stdout, self.stderr = r.exit_code, r.stdout, r.stderr


def run(*args: str) -> _Result:
    """``tracesim convert ARGS`` in-process (the CLI group, as the console script runs it)."""
    return _Result(CliRunner().invoke(cli, ["convert", *args], obj={}))


def check_error(p: _Result, *needles: str) -> None:
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_aicb_to_chakra_to_tracesim_to_aicb_and_replay(tmp_path):
    src = DATA / "moe_ep2.txt"
    p = run(str(src), "--to", "chakra", "-o", str(tmp_path / "et" / "moe"))
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in (tmp_path / "et").iterdir()) == sorted(
        [f"moe.{r}.et" for r in range(8)] + ["moe.json"])
    p = run(str(tmp_path / "et"), "--to", "tracesim", "-o", str(tmp_path / "wl"),
            "--replay-on", "h100x8", "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["from"] == "chakra" and res["ranks"] == 8
    rep = res["replay"]
    assert rep["gpus"] == 8 and rep["cluster"] == "h100x8" and rep["iteration_time_s"] > 0
    assert set(rep["breakdown"]["exposed_comm_s"]) >= {"tp", "dp", "ep"}
    p = run(str(tmp_path / "wl"), "--to", "aicb", "-o", str(tmp_path / "back.txt"))
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "back.txt").read_text() == src.read_text()


def test_built_workload_to_chakra(tmp_path):
    p = run("--model", "gpt3-1.7b", "--cluster", "h100x8", "--tp", "2", "--pp", "2", "--dp", "2",
            "--global-batch", "4", "--seq-len", "256", "--to", "chakra", "-o", str(tmp_path), "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["from"] == "built" and res["ranks"] == 8
    assert len(list(tmp_path.glob("workload.*.et"))) == 8
    groups = json.loads((tmp_path / "workload.json").read_text())
    assert [0, 1] in groups.values()  # a TP pair


def test_a_folder_of_rank_traces_converts_as_replay_reads_it(tmp_path):
    """A job's per-rank Kineto traces in one folder (the 8-rank Megatron TP8 recording), the
    input ``replay`` takes, converts to Chakra ET; the ET folder is then not taken for traces
    (its communicator file is JSON too)."""
    src = ROOT / "tests" / "data" / "traces" / "astra-megatron-gpt-tp8-a100"
    p = run(str(src), "--to", "chakra", "-o", str(tmp_path / "et" / "meg"), "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["from"] == "trace" and res["ranks"] == 8
    p = run(str(tmp_path / "et"), "--to", "tracesim", "-o", str(tmp_path / "wl"), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["from"] == "chakra"


def test_bad_inputs_exit_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.txt"
    lines = (DATA / "moe_ep2.txt").read_text().splitlines()
    lines[3] = "\t".join(lines[3].split("\t")[:10])
    bad.write_text("\n".join(lines) + "\n")
    check_error(run(str(bad), "--to", "chakra", "-o", str(tmp_path / "x")), "bad.txt", "line 4",
                "expected 12 columns")
    nohead = tmp_path / "nohead.txt"
    nohead.write_text((DATA / "moe_ep2.txt").read_text().replace(" ga: 1", ""))
    check_error(run(str(nohead), "--to", "tracesim", "-o", str(tmp_path / "y")), "nohead.txt",
                "line 1", "ga")
    check_error(run(str(tmp_path / "missing.txt"), "--to", "chakra", "-o", str(tmp_path / "z")),
                "missing.txt")
    check_error(run(str(DATA / "moe_ep2.txt"), "--to", "chakra", "-o", str(tmp_path / "w"),
                    "--system", str(DATA / "astrasim_system.json")), "--replay-on")
    check_error(run(str(DATA / "moe_ep2.txt"), "--to", "aicb", "-o", str(tmp_path / "v.txt"),
                    "--tp", "2"), "--tp")
    check_error(run("--to", "aicb", "-o", str(tmp_path / "u.txt")), "SOURCE")


@pytest.mark.parametrize("fmt", ["chakra", "aicb"])
def test_replay_with_astrasim_system(tmp_path, fmt):
    out = tmp_path / ("o.txt" if fmt == "aicb" else "o")
    p = run(str(DATA / "moe_ep2.txt"), "--to", fmt, "-o", str(out), "--replay-on", "h100x8",
            "--system", str(DATA / "astrasim_system.json"))
    assert p.returncode == 0, p.stderr
    assert "iteration time" in p.stdout
    assert "warning: system configuration: scheduling-policy LIFO" in p.stdout


def test_console_entry_point_exit_code(tmp_path):
    """The installed entry point (a real process): malformed AICB -> exit 2, one line."""
    import subprocess
    import sys

    bad = tmp_path / "bad.txt"
    bad.write_text((DATA / "moe_ep2.txt").read_text().replace("\n5\n", "\n7\n"))
    p = subprocess.run([sys.executable, "-m", "tracesim.cli", "convert", str(bad), "--to",
                        "chakra", "-o", str(tmp_path / "o")], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    check_error(p, "bad.txt", "line 8", "announces 7 rows")  # type: ignore[arg-type]
    assert not (tmp_path / "o.0.et").exists()


def test_nodes_scale_a_built_workload_and_its_et_replay(tmp_path):
    """``--nodes`` sizes the cluster a workload is built for and the one its ET replays on:
    16 ranks on two nodes of h100x128, the same iteration either way."""
    lay = ["--model", "gpt3-1.7b", "--cluster", "h100x128", "--nodes", "2", "--tp", "2",
           "--dp", "8", "--global-batch", "8", "--seq-len", "256"]
    p = run(*lay, "--to", "chakra", "-o", str(tmp_path / "et" / "w"), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["ranks"] == 16
    on = CliRunner().invoke(cli, ["replay", str(tmp_path / "et"), "--cluster", "h100x128",
                                  "--nodes", "2", "--json"], obj={})
    native = CliRunner().invoke(cli, ["replay", *lay, "--json"], obj={})
    assert on.exit_code == 0 and native.exit_code == 0, on.output + native.output
    a, b = json.loads(on.stdout), json.loads(native.stdout)
    assert a["gpus"] == b["gpus"] == 16
    assert a["iteration_time_s"] == b["iteration_time_s"]


def test_an_imported_workload_takes_only_cluster_and_nodes(tmp_path):
    """Options a task graph with its own durations cannot honour are an error, not ignored."""
    src = DATA / "moe_ep2.txt"
    assert run(str(src), "--to", "tracesim", "-o", str(tmp_path / "wl")).returncode == 0
    for extra in (["--device", "b200"], ["--straggler", "0:2"]):
        r = CliRunner().invoke(cli, ["replay", str(tmp_path / "wl"), "--cluster", "h100x8", *extra],
                               obj={})
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and extra[0] in lines[0], r.output
    ok = CliRunner().invoke(cli, ["replay", str(tmp_path / "wl"), "--cluster", "h100x8"], obj={})
    assert ok.exit_code == 0, ok.output


def test_replay_reads_an_aicb_file_as_convert_replays_it(tmp_path):
    """``tracesim replay W.txt --cluster C`` is ``convert W.txt --replay-on C`` without a
    written workload; it needs a cluster and takes no other option."""
    src = str(DATA / "moe_ep2.txt")
    direct = CliRunner().invoke(cli, ["replay", src, "--cluster", "h100x8", "--json"], obj={})
    assert direct.exit_code == 0, direct.output
    p = run(src, "--to", "tracesim", "-o", str(tmp_path / "wl"), "--replay-on", "h100x8", "--json")
    assert p.returncode == 0, p.stderr
    converted = json.loads(p.stdout)["replay"]
    assert json.loads(direct.stdout)["iteration_time_s"] == converted["iteration_time_s"]
    for bad, word in ((["--cluster", "h100x8", "--tp", "2"], "--tp"), ([], "--cluster")):
        r = CliRunner().invoke(cli, ["replay", src, *bad], obj={})
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and word in lines[0], r.output


def test_a_replay_that_cannot_run_leaves_no_converted_output(tmp_path):
    """``--replay-on`` replays before anything is written: a cluster too small for the
    workload is bad input and the output is not there afterwards."""
    import yaml

    spec = yaml.safe_load((ROOT / "topologies" / "h100x8.yaml").read_text())
    spec.update(name="one-gpu", gpus_per_node=1, nodes=1)
    spec.pop("inter_node", None)
    small = tmp_path / "one.yaml"
    small.write_text(yaml.safe_dump(spec))
    out = tmp_path / "wl"
    p = run(str(DATA / "moe_ep2.txt"), "--to", "tracesim", "-o", str(out), "--replay-on", str(small))
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert not out.exists()
