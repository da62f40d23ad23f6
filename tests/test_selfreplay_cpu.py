"""Self-replay of CPU bundles collected here (1 rank, and 2 gloo ranks replayed jointly).

The collection tests compare wall-clock measurements, so they are `timing` tests:
scripts/test.sh runs them alone after the rest. Measured values are in docs/accuracy.md.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracesim.trace.overhead import profiler_overhead, rank_overheads
from tracesim.trace.sources import load_source

ROOT = Path(__file__).resolve().parents[1]
HAS_TORCH = importlib.util.find_spec("torch") is not None


def _collect(out: Path, *args: str) -> Path:
    pytest.importorskip("torch")
    cmd = [sys.executable, "-m", "tracesim.cli", "collect", "--workload", "gpt-tiny", "-o", str(out), *args]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600, cwd=ROOT)
    return out


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
    assert profiler_overhead({"profiler_overhead": {"per_event_ns": 7000}}) == (7000.0, 7000.0)
    assert profiler_overhead({}) is None and rank_overheads(None) == ()


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_split_keeps_the_total_per_step() -> None:
    from collectors.overhead import loop_floor, split_per_event

    counts = {"cpu_ops": 1800, "module_scopes": 28, "annotations": 5, "events": 1833}
    loops = {"op_ns": 6000, "annotation_ns": 2000}
    op_ns, an_ns = split_per_event(7000, counts, loops)
    assert op_ns == pytest.approx(3 * an_ns, rel=0.01)
    assert 1800 * op_ns + 33 * an_ns == pytest.approx(7000 * 1833, rel=1e-3)
    # the loop cost per event of such a step: the floor of the step calibration
    assert loop_floor(counts, loops) == round((1800 * 6000 + 33 * 2000) / 1833)
    assert split_per_event(loop_floor(counts, loops), counts, loops) == (6000, 2000)


def _busy() -> str | None:
    load = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    return f"load average {load:.1f} on {cores} cores" if load > 2.0 * cores else None


#: a bundle whose profiled steps spread more than this (upper over lower quartile, same rank)
#: was disturbed while it was recorded (a descheduled thread): collected again once, then
#: skipped (measurements only, never the errors, decide); ordinary noise (quartile ratios
#: 1.1-1.3 on the 2026-12-01 VM) is left to the error's interval, not skipped
DISTURBED_SPREAD = 1.5
#: the same for the unprofiled reference steps
REFERENCE_SPREAD = 1.5


def _quartile_ratio(values: list[float]) -> float:
    import numpy as np

    q1, q3 = np.percentile(values, [25, 75])
    return float(q3 / q1)


def _steady_bundle(out: Path, *args: str) -> tuple[list, dict]:
    """Self-replay results and meta of a bundle collected at ``out`` (again once if
    disturbed)."""
    from tracesim.report.steps import self_replay

    why = ""
    for attempt in range(2):
        src = load_source(_collect(out.with_name(f"{out.name}-{attempt}"), *args))
        results = self_replay(src)
        steps = max(_quartile_ratio([r.measured_s for r in results if r.rank == rk])
                    for rk in {r.rank for r in results})
        reference = _quartile_ratio(src.meta["per_rank"][0]["step_times_s"])
        if steps <= DISTURBED_SPREAD and reference <= REFERENCE_SPREAD:
            return results, src.meta
        why = (f"profiled steps spread x{steps:.2f}, reference steps x{reference:.2f} "
               f"(quartiles); load {os.getloadavg()[0]:.2f}")
        print(f"disturbed: {why}")
    pytest.skip(f"disturbed twice: {why}")


#: the issue's target for the unprofiled step (the median of the steady steps' predictions
#: against the median of the reference steps): asserted where the measurement can tell, i.e.
#: the error must be within it or, given the 95% interval that the measurement noise alone
#: gives it (tracesim.selfreplay_interval), not distinguishable from an error within it
UNPROFILED_TARGET = 0.05
#: and, whatever the noise, a bound that only a broken overhead removal misses (none at
#: all: +40 .. +70% on this VM)
UNPROFILED_BOUND = 0.30


def _check_unprofiled(results: list, meta: dict, name: str) -> None:
    from tracesim.report.steps import unprofiled_summary

    for u in unprofiled_summary(results, {r.source: meta for r in results}):
        assert u.rel_error_ci95 is not None, u
        lo, hi = u.rel_error_ci95
        print(f"{name} rank {u.rank} unprofiled: predicted {u.predicted_s * 1e3:.1f} ms (median of "
              f"{u.steps} steps), measured median {u.measured_s * 1e3:.1f} ms: {u.rel_error:+.1%} "
              f"(95% interval from the noise {lo:+.1%} .. {hi:+.1%}); load {os.getloadavg()[0]:.2f}")
        assert abs(u.rel_error) < UNPROFILED_BOUND, u
        assert u.consistent_with(UNPROFILED_TARGET), u


@pytest.mark.slow
@pytest.mark.timing
def test_one_rank_bundle(tmp_path: Path) -> None:
    results, meta = _steady_bundle(tmp_path / "b1")
    assert len(results) == 8  # collect's default: 8 profiled steps
    for r in results:
        assert abs(r.rel_error) < 0.03, r
        assert r.rel_error_unprofiled is not None
        assert r.predicted_unprofiled_s is not None and r.predicted_unprofiled_s < r.predicted_s
    _check_unprofiled(results, meta, "1 rank")


@pytest.mark.slow
@pytest.mark.timing
def test_two_rank_bundle_replayed_jointly(tmp_path: Path) -> None:
    results, meta = _steady_bundle(tmp_path / "b2", "--ranks", "2")
    assert sorted(r.rank for r in results) == [0] * 8 + [1] * 8
    for r in results:
        # a single step of the joint replay can drift (one rank's step boundary moves with the
        # other rank's waits), their median per rank cannot: within the 3%
        assert abs(r.rel_error) < 0.08, r
        assert r.rel_error_unprofiled is not None
    for rank in (0, 1):
        errs = sorted(r.rel_error for r in results if r.rank == rank)
        assert abs(errs[len(errs) // 2]) < 0.03, errs
    _check_unprofiled(results, meta, "2 ranks")
