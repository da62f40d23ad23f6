"""The profiler's cost per event as a bundle records it, and how it is split between op kinds.

How well the unprofiled self-replay of CPU bundles matches the unprofiled steps is a
wall-clock measurement: ``benchmarks/cpu/accuracy_cpu_selfreplay.py`` (docs/accuracy.md).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tracesim.trace.overhead import profiler_overhead, rank_overheads

ROOT = Path(__file__).resolve().parents[1]
HAS_TORCH = importlib.util.find_spec("torch") is not None


def test_overhead_prefers_the_step_calibration() -> None:
    """Current bundles: per_op_ns / per_annotation_ns; older ones: the loops, then per_event_ns;
    per rank when every rank measured its own."""
    loops = {"op_ns": 6000, "annotation_ns": 3000}
    meta = {"profiler_overhead": {"per_event_ns": 7000, "per_op_ns": 7100, "per_annotation_ns": 3100,
                                  "loops": loops},
            "per_rank": [{"rank": 0, "profiler_overhead": {"per_event_ns": 7000, "per_op_ns": 7100,
                                                           "per_annotation_ns": 3100}},
                         {"rank": 1, "profiler_overhead": {"per_event_ns": 8000, "loops": loops}}]}
    assert profiler_overhead(meta) == (7100.0, 3100.0)
    assert rank_overheads(meta) == ((0, 7100.0, 3100.0), (1, 6000.0, 3000.0))
    # one reader for self-replay and templates: a rank's own measurement where it has one
    assert profiler_overhead(meta, rank=1) == (6000.0, 3000.0)
    assert profiler_overhead(meta, rank=0) == (7100.0, 3100.0)
    assert profiler_overhead(meta, rank=5) == (7100.0, 3100.0)
    assert profiler_overhead({"profiler_overhead": {"per_event_ns": 7000}}) == (7000.0, 7000.0)
    assert profiler_overhead({}) is None and rank_overheads(None) == ()


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_split_keeps_the_total_per_step() -> None:
    from tracesim.collectors.overhead import loop_floor, split_per_event

    counts = {"cpu_ops": 1800, "module_scopes": 28, "annotations": 5, "events": 1833}
    loops = {"op_ns": 6000, "annotation_ns": 2000}
    op_ns, an_ns = split_per_event(7000, counts, loops)
    assert op_ns == pytest.approx(3 * an_ns, rel=0.01)
    assert 1800 * op_ns + 33 * an_ns == pytest.approx(7000 * 1833, rel=1e-3)
    # the loop cost per event of such a step: the floor of the step calibration
    assert loop_floor(counts, loops) == round((1800 * 6000 + 33 * 2000) / 1833)
    assert split_per_event(loop_floor(counts, loops), counts, loops) == (6000, 2000)
