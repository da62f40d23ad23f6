"""Durations of template ops on a target device (DESIGN.md, "Kernel-time scaling").

:func:`make_op_time` returns the ``op_time`` callable the builder uses. For an op with a
measured duration (a trace-derived template):

* recorded on the target device at the same FLOPs / bytes: the measurement (``measured``);
* recorded on the target device or another GPU, at other sizes: the measurement times the
  cost model's ratio target / source (``scaled``);
* recorded on a CPU while the target is not that CPU: the cost model alone (``model``): a
  CPU time says little about a GPU kernel.

Ops without a measurement use the cost model (``model``), with the op's own ``dtype`` where
it has one (an FP8 GEMM) and its ``shape`` (resolved to numbers by
:func:`tracesim.template.resolve.resolve_template`) for the shape-aware path of profiles
that have one (the routed experts' grouped GEMMs four experts at a time, as Transformer
Engine's multi-stream grouped GEMM runs them: :mod:`tracesim.template.grouped_gemm`); a
backward GEMM op is its data and weight gradients at their own shapes
(:func:`backward_gemm_ns`); a backward attention op runs at the profile's measured backward /
forward rate ratio (:func:`backward_attention_ns`); a block-scaled quantization kernel
(``TemplateOp.quant``) at the profile's ``quantize`` rate for its recipe. ``methods`` counts
each outcome. A template built with ``attention: flash2`` times its fused attention with the
profile's FlashAttention-2 parameters (``shape_model.attention.flash2``; an InputError where
the profile has none).

An op that stands for many host calls (``TemplateOp.calls``, resolved to calls per local
parameter: the trace-derived optimizer step) is split in two (:func:`split_calls_ns`): the
part of its measured time that the cost model puts on its bytes and FLOPs (the model's time
less its launch overhead) is scaled by the model's ratio; the rest (dispatch, interpreter,
scalar arguments: per call, whatever the tensor's size) by the number of calls, target over
recorded (``count``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tracesim.errors import InputError
from tracesim.template.grouped_gemm import stream_groups_ns
from tracesim.template.layer import LayerTemplate, TemplateOp, evaluate
from tracesim.template.moe_ops import is_expert_op

T = TypeVar("T")  # a shape part: a number or an expression


@dataclass
class _Cost:
    op_class: str
    flops: float
    bytes: float
    dtype: str
    units: float = 1.0


def make_op_time(template: LayerTemplate, device: Any, dtype: str) -> tuple[Callable[..., int], Counter]:
    """``(op_time, methods)`` for ``template`` on ``device`` (a DeviceProfile) in ``dtype``."""
    from tracesim.hardware.costmodel import op_time_ns, scale_duration
    from tracesim.hardware.device import get_device

    methods: Counter = Counter()
    if template.meta.get("attention") == "flash2" and getattr(device, "kind", "gpu") == "gpu":
        fa2 = device.with_flash2()
        if fa2 is None:
            raise InputError(f"flash2: the {device.name} profile has no FlashAttention-2 rates "
                             "(shape_model.attention.flash2); the shipped profiles with them: a100, "
                             "a100-40gb, h100, h200", "--attention")
        device = fa2
    src_name = template.meta.get("device")
    src_dev = None
    if src_name and str(src_name) == device.name:
        # recorded on the target itself (e.g. a CPU profile named like it), by one GPU at its
        # own rate: the job's slowest GPU (DeviceProfile.for_job) is the target's
        src_dev = device.alone() if hasattr(device, "alone") else device
    elif src_name:
        try:
            src_dev = get_device(str(src_name), recorded=True)
        except Exception:  # an unknown recording device: fall back to the model
            src_dev = None
    src_dtype = str(template.meta.get("dtype") or dtype)
    use_measured = src_dev is not None and (
        getattr(src_dev, "kind", "gpu") != "cpu" or src_dev.name == device.name
    )
    cache: dict[tuple, int] = {}

    def op_time(op_class: str, flops: float, nbytes: float, op: TemplateOp, units: float = 1.0) -> int:
        # units (work units at the target, :func:`tracesim.template.resolve.op_units`) only
        # count with the recorded ones (``src_units``; 0 in templates written before)
        units = units if op.src_units > 0 else 1.0
        grouped = op_class == "gemm" and is_expert_op(op)
        key = (op_class, flops, nbytes, units, op.measured_ns, op.src_flops, op.src_bytes,
               op.src_units, op.calls, op.count, op.dtype, op.shape, grouped, op.quant,
               op.phase == "bwd")  # a backward GEMM / attention is priced apart
        if key in cache:
            methods[cache[key][1]] += 1  # type: ignore[index]
            return cache[key][0]  # type: ignore[index]
        if use_measured and src_dev is not None and op.measured_ns > 0:
            src = _Cost(op_class, op.src_flops, op.src_bytes, src_dtype, max(op.src_units, 1.0))
            dst = _Cost(op_class, flops, nbytes, dtype, units)
            if op.calls not in ("", "0"):
                ns, method = split_calls_ns(op, src_dev, src, device, dst)
            else:
                ns, method = scale_duration(int(op.measured_ns), src_dev, src, device, dst)
        else:
            shape = _numeric_shape(op.shape)
            dt = op.dtype or dtype

            def model_ns(f: float, b: float, sh: tuple[float, ...] | None) -> int:
                return op_time_ns(device, op_class, f, b, dt, units, **({"shape": sh} if sh else {}))

            def gemm_ns(f: float, b: float, sh: tuple[float, ...] | None) -> int:
                return stream_groups_ns(model_ns, f, b, sh) if sh and grouped else model_ns(f, b, sh)

            if shape and op_class == "gemm" and op.phase == "bwd":
                ns, method = backward_gemm_ns(gemm_ns, flops, nbytes, shape), "model"
            else:
                ns, method = gemm_ns(flops, nbytes, shape), "model"
            if shape and op_class == "attention" and op.phase == "bwd":
                ns = backward_attention_ns(device, int(ns), shape, dt)
            if op.quant:  # a block-scaled quantization kernel (tracesim.template.fp8)
                ns = ns / device.quantize_rate(op.quant)
        cache[key] = (int(ns), method)  # type: ignore[assignment]
        methods[method] += 1
        return int(ns)

    return op_time, methods


def backward_gemm_ns(time_ns: Callable[[float, float, tuple[float, ...]], int], flops: float,
                     nbytes: float, shape: tuple[float, ...]) -> int:
    """Time (ns) of the backward of a GEMM ``Y = X W`` of forward ``shape = (batch, m, n, k)``:
    its data gradient ``dX = dY W^T`` of shape ``(batch, m, k, n)`` and its weight gradient
    ``dW = X^T dY`` of shape ``(batch, k, n, m)``, each half of the backward's ``flops`` and
    ``nbytes``, each priced by ``time_ns`` (one launch each). The two run at other tile and
    wave fills than the forward: a projection with a short reduction (``k`` = 512 at TP 8)
    has long ones backward; an expert's weight gradient reduces over its few tokens."""
    dgrad, wgrad = gradient_shapes(shape)
    half_f, half_b = flops / 2.0, nbytes / 2.0
    return time_ns(half_f, half_b, dgrad) + time_ns(half_f, half_b, wgrad)


