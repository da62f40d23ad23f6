"""scripts/bench.py: generated inputs, one measured run, the exponent fit, the docs block."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from tracesim.catalog import load_cluster
from tracesim.specs.model import load_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench", ROOT / "scripts" / "bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_generated_cluster_and_model(bench, tmp_path: Path) -> None:
    c = load_cluster(bench.h100_cluster(2048, tmp_path))
    assert c.gpus == 16384 and c.inter_node.topology == "fat_tree" and c.inter_node.levels == 3
    m = load_model(bench.model_with_layers("llama3-70b", 24, tmp_path))
    assert m.layers == 24 and m.hidden == 8192
    opts = bench.scaling_gpus_opts(4096, tmp_path)
    assert opts["dp"] == 64 and opts["global_batch"] == 64 * 64 and opts["tp"] * opts["pp"] == 64


def test_fit_exponent(bench) -> None:
    xs = [1024, 2048, 4096, 8192, 16384]
    assert bench.fit_exponent(xs, [3 * x**0.25 for x in xs]) == pytest.approx(0.25)
    assert bench.fit_exponent(xs, [5.0] * 5) == pytest.approx(0.0)
    assert bench.fit_exponent([1], [1]) is None


def test_one_run_in_a_subprocess(bench) -> None:
    r = bench.run({"model": "gpt3-1.7b", "cluster": "h100x8", "tp": 8, "seq_len": 512,
                   "template": "analytic"}, timeout_s=300)
    assert "error" not in r, r
    assert r["gpus"] == 8 and r["tasks"] > 0 and r["events"] > 0 and r["wall_s"] > 0
    assert 0.05 < r["peak_rss_gib"] < 4 and r["iteration_time_s"] > 0 and not r["symmetric"]
    bad = bench.run({"model": "no-such-model", "cluster": "h100x8"}, timeout_s=300)
    assert bad["error"].startswith("exit")


def test_per_op_variant_replays_the_same_iteration(bench) -> None:
    opts = {"model": "gpt3-1.7b", "cluster": "h100x8", "tp": 2, "pp": 2, "global_batch": 8,
            "seq_len": 512, "template": "analytic", "full": True}
    merged = bench.child(opts)
    per_op = bench.child({**opts, "per_op": True})
    assert per_op["tasks"] > 2 * merged["tasks"]
    assert per_op["iteration_time_s"] == merged["iteration_time_s"]


def _row(**kw):
    base = {"wall_s": 1.5, "peak_rss_gib": 0.3, "iteration_time_s": 2.0, "tasks": 10, "events": 20,
            "events_per_s": 13, "symmetric": True, "network": "estimate", "gpus": 128,
            "load_before": 1.0}
    return {**base, **kw}


def test_docs_block_replaced_and_other_sections_kept(bench, tmp_path: Path, monkeypatch) -> None:
    data = {
        "machine": {"date": "d", "cpu": "cpu", "cores": 2, "memory_gib": 24, "python": "3.11",
                    "numpy": "2", "simpy": "4", "commit": "abc"},
        "command": "python scripts/bench.py",
        "scenarios": {"S1": _row(), "S4": _row(wall_s=400.0, symmetric=False, network="flow"),
                      "S3": {"error": "timed out after 900 s", "load_before": 2.0}},
        "agreement": {"S1": {"reduced": _row(iteration_time_s=1.001), "reduced_flow": _row(),
                             "full": _row(iteration_time_s=1.0)}},
        "scaling_gpus": [{"gpus": g, "net": "estimate", **_row(wall_s=g / 1000)} for g in (1024, 2048)],
        "exponents_gpus": {"estimate": {"wall": 1.0, "events": 0.0, "rss": 0.1}},
    }
    md = bench.markdown(data)
    assert "| S1 | reduced, estimate | 128 |" in md and "< 10 (met)" in md
    assert "< 300 (**missed**)" in md and "timed out after 900 s" in md
    assert "+0.100% (met)" in md and "**1.000** (estimate" in md
    monkeypatch.setattr(bench, "DOCS", tmp_path)
    monkeypatch.setattr(bench, "plot", lambda data, path: path.write_bytes(b"png"))
    doc = tmp_path / "performance.md"
    doc.write_text(f"# Performance\n\n## Replay at scale\n\n{bench.BEGIN}\nold\n{bench.END}\n\n"
                   "## Sweeps\n\nkept\n")
    bench.write_docs(data)
    text = doc.read_text()
    assert "old" not in text and "## Sweeps\n\nkept" in text and md in text
    assert (tmp_path / "performance_scaling.png").exists()
    assert not math.isnan(bench.fit_exponent([1, 2], [1, 2]))
