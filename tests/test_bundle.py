"""Bundle reading and meta.yaml validation (no torch needed)."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest
import yaml

from tracesim.errors import InputError
from tracesim.trace.bundle import REQUIRED_META_KEYS, is_bundle, load_bundle

ROOT = Path(__file__).resolve().parents[1]
STORED = ROOT / "workloads" / "bundles"

META = {
    "format": "tracesim-bundle",
    "version": 1,
    "device": "cpu",
    "torch_version": "2.13.0+cpu",
    "threads": 1,
    "model": {"name": "m", "family": "gpt", "layers": 2, "hidden": 160, "heads": 5,
              "vocab": 1000, "seq_len": 128, "dtype": "fp32"},
    "batch": 2,
    "seq_len": 128,
    "parallel": {"tp": 1, "pp": 1, "dp": 2, "cp": 1, "ep": 1},
    "ranks": 2,
    "warmup_steps": 1,
    "profiled_steps": 1,
    "measured_step_time_s": {"median": 0.05, "min": 0.04, "max": 0.07, "n": 3},
    "profiler_overhead": {"per_event_ns": 8000, "method": "test"},
}


def _write(path: Path, meta: dict, ranks: int = 2) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "meta.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    for r in range(ranks):
        (path / f"rank{r}").mkdir(exist_ok=True)
        with gzip.open(path / f"rank{r}" / "trace.json.gz", "wt") as fh:
            json.dump({"traceEvents": []}, fh)
    with gzip.open(path / "rank0" / "et.json.gz", "wt") as fh:
        json.dump({"nodes": []}, fh)
    return path


def test_valid_bundle_loads(tmp_path):
    b = load_bundle(_write(tmp_path / "b", META))
    assert b.ranks == [0, 1]
    assert b.trace_path(1) == tmp_path / "b" / "rank1" / "trace.json.gz"
    assert b.et_path(0) == tmp_path / "b" / "rank0" / "et.json.gz"
    assert b.et_path(1) is None
    assert b.model.hidden == 160 and b.model.kv_heads == 5
    assert b.measured_step_time_s == {"median": 0.05, "min": 0.04, "max": 0.07, "n": 3}
    assert b.profiler_overhead["per_event_ns"] == 8000
    assert b.device == "cpu"
    assert is_bundle(tmp_path / "b")


def test_plain_trace_json_is_accepted(tmp_path):
    path = _write(tmp_path / "b", META)
    gz = path / "rank1" / "trace.json.gz"
    (path / "rank1" / "trace.json").write_text(gzip.decompress(gz.read_bytes()).decode())
    gz.unlink()
    assert load_bundle(path).trace_path(1).name == "trace.json"


def _mutated(**changes) -> dict:
    meta = copy.deepcopy(META)
    for key, value in changes.items():
        if value is None:
            meta.pop(key)
        else:
            meta[key] = value
    return meta


@pytest.mark.parametrize(("changes", "where", "text"), [
    ({"format": "something-else"}, "format", "tracesim-bundle"),
    ({"version": 3}, "version", "not supported"),
    ({"version": "one"}, "version", "expected a number"),
    ({"ranks": 0}, "ranks", "> 0"),
    ({"batch": 2.5}, "batch", "integer"),
    ({"device": 3}, "device", "string"),
    ({"parallel": {"tp": 1, "pp": 1, "dp": 3}}, "parallel", "does not match ranks"),
    ({"parallel": {"tp": 1, "pp": 1, "dp": 2, "zz": 1}}, "parallel.zz", "unknown key"),
    ({"measured_step_time_s": {"median": 0.1, "min": 0.2, "max": 0.3, "n": 3}},
     "measured_step_time_s", "min <= median <= max"),
    ({"measured_step_time_s": {"median": 0.1, "min": 0.1, "max": 0.3}},
     "measured_step_time_s.n", "missing"),
    ({"model": {**META["model"], "colour": "red"}}, "model.colour", "unknown key"),
    ({"model": {**META["model"], "heads": 7}}, "model.heads", "not divisible"),
    ({"seq_len": 256}, "seq_len", "exceeds"),
    ({"profiler_overhead": {"method": "x"}}, "profiler_overhead.per_event_ns", "missing"),
])
def test_bad_meta_names_file_and_key(tmp_path, changes, where, text):
    path = _write(tmp_path / "b", _mutated(**changes))
    with pytest.raises(InputError) as info:
        load_bundle(path)
    assert info.value.file == str(path / "meta.yaml")
    assert info.value.where == where
    assert text in info.value.message


@pytest.mark.parametrize("key", REQUIRED_META_KEYS[2:])
def test_every_required_key_is_required(tmp_path, key):
    path = _write(tmp_path / "b", _mutated(**{key: None}))
    with pytest.raises(InputError) as info:
        load_bundle(path)
    assert (info.value.where, info.value.message) == (key, "missing required key")


def test_missing_rank_trace(tmp_path):
    path = _write(tmp_path / "b", META, ranks=1)
    with pytest.raises(InputError, match="no trace for rank 1"):
        load_bundle(path)


def test_not_a_bundle(tmp_path):
    with pytest.raises(InputError, match="bundle not found"):
        load_bundle(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    assert not is_bundle(tmp_path / "empty")
    with pytest.raises(InputError, match="no meta.yaml"):
        load_bundle(tmp_path / "empty")
    (tmp_path / "file").write_text("x")
    assert not is_bundle(tmp_path / "file")
    with pytest.raises(InputError, match="not a bundle directory"):
        load_bundle(tmp_path / "file")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "meta.yaml").write_text("format: [unclosed\n")
    with pytest.raises(InputError, match="invalid YAML"):
        load_bundle(bad)
    (bad / "meta.yaml").write_text("- a list\n")
    with pytest.raises(InputError, match="expected a mapping"):
        load_bundle(bad)


STORED_NAMES = ("gpt-tiny", "llama-tiny", "moe-tiny")


@pytest.mark.parametrize("name", STORED_NAMES)
def test_stored_template_bundles(name):
    """The default templates: valid, one rank, one profiled step, small, right model."""
    b = load_bundle(STORED / name)
    assert b.ranks == [0]
    assert b.meta["profiled_steps"] == 1
    assert b.model.name == name
    assert b.meta["parallel"] == {"tp": 1, "pp": 1, "dp": 1, "cp": 1, "ep": 1}
    po = b.profiler_overhead
    assert po is not None and 1_000 < po["per_event_ns"] < 100_000
    total = sum(f.stat().st_size for f in (STORED / name).rglob("*") if f.is_file())
    assert total < 1_000_000, total
    with gzip.open(b.trace_path(0), "rt") as fh:
        events = json.load(fh)["traceEvents"]
    steps = [e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert steps == ["ProfilerStep#1"]
    with gzip.open(b.et_path(0), "rt") as fh:
        assert len(json.load(fh)["nodes"]) > 100


def test_version_2_needs_only_what_any_recording_has(tmp_path):
    """A recording of any job (collect -- CMD, or an import): device, torch version, ranks."""
    from tracesim.fileio import write_yaml
    from tracesim.trace.bundle import load_bundle

    b = tmp_path / "b"
    for r in (0, 3):
        (b / f"rank{r}").mkdir(parents=True)
        (b / f"rank{r}" / "trace.json").write_text('{"traceEvents": []}')
    meta = {"format": "tracesim-bundle", "version": 2, "device": "NVIDIA A100-SXM4-80GB",
            "torch_version": "2.4.0", "ranks": [0, 3], "world_size": 8}
    write_yaml(b / "meta.yaml", meta)
    bundle = load_bundle(b)
    assert bundle.ranks == [0, 3] and bundle.model is None and bundle.measured_step_time_s is None
    write_yaml(b / "meta.yaml", {**meta, "ranks": [0, 0]})
    with pytest.raises(InputError, match="ranks: expected a count or a list"):
        load_bundle(b)
    write_yaml(b / "meta.yaml", {**meta, "ranks": [0, 1]})
    with pytest.raises(InputError, match="no trace for rank 1"):
        load_bundle(b)
