"""The profiler's cost per event as a bundle records it, and how it is split between op kinds.

How well the unprofiled self-replay of CPU bundles matches the unprofiled steps is a
wall-clock measurement: ``benchmarks/cpu/accuracy_cpu_selfreplay.py`` (docs/accuracy.md).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tracesim.trace.overhead import JOB_METHOD, profiler_overhead, rank_overheads

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


def test_a_calibration_claiming_most_of_a_recorded_step_is_not_applied(tmp_path: Path) -> None:
    """Calibration cycles that ran under other load than the recorded step can claim more of
    it than it lasted, which would replay the step as (nearly) nothing: above
    MAX_OVERHEAD_SHARE of a recorded step the self-replay takes none out and says why."""
    import shutil

    import yaml

    from tracesim.pipeline.run import predict
    from tracesim.trace.overhead import MAX_OVERHEAD_SHARE, largest_claim

    step = {"dur_us": 80_000.0, "cpu_ops": 1800, "module_scopes": 28, "annotations": 5}
    meta = {"per_rank": [{"rank": 0, "profiled_step_events": [step]}]}
    assert largest_claim(meta, (20_000.0, 5_000.0)) == pytest.approx(
        (20_000 * 1800 + 5_000 * 33) / 80e6)
    assert largest_claim({"per_rank": [{"rank": 0}]}, (1e9, 1e9)) == 0.0  # no step events

    bundle = tmp_path / "gpt-tiny"
    shutil.copytree(ROOT / "workloads" / "bundles" / "gpt-tiny", bundle)
    plain = predict(bundle)
    assert not any("profiler overhead not taken out" in w for w in plain.warnings)
    m = yaml.safe_load((bundle / "meta.yaml").read_text())
    ev = m["per_rank"][0]["profiled_step_events"][0]
    per_op = 0.9 * ev["dur_us"] * 1e3 / ev["cpu_ops"]  # 90% of the step in its ops alone
    for po in (m["profiler_overhead"], m["per_rank"][0]["profiler_overhead"]):
        po.update(per_event_ns=round(per_op), per_op_ns=per_op, per_annotation_ns=0)
    (bundle / "meta.yaml").write_text(yaml.safe_dump(m))
    assert largest_claim(m, (per_op, 0.0)) > MAX_OVERHEAD_SHARE
    res = predict(bundle)
    assert any("profiler overhead not taken out: its calibration would remove 90%" in w
               for w in res.warnings), res.warnings
    assert res.details["profiler_overhead_removed_ns"] == {"per_op": 0.0, "per_annotation": 0.0}
    assert res.iteration_time_s > plain.iteration_time_s  # the profiled step, nothing removed
    # measured on the job's own steps (a recorded command: no calibration cycles), the same
    # share is what profiling added to the step by construction, and it is taken out
    for po in (m["profiler_overhead"], m["per_rank"][0]["profiler_overhead"]):
        po["method"] = JOB_METHOD
    (bundle / "meta.yaml").write_text(yaml.safe_dump(m))
    job = predict(bundle)
    assert not any("not taken out" in w for w in job.warnings)
    assert job.details["profiler_overhead_removed_ns"]["per_op"] == pytest.approx(per_op)
    assert job.iteration_time_s < res.iteration_time_s


def test_the_recorder_writes_the_method_the_replay_knows() -> None:
    from tracesim.collectors.recorder import OVERHEAD_METHOD

    assert OVERHEAD_METHOD == JOB_METHOD
