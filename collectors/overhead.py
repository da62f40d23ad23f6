"""Profiler-overhead calibration, measured on separate steps (never the ones it is used for).

``torch.profiler`` with ``record_shapes`` / ``with_flops`` and, above all, the
execution-trace observer add a cost to every event they record (about 7-10 us per op on a
CPU). A replay of recorded durations reproduces the *profiled* step; to predict an
unprofiled step that cost must be removed, and the self-replay check must not fit it on the
steps it is tested on. So each rank measures it here, on **calibration steps** of the real
training job (same model, batch, DDP wrapper, threads, hence the same ops, shapes, page-fault
pattern and, with several ranks, the same contention between the processes), taken after the
warm-up and before the recorded profile, under the same profiler configuration
(:func:`collectors.train.make_profiler`):

* ``sessions`` times: an untimed step, a timed unprofiled step, one profiler session of 1
  warm-up + ``steps`` active steps (timing each active step; its events are counted from
  the exported trace, :func:`collectors.train.count_step_events`, after the last session),
  another untimed and another timed unprofiled step (the untimed steps absorb the slowdown
  that follows a profiler session and its trace export);
* ``per_event_ns = (median profiled step - median unprofiled step) / events per step``
  over all sessions (plain and profiled steps alternate, so both see the same load; the
  medians drop steps slowed by other work on both sides alike).

The recorded ``ProfilerStep`` and the timed unprofiled steps of the bundle come afterwards
and are not used. Where other work made the sessions useless (a median below the loop
microbenchmark's cost, a lower bound: real ops record more), the loop cost is used instead
(``floored: true``). The per-event cost is split between ops and annotations in the ratio of a
second microbenchmark (``loops``: ``n_ops`` calls of ``torch.add`` on one-element tensors and
as many empty ``record_function`` blocks with and without the profiler; ``op_ns`` /
``annotation_ns`` per event, and ``op_inside_ns`` / ``annotation_inside_ns``, the part that
lands inside the recorded duration). All figures are integer nanoseconds.
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

from collectors.train import Training, count_step_events, make_profiler
from tracesim.workload.model import ModelSpec

#: twin sizes: tiny tensors, same layers / heads / experts as the real model
TWIN_HEAD_DIM = 8
TWIN_FFN = 32
TWIN_VOCAB = 64
TWIN_SEQ = 16


def twin_spec(spec: ModelSpec) -> ModelSpec:
    """A small twin of ``spec``: same structure and op sequence, tiny sizes (for tests)."""
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


def step_overhead(training: Training, device: torch.device, steps: int = 1,
                  sessions: int = 16) -> dict[str, Any]:
    """Per-event profiler overhead from calibration steps of ``training`` (see module doc).

    Each session runs an untimed step, times an unprofiled step, a profiler session (1
    warm-up + ``steps`` active steps), again an untimed and a timed unprofiled step, so
    plain and profiled steps alternate and see the same load; the untimed steps keep the
    disturbance right after a profiler session (and its trace export) out of the baseline,
    and the traces are parsed only after the last session. ``per_event_ns`` is (median profiled step - median unprofiled step) over all
    sessions, divided by the (median) events per profiled step: medians, so that steps slowed
    by other work drop out on both sides alike.
    """
    plain: list[int] = []
    active: list[int] = []
    per_event: list[float] = []
    counts: list[dict[str, int]] = []
    with tempfile.TemporaryDirectory(prefix="tracesim-calib-") as tmp:
        files = [Path(tmp) / f"trace{k}.json" for k in range(sessions)]
        times: list[tuple[int, list[int], int]] = []
        for k in range(sessions):
            # an untimed step first: the step right after a profiler session (or its trace
            # export) runs slower than a steady one, which would bias the baseline high
            training.step()
            before = _timed_ns(training.step)
            session = []
            prof = make_profiler(
                device, steps, Path(tmp) / f"et{k}.json",
                on_trace_ready=lambda p, f=files[k]: p.export_chrome_trace(str(f)),
            )
            with prof:
                for i in range(1 + steps):
                    dt = _timed_ns(training.step)
                    if i:
                        session.append(dt)
                    prof.step()
            training.step()
            after = _timed_ns(training.step)
            times.append((before, session, after))
        # the traces are read only after the last session, so that parsing them disturbs
        # no timed step
        for trace_file, (before, session, after) in zip(files, times, strict=True):
            with open(trace_file) as fh:
                counted = count_step_events(json.load(fh))
            n = max(1, len(counted))
            events = sum(c["events"] for c in counted) / n
            plain += [before, after]
            active += session
            per_event.append((statistics.fmean(session) - (before + after) / 2) / max(1.0, events))
            counts.append({k: sum(c[k] for c in counted) // n
                           for k in ("cpu_ops", "module_scopes", "annotations", "events")})
    counts.sort(key=lambda c: c["events"])
    typical = counts[len(counts) // 2]
    plain_ns, prof_ns = statistics.median(plain), statistics.median(active)
    return {
        "per_event_ns": max(0, round((prof_ns - plain_ns) / max(1, typical["events"]))),
        "per_event_ns_sessions": [round(x) for x in per_event],
        "plain_step_ns": round(plain_ns),
        "profiled_step_ns": round(prof_ns),
        "plain_steps_ns": plain,
        "profiled_steps_ns": active,
        "events_per_step": typical,
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


def loop_floor(counts: dict[str, int], loops: dict[str, Any]) -> int:
    """The loop microbenchmark's cost per event of a step with ``counts`` (ns): a lower
    bound for real ops, which record at least as much (more inputs, shapes, FLOPs)."""
    ops = counts["cpu_ops"]
    annotations = counts["module_scopes"] + counts["annotations"]
    total = ops * float(loops["op_ns"]) + annotations * float(loops["annotation_ns"])
    return round(total / max(1, ops + annotations))


def split_per_event(per_event_ns: float, counts: dict[str, int],
                    loops: dict[str, Any]) -> tuple[int, int]:
    """(per op, per annotation) in ns: ``per_event_ns`` over all events of a step, split in
    the ratio of the loop microbenchmark's ``op_ns`` : ``annotation_ns``."""
    ops = counts["cpu_ops"]
    annotations = counts["module_scopes"] + counts["annotations"]
    total = per_event_ns * (ops + annotations)
    op_w, an_w = float(loops["op_ns"]), float(loops["annotation_ns"])
    denom = ops * op_w + annotations * an_w
    if denom <= 0:
        return round(per_event_ns), round(per_event_ns)
    k = total / denom
    return round(k * op_w), round(k * an_w)


