"""Profiler-overhead calibration: a microbenchmark run before the training steps.

The profiler (and the execution-trace observer) adds a roughly constant cost to every event
it records. A replay of recorded durations sees that cost twice: inside an event's recorded
duration (its start/end callbacks) and in the gaps between events. Because the self-replay
check must not fit the overhead on the run it is tested on, it is measured here, separately,
with the same profiler configuration as the training steps:

* ``n_events`` calls of a tiny op (``torch.add`` on one-element tensors), timed without the
  profiler and inside an active profiler (CPU activity, ``record_shapes``, ``with_flops``,
  execution-trace observer running): ``per_event_ns = (t_profiled - t_plain) / n_events``;
  ``inside_ns`` is how much of it shows up inside the recorded ``aten::add`` durations
  (mean recorded duration minus the plain per-call time), the rest lies between events.
* the same for ``record_function`` annotations (what module scopes and phases cost):
  ``per_annotation_ns``.

Each figure is the median over ``repeats`` alternating plain/profiled runs, in integer ns.
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, record_function


@contextlib.contextmanager
def _profiler(activities: list[ProfilerActivity], et_dir: Path) -> Iterator[profile]:
    et = ExecutionTraceObserver().register_callback(str(et_dir / "calib_et.json"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prof = profile(
            activities=activities,
            record_shapes=True,
            with_flops=True,
            execution_trace_observer=et,
        )
        with prof:
            yield prof


def _loop_ops(n: int, a: torch.Tensor, b: torch.Tensor) -> None:
    for _ in range(n):
        torch.add(a, b)


def _loop_annotations(n: int) -> None:
    for _ in range(n):
        with record_function("calib"):
            pass


def _timed(fn: Callable[[], None]) -> int:
    t0 = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - t0


def _measure(
    body: Callable[[], None], n: int, name: str, repeats: int, activities: list[ProfilerActivity]
) -> tuple[int, int, int, int]:
    """Return (plain_ns, profiled_ns, mean recorded duration ns, events counted), medians."""
    plain, profiled, inside, counted = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="tracesim-calib-") as tmp:
        for _ in range(repeats):
            plain.append(_timed(body))
            with _profiler(activities, Path(tmp)) as prof:
                profiled.append(_timed(body))
            durs = [e.time_range.elapsed_us() * 1000.0 for e in prof.events() if e.name == name]
            counted.append(len(durs))
            inside.append(int(statistics.fmean(durs)) if durs else 0)
    return (
        int(statistics.median(plain)),
        int(statistics.median(profiled)),
        int(statistics.median(inside)),
        int(statistics.median(counted)),
    )


def measure_profiler_overhead(
    device: str = "cpu", n_events: int = 2000, repeats: int = 5
) -> dict[str, Any]:
    """Measure the profiler's per-event cost on this process; all times in integer ns.

    Returns the ``profiler_overhead`` mapping of ``meta.yaml``: ``per_event_ns``,
    ``inside_ns``, ``per_annotation_ns``, ``annotation_inside_ns``, ``method``,
    ``n_events``, ``repeats``.
    """
    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    a = torch.ones(1)
    b = torch.ones(1)
    # warm up the profiler machinery (first use loads Kineto) and the op itself
    _measure(lambda: _loop_ops(50, a, b), 50, "aten::add", 1, activities)

    plain, prof, dur, counted = _measure(
        lambda: _loop_ops(n_events, a, b), n_events, "aten::add", repeats, activities
    )
    a_plain, a_prof, a_dur, a_counted = _measure(
        lambda: _loop_annotations(n_events), n_events, "calib", repeats, activities
    )
    if counted != n_events or a_counted != n_events:
        raise RuntimeError(
            f"calibration recorded {counted} / {a_counted} events, expected {n_events}"
        )
    return {
        "per_event_ns": max(0, round((prof - plain) / n_events)),
        "inside_ns": max(0, dur - round(plain / n_events)),
        "per_annotation_ns": max(0, round((a_prof - a_plain) / n_events)),
        "annotation_inside_ns": max(0, a_dur - round(a_plain / n_events)),
        "method": (
            "microbenchmark before training: torch.add on 1-element tensors and empty "
            "record_function blocks, timed with and without torch.profiler (record_shapes, "
            "with_flops, execution trace observer); median of repeats"
        ),
        "n_events": n_events,
        "repeats": repeats,
    }
