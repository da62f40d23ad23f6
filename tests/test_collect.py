"""`tracesim collect` end to end: real 1- and 2-rank collections, and bad input."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tracesim.cli import cli
from tracesim.trace.bundle import load_bundle

pytest.importorskip("torch")

FAST = ["--batch", "2", "--warmup", "1", "--steps", "1", "--measure", "3", "--calibration-cycles", "2"]


def _collect(*args: str):
    return CliRunner().invoke(cli, ["collect", *args], obj={})


def _trace(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("collect") / "tiny1"
    result = _collect("--workload", "gpt-tiny", *FAST, "-o", str(out))
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("collect") / "tiny2"
    result = _collect("--workload", "gpt-tiny", "--ranks", "2", *FAST, "-o", str(out))
    assert result.exit_code == 0, result.output
    return out


def _check_common(path: Path, ranks: int) -> dict:
    b = load_bundle(path)
    meta = b.meta
    assert b.ranks == list(range(ranks))
    assert meta["format"] == "tracesim-bundle" and meta["version"] == 1
    assert meta["device"] == "cpu" and meta["torch_version"].startswith("2.13.0")
    assert meta["model"]["name"] == "gpt-tiny" and meta["model"]["hidden"] == 160
    assert (meta["batch"], meta["seq_len"]) == (2, 128)
    assert meta["parallel"] == {"tp": 1, "pp": 1, "dp": ranks, "cp": 1, "ep": 1}
    assert (meta["warmup_steps"], meta["profiled_steps"], meta["calibration_cycles"]) == (1, 1, 2)
    assert meta["threads"] * ranks <= meta["cores"]
    st = meta["measured_step_time_s"]
    assert st["n"] == 3 and 0 < st["min"] <= st["median"] <= st["max"] < 10
    po = meta["profiler_overhead"]
    assert 500 < po["per_event_ns"] < 1_000_000 and po["method"]
    assert len(meta["per_rank"]) == ranks
    for r in b.ranks:
        entry = b.rank_meta(r)
        assert entry is not None and len(entry["step_times_s"]) == 3
        assert len(entry["minor_faults"]) == 3 and min(entry["minor_faults"]) >= 0
        (events,) = entry["profiled_step_events"]
        # one recorded cycle between two calibration cycles: its profiled step is the
        # session's step 10 (cycles of settle, 2 or 3 plain, warm-up, profiled: 5 + 6 - 1)
        cycles = entry["cycles"]
        assert [c["recorded"] for c in cycles] == [False, True, False]
        assert [len(c["plain_ms"]) for c in cycles] == [2, 3, 2]
        assert events["cycle"] == 1 and events["step"] == "ProfilerStep#10"
        assert events["cpu_ops"] > 500
        assert events["module_scopes"] == 28  # 2 x 11 block scopes + embed x3, norm_f, head, loss
        assert events["events"] == events["cpu_ops"] + events["module_scopes"] + events["annotations"]
        assert events["minor_faults"] >= 0
        trace = _trace(b.trace_path(r))
        xs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
        assert [e["name"] for e in xs if e["name"].startswith("ProfilerStep#")] == ["ProfilerStep#10"]
        assert sum(e.get("cat") == "cpu_op" for e in xs) == events["cpu_ops"]
        assert any(e["name"] == "nn.Module: blocks.1.mlp.fc2" for e in xs)
        with gzip.open(b.et_path(r), "rt") as fh:
            et = json.load(fh)
        assert len(et["nodes"]) > 500
        # the calibration cycles' steps are not in the bundle's execution trace
        assert [n["name"] for n in et["nodes"] if n["name"].startswith("ProfilerStep#")] == \
            ["ProfilerStep#10"]
        # the execution trace joins the Kineto trace through the record-function id
        rf_ids = {a["value"] for n in et["nodes"] for a in n.get("attrs", []) if a["name"] == "rf_id"}
        kineto_ids = {e["args"]["Record function id"] for e in xs
                      if e.get("cat") == "cpu_op" and "Record function id" in e.get("args", {})}
        assert len(kineto_ids) > 500 and len(kineto_ids & rf_ids) > 0.9 * len(kineto_ids)
    return meta


@pytest.mark.slow
def test_one_rank_bundle(one_rank):
    meta = _check_common(one_rank, 1)
    assert meta["backend"] is None
    assert sorted(p.name for p in one_rank.iterdir()) == ["meta.yaml", "rank0"]
    assert not [p for p in one_rank.parent.iterdir() if p.name.startswith(".")]


@pytest.mark.slow
def test_two_rank_bundle_records_every_rank_and_the_gradient_all_reduce(two_ranks):
    meta = _check_common(two_ranks, 2)
    assert meta["backend"] == "gloo"
    b = load_bundle(two_ranks)
    for r in b.ranks:
        trace = _trace(b.trace_path(r))
        assert trace["distributedInfo"]["rank"] == r
        assert trace["distributedInfo"]["world_size"] == 2
        names = [e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"]
        assert "gloo:all_reduce" in names and "c10d::allreduce_" in names


@pytest.mark.slow
def test_collect_replaces_an_existing_bundle(one_rank, tmp_path):
    out = tmp_path / "again"
    out.mkdir()
    (out / "meta.yaml").write_text((one_rank / "meta.yaml").read_text())
    (out / "stale.txt").write_text("old")
    result = _collect("--workload", "gpt-tiny", *FAST, "--threads", "1", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert not (out / "stale.txt").exists()
    assert load_bundle(out).meta["threads"] == 1
    assert "measured step median" in result.stdout


def _one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("tracesim: error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize(("args", "text"), [
    (["--workload", "no-such-model"], "--workload: unknown model 'no-such-model'"),
    (["--workload", "gpt-tiny", "--tp", "2"], "--tp: only data parallelism is collected"),
    (["--workload", "gpt-tiny", "--pp", "4"], "--pp: only data parallelism is collected"),
    (["--workload", "gpt-tiny", "--ranks", "2", "--dp", "3"], "--dp: must equal --ranks (2)"),
    (["--workload", "missing.yaml"], "missing.yaml: file not found"),
])
def test_bad_flags_exit_2(tmp_path, args, text):
    out = tmp_path / "out"
    line = _one_line_error(_collect(*args, "-o", str(out)))
    assert text in line
    assert not out.exists()


def test_bad_model_file_exits_2(tmp_path):
    spec = tmp_path / "m.yaml"
    spec.write_text(yaml.safe_dump({"name": "m", "family": "gpt", "layers": 2, "hidden": 64,
                                    "heads": 4, "vocab": 100, "seq_len": 16, "colour": 1}))
    line = _one_line_error(_collect("--workload", str(spec), "-o", str(tmp_path / "o")))
    assert f"{spec}: colour: unknown key" in line


def test_refuses_to_overwrite_a_non_bundle(tmp_path):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "data.txt").write_text("keep me")
    line = _one_line_error(_collect("--workload", "gpt-tiny", "-o", str(out)))
    assert "not a bundle; refusing to overwrite" in line
    assert (out / "data.txt").read_text() == "keep me"


def test_collector_side_input_error_exits_2(tmp_path):
    """An error found by the collector process (fp8 cannot be trained) is a one-line exit 2."""
    spec = tmp_path / "fp8.yaml"
    spec.write_text(yaml.safe_dump({"name": "m", "family": "gpt", "layers": 1, "hidden": 32,
                                    "heads": 2, "vocab": 50, "seq_len": 8, "dtype": "fp8"}))
    out = tmp_path / "o"
    line = _one_line_error(_collect("--workload", str(spec), *FAST, "-o", str(out)))
    assert "fp8 training cannot be collected" in line and "dtype" in line
    assert not out.exists() and os.listdir(tmp_path) == ["fp8.yaml"]


def test_failed_collection_leaves_no_bundle(tmp_path, monkeypatch):
    """A collection that fails after it started writing leaves neither bundle nor temp dir."""
    import tracesim.collectors.run as run

    def failing(cfg):
        (Path(cfg.bundle_dir) / "rank0").mkdir()
        (Path(cfg.bundle_dir) / "rank0" / "trace.json.gz").write_bytes(b"partial")
        raise RuntimeError("rank 0 died")

    monkeypatch.setattr(run, "_run_ranks", failing)
    out = tmp_path / "b"
    args = run.parse_args(["--model", "gpt-tiny", *FAST, "-o", str(out)])
    with pytest.raises(RuntimeError, match="rank 0 died"):
        run.collect(args)
    assert os.listdir(tmp_path) == []