def measure_profiler_overhead(training: Training, device: torch.device, steps: int = 1,
                              sessions: int = 16, n_ops: int = 1000) -> dict[str, Any]:
    """The ``profiler_overhead`` mapping of ``meta.yaml`` (integer ns; see module doc)."""
    loops = op_overhead(device, n_ops=n_ops)
    calib = step_overhead(training, device, steps=steps, sessions=sessions)
    floor = loop_floor(calib["events_per_step"], loops)
    per_event = max(calib["per_event_ns"], floor)
    op_ns, an_ns = split_per_event(per_event, calib["events_per_step"], loops)
    return {
        "per_event_ns": per_event,
        "floored": per_event > calib["per_event_ns"],
        "per_op_ns": op_ns,
        "per_annotation_ns": an_ns,
        "method": (
            "calibration steps of the same training job (after warm-up, before the recorded "
            "profile): per session an unprofiled step, a profiled one under the collector's "
            "profiler (record_shapes, with_flops, execution trace observer), another "
            "unprofiled one; (median profiled - median unprofiled step) / events per step; "
            "at least the loop microbenchmark's cost; split between ops and annotations in "
            "the ratio of the loop microbenchmark"
        ),
        "applies_to": "every cpu_op and user_annotation event of a profiled step",
        "n_events": calib["events_per_step"]["events"] * steps * sessions,
        "calibration": calib,
        "loops": loops,
    }
