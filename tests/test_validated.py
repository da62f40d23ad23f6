"""What a retarget says about its own accuracy: the published runs of its stack, model kind
and GPU, as ``scripts/validation_summary.py`` measured them (tracesim.report.validated)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tracesim.cli import cli
from tracesim.report.validated import _shipped, lookup, model_kind, summarize, validation_text


def test_groups_by_stack_kind_and_gpu_and_by_stack_and_kind() -> None:
    rows = [("megatron-core", "dense", "h100", 0.2), ("megatron-core", "dense", "h100", -0.1),
            ("megatron-core", "dense", "b200", 0.05), ("megatron-core", "moe", "gb200", -0.3)]
    data = summarize(rows)
    h100 = next(g for g in data["groups"] if g["device"] == "h100")
    assert h100["rows"] == 2 and h100["mean_error"] == pytest.approx(0.05)
    assert h100["mean_abs_error"] == pytest.approx(0.15) and h100["within_10pct"] == 1
    assert h100["within_20pct"] == 2 and h100["largest"] == pytest.approx(0.2)
    dense = next(g for g in data["kinds"] if g["kind"] == "dense")
    assert dense["rows"] == 3 and dense["devices"] == ["b200", "h100"]
    # this GPU's group, else the stack and kind on the GPUs that have rows, else none
    assert lookup("megatron-core", "dense", "h100", data)["scope"] == "device"
    other = lookup("megatron-core", "dense", "mi355x", data)
    assert other["scope"] == "stack" and other["rows"] == 3
    assert lookup("megatron-core", "hybrid", "h100", data) is None
    assert lookup("eager", "dense", "h100", data) is None
    assert "predicted 5.0% faster than measured" in validation_text(lookup("megatron-core", "dense", "h100", data))
    assert "slower" in validation_text(lookup("megatron-core", "moe", "gb200", data))
    assert "none on this GPU" in validation_text(other)
    assert "no published hybrid runs of the eager stack" in validation_text(None, "eager", "hybrid")


def test_model_kinds() -> None:
    assert model_kind("llama", 0) == "dense"
    assert model_kind("moe", 128) == "moe"
    assert model_kind("hybrid", 128) == "hybrid"


def test_the_shipped_summary_covers_the_validated_rows() -> None:
    """The groups add up to the rows of docs/accuracy.md's tables, every group's numbers are
    consistent, and the dense megatron-core H100 group is there."""
    data = _shipped()
    total = data["all"]["rows"]
    assert sum(g["rows"] for g in data["groups"]) == total == sum(k["rows"] for k in data["kinds"])
    assert sum(g["within_20pct"] for g in data["groups"]) == data["all"]["within_20pct"]
    for g in data["groups"]:
        assert abs(g["mean_error"]) <= g["mean_abs_error"] <= abs(g["largest"]) + 1e-9
        assert g["within_10pct"] <= g["within_20pct"] <= g["rows"]
    assert lookup("megatron-core", "dense", "h100") is not None


def test_a_retarget_reports_its_validation() -> None:
    run = CliRunner()
    args = ["replay", "--model", "llama3-8b", "--cluster", "h100x8", "--tp", "8", "--seq-len",
            "2048"]
    r = run.invoke(cli, [*args, "--json"])
    assert r.exit_code == 0, r.output
    val = json.loads(r.output)["validation"]
    assert (val["stack"], val["kind"]) == ("megatron-core", "dense")
    assert val["group"]["device"] == "h100" and val["group"]["rows"] > 10
    r = run.invoke(cli, args)
    assert "validated" in r.output and "published dense megatron-core runs on h100" in r.output
    r = run.invoke(cli, [*args, "--stack", "eager", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["validation"]["group"] is None


def test_the_summary_names_the_tables_the_script_replays() -> None:
    """A table added to benchmarks/published (or the shared references) without rerunning
    ``scripts/validation_summary.py`` leaves the shipped summary stale: caught here."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "validation_summary.py"
    spec = importlib.util.spec_from_file_location("validation_summary", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert [p.name for p in mod.tables()] == _shipped()["tables"], (
        "run python scripts/validation_summary.py")
