"""How far the unprofiled self-replay comparison can move by measurement noise alone.

The unprofiled check of a bundle compares two medians of noisy samples: the predictions of
its profiled steps (each the recorded step less the profiler overhead, itself the median of
the calibration cycles' per-event costs) and its timed reference steps. On a quiet machine
they move by about 1%; on a busy or throttled VM (single steps 10-17% apart) by several
percent, and a single number cannot tell a wrong model from a noisy measurement.

:func:`error_interval` gives a 95% interval of the relative error by resampling what was
measured, cycle by cycle (:mod:`tracesim.collectors.cycles`): the recorded cycles with replacement
(a recorded step's prediction together with the reference steps of the same cycle, which
saw the same machine speed), and independently the calibration cycles (the per-event cost
recomputed from the resampled cycles' steps as the collector computes it,
:func:`tracesim.collectors.cycles.cycle_overhead`, moving every prediction by the change times the
step's events).
Measurements only: nothing here looks at the error itself. Bundles without cycle records
(collected before the cycles) get no interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from benchmarks.cpu.noise import bootstrap_interval
from tracesim.trace.bundle import rank_entry

#: bootstrap resamples (deterministic: a fixed seed)
RESAMPLES = 2000
SEED = 20261201


def error_interval(meta: Mapping[str, Any] | None, rank: int,
                   predictions_s: Mapping[str, float]) -> tuple[float, float] | None:
    """95% interval (low, high) of ``median(predictions) / median(reference) - 1`` for
    ``rank`` of a bundle with cycle records, or None.

    ``predictions_s``: the unprofiled prediction (s) of each step used, by step name
    (``ProfilerStep#N``). The reference steps are rank 0's, as ``measured_step_time_s``.
    """
    if not meta or not predictions_s:
        return None
    mine, ref_entry = rank_entry(meta, rank), rank_entry(meta, 0)
    if mine is None or ref_entry is None:
        return None
    ref_cycles = {c.get("index"): c for c in ref_entry.get("cycles") or [] if isinstance(c, dict)}
    by_step = {e.get("step"): e for e in mine.get("profiled_step_events") or [] if isinstance(e, dict)}
    rows: list[tuple[float, float, list[float]]] = []
    for step, pred in predictions_s.items():
        ev = by_step.get(step)
        cyc = ref_cycles.get(ev.get("cycle")) if ev else None
        if ev is None or cyc is None or not cyc.get("plain_ms"):
            return None
        rows.append((float(pred), float(ev.get("events", 0)),
                     [float(x) / 1e3 for x in cyc["plain_ms"]]))
    po = mine.get("profiler_overhead") or {}
    cal = [(list(map(float, c.get("plain_ms") or [])), float(c.get("profiled_ms", 0.0)),
            float(c.get("events", 0))) for c in mine.get("cycles") or []
           if isinstance(c, dict) and not c.get("recorded") and c.get("plain_ms")]
    used = float(po.get("per_event_ns", 0.0))
    floor = float(po.get("floor_ns", 0.0))
    return _bootstrap(rows, cal, used, floor)


def _overhead_ns(cal: Sequence[tuple[list[float], float, float]], pick: np.ndarray) -> float:
    """Per-event cost (ns) of the calibration cycles ``pick``, as the collector computes it."""
    plain = [u for j in pick for u in cal[j][0]]
    prof = [cal[j][1] for j in pick]
    events = float(np.median([cal[j][2] for j in pick]))
    return (float(np.median(prof)) - float(np.median(plain))) * 1e6 / max(1.0, events)


def _bootstrap(rows: Sequence[tuple[float, float, list[float]]],
               cal: Sequence[tuple[list[float], float, float]],
               used_ns: float, floor_ns: float) -> tuple[float, float]:
    """Recorded cycles (``rows``) and calibration cycles (``cal``) resampled as two index
    groups (:func:`benchmarks.cpu.noise.bootstrap_interval`)."""
    pred = np.array([r[0] for r in rows])
    events = np.array([r[1] for r in rows])
    refs = [np.array(r[2]) for r in rows]
    groups = [np.arange(len(rows))] + ([np.arange(len(cal))] if cal else [])

    def stat(g: Sequence[np.ndarray]) -> float:
        pick = g[0].astype(int)
        shift = np.zeros(len(rows))
        if cal:
            o = max(_overhead_ns(cal, g[1].astype(int)), floor_ns, 0.0)
            shift = (used_ns - o) * events / 1e9
        p = pred[pick] + shift[pick]
        u = np.concatenate([refs[j] for j in pick])
        return float(np.median(p)) / float(np.median(u)) - 1.0

    return bootstrap_interval(stat, groups, resamples=RESAMPLES, seed=SEED)