def gradient_shapes(shape: tuple[T, ...]) -> tuple[tuple[T, ...], tuple[T, ...]]:
    """The data- and weight-gradient GEMM shapes ``((b, m, k, n), (b, k, n, m))`` of the
    backward of a GEMM of forward ``shape = (b, m, n, k)`` (numbers or expressions)."""
    b, m, n, k = shape
    return (b, m, k, n), (b, k, n, m)


def backward_attention_ns(device: Any, ns: int, shape: tuple[float, ...],
                          dtype: str = "default") -> int:
    """A backward attention op's model time: the forward-efficiency time less the launch
    overhead, divided by the profile's backward / forward rate ratio at the op's head dim,
    mean key length and dtype (:meth:`AttentionShapeModel.backward_ratio`)."""
    att = device.shape_model.attention if device.shape_model is not None else None
    if att is None or not att.backward:
        return ns
    launch = int(round(float(device.launch_overhead_us) * 1e3))
    ratio = att.backward_ratio(shape[3], shape[2], dtype)
    return launch + int(round(max(ns - launch, 0) / ratio))


def _numeric_shape(shape: str) -> tuple[float, ...] | None:
    """A resolved ``shape`` field (four numbers) as floats; None when empty or not numeric."""
    if not shape:
        return None
    try:
        vals = tuple(float(x) for x in shape.split(","))
    except ValueError:
        return None
    return vals if len(vals) == 4 else None


def split_calls_ns(op: TemplateOp, src_dev: Any, src: _Cost, dst_dev: Any, dst: _Cost) -> tuple[int, str]:
    """Duration (ns, method) of ``op``, recorded at ``src`` on ``src_dev``, at ``dst`` on
    ``dst_dev``, with its per-call part apart (module doc).

    ``op.calls`` must be resolved to ``<calls per parameter>*params``
    (:func:`tracesim.template.resolve.optimizer_ops`); the local parameters are the target
    bytes over the op's bytes per parameter. The per-call part is the measurement less the
    source model's size-dependent time (never below zero); it is scaled by the calls, target
    over ``op.count``, and by the devices' launch overheads when they differ.
    """
    from tracesim.hardware.costmodel import op_time_ns

    try:
        per_param = evaluate(op.bytes, {"params": 1.0})
        local = dst.bytes / per_param if per_param > 0 else 0.0
        calls = evaluate(op.calls, {"params": local})
    except NameError:
        raise ValueError(f"op {op.name}: calls {op.calls!r} are not resolved to calls per "
                         "parameter (tracesim.template.resolve.optimizer_ops)") from None
    measured = float(op.measured_ns)

    def sized(dev: Any, c: _Cost) -> float:  # the model's time less its launch overhead
        ns = op_time_ns(dev, c.op_class, c.flops, c.bytes, c.dtype, c.units)
        return max(float(ns) - float(dev.launch_overhead_us) * 1e3, 0.0)

    v_src, v_dst = sized(src_dev, src), sized(dst_dev, dst)
    per_call = max(measured - v_src, 0.0)
    launch = 1.0
    if src_dev.name != dst_dev.name and src_dev.launch_overhead_us > 0:
        launch = float(dst_dev.launch_overhead_us) / float(src_dev.launch_overhead_us)
    ratio = v_dst / v_src if v_src > 0 else 1.0
    ns = per_call * launch * calls / max(op.count, 1) + (measured - per_call) * ratio
    same = (src_dev.name == dst_dev.name and abs(calls - op.count) <= 1e-6 * max(op.count, 1)
            and dst.bytes == src.bytes
            and dst.flops == src.flops and (src.dtype or "fp32") == (dst.dtype or "fp32"))
    return (int(round(measured)), "measured") if same else (int(round(ns)), "scaled")
