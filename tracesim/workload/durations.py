"""Durations of template ops on a target device (DESIGN.md, "Kernel-time scaling").

:func:`make_op_time` returns the ``op_time`` callable the builder uses. For an op with a
measured duration (a trace-derived template):

* recorded on the target device at the same FLOPs / bytes: the measurement (``measured``);
* recorded on the target device or another GPU, at other sizes: the measurement times the
  cost model's ratio target / source (``scaled``);
* recorded on a CPU while the target is not that CPU: the cost model alone (``model``): a
  CPU time says little about a GPU kernel.

Ops without a measurement use the cost model (``model``). ``methods`` counts each outcome.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracesim.workload.template import LayerTemplate, TemplateOp


@dataclass
class _Cost:
    op_class: str
    flops: float
    bytes: float
    dtype: str


def make_op_time(template: LayerTemplate, device: Any, dtype: str) -> tuple[Callable[[str, float, float, TemplateOp], int], Counter]:
    """``(op_time, methods)`` for ``template`` on ``device`` (a DeviceProfile) in ``dtype``."""
    from tracesim.hardware.costmodel import op_time_ns, scale_duration
    from tracesim.hardware.device import get_device

    methods: Counter = Counter()
    src_name = template.meta.get("device")
    src_dev = None
    if src_name and str(src_name) == device.name:
        src_dev = device  # recorded on the target itself (e.g. a CPU profile named like it)
    elif src_name:
        try:
            src_dev = get_device(str(src_name))
        except Exception:  # an unknown recording device: fall back to the model
            src_dev = None
    src_dtype = str(template.meta.get("dtype") or dtype)
    use_measured = src_dev is not None and (
        getattr(src_dev, "kind", "gpu") != "cpu" or src_dev.name == device.name
    )
    cache: dict[tuple, int] = {}

    def op_time(op_class: str, flops: float, nbytes: float, op: TemplateOp) -> int:
        key = (op_class, flops, nbytes, op.measured_ns, op.src_flops, op.src_bytes)
        if key in cache:
            methods[cache[key][1]] += 1  # type: ignore[index]
            return cache[key][0]  # type: ignore[index]
        if use_measured and src_dev is not None and op.measured_ns > 0:
            ns, method = scale_duration(
                int(op.measured_ns), src_dev, _Cost(op_class, op.src_flops, op.src_bytes, src_dtype),
                device, _Cost(op_class, flops, nbytes, dtype),
            )
        else:
            ns, method = op_time_ns(device, op_class, flops, nbytes, dtype), "model"
        cache[key] = (int(ns), method)  # type: ignore[assignment]
        methods[method] += 1
        return int(ns)

    return op_time, methods
