"""Bad input at the command line: exit 2, one line naming the file, no traceback, no output."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracesim.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def check_error(p: subprocess.CompletedProcess, *needles: str) -> None:
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture
def truncated(tmp_path, public_traces):
    data = (public_traces / "mi250_minitoy.json.gz").read_bytes()
    p = tmp_path / "trunc.json.gz"
    p.write_bytes(data[: len(data) // 3])
    return p


def test_truncated_gzip_replay(truncated, tmp_path):
    out = tmp_path / "out"
    check_error(run("replay", str(truncated), "-o", str(out)), "trunc.json.gz", "gzip")
    assert not out.exists()


def test_truncated_gzip_extract(truncated, tmp_path):
    out = tmp_path / "w"
    check_error(run("extract", str(truncated), "-o", str(out)), "trunc.json.gz")
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [truncated]  # no temp dirs left behind


def test_non_trace_json(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"lr": 0.1}))
    check_error(run("validate", "self-replay", str(p)), "config.json", "traceEvents")


def test_op_table_without_steps(public_traces, tmp_path):
    """A single trace file without steps replays its whole window (docs/replay-trace.md); an
    op table without steps has none to replay."""
    from tracesim.trace.kineto import load_trace_json, op_table_from_events
    from tracesim.trace.schema import write_op_table

    trace = public_traces / "a100_simple_add.trace.json.gz"
    table = tmp_path / "simple_add.parquet"
    write_op_table(op_table_from_events(load_trace_json(trace), trace), table)
    out = tmp_path / "o"
    check_error(run("replay", str(table), "-o", str(out)), "simple_add.parquet", "ProfilerStep")
    assert not out.exists()


def test_missing_file(tmp_path):
    check_error(run("validate", "self-replay", str(tmp_path / "nope.json.gz")), "nope.json.gz", "not found")


def test_plain_text_not_json(tmp_path):
    p = tmp_path / "notes.json.gz"
    with gzip.open(p, "wt") as fh:
        fh.write("hello")
    check_error(run("extract", str(p), "-o", str(tmp_path / "w")), "notes.json.gz", "JSON")


def test_validate_json_shape(public_traces):
    p = run("validate", "self-replay", "--json", str(public_traces / "mi250_minitoy.json.gz"))
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)["results"]
    assert len(res) == 2
    for r in res:
        assert {"source", "rank", "step", "measured_s", "predicted_s", "rel_error"} <= set(r)
        assert r["step"].startswith("ProfilerStep#")


def test_extract_writes_workload(public_traces, tmp_path):
    out = tmp_path / "w"
    p = run("extract", str(public_traces / "mi250_minitoy.json.gz"), "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert {x.name for x in out.iterdir()} == {"ops.parquet", "tasks.parquet", "edges.parquet",
                                                "lanes.parquet", "graph.yaml"}


def test_trace_without_host_ops_names_the_file(tmp_path):
    """A trace whose rank has kernels but no host events (a legacy trace cut down to its
    kernels): the error names the file, not a placeholder."""
    kern = {"ph": "X", "cat": "Kernel", "name": "copy_kernel", "pid": 0, "tid": 7,
            "ts": 1665536373729077, "dur": 4,
            "args": {"device": 0, "stream": 7, "correlation": 538860, "external id": 0}}
    p = tmp_path / "rank1.json"
    p.write_text(json.dumps({"distributedInfo": {"rank": 1}, "traceEvents": [kern]}))
    out = tmp_path / "out"
    check_error(run("replay", str(p), "-o", str(out)), "rank1.json", "rank 1", "no host")
    assert not out.exists()


def test_layout_option_on_a_trace_without_a_model(public_traces):
    """A layout flag on a recording that names no model says which flag wants a model spec
    and what a trace replay takes instead."""
    trace = str(public_traces / "mi250_minitoy.json.gz")
    check_error(run("replay", trace, "--dtype", "bf16"), "--dtype needs a model spec",
                "--cluster, --device and --dp apply")
    check_error(run("replay", trace, "--retarget", "template", "--cluster", "h100x8"),
                "--retarget template needs a model spec")


def test_an_output_path_that_is_a_file(tmp_path):
    """-o naming an existing file: exit 2 naming it, before any work, the file untouched."""
    f = tmp_path / "taken"
    f.write_text("mine")
    check_error(run("replay", "--model", "gpt-tiny", "--cluster", "h100x8", "-o", str(f)),
                "taken", "-o: exists and is not a directory")
    assert f.read_text() == "mine"
    check_error(run("replay", "--model", "gpt-tiny", "--cluster", "h100x8", "-o",
                    str(f / "sub")), "-o: cannot create the directory")
    for cmd in (["extract", str(ROOT / "tests" / "data" / "traces" / "astra-megatron-gpt-tp8-a100")],
                ["convert", "--model", "gpt-tiny", "--cluster", "h100x8", "--to", "chakra"]):
        check_error(run(*cmd, "-o", str(f / "sub" / "w")), "-o: cannot create the directory")


def test_a_replay_larger_than_memory_is_refused_before_it_builds(tmp_path):
    """10^11 micro-batches of Llama 3 70B on one node: exit 2 at once naming --global-batch
    and the memory it would need, no result directory (the build ran until killed before)."""
    out = tmp_path / "out"
    check_error(run("replay", "--model", "llama3-70b", "--cluster", "h100x8", "--tp", "8",
                    "--global-batch", "100000000000", "-o", str(out)),
                "--global-batch", "layer passes", "GiB")
    assert not out.exists()


def test_graph_memory_check_counts_layer_passes():
    from tracesim.engine.symmetry import BYTES_PER_LAYER_PASS, check_graph_memory
    from tracesim.errors import InputError

    check_graph_memory(1000, limit=1000 * BYTES_PER_LAYER_PASS)  # fits exactly
    with pytest.raises(InputError, match="1,001 layer passes"):
        check_graph_memory(1001, limit=1000 * BYTES_PER_LAYER_PASS)
    # a symmetry-reduced replay's passes cost more each (they carry their copies' batches)
    from tracesim.engine.symmetry import BYTES_PER_REDUCED_PASS

    check_graph_memory(1000, limit=1000 * BYTES_PER_REDUCED_PASS, reduced=True)
    with pytest.raises(InputError, match="1,001 layer passes"):
        check_graph_memory(1001, limit=1000 * BYTES_PER_REDUCED_PASS, reduced=True)
    with pytest.raises(InputError):
        check_graph_memory(1000, limit=1000 * BYTES_PER_LAYER_PASS, reduced=True)


@pytest.mark.parametrize("flag, value", [("--host-speed", "1e-12"), ("--host-speed", "1000"),
                                         ("--jitter", "2")])
def test_float_options_outside_their_range_are_usage_errors(flag, value):
    """--host-speed 1e-12 overflowed the launch times (internal OverflowError); a jitter CV
    of 10^12 replayed a faster step than none."""
    p = run("replay", "--model", "llama3-8b", "--cluster", "dgx-b200", "--tp", "2", flag, value)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert flag in p.stderr and "range" in p.stderr


def test_float_option_ranges_hold_from_python():
    from tracesim.errors import InputError
    from tracesim.options import ReplayOptions

    assert ReplayOptions.from_mapping({"host_speed": 0.5}).host_speed == 0.5
    for key, bad in (("host_speed", 1e-300), ("host_speed", 101), ("jitter", 1.5)):
        with pytest.raises(InputError, match="--" + key.replace("_", "-")):
            ReplayOptions.from_mapping({key: bad})
