"""The noise intervals of the CPU accuracy checks' paired comparisons
(``tracesim.noise``, ``collectors.cpu_accuracy.paired_error_interval``; the scaling
script's is tested in test_cpu_scaling.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from tracesim.noise import bootstrap_interval, consistent_with


def _ratio(g: list[np.ndarray]) -> float:
    return float(np.median(g[0])) / float(np.median(g[1])) - 1.0


def test_interval_of_noiseless_samples_is_the_value() -> None:
    lo, hi = bootstrap_interval(_ratio, [[0.11] * 8, [0.10] * 8])
    assert lo == pytest.approx(0.1) and hi == pytest.approx(0.1)


def test_interval_widens_with_the_noise_and_covers_the_truth() -> None:
    rng = np.random.default_rng(1)
    widths = []
    for cv in (0.02, 0.15):
        a = 0.10 * (1 + cv * rng.standard_normal(30))
        b = 0.10 * (1 + cv * rng.standard_normal(30))
        lo, hi = bootstrap_interval(_ratio, [a, b])
        assert lo < _ratio([a, b]) < hi
        assert lo < 0.0 < hi  # the same distribution: no real difference
        widths.append(hi - lo)
    assert widths[1] > 4 * widths[0]
    # deterministic: a fixed seed
    assert bootstrap_interval(_ratio, [a, b]) == bootstrap_interval(_ratio, [a, b])


def test_empty_group_is_refused() -> None:
    with pytest.raises(ValueError):
        bootstrap_interval(_ratio, [[1.0], []])


def test_consistent_with() -> None:
    assert consistent_with(0.04, None, 0.05)
    assert not consistent_with(0.06, None, 0.05)
    assert consistent_with(0.12, (0.08, 0.16), 0.10)  # the interval reaches into the bound
    assert not consistent_with(0.12, (0.105, 0.14), 0.10)
    assert not consistent_with(-0.2, (-0.25, -0.11), 0.10)
    # an interval that misses its own value is widened to it
    assert consistent_with(0.09, (0.11, 0.2), 0.10)


def _bundle(path: Path, steps: list[float]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    meta = {"measured_step_time_s": {"median": float(np.median(steps))},
            "per_rank": [{"rank": 0, "step_times_s": steps}]}
    (path / "meta.yaml").write_text(yaml.safe_dump(meta))
    return path


def test_gloo_paired_error_interval(tmp_path: Path) -> None:
    from collectors.cpu_accuracy import paired_error, paired_error_interval

    rng = np.random.default_rng(2)
    one = _bundle(tmp_path / "one", [float(x) for x in 0.060 * (1 + 0.05 * rng.standard_normal(16))])
    paired = {"one": 0.063, "two": 0.0735,
              "one_s": [float(x) for x in 0.063 * (1 + 0.05 * rng.standard_normal(30))],
              "two_s": [float(x) for x in 0.0735 * (1 + 0.05 * rng.standard_normal(30))]}
    paired["one"], paired["two"] = float(np.median(paired["one_s"])), float(np.median(paired["two_s"]))
    err = paired_error(0.070, one, paired)
    lo, hi = paired_error_interval(0.070, one, paired)  # type: ignore[misc]
    assert lo < err < hi and hi - lo < 0.1
    # two contention readings far apart widen it (the prediction's compute moves with them)
    contention = {"slowdown": {2: 1.1}, "detail": {"readings": [1.0, 1.2]}}
    lo2, hi2 = paired_error_interval(0.070, one, paired, contention, compute_s=0.05)  # type: ignore[misc]
    assert lo2 < lo and hi2 > hi
    # no listed steps (a paired run of the older tool): no interval
    assert paired_error_interval(0.070, one, {"one": 0.063, "two": 0.0735}) is None
