"""What a Kineto trace says about itself beyond its events: the GPU that recorded it, and a
step for a trace that marks none.

A trace recorded without ``prof.step()`` (a ``with torch.profiler.profile():`` block around
some work, an inference server's profile) has no ``ProfilerStep#N`` annotation, so it has no
step to compare or to replay. :func:`whole_trace_step` gives such a trace one: an annotation
``ProfilerStep#0`` from its first to its last host event, on the host thread with the most
events (where ``ProfilerStep`` annotations are), so the window the trace recorded is replayed
as one step. :func:`tracesim.trace.sources.load_source` adds it to single trace files and
says so in the source's ``meta`` (``whole_trace_step``); the reports warn.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

#: the name of the step given to a trace that marks none
WHOLE_TRACE_STEP = "ProfilerStep#0"
#: the warning of a replay of such a trace
WHOLE_TRACE_WARNING = ("the trace has no ProfilerStep#N annotations: its whole window, from its "
                       "first to its last host event, is replayed as one step "
                       f"({WHOLE_TRACE_STEP}); call prof.step() at each step of the job to "
                       "compare steps")


def whole_trace_warnings(meta: Mapping[str, Any] | None) -> list[str]:
    """The report's warning for a source whose one step is its whole window (none else)."""
    return [WHOLE_TRACE_WARNING] if (meta or {}).get("whole_trace_step") else []


def trace_field(data: Mapping[str, Any], key: str) -> Any:
    """A top-level field of a trace; one some writers store as a Python literal string
    (``"{'rank': 0}"``) is parsed (None when it does not parse)."""
    value = data.get(key)
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return None
    return value


def trace_device(data: Mapping[str, Any]) -> str:
    """The GPU name recorded in ``deviceProperties`` ("" if none, e.g. CPU traces). A name
    no device profile knows, such as ROCm's generic "AMD Radeon Graphics", becomes the name
    of the profile its properties identify (compute capability and CU count:
    :func:`tracesim.hardware.device.device_from_properties`), else stays as recorded."""
    props = trace_field(data, "deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], Mapping):
        name = str(props[0].get("name", ""))
        from tracesim.errors import InputError
        from tracesim.hardware.device import device_from_properties, get_device

        try:
            get_device(name)
        except InputError:
            return device_from_properties(props[0]) or name
        return name
    return ""


def whole_trace_step(cols: dict[str, list[Any]], gpu_cats: set[str], is_step: Any,
                     next_event: int) -> bool:
    """Append to ``cols`` (the op table's columns as lists, before annotation) an annotation
    ``ProfilerStep#0`` spanning the host events (categories not in ``gpu_cats``) when no row
    is a step (``is_step(name)``). Returns whether it did (False when there is a step
    already, or no host event)."""
    names, cats, lanes = cols["name"], cols["cat"], cols["lane"]
    host = [i for i, c in enumerate(cats) if c not in gpu_cats]
    if not host or any(cats[i] in ("annotation", "cpu_op") and is_step(names[i]) for i in host):
        return False
    lane = _busiest(lanes, host)
    ts, dur = cols["ts_ns"], cols["dur_ns"]
    t0 = min(ts[i] for i in host)
    t1 = max(ts[i] + dur[i] for i in host)
    row = {"event_id": next_event, "name": WHOLE_TRACE_STEP, "cat": "annotation", "lane": lane,
           "device": "cpu", "ts_ns": t0, "dur_ns": t1 - t0, "stream": -1, "sync_kind": "",
           "_dims": None, "_types": None, "_args": {}}
    for key, col in cols.items():
        col.append(row.get(key, -1))
    return True


def rehome_lone_steps(cols: dict[str, list[Any]], gpu_cats: set[str], is_step: Any) -> None:
    """Move ``ProfilerStep#N`` annotations recorded on a thread with no other host event
    onto the busiest host thread (``cols`` as in :func:`whole_trace_step`): a step marks
    the work of the thread that calls ``prof.step()``, and a step alone on its thread would
    mark nothing."""
    names, cats, lanes = cols["name"], cols["cat"], cols["lane"]
    host = [i for i, c in enumerate(cats) if c not in gpu_cats]
    steps = {i for i in host if cats[i] in ("annotation", "cpu_op") and is_step(names[i])}
    others = [i for i in host if i not in steps]
    busy = {lanes[i] for i in others}
    lone = [i for i in steps if lanes[i] not in busy]
    if lone and others:
        lane = _busiest(lanes, others)
        for i in lone:
            lanes[i] = lane


def _busiest(lanes: list[Any], rows: list[int]) -> Any:
    """The lane holding the most of ``rows``."""
    count: dict[Any, int] = {}
    for i in rows:
        count[lanes[i]] = count.get(lanes[i], 0) + 1
    return max(count, key=lambda k: count[k])
