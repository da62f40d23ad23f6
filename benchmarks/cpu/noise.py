"""How far a comparison of medians of timed steps can move by measurement noise alone.

Used by the unprofiled self-replay interval (:mod:`benchmarks.cpu.selfreplay_interval`) and the
CPU accuracy checks (the gloo data-parallel check, the larger-models check). These compare a
prediction, moved by a ratio of medians of timed steps (a job's drift between its collection
and a paired measurement), with another median of timed steps. On a quiet machine those
medians move by about 1%; on a busy or throttled VM (single steps 10-30% apart, a fixed step
64-118 ms within minutes in one CI run) by several percent, and a single number cannot tell
a wrong prediction from a noisy measurement.

:func:`bootstrap_interval` gives a 95% interval of such a statistic by resampling each group
of timed steps independently, with replacement, and recomputing the statistic from the
resampled groups. It looks at the measurements only, never at the error. It covers the
step-to-step noise within each group, not a slow drift that moves a whole group alike (the
paired measurements are there for that).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

#: bootstrap resamples (deterministic: a fixed seed)
RESAMPLES = 2000
SEED = 20261202


def bootstrap_interval(statistic: Callable[[Sequence[np.ndarray]], float],
                       groups: Sequence[Sequence[float] | np.ndarray], *, resamples: int = RESAMPLES,
                       seed: int = SEED) -> tuple[float, float]:
    """95% percentile interval (low, high) of ``statistic(groups)``, each group of samples
    resampled with replacement on its own. Raises ValueError on an empty group."""
    arrays = [np.asarray(g, dtype=float) for g in groups]
    if not arrays or any(a.size == 0 for a in arrays):
        raise ValueError("bootstrap_interval: every group needs at least one sample")
    rng = np.random.default_rng(seed)
    values = np.empty(resamples)
    for i in range(resamples):
        values[i] = statistic([a[rng.integers(0, a.size, size=a.size)] for a in arrays])
    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def consistent_with(value: float, interval: tuple[float, float] | None, bound: float) -> bool:
    """Whether ``value`` is within ``bound`` or, given its noise ``interval``, cannot be told
    apart from a value within it (no interval: the value itself)."""
    lo, hi = interval or (value, value)
    lo, hi = min(lo, value), max(hi, value)
    return lo < bound and hi > -bound
