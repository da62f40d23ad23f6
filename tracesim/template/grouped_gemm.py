"""The routed experts' grouped GEMMs as Transformer Engine runs them: one cuBLAS GEMM per
local expert, round robin on a few compute streams (docs/moe.md, "Grouped GEMM kernels").

``GroupedLinear`` calls ``general_grouped_gemm``, which hands the experts' GEMMs to
``nvte_multi_stream_cublas_gemm``: a loop issuing GEMM ``i`` on compute stream ``i % 4``
(``transformer_engine/common/include/transformer_engine/gemm.h``: ``num_streams = 4``;
``cublaslt_gemm.cu``: ``get_compute_stream(i % num_streams)``). Up to four expert GEMMs run
side by side and share the SMs like one batched GEMM of four experts (their tiles, their
waves); the next four start when those end. So ``E`` local experts of ``m`` tokens each cost
``E // 4`` batched GEMMs of shape ``(4, m, n, k)`` and one of ``(E % 4, m, n, k)``, each
priced by the device's GEMM shape model, instead of one batched GEMM of ``(E, m, n, k)``
(every expert's tiles in one wave schedule). Experts with many tokens per GEMM fill the SMs
either way (ratio about 1); experts of a few hundred tokens leave SMs idle in each group's
last wave and pay each group's fixed cost (ratios up to about 1.4).
"""

from __future__ import annotations

from collections.abc import Callable

#: compute streams of Transformer Engine's multi-stream grouped GEMM (module docstring)
GROUPED_GEMM_STREAMS = 4


def stream_groups_ns(time_ns: Callable[[float, float, tuple[float, ...]], int], flops: float,
                     nbytes: float, shape: tuple[float, ...]) -> int:
    """Time (ns) of a grouped GEMM of ``shape = (experts, m, n, k)`` with ``flops`` and
    ``nbytes`` in all, run as :data:`GROUPED_GEMM_STREAMS` experts at a time (module
    docstring); ``time_ns(flops, nbytes, shape)`` prices one batched GEMM."""
    experts = int(round(shape[0]))
    if experts <= GROUPED_GEMM_STREAMS:
        return time_ns(flops, nbytes, shape)
    c = GROUPED_GEMM_STREAMS

    def group(g: int) -> int:
        frac = g / experts
        return time_ns(flops * frac, nbytes * frac, (float(g),) + tuple(shape[1:]))

    full, rest = divmod(experts, c)
    return full * group(c) + (group(rest) if rest else 0)
