"""The interleaved profiling run: calibration and recorded profiler cycles, and their files.

A shared machine's speed can move by 10-30% within seconds. A profiled window, an overhead
calibration and a block of reference steps taken one after the other can then see different
machine speeds, which moves the unprofiled self-replay error by tens of percent. So the
collector measures all three in one interleaved run (:func:`plan_cycles`):

* one ``torch.profiler`` session with a schedule made of **cycles** (:func:`cycle_schedule`);
  a cycle is an untimed settle step (absorbs the slowdown after the previous cycle's trace
  export), ``plain`` timed unprofiled steps, the profiler's warm-up step (untimed), and one
  recorded (timed, profiled) step, whose trace is exported when the cycle ends;
* ``calibration`` cycles measure the profiler's cost (their profiled steps against their
  unprofiled steps, :func:`cycle_overhead`) and are thrown away;
* ``recorded`` cycles, spread evenly among them, give the bundle its profiled steps
  (:func:`merge_chrome_traces`, :func:`filter_et_nodes`) and its reference steps (their
  unprofiled steps: ``meta.yaml: measured_step_time_s``).

So the calibration and the test are disjoint sets of steps (nothing the self-replay is
compared with enters the overhead estimate) that sample the same stretch of machine time.
Pure Python on the JSON files: no torch import, so the tests can run it without torch.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: calibration cycles of a collection (each costs plain + 3 steps)
CALIBRATION_CYCLES = 16
#: timed unprofiled steps in a calibration cycle
CALIBRATION_PLAIN = 2


@dataclass(frozen=True)
class Cycle:
    """One profiler cycle: ``plain`` timed unprofiled steps, then one profiled step.

    ``recorded``: its profiled step goes into the bundle and its unprofiled steps are
    reference steps; otherwise it is a calibration cycle.
    """

    index: int
    recorded: bool
    plain: int

    @property
    def steps(self) -> int:
        """Training steps of the cycle: settle, plain, profiler warm-up, profiled."""
        return self.plain + 3


def _spread(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` near-equal counts, larger ones first."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def plan_cycles(recorded: int, measure: int, calibration: int = CALIBRATION_CYCLES,
                calibration_plain: int = CALIBRATION_PLAIN) -> list[Cycle]:
    """The cycles of a collection: ``recorded`` cycles (``measure`` reference steps spread
    over them, at least one each) placed evenly among ``calibration`` calibration cycles.

    With more calibration than recorded cycles, the first and the last cycle are
    calibration ones, so every recorded cycle has calibration on both sides.
    """
    if recorded < 1 or measure < 1 or calibration < 0 or calibration_plain < 1:
        raise ValueError("need recorded >= 1, measure >= 1, calibration >= 0, plain >= 1")
    total = recorded + calibration
    # recorded cycle j sits at the middle of the j-th of `recorded` equal stretches (at least
    # one cycle long, so no two coincide)
    at = {int((j + 0.5) * total / recorded) for j in range(recorded)}
    ref = iter(_spread(max(measure, recorded), recorded))
    return [Cycle(i, i in at, next(ref) if i in at else calibration_plain) for i in range(total)]


def cycle_schedule(cycles: Sequence[Cycle]) -> Callable[[int], Any]:
    """A ``torch.profiler`` schedule for ``cycles``: per cycle ``1 + plain`` steps of NONE
    (settle and timed plain steps), one WARMUP, one RECORD_AND_SAVE; NONE after the last."""
    from torch.profiler import ProfilerAction

    actions: list[Any] = []
    for c in cycles:
        actions += [ProfilerAction.NONE] * (1 + c.plain)
        actions += [ProfilerAction.WARMUP, ProfilerAction.RECORD_AND_SAVE]

    def schedule(step: int) -> Any:
        return actions[step] if 0 <= step < len(actions) else ProfilerAction.NONE

    return schedule


@dataclass(frozen=True)
class CycleTimes:
    """Measured times of one cycle (ns): its unprofiled steps and its profiled step."""

    plain_ns: tuple[int, ...]
    profiled_ns: int


def cycle_overhead(times: Sequence[CycleTimes], events: Sequence[float]) -> dict[str, Any]:
    """Per-event profiler cost from calibration cycles (ns).

    (median of the cycles' profiled steps - median of their unprofiled steps) / the median
    of the events recorded per profiled step: the same statistic as the self-replay check,
    which compares the median of the predictions with the median of the reference steps
    (a per-cycle pairing with the mean of a cycle's two unprofiled steps would keep the slow
    outliers that a median drops and bias the estimate low). The calibration cycles are
    spread over the same stretch of machine time as the recorded ones, so a change of machine
    speed affects both sets alike. ``events[k]`` belongs to ``times[k]``;
    ``per_event_ns_cycles`` keeps each cycle's own (profiled - mean unprofiled) / events,
    whose spread shows how busy the machine was.
    """
    if not times or len(times) != len(events):
        raise ValueError("one event count per calibration cycle is needed")
    per_cycle = [(t.profiled_ns - statistics.fmean(t.plain_ns)) / max(1.0, e)
                 for t, e in zip(times, events, strict=True)]
    plain = [p for t in times for p in t.plain_ns]
    profiled = [t.profiled_ns for t in times]
    plain_ns, profiled_ns = statistics.median(plain), statistics.median(profiled)
    return {
        "per_event_ns": max(0, round((profiled_ns - plain_ns) / max(1.0, statistics.median(events)))),
        "per_event_ns_cycles": [round(x) for x in per_cycle],
        "plain_step_ns": round(plain_ns),
        "profiled_step_ns": round(profiled_ns),
        "plain_steps_ns": plain,
        "profiled_steps_ns": profiled,
        "cycles": len(times),
    }


def merge_chrome_traces(traces: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One Chrome trace from the (loaded) traces of several profiler cycles of one process.

    The cycles share the process's clock (absolute timestamps), record-function ids and
    correlation ids, so their events are concatenated as they are; only the flow-event ids
    (``ph`` s / f / t, which each cycle numbers from 1) are renumbered so that they stay
    unique. Top-level fields come from the first trace.
    """
    if not traces:
        raise ValueError("no traces to merge")
    merged: dict[str, Any] | None = None
    events: list[Any] = []
    flow_base = 0
    for trace in traces:
        top = 0
        for ev in trace.get("traceEvents", []):
            if isinstance(ev, dict) and ev.get("ph") in ("s", "f", "t") and isinstance(ev.get("id"), int):
                top = max(top, ev["id"])
                ev = {**ev, "id": ev["id"] + flow_base}
            events.append(ev)
        flow_base += top
        if merged is None:
            merged = {k: v for k, v in trace.items() if k != "traceEvents"}
    assert merged is not None
    merged["traceEvents"] = events
    return merged


def _attr(node: dict[str, Any], name: str) -> Any:
    if name in node:
        return node[name]
    for a in node.get("attrs") or []:
        if isinstance(a, dict) and a.get("name") == name:
            return a.get("value")
    return None


def filter_et_nodes(et: dict[str, Any], keep_steps: set[str]) -> dict[str, Any]:
    """The execution trace ``et`` reduced to the ``ProfilerStep#N`` steps in ``keep_steps``.

    The observer records every profiled step of the session; a node belongs to the step
    whose ``ProfilerStep#N`` node has the largest record-function id not above its own
    (record-function ids grow in call order on all threads, so this also places nodes of
    other threads, e.g. a GPU backward thread). The observer's process and thread nodes
    (no step) are kept.
    """
    nodes = et.get("nodes") or []
    starts = sorted((int(_attr(n, "rf_id")), str(n["name"])) for n in nodes
                    if str(n.get("name", "")).startswith("ProfilerStep#")
                    and isinstance(_attr(n, "rf_id"), int))
    keys = [s[0] for s in starts]

    def keep(n: dict[str, Any]) -> bool:
        rf = _attr(n, "rf_id")
        if str(n.get("name", "")).startswith("[pytorch|profiler|execution_trace|"):
            return True
        if not isinstance(rf, int):
            return False
        i = bisect.bisect_right(keys, rf) - 1
        return i >= 0 and starts[i][1] in keep_steps

    return {**et, "nodes": [n for n in nodes if isinstance(n, dict) and keep(n)]}
