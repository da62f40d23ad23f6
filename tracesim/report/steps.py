"""Self-replay: replay a recorded run with its own durations and compare step times.

For every ``ProfilerStep#N`` of every rank, the measured step time is the duration of the
step annotation; the predicted one is the simulated time between the step's begin and end
markers. Because waiting (synchronisation, stream waits, collectives across ranks) comes out
of the simulation rather than the recording, the comparison checks the dependency model.

For bundles made by ``tracesim collect``, the unprofiled prediction removes the profiler's
per-event overhead, measured by the collector on calibration cycles interleaved with the
recorded ones (``meta.yaml: profiler_overhead``, read by
:func:`tracesim.trace.overhead.profiler_overhead`), and is compared with the
median wall-clock time of the unprofiled steps. A bundle recorded with several profiled steps
(``tracesim collect --steps N``) predicts that median by the median of its steady steps'
predictions (:func:`unprofiled_summary`), which damps the noise of any single profiled step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from tracesim.engine.replay import ReplayResult, replay
from tracesim.errors import InputError
from tracesim.graph.taskgraph import TaskGraph
from tracesim.trace.extract import extract_source
from tracesim.trace.overhead import profiler_overhead
from tracesim.trace.sources import Source


@dataclass(frozen=True)
class StepResult:
    """One replayed step. Times in seconds; rel_error = (predicted - measured) / measured."""

    source: str
    rank: int
    step: str
    measured_s: float
    predicted_s: float
    rel_error: float
    steady: bool
    gpu_start_mae_us: float | None = None
    measured_unprofiled_s: float | None = None
    predicted_unprofiled_s: float | None = None
    rel_error_unprofiled: float | None = None
    #: dependencies of the replay that fell back to the recorded order, by kind (None: none)
    fallbacks: dict[str, int] | None = None
    #: True when the trace marks no step and this one is its whole window
    #: (:mod:`tracesim.trace.traceinfo`); None otherwise
    whole_trace: bool | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class UnprofiledSummary:
    """Per source and rank: the median of the steady steps' unprofiled predictions against
    the measured unprofiled median (seconds; rel_error = predicted / measured - 1)."""

    source: str
    rank: int
    steps: int
    measured_s: float
    predicted_s: float
    rel_error: float

    def to_dict(self) -> dict:
        return asdict(self)


def unprofiled_summary(results: list[StepResult]) -> list[UnprofiledSummary]:
    """:class:`UnprofiledSummary` per (source, rank) of ``results`` that have an unprofiled
    prediction; steady steps only (all steps where none is steady)."""
    groups: dict[tuple[str, int], list[StepResult]] = {}
    for r in results:
        if r.predicted_unprofiled_s is not None and r.measured_unprofiled_s:
            groups.setdefault((r.source, r.rank), []).append(r)
    out = []
    for (src, rank), rs in groups.items():
        use = [r for r in rs if r.steady] or rs
        pred = float(np.median([r.predicted_unprofiled_s for r in use]))
        meas = float(use[0].measured_unprofiled_s)  # type: ignore[arg-type]
        out.append(UnprofiledSummary(src, rank, len(use), meas, pred, pred / meas - 1.0))
    return out


StepTime = tuple[int, str, int, int, int, int, int]


def step_times(graph: TaskGraph, result: ReplayResult) -> list[StepTime]:
    """(rank, step, step event id, measured_ns, predicted_ns, begin task, end task) per step."""
    t = graph.tasks
    if "marker" not in t:
        return []
    marker = t["marker"].to_numpy()
    ev = t["src_event"].to_numpy()
    rank = t["rank"].to_numpy()
    begins = {(int(rank[i]), int(ev[i])): i for i in np.flatnonzero(marker == "begin")}
    out: list[StepTime] = []
    for i in np.flatnonzero(marker == "end"):
        key = (int(rank[i]), int(ev[i]))
        b = begins.get(key)
        if b is None:
            continue
        measured = int(t["measured_ns"].iat[i])
        predicted = int(result.start_ns[i] - result.start_ns[b])
        out.append((key[0], str(t["step"].iat[i]), key[1], measured, predicted, int(b), int(i)))
    out.sort(key=lambda x: (x[0], x[2]))
    return out


def steady_windows(graph: TaskGraph, result: ReplayResult,
                   steps: list[StepTime]) -> dict[tuple[int, int], tuple[int, int]]:
    """Each step's window in a long run's steady state, where the host may run ahead of the
    device (replays on another device or network).

    A step then lasts as long as the busier of its two producers: the host's own step (its
    begin to end marker, with the waits the recording makes it do) and the device's work
    launched in the step (the time its kernels, copies and collectives keep the rank's
    device busy: the union of their intervals). A host-bound step keeps its markers; a step
    whose device work outlasts the host's (nothing in the step waits for the device, so the
    host runs ahead of a growing queue) lasts as long as that work, as each step of a long
    run does once the launch queue is full. Keyed by (rank, step event id): (start, end) ns
    from the begin marker.
    """
    t = graph.tasks
    busy: dict[tuple[int, str], int] = {}
    device = t["kind"].to_numpy() != "cpu"  # host threads (pollers) may run on
    if device.any():
        frame = pd.DataFrame({"rank": t["rank"].to_numpy()[device],
                              "step": t["step"].to_numpy()[device].astype(str),
                              "s": np.asarray(result.start_ns)[device],
                              "e": np.asarray(result.end_ns)[device]})
        frame = frame[frame["step"] != ""].sort_values(["rank", "step", "s"], kind="stable")
        for (rk, st), g in frame.groupby(["rank", "step"], sort=False):
            busy[(int(rk), str(st))] = _union_ns(g["s"].to_numpy(), g["e"].to_numpy())
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for rk, name, ev, _m, pred, b, _e in steps:
        start = int(result.start_ns[b])
        out[(rk, ev)] = (start, start + max(int(pred), busy.get((rk, name), 0)))
    return out


def _union_ns(s: np.ndarray, e: np.ndarray) -> int:
    """Total length of the union of intervals [s, e) sorted by start."""
    if not len(s):
        return 0
    reach = np.maximum.accumulate(e)
    prev = np.concatenate([[s[0]], reach[:-1]])
    return int(np.sum(np.maximum(e - np.maximum(s, prev), 0) * (e > prev)))


def _gpu_start_mae_us(graph: TaskGraph, result: ReplayResult, source: Source, rank: int,
                      b: int, e: int) -> float | None:
    """Mean |simulated - recorded| start of the GPU ops inside a step, relative to its begin."""
    t = graph.tasks
    sel = (t["kind"].to_numpy() == "gpu") & (t["rank"].to_numpy() == rank)
    src = t["src_event"].to_numpy()
    ops = source.op_table[source.op_table["rank"] == rank].set_index("event_id")
    b_ev = int(src[b])
    if b_ev not in ops.index:
        return None
    rec_begin = int(ops.at[b_ev, "ts_ns"])
    rec_end = rec_begin + int(ops.at[b_ev, "dur_ns"])
    idx = np.flatnonzero(sel)
    if not len(idx):
        return None
    rec_ts = ops["ts_ns"].reindex(src[idx]).to_numpy()
    inside = (rec_ts >= rec_begin) & (rec_ts < rec_end)
    if not inside.any():
        return None
    rec_rel = rec_ts[inside] - rec_begin
    sim_rel = result.start_ns[idx[inside]] - result.start_ns[b]
    return float(np.mean(np.abs(sim_rel - rec_rel)) / 1000.0)


def self_replay(source: Source) -> list[StepResult]:
    """Replay ``source`` with its recorded durations; one result per (rank, step)."""
    graph = extract_source(source)
    result = replay(graph)
    steps = step_times(graph, result)
    if not steps:
        raise InputError("the trace has no ProfilerStep#N annotations, so it has no steps to "
                         "replay (record with torch.profiler and call prof.step())", source.path)
    unprof: dict[tuple[int, int], int] = {}
    measured_unprof = None
    overhead = _overhead_ns(source)
    if overhead is not None:
        g2 = extract_source(source, overhead)
        r2 = replay(g2)
        unprof = {(rk, ev): pred for rk, _, ev, _, pred, _, _ in step_times(g2, r2)}
        measured_unprof = float(source.meta["measured_step_time_s"]["median"])
    per_rank_median: dict[int, float] = {}
    for rk in {s[0] for s in steps}:
        per_rank_median[rk] = float(np.median([s[3] for s in steps if s[0] == rk]))
    out = []
    for rk, step, ev, meas, pred, b, e in steps:
        steady = abs(meas - per_rank_median[rk]) <= 0.2 * per_rank_median[rk]
        kw = {}
        if (rk, ev) in unprof and measured_unprof:
            pu = unprof[(rk, ev)] / 1e9
            kw = {"measured_unprofiled_s": measured_unprof, "predicted_unprofiled_s": pu,
                  "rel_error_unprofiled": (pu - measured_unprof) / measured_unprof}
        out.append(StepResult(
            str(source.path), rk, step, meas / 1e9, pred / 1e9,
            (pred - meas) / meas if meas else float("nan"), bool(steady),
            _gpu_start_mae_us(graph, result, source, rk, b, e), **kw,
            fallbacks=dict(result.fallbacks) or None,
            whole_trace=True if (source.meta or {}).get("whole_trace_step") else None,
        ))
    return out


def _overhead_ns(source: Source) -> tuple[float, float] | None:
    if not isinstance((source.meta or {}).get("measured_step_time_s"), dict):
        return None
    return profiler_overhead(source.meta)
