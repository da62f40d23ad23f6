"""Profiler-overhead calibration, measured on separate steps (never the ones it is used for).

``torch.profiler`` with ``record_shapes`` / ``with_flops`` and, above all, the
execution-trace observer add a cost to every event they record (several microseconds per
op on a CPU, more when the machine is busy). A replay of recorded durations reproduces the
*profiled* step; to predict an unprofiled step that cost must be removed, and the
self-replay check must not fit it on the steps it is tested on. So each rank measures it on
**calibration cycles** of the real training job (same model, batch, DDP wrapper, threads,
hence the same ops, shapes and, with several ranks, the same contention between the
processes), under the same profiler session as the recorded steps and interleaved with
them (:mod:`tracesim.collectors.cycles`): ``per_event_ns`` is (the median of the calibration cycles'
profiled steps - the median of their unprofiled steps) / the events of a profiled step
(:func:`tracesim.collectors.cycles.cycle_overhead`). The recorded profiled steps and the
reference steps of the bundle belong to other cycles and are not used.

Where other work made the cycles useless (a median below the loop microbenchmark's cost, a
lower bound: real ops record more), the loop cost is used instead (``floored: true``). The
per-event cost is split between ops and annotations in the ratio of a second
microbenchmark (``loops``: ``n_ops`` calls of ``torch.add`` on one-element tensors and as
many empty ``record_function`` blocks with and without the profiler; ``op_ns`` /
``annotation_ns`` per event, and ``op_inside_ns`` / ``annotation_inside_ns``, the part that
lands inside the recorded duration). All figures are integer nanoseconds.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import record_function
from tracesim.collectors.train import make_profiler, timed

from tracesim.specs.model import ModelSpec

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
        plain, _ = timed(body)
        prof = make_profiler(device, None, tmp / "et.json")  # records from the start
        with prof:
            profiled, _ = timed(body)
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


def overhead_mapping(calib: dict[str, Any], counts: dict[str, int],
                     loops: dict[str, Any]) -> dict[str, Any]:
    """The ``profiler_overhead`` mapping of ``meta.yaml`` (integer ns; see module doc) from
    the calibration cycles (:func:`tracesim.collectors.cycles.cycle_overhead`), the event counts of a
    typical profiled step and the loop microbenchmark (:func:`op_overhead`)."""
    floor = loop_floor(counts, loops)
    per_event = max(int(calib["per_event_ns"]), floor)
    op_ns, an_ns = split_per_event(per_event, counts, loops)
    return {
        "per_event_ns": per_event,
        "floored": per_event > int(calib["per_event_ns"]),
        "floor_ns": floor,
        "per_op_ns": op_ns,
        "per_annotation_ns": an_ns,
        "method": (
            "calibration cycles of the same training job, interleaved with the recorded "
            "ones in one profiler session: (median of their profiled steps - median of their "
            "unprofiled steps) / events per profiled step; at least the loop "
            "microbenchmark's cost; split between ops and annotations in the ratio of the "
            "loop microbenchmark"
        ),
        "applies_to": "every cpu_op and user_annotation event of a profiled step",
        "n_events": int(counts["events"]) * int(calib["cycles"]),
        "calibration": {**calib, "events_per_step": dict(counts)},
        "loops": loops,
    }
