"""Larger CPU models predicted from one small CPU trace (issue 4; docs/accuracy.md, "Larger
CPU models predicted from one small CPU trace").

The fast tests check the pieces: the robust affine fit of the calibration and memory curves
without cliffs in the shipped host-cpu profile.
The timing test collects gpt-tiny and its hidden x2, layers x2 and sequence x2 variants on
this CPU and compares the predictions (from the gpt-tiny bundle alone) with the measured
steps; `scripts/accuracy_cpu_scaling.py` is the same experiment with repeats.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from tracesim.hardware.calibrate import affine_curve, fit_affine
from tracesim.hardware.costmodel import op_time_ns, op_times_ns
from tracesim.hardware.device import get_device

ROOT = Path(__file__).resolve().parents[1]
HAS_TORCH = importlib.util.find_spec("torch") is not None
MEMORY_CLASSES = ("memcpy", "elementwise", "norm", "softmax", "reduction", "embedding", "optimizer")


def test_fit_affine_ignores_slowed_samples() -> None:
    sizes = np.logspace(3, 8, 16)
    times = 5e-6 + sizes / 50e9
    times[[3, 9, 12]] *= [40.0, 5.0, 100.0]  # three sizes hit by other processes' load
    t0, rate = fit_affine(sizes, times)
    assert t0 == pytest.approx(5e-6, rel=0.05) and rate == pytest.approx(50e9, rel=0.05)
    with pytest.raises(ValueError):
        fit_affine([0.0], [1.0])


def test_affine_curve_reproduces_the_fit() -> None:
    """The roofline with the written curve gives back t0 + bytes / rate (within 3%)."""
    launch, peak = 1e-6, 200e9
    sizes = [float(f"{10 ** (k / 4):.4g}") for k in range(12, 41)]
    curve = affine_curve(8e-6, 60e9, launch, peak, sizes)
    prof = {"name": "t", "kind": "cpu", "peak_tflops": {"fp32": 0.2}, "hbm_GBps": peak / 1e9,
            "launch_overhead_us": launch * 1e6,
            "efficiency": {"default": {"compute": [[1.0, 1.0]], "memory": curve}}}
    d = get_device(prof)
    for b in (3e3, 1e5, 2.5e6, 7e7):
        t = op_time_ns(d, "norm", 0.0, b, "fp32") * 1e-9
        assert t == pytest.approx(8e-6 + b / 60e9, rel=0.03)


@pytest.mark.parametrize("profile", ["host-cpu", "host-cpu-1t"])
def test_shipped_memory_curves_have_no_cliff(profile: str) -> None:
    """Doubling a memory-bound op's bytes takes between 0.97x (interpolation between the
    curve's points) and 2.05x the time (the earlier calibration had 100x steps where one size
    was slowed down by other jobs)."""
    d = get_device(profile)
    b = np.logspace(3, 9, 200)
    for cls in MEMORY_CLASSES:
        t1 = op_times_ns(d, cls, 0.0, b, "fp32").astype(float)
        t2 = op_times_ns(d, cls, 0.0, 2 * b, "fp32").astype(float)
        ratio = t2 / t1
        assert ratio.min() >= 0.97 and ratio.max() <= 2.05, (cls, ratio.min(), ratio.max())


def _script() -> object:
    spec = importlib.util.spec_from_file_location("accuracy_cpu_scaling", ROOT / "scripts" / "accuracy_cpu_scaling.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_base_disturbed_rule_allows_for_the_profilers_own_cost(tmp_path: Path) -> None:
    """A profiled step is distrusted only beyond 1.5x what the profiler's own cost explains
    (the CI run's base: 170 ms against 64 ms unprofiled + 1821 events x 27.7 us)."""
    mod = _script()

    def bundle(dur_ms: float, lo: float = 0.062, hi: float = 0.076) -> Path:
        b = tmp_path / f"b{dur_ms}-{hi}"
        b.mkdir()
        meta = {"measured_step_time_s": {"median": 0.064, "min": lo, "max": hi, "n": 5},
                "profiler_overhead": {"per_event_ns": 27657},
                "per_rank": [{"rank": 0, "profiled_step_events": [
                    {"step": "ProfilerStep#7", "dur_us": dur_ms * 1e3, "events": 1821}]}]}
        (b / "meta.yaml").write_text(yaml.safe_dump(meta))
        return b

    assert mod.disturbed(bundle(170.0), base=True) == ""  # type: ignore[attr-defined]
    assert "expected 114 ms" in mod.disturbed(bundle(180.0), base=True)  # type: ignore[attr-defined]
    # not the base: its profiled step is not used
    assert mod.disturbed(bundle(180.0, hi=0.070)) == ""  # type: ignore[attr-defined]
    assert "unprofiled steps" in mod.disturbed(bundle(170.0, hi=0.1), base=True)  # type: ignore[attr-defined]


def test_scaling_paired_error_interval_is_about_the_median_of_rounds() -> None:
    mod = _script()
    rng = np.random.default_rng(3)
    rows = []
    for pred, base, var in ((0.100, 0.100, 0.098), (0.105, 0.110, 0.108), (0.095, 0.090, 0.097)):
        s = {"base_paired": list(base * (1 + 0.04 * rng.standard_normal(8))),
             "base_reference": list(pred * (1 + 0.04 * rng.standard_normal(5))),
             "paired": list(var * (1 + 0.04 * rng.standard_normal(8)))}
        rows.append({"pred": pred, "samples": s,
                     "pred_paired": pred * float(np.median(s["base_paired"])) / float(np.median(s["base_reference"])),
                     "meas_paired": float(np.median(s["paired"]))})
    errs = [x["pred_paired"] / x["meas_paired"] - 1 for x in rows]
    lo, hi = mod.paired_error_interval(rows)  # type: ignore[attr-defined]
    assert lo < float(np.median(errs)) < hi
    assert mod.paired_error_interval([{"pred": 0.1}]) is None  # type: ignore[attr-defined]
    assert mod._as_steps(0.07) == [0.07] and mod._as_steps([0.07, 0.08]) == [0.07, 0.08]  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.timing
@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed (collect needs it)")
def test_larger_cpu_models_from_one_small_trace(tmp_path: Path) -> None:
    """gpt-tiny collected here predicts its hidden x2 / layers x2 / sequence x2 variants'
    step times against the paired measurement (all four models timed in turn in one process;
    the prediction corrected by the base's drift between its collection and the pairing):
    the median error over the trusted rounds within HARD_BOUND always, and within BOUND (the
    issue's 10%) as far as the measurement can tell (the error or its 95% noise interval,
    `paired_error_interval`, reaching into +-BOUND); against the variants' own collected runs
    (median of 5 unprofiled steps, drift between the collections included) within
    UNPAIRED_BOUND. One round first; if a configuration misses BOUND, two more rounds, and the
    median over the three is held to the bounds (the accuracy docs report medians over rounds
    too). Rounds that the script's timing rules (`disturbed`, `_flag_slow_rounds`) distrust
    are left out; skipped when none is left."""
    load = os.getloadavg()[0]
    if load > 2.0 * (os.cpu_count() or 1):
        pytest.skip(f"machine too busy for timing (load average {load:.1f})")
    mod = _script()
    rows = mod.run("gpt-tiny", 8, 5, tmp_path / "first", 1)  # type: ignore[attr-defined]
    errors, raw = _median_errors(rows), _median_errors(rows, paired=False)
    print("round 1, paired:", _fmt(errors), "unpaired:", _fmt(raw))
    labels = ("hidden x2", "layers x2", "sequence x2")
    if not errors or any(abs(errors.get(label, 1.0)) >= BOUND or abs(raw.get(label, 1.0)) >= UNPAIRED_BOUND
                         for label in labels):
        rows += mod.run("gpt-tiny", 8, 5, tmp_path / "more", 2)  # type: ignore[attr-defined]
        errors, raw = _median_errors(rows), _median_errors(rows, paired=False)
        print("median of 3 rounds, paired:", _fmt(errors), "unpaired:", _fmt(raw))
    if not all(label in errors for label in ("base (self)", *labels)):
        pytest.skip(f"timing disturbed by other jobs: {[x['disturbed'] for x in rows if x['disturbed']]}")
    from tracesim.noise import consistent_with

    intervals = {label: mod.paired_error_interval(  # type: ignore[attr-defined]
        [x for x in rows if x["label"] == label and not x["disturbed"]]) for label in labels}
    print("paired 95% noise intervals:", {k: f"{v[0]:+.1%} .. {v[1]:+.1%}" for k, v in intervals.items() if v})
    assert abs(errors["base (self)"]) < 0.03
    for label in labels:
        assert abs(errors[label]) < HARD_BOUND, (label, errors)
        assert consistent_with(errors[label], intervals[label], BOUND), (label, errors, intervals)
        # against the separately collected runs, drift included (5-15% between rounds here)
        assert abs(raw[label]) < UNPAIRED_BOUND, (label, raw)


def _fmt(errors: dict[str, float]) -> dict[str, str]:
    return {k: f"{v:+.1%}" for k, v in errors.items()}


def _median_errors(rows: list[dict], paired: bool = True) -> dict[str, float]:
    """Per configuration, the median relative error of the trusted rounds: the drift-corrected
    prediction against the paired measurement (``paired``), or the prediction against the
    variant's own collected run."""
    by_label: dict[str, list[float]] = {}
    for x in rows:
        if x["disturbed"]:
            continue
        p, m = (x["pred_paired"], x["meas_paired"]) if paired else (x["pred"], x["meas"])
        by_label.setdefault(x["label"], []).append((p - m) / m)
    return {k: float(np.median(v)) for k, v in by_label.items()}


#: the issue's target. Held on the paired measurement (the scaling script's step 4: base and
#: variants timed in turn in one process, the prediction corrected by the base's own drift),
#: whose rounds spread by a few percent in the fresh rounds of docs/accuracy.md, as far as
#: the measurement can tell: a fresh-clone CI run on a noisy VM (the base's collected median
#: 64, 118 and 84 ms in three rounds) read hidden x2 at +11.6% as the median of 3 rounds
BOUND = 0.10
#: what the paired median must meet whatever the noise: the memory-curve error before its
#: recalibration (hidden x2 +23.7% as the median of rounds, docs/accuracy.md) misses it
HARD_BOUND = 0.20
#: against the separately collected runs, drift between the collections included: single
#: rounds moved by up to +-13% on a quiet VM; the same CI run read +24.9% / +30.5% (hidden x2,
#: sequence x2) as medians of 3 rounds, the base's own level moving by 1.8x between rounds.
#: Only a broken prediction (compute mis-scaled by a model dimension) goes beyond it
UNPAIRED_BOUND = 0.40
