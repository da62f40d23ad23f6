"""Profiler overhead in a recorded step, taken out op by op (trace-derived templates).

A step recorded under ``torch.profiler`` (with shapes, FLOPs and the execution-trace
observer) runs slower than an unprofiled one, mostly by a fixed cost per recorded event.
The template extractor (:mod:`tracesim.template.from_trace`) removes that cost from each
op where its events are (:class:`OverheadTaker`), using the per-event cost the collector
measured in the same job (:func:`profiler_overhead`), and maps what is left onto the
unprofiled step time with one residual factor. An optimizer step of 250 tiny host ops
carries some 30 times the profiler cost per millisecond of a GEMM, so one uniform factor
for the whole step over-states it and under-states the GEMMs.
All times are nanoseconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd


class OverheadTaker:
    """The profiler's cost in a recorded step, taken out op by op.

    Every traced CPU op costs ``per_ns[0]`` and every annotation ``per_ns[1]`` ns where it
    starts (measured by the collector apart from the recorded step, :func:`profiler_overhead`). An op's
    window (from the end of the op kept before it) loses the overhead of the events that
    start in it; what a window cannot pay (it is shorter than its events' overhead) passes to
    the next one, as the self-replay does (:mod:`tracesim.trace.extract`). Falls back to
    no correction (``active`` False) without a calibration, or when the calibration claims
    more than :data:`MAX_OVERHEAD_SHARE` of the profiled step (then it does not describe
    this step).
    """

    def __init__(self, t: pd.DataFrame, start: int, prof_dur: float,
                 per_ns: tuple[float, float] | None) -> None:
        self.per_ns = per_ns or (0.0, 0.0)
        self.prof_dur = prof_dur
        ev = t[t["cat"].isin(["cpu_op", "annotation"])]
        ev = ev[~((ev["cat"] == "annotation") & ev["name"].str.startswith("ProfilerStep"))]
        order = np.argsort(ev["ts_ns"].to_numpy(), kind="stable")
        self.ts = ev["ts_ns"].to_numpy()[order].astype(np.int64)
        w = np.where(ev["cat"].to_numpy()[order] == "annotation", self.per_ns[1], self.per_ns[0])
        self.cum = np.concatenate([[0.0], np.cumsum(w.astype(float))])
        self.total = self._in(start, int(start + prof_dur))
        self.active = self.total > 0 and self.total <= MAX_OVERHEAD_SHARE * prof_dur
        self.debt = 0.0

    def _in(self, lo: int, hi: int) -> float:
        return overhead_in((self.ts, self.cum), lo, hi)

    def residual_scale(self, step_time_s: float | None) -> float:
        """Factor mapping the corrected step onto the unprofiled median ``step_time_s``."""
        left = self.prof_dur - (self.total if self.active else 0.0)
        return step_time_s * 1e9 / left if step_time_s and left > 0 else 1.0

    def take(self, lo: int, hi: int, dur: float) -> float:
        """``dur`` (ns, the window [lo, hi)) less the overhead paid in it."""
        if not self.active:
            return dur
        ov = self._in(lo, hi) + self.debt
        paid = min(dur, ov)
        self.debt = ov - paid
        return dur - paid


def overhead_in(overhead: tuple[np.ndarray, np.ndarray], lo: int, hi: int) -> float:
    """Profiler overhead (ns) of the events that start in [lo, hi): ``overhead`` is (sorted
    event starts, cumulative per-event overhead with a leading 0)."""
    sorted_ts, cum = overhead
    a = int(np.searchsorted(sorted_ts, lo, side="left"))
    b = int(np.searchsorted(sorted_ts, hi, side="left"))
    return float(cum[b] - cum[a])


#: a calibration claiming more of the profiled step than this is not applied
MAX_OVERHEAD_SHARE = 0.8
#: ``profiler_overhead.method`` of a recording of the user's own command (``tracesim
#: collect -- CMD``, ``tracesim.record``): per event, the median profiled step less the median
#: unprofiled step of the job itself, over a profiled step's events
JOB_METHOD = "profiled vs unprofiled steps of the job"


def measured_on_the_job(meta: Mapping[str, Any] | None) -> bool:
    """Whether the bundle's overhead is the job's own profiled-less-unprofiled median
    (:data:`JOB_METHOD`), not calibration cycles: then it takes out of a step about what
    profiling added to it by construction, a large share when profiling slows small CPU ops
    several times over, and no cap applies."""
    po = (meta or {}).get("profiler_overhead")
    return isinstance(po, Mapping) and po.get("method") == JOB_METHOD


def _overhead_pair(po: object) -> tuple[float, float] | None:
    """(per op, per annotation) ns from one ``profiler_overhead`` mapping, or None."""
    if not isinstance(po, Mapping):
        return None
    if isinstance(po.get("per_op_ns"), (int, float)):
        op_ns = float(po["per_op_ns"])
        an = po.get("per_annotation_ns")
        return op_ns, float(an) if isinstance(an, (int, float)) else op_ns
    loops = po.get("loops")
    if isinstance(loops, dict) and isinstance(loops.get("op_ns"), (int, float)):
        op_ns = float(loops["op_ns"])
        an = loops.get("annotation_ns")
        return op_ns, float(an) if isinstance(an, (int, float)) else op_ns
    if isinstance(po.get("per_event_ns"), (int, float)):
        return float(po["per_event_ns"]), float(po["per_event_ns"])
    return None


def profiler_overhead(meta: Mapping[str, Any] | None, rank: int | None = None) -> tuple[float, float] | None:
    """The profiler's cost per traced op and per annotation (ns) that the collector measured,
    or None: the one reader of ``meta.yaml: profiler_overhead`` (self-replay and templates).

    ``rank``: that rank's own measurement (``per_rank[].profiler_overhead``) where it has one,
    else the bundle's. From a measurement, in this order: ``per_op_ns`` / ``per_annotation_ns``
    (calibration steps of the same job, interleaved with the recorded ones, never the steps
    compared with); ``loops.op_ns`` / ``annotation_ns`` (the loop microbenchmark: tiny ops and
    empty ``record_function`` blocks, a lower bound for real ops; the stored bundles have
    only this and ``per_event_ns``); ``per_event_ns`` for both.
    """
    m = meta or {}
    if rank is not None:
        for entry in m.get("per_rank") or []:
            if isinstance(entry, Mapping) and entry.get("rank") == rank:
                pair = _overhead_pair(entry.get("profiler_overhead"))
                if pair is not None:
                    return pair
    return _overhead_pair(m.get("profiler_overhead"))


def rank_overheads(meta: Mapping[str, Any] | None) -> tuple[tuple[int, float, float], ...]:
    """(rank, per op ns, per annotation ns) for every rank of a bundle with its own
    calibration (``per_rank[].profiler_overhead``); empty when there is none."""
    out = []
    for entry in (meta or {}).get("per_rank") or []:
        pair = _overhead_pair(entry.get("profiler_overhead")) if isinstance(entry, Mapping) else None
        if pair is not None and isinstance(entry.get("rank"), int):
            out.append((int(entry["rank"]), *pair))
    return tuple(out)


def largest_claim(meta: Mapping[str, Any] | None, pair: tuple[float, float]) -> float:
    """The largest share of a recorded profiled step (``per_rank[].profiled_step_events``:
    its duration and event counts) that a cost of ``pair`` (per op, per annotation ns) per
    event would take out; each rank at its own calibration where it has one. 0 where the
    bundle records no step events. A share near or above 1 means the calibration cycles ran
    under other load than the recorded step (they are medians of a few steps): removing it
    would leave the step little or nothing; the self-replay then applies none, as the
    template extractor does above :data:`MAX_OVERHEAD_SHARE` (:class:`OverheadTaker`)."""
    share = 0.0
    for entry in (meta or {}).get("per_rank") or []:
        if not isinstance(entry, Mapping):
            continue
        own = profiler_overhead(meta, entry.get("rank")) if isinstance(entry.get("rank"), int) else None
        op_ns, an_ns = own or pair
        for st in entry.get("profiled_step_events") or []:
            if not isinstance(st, Mapping) or not isinstance(st.get("dur_us"), (int, float)) or st["dur_us"] <= 0:
                continue
            annotations = float(st.get("module_scopes", 0) or 0) + float(st.get("annotations", 0) or 0)
            claim = op_ns * float(st.get("cpu_ops", 0) or 0) + an_ns * annotations
            share = max(share, claim / (float(st["dur_us"]) * 1e3))
    return share

