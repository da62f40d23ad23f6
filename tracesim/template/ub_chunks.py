"""Transformer Engine's userbuffers overlaps run a linear's GEMM as chunks: each chunk's
price at its own shape (docs/stacks.md, "Chunk GEMMs at their own shape")."""

from __future__ import annotations

from collections.abc import Callable

from tracesim.template.layer import TemplateOp, shape_parts

#: GEMM chunks of Transformer Engine's pipelined reduce-scatter (``CommOverlapBase``, 4 splits
#: in the Megatron-Bridge userbuffers configurations)
PIPE_SPLITS = 4
#: compute streams Transformer Engine's userbuffers overlaps issue their GEMM chunks on, round
#: robin (``num_max_streams``, 3 by default: ``transformer_engine/pytorch/module/base.py``
#: ``initialize_ub``; ``comm_gemm_overlap.cpp`` ``_stream_compute[i % size]``)
UB_GEMM_STREAMS = 3


def chunk_slowdown(op_time: Callable[..., int], timed: TemplateOp, flops: float, nbytes: float,
                   units: float, dur_ns: int, splits: int) -> float:
    """One chunk's mean time over ``dur_ns / splits`` when a GEMM of shape ``(b, m, n, k)``
    (``m`` its tokens) runs as ``splits`` chunks of ``m / splits`` rows, up to
    :data:`UB_GEMM_STREAMS` of them at once: ``c`` chunks side by side share the SMs like one
    GEMM of ``c m / splits`` rows (its tiles, its waves), so the chunks cost ``splits // c``
    such GEMMs and one of the ``splits % c`` left over. The device's shape model prices them:
    chunks whose tiles fill the SMs in whole waves keep the rate (ratio about 1), small ones
    lose it to wave and tile quantisation and their own launches; a GEMM whose last wave was
    nearly empty can gain (ratio below 1). 1.0 without a shape."""
    parts = shape_parts(timed.shape)
    if len(parts) != 4 or dur_ns <= 0 or splits <= 1:
        return 1.0
    c = min(UB_GEMM_STREAMS, splits)
    vals = [float(v) for v in parts]

    def group(chunks: int) -> float:
        frac = chunks / splits
        piece = timed.replace(shape=",".join(
            f"{max(v * frac, 1.0) if i == 1 else v:.6g}" for i, v in enumerate(vals)))
        return float(op_time(timed.op_class, flops * frac, nbytes * frac, piece, units))

    total = (splits // c) * group(c) + (group(splits % c) if splits % c else 0.0)
    return total / dur_ns
