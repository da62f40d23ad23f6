"""Profiler-overhead calibration, measured before the training steps (never on them).

``torch.profiler`` with ``record_shapes`` / ``with_flops`` and, above all, the
execution-trace observer add a cost to every event they record (about 8-12 us per op on a
CPU, most of it the execution trace). A replay of recorded durations reproduces the
*profiled* step; to predict an unprofiled step that cost must be removed, and the self-replay
check must not fit it on the steps it is tested on. So it is measured here, separately, on a
*calibration twin*: the same model family and layer count (hence the same sequence of ops,
module scopes and annotations) with tiny tensor sizes, run in the same process under the same
profiler configuration (:func:`collectors.train.make_profiler`):

* ``sessions`` times: time ``plain_steps`` unprofiled twin steps (median), then one profiler
  session of 1 warm-up + ``steps`` active steps, timing each active step and counting its
  events from the exported trace (:func:`collectors.train.count_step_events`);
* ``per_event_ns = (sum of active step times - steps x plain median) / events``, the median
  over sessions. It applies to every ``cpu_op`` and ``user_annotation`` event of a profiled
  step (the ``events`` count of ``per_rank[].profiled_step_events``).

A second microbenchmark times ``n_ops`` calls of ``torch.add`` on one-element tensors (and as
many empty ``record_function`` blocks) with and without the profiler: ``op_ns`` /
``annotation_ns`` per event, and ``op_inside_ns`` / ``annotation_inside_ns``, the part that
lands inside the recorded duration (mean recorded duration minus the plain per-call time);
the rest lies in the gaps between events. All figures are integer nanoseconds.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import record_function

from collectors.train import count_step_events, make_profiler, make_training
from tracesim.workload.model import ModelSpec

#: twin sizes: tiny tensors, same layers / heads / experts as the real model
TWIN_HEAD_DIM = 8
TWIN_FFN = 32
TWIN_VOCAB = 64
TWIN_SEQ = 16
TWIN_BATCH = 2


def twin_spec(spec: ModelSpec) -> ModelSpec:
    """The calibration twin of ``spec``: same structure and op sequence, tiny sizes."""
    return spec.replace(
        name=f"{spec.name}-calibration-twin",
        hidden=spec.heads * TWIN_HEAD_DIM,
        ffn_hidden=TWIN_FFN,
        moe_ffn_hidden=TWIN_FFN if spec.is_moe else 0,
        vocab=TWIN_VOCAB,
        seq_len=TWIN_SEQ,
    )


def _timed_ns(fn: Callable[[], Any]) -> int:
    t0 = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - t0


def step_overhead(spec: ModelSpec, device: torch.device, steps: int = 1, sessions: int = 5,
                  plain_steps: int = 5) -> dict[str, Any]:
    """Per-event profiler overhead from the calibration twin of ``spec`` (see module doc)."""
    twin = twin_spec(spec)
    training = make_training(twin, TWIN_BATCH, device, seed=99)
    for _ in range(3):
        training.step()
    per_event, plain_med, prof_med, n_events = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="tracesim-calib-") as tmp:
        trace_file = Path(tmp) / "trace.json"
        for _ in range(sessions):
            plain = statistics.median(_timed_ns(training.step) for _ in range(plain_steps))
            active = []
            prof = make_profiler(
                device, steps, Path(tmp) / "et.json",
                on_trace_ready=lambda p: p.export_chrome_trace(str(trace_file)),
            )
            with prof:
                for i in range(1 + steps):
                    dt = _timed_ns(training.step)
                    if i:
                        active.append(dt)
                    prof.step()
            with open(trace_file) as fh:
                counted = count_step_events(json.load(fh))
            events = sum(c["events"] for c in counted)
            per_event.append((sum(active) - steps * plain) / max(1, events))
            plain_med.append(plain)
            prof_med.append(sum(active) / steps)
            n_events.append(events / steps)
    training.scopes.remove()
    return {
        "per_event_ns": max(0, round(statistics.median(per_event))),
        "per_event_ns_spread": [max(0, round(min(per_event))), max(0, round(max(per_event)))],
        "twin": {
            "hidden": twin.hidden,
            "ffn_hidden": twin.ffn_hidden,
            "vocab": twin.vocab,
            "seq_len": twin.seq_len,
            "batch": TWIN_BATCH,
            "events_per_step": round(statistics.median(n_events)),
            "plain_step_ns": round(statistics.median(plain_med)),
            "profiled_step_ns": round(statistics.median(prof_med)),
        },
        "sessions": sessions,
    }


def _loop_ops(n: int, a: torch.Tensor, b: torch.Tensor) -> None:
    for _ in range(n):
        torch.add(a, b)


def _loop_annotations(n: int) -> None:
    for _ in range(n):
        with record_function("calib"):
            pass


def _loop_cost(body: Callable[[], None], name: str, n: int, repeats: int,
               device: torch.device, tmp: Path) -> tuple[int, int]:
    """(per-event overhead, part of it inside the recorded duration), medians, in ns."""
    per, inside = [], []
    for _ in range(repeats):
        plain = _timed_ns(body)
        prof = make_profiler(device, None, tmp / "et.json")  # records from the start
        with prof:
            profiled = _timed_ns(body)
        durs = [e.time_range.elapsed_us() * 1000.0 for e in prof.events() if e.name == name]
        if len(durs) != n:
            raise RuntimeError(f"calibration recorded {len(durs)} {name} events, expected {n}")
        per.append((profiled - plain) / n)
        inside.append(statistics.fmean(durs) - plain / n)
    return max(0, round(statistics.median(per))), max(0, round(statistics.median(inside)))


def op_overhead(device: torch.device, n_ops: int = 1000, repeats: int = 3) -> dict[str, Any]:
    """Per-event cost of a tiny aten op and of an empty annotation (see module doc)."""
    a, b = torch.ones(1, device=device), torch.ones(1, device=device)
    with tempfile.TemporaryDirectory(prefix="tracesim-calib-") as tmp_dir:
        tmp = Path(tmp_dir)
        _loop_cost(lambda: _loop_ops(50, a, b), "aten::add", 50, 1, device, tmp)  # warm-up
        op_ns, op_in = _loop_cost(lambda: _loop_ops(n_ops, a, b), "aten::add", n_ops,
                                  repeats, device, tmp)
        an_ns, an_in = _loop_cost(lambda: _loop_annotations(n_ops), "calib", n_ops,
                                  repeats, device, tmp)
    return {"op_ns": op_ns, "op_inside_ns": op_in, "annotation_ns": an_ns,
            "annotation_inside_ns": an_in, "n_ops": n_ops, "repeats": repeats}


def measure_profiler_overhead(spec: ModelSpec, device: torch.device, steps: int = 1,
                              sessions: int = 5, n_ops: int = 1000) -> dict[str, Any]:
    """The ``profiler_overhead`` mapping of ``meta.yaml`` (integer ns; see module doc)."""
    twin = step_overhead(spec, device, steps=steps, sessions=sessions)
    loops = op_overhead(device, n_ops=n_ops)
    return {
        "per_event_ns": twin["per_event_ns"],
        "method": (
            "calibration twin (same model structure, tiny sizes) stepped with and without "
            "the collector's profiler (record_shapes, with_flops, execution trace observer) "
            "in the same process before training; (profiled - plain) step time / events "
            "per step, median over sessions"
        ),
        "applies_to": "every cpu_op and user_annotation event of a profiled step",
        "n_events": twin["twin"]["events_per_step"] * steps * sessions,
        "per_event_ns_spread": twin["per_event_ns_spread"],
        "twin": twin["twin"],
        "sessions": twin["sessions"],
        "loops": loops,
    }
