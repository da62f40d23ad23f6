"""Op classification and cost features (FLOPs, bytes moved, dtype) from recorded shapes.

Two entry points, both pure and never raising on odd input:

* :func:`classify` maps an aten op name, an autograd node, a GPU kernel name (CUDA or HIP),
  or a communication op to one op class of :data:`OP_CLASSES`.
* :func:`op_cost` turns a Kineto CPU op (its ``Input Dims`` and ``Input type``, optionally
  its ``Concrete Inputs``) into an :class:`OpCost`: class, FLOPs, bytes moved, dtype.

Costs are those of the op itself *including* the ops it calls (``aten::linear`` counts the
GEMM that its child ``aten::addmm`` also counts): to total a trace, sum leaf ops only.
Wrappers (autograd nodes, ``Optimizer.step#...``, ``nn.Module: ...`` annotations, view ops)
cost zero. The per-op formulas live in :mod:`tracesim.ops.costrules`, registered by
decorator.

Byte counts are the ideal traffic: every input read once and every output written once.
FLOPs count a multiply-add as 2; pointwise ops count their documented per-element factor.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tracesim.ops import costrules
from tracesim.ops.dtypes import DEFAULT_DTYPE
from tracesim.ops.rules import work_units  # also registers every rule with costrules
from tracesim.ops.shapes import op_shape

#: the op classes, in the order the reports list them
OP_CLASSES = (
    "gemm",
    "attention",
    "scan",
    "elementwise",
    "norm",
    "softmax",
    "reduction",
    "embedding",
    "optimizer",
    "memcpy",
    "comm",
    "other",
)

@dataclass(frozen=True)
class OpCost:
    """Cost features of one op.

    Attributes:
        op_class: one of :data:`OP_CLASSES`.
        flops: floating-point operations (multiply-add = 2).
        bytes: bytes read plus bytes written, ideal (each tensor touched once).
        dtype: the compute dtype (fp32 | tf32 | bf16 | fp16 | fp8 | fp64 | int64 | ...).
        units: independent work units the FLOPs split into (attention: batch x heads; 1
            otherwise; :func:`tracesim.ops.rules.work_units`).
        shape: ``(batch, m, n, k)`` of a GEMM or an attention (:func:`tracesim.ops.shapes.op_shape`),
            None for other ops or unknown shapes; the cost model's shape-aware path reads it.
    """

    op_class: str
    flops: float
    bytes: float
    dtype: str
    units: float = 1.0
    shape: tuple[int, int, int, int] | None = None


# --------------------------------------------------------------------------- classification

_WRAPPER_PREFIXES = (
    "profilerstep#",
    "## ",
    "nn.module:",
    "distributeddataparallel.",
    "<forward op>",
    "<backward op>",
    "torch::autograd::cppnode",
    "torch::jit::",
    "cudagraph",
    "enumerate(dataloader)",
)
_EVAL_PREFIX = "autograd::engine::evaluate_function: "
_BACKWARD_RE = re.compile(r"^([A-Z][A-Za-z0-9]*?)Backward\d*$")
_CAMEL_RE = re.compile(r"(?<!^)(?=[A-Z])")

_COMM_PREFIXES = ("nccl:", "gloo:", "c10d::", "_c10d_functional::", "c10d_functional::", "mpi:", "ucc:")


def _camel_to_snake(s: str) -> str:
    return _CAMEL_RE.sub("_", s).lower()


@lru_cache(maxsize=1 << 16)
def classify(name: str, cat: str = "cpu_op") -> str:
    """The op class of an event.

    Args:
        name: the event name (``aten::addmm``, ``AddmmBackward0``, a kernel name, ...).
        cat: the Kineto category (``cpu_op``, ``kernel``, ``gpu_memcpy``, ``gpu_memset``,
            or the op table's ``memcpy`` / ``memset`` / ``comm``); kernels are classified
            by their name patterns, host ops by their operator name.

    Returns:
        One of :data:`OP_CLASSES`; ``other`` for anything unknown.
    """
    if not isinstance(name, str):
        return "other"
    c = (cat or "").lower()
    if c in ("gpu_memcpy", "gpu_memset", "memcpy", "memset"):
        return "memcpy"
    if c == "comm":
        return "comm"
    if c == "kernel":
        return _classify_kernel(name)
    return _classify_op(name)


def _classify_op(name: str) -> str:
    n = name.strip()
    low = n.lower()
    if low.startswith(_EVAL_PREFIX):
        n = n[len(_EVAL_PREFIX):].strip()
        low = n.lower()
    if low == "record_param_comms" or low.startswith(_COMM_PREFIXES):
        return "comm"
    if low.startswith("optimizer.") or low.startswith("torch.optim"):
        return "optimizer"
    if low.startswith(_WRAPPER_PREFIXES):
        return "other"
    if low.endswith("accumulategrad"):
        return "elementwise"
    base = n.split("::")[-1] if "::" in n else n
    m = _BACKWARD_RE.match(base)
    if m:  # autograd node: class of its forward op
        fwd = _camel_to_snake(m.group(1))
        for cand in (fwd, "_" + fwd, fwd + "_backward", "native_" + fwd):
            cls = costrules.op_class_of(cand)
            if cls is not None:
                return cls
        return _classify_by_pattern(fwd)
    cls = costrules.op_class_of(base)
    if cls is not None:
        return cls
    return _classify_by_pattern(base.lower())


def _classify_by_pattern(low: str) -> str:
    if "scaled_dot_product" in low or "flash_attn" in low or "attention" in low:
        return "attention"
    if any(k in low.replace("_", "") for k in ("mambachunkscan", "mambasplitconv1dscan",
                                                "selectivescan")):
        return "scan"  # the Mamba scans' ops and autograd functions (MambaChunkScanCombinedFn)
    if low.startswith("_foreach_") or "_fused_adam" in low or "_fused_sgd" in low:
        return "optimizer"
    if "embedding" in low:
        return "embedding"
    if "conv" in low and "convert" not in low:
        return "gemm"
    if "softmax" in low:
        return "softmax"
    if "layer_norm" in low or "batch_norm" in low or "rms_norm" in low or "group_norm" in low:
        return "norm"
    if "gemm" in low or low.endswith("_mm") or "matmul" in low:
        return "gemm"
    if low.startswith("_c10d") or "all_reduce" in low or "allreduce" in low or "all_gather" in low:
        return "comm"
    return "other"


# kernel name patterns, checked in order (lower-cased substring match)
_KERNEL_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("comm", ("nccl", "rccl", "cross_device_reduce", "all_reduce", "allreduce", "all_gather",
              "reduce_scatter", "alltoall")),
    ("memcpy", ("memcpy", "memset", "copybuffer", "fillbuffer", "catarraybatchedcopy",
                "direct_copy_kernel", "copy_kernel", "nchwtonhwc", "nhwctonchw", "transpose",
                "permute", "indexselect", "index_select", "gather_kernel", "scatter_gather",
                "index_kernel", "index_put")),
    ("attention", ("flash", "fmha", "attention", "attn", "sdpa")),
    # the Mamba-2 chunked scan's Triton kernels (state-spaces/mamba ssd_*.py)
    ("scan", ("_chunk_scan_", "_chunk_state_", "_state_passing_", "_bmm_chunk_",
              "_chunk_cumsum_", "mamba_chunk_scan", "selective_scan")),
    ("softmax", ("softmax",)),
    ("norm", ("layer_norm", "layernorm", "rmsnorm", "rms_norm", "batch_norm", "batchnorm",
              "bn_fw", "bn_bw", "group_norm", "groupnorm", "rowwisemoments",
              "computeinternalgradients", "gammabeta", "welford", "instance_norm")),
    ("optimizer", ("multi_tensor_apply", "adam", "fused_sgd", "lamb", "_foreach")),
    ("embedding", ("embedding", "embeddingbag", "split_embedding")),
    ("gemm", ("gemm", "gemv", "xmma", "cutlass", "cublas", "cijk_", "nvjet", "dgrad", "wgrad",
              "fprop", "winograd", "scudnn", "hcudnn", "implicit_gemm", "implicit_convolve",
              "igemm", "splitkreduce", "conv", "fft2d", "fft3d", "mfma", "triton_tem_",
              "matmul", "dot_kernel", "_mm_", "miopen", "naive_conv")),
    ("reduction", ("reduce", "cub::", "devicescan", "scan_kernel", "cumsum", "cumprod",
                   "argmax", "argmin", "topk", "nll_loss", "triton_red_", "triton_per_",
                   "norm_kernel", "sum_kernel", "mean_kernel")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "pointwise", "triton_poi_",
                     "triton_", "dropout", "gelu", "silu", "relu", "sigmoid", "tanh",
                     "functor", "fill", "pool", "upsample", "clamp", "where", "masked",
                     "distribution", "philox", "scalepackedtensor", "rotary")),
)


def _classify_kernel(name: str) -> str:
    low = name.lower()
    for cls, pats in _KERNEL_RULES:
        for p in pats:
            if p in low:
                return cls
    return "other"


# --------------------------------------------------------------------------- dtype helpers

#: kernel-name markers of the math mode a GEMM / convolution kernel ran in, in the order they
#: are tried: the input type a name spells out first, then the MMA instruction shape. The
#: shape alone does not give the input type: ``s16816`` (an m16n8k16 MMA with a float
#: accumulator) runs FP16 or BF16 inputs, and FP16 kernels also use the m16n8k8 shape of TF32
#: (cuBLAS's ``ampere_fp16_s1688gemm_fp16_*``, ``cutlass_80_tensorop_f16_s16816gemm_*``
#: in a Megatron-LM FP16 step on A100, tests/data/traces/astra-megatron-gpt-tp8-a100)
_KERNEL_DTYPE_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("fp8", ("e4m3", "e5m2", "fp8", "f8f8", "qgmma")),
    ("tf32", ("tf32", "xf32")),
    ("bf16", ("bf16", "bfloat16")),
    ("fp16", ("h884", "h1688", "h16816", "fp16", "f16f16", "_f16_", "hgemm", "hcudnn", "half", "_hh_",
              "hh_")),
    ("tf32", ("s1688",)),
    ("fp32", ("sgemm", "scudnn", "simt_s", "sgemv", "_ss_")),
)


def kernel_dtype_hint(kernel_name: str) -> str | None:
    """The math dtype a GEMM/conv kernel's name reveals (``tf32`` for ``s1688`` tensor-op
    kernels, ``fp32`` for SIMT ``sgemm`` / ``scudnn``, ...), or None if the name says nothing.

    Kernel names carry the precision the job configured (e.g. TF32 enabled), which shapes and
    input types cannot tell; durations are not involved.
    """
    low = kernel_name.lower()
    for dt, pats in _KERNEL_DTYPE_RULES:
        if any(p in low for p in pats):
            return dt
    return None


def math_dtype(name: str, dtype: str, kernel_names: tuple[str, ...] | list[str] = ()) -> str:
    """The dtype whose peak an op runs at.

    Uses the kernel-name hints when given (first GEMM-class kernel with a hint wins);
    otherwise fp32 convolutions run as ``tf32`` (PyTorch's default
    ``torch.backends.cudnn.allow_tf32 = True``; devices without TF32 fall back to fp32 peak)
    and everything else at its storage dtype.
    """
    for k in kernel_names:
        if classify(k, "kernel") in ("gemm", "attention"):
            hint = kernel_dtype_hint(k)
            if hint is not None:
                return hint
    if dtype == "fp32" and classify(name) == "gemm" and "conv" in name.lower():
        return "tf32"
    return dtype


# --------------------------------------------------------------------------- op_cost

_ZERO_CLASSES_FOR_WRAPPERS = ("other",)


def _as_list(value: Any) -> list | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            return None
        return list(parsed) if isinstance(parsed, (list, tuple)) else None
    return None


def op_cost(
    name: str,
    input_dims: list | None,
    input_types: list[str] | None,
    concrete_inputs: list | None = None,
) -> OpCost:
    """FLOPs, bytes moved and dtype of a CPU op from its recorded inputs.

    Args:
        name: the op name (``aten::mm``, ``aten::_fused_adamw_``, ``AddmmBackward0``, ...).
        input_dims: Kineto ``Input Dims``: one entry per argument, a shape list for a tensor,
            ``[]`` for a scalar or non-tensor, a list of shapes for a TensorList.
        input_types: Kineto ``Input type``: ``float``, ``c10::BFloat16``, ``Scalar``,
            ``ScalarList``, ``TensorList``, ``""``, ...
        concrete_inputs: optional Kineto ``Concrete Inputs`` (values of scalar arguments:
            strides, ``is_causal``, ``output_mask``); without them convolutions assume
            stride 1 and "same" padding, attention assumes non-causal.

    Returns:
        An :class:`OpCost`. Never raises: malformed inputs give class ``other`` and zeros;
        missing shapes (a trace without ``record_shapes``) give the op's class and zeros.
        Results are remembered by their inputs (a training step repeats the same ops with
        the same shapes layer after layer, and every rank repeats the step).
    """
    try:
        key = (name, repr(input_dims), repr(input_types), repr(concrete_inputs))
    except Exception:  # noqa: BLE001 - an unprintable input: cost it without the cache
        return _op_cost(name, input_dims, input_types, concrete_inputs)
    hit = _COST_CACHE.get(key)
    if hit is None:
        if len(_COST_CACHE) >= _COST_CACHE_MAX:
            _COST_CACHE.clear()
        hit = _COST_CACHE[key] = _op_cost(name, input_dims, input_types, concrete_inputs)
    return hit


#: remembered op costs (OpCost is frozen, so sharing one is safe); cleared when full
_COST_CACHE: dict[tuple[str, str, str, str], OpCost] = {}
_COST_CACHE_MAX = 200_000


def _op_cost(name: str, input_dims: list | None, input_types: list[str] | None,
             concrete_inputs: list | None) -> OpCost:
    try:
        cls = classify(name)
        dims = _as_list(input_dims)
        types = _as_list(input_types)
        if not dims:
            return OpCost(cls, 0.0, 0.0, DEFAULT_DTYPE)
        if types is None:
            types = []
        types = [str(t) for t in types]
        concrete = _as_list(concrete_inputs) or []
        args = costrules.Args.build(dims, types, concrete)
        if _is_wrapper(name, cls):
            return OpCost(cls, 0.0, 0.0, args.dtype)
        flops, nbytes = costrules.cost_of(name, cls, args)
        if not (flops >= 0.0 and nbytes >= 0.0) or flops == float("inf") or nbytes == float("inf"):
            return OpCost("other", 0.0, 0.0, DEFAULT_DTYPE)
        shape = op_shape(name, args) if cls in ("gemm", "attention") else None
        return OpCost(cls, float(flops), float(nbytes), args.dtype, work_units(name, args), shape)
    except Exception:  # noqa: BLE001 - contract: never raise on odd input
        return OpCost("other", 0.0, 0.0, DEFAULT_DTYPE)


def _is_wrapper(name: str, cls: str) -> bool:
    low = name.strip().lower()
    if low.startswith(_EVAL_PREFIX) or low.startswith(_WRAPPER_PREFIXES):
        return True
    if low.startswith("optimizer.") or low.endswith("accumulategrad"):
        return True
    base = name.split("::")[-1]
    return bool(_BACKWARD_RE.match(base.strip()))
