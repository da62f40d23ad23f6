"""The Mamba-2 mixer of a hybrid model's ``M`` layers (``part="mamba"``), as Megatron-Core's
``MambaMixer`` runs it (``megatron/core/ssm/mamba_mixer.py``) with the state-spaces/mamba
kernels (``mamba_ssm/ops/triton/ssd_combined.py``, ``causal_conv1d``).

Symbols (:data:`tracesim.template.layer.SYMBOLS`): ``m_inner`` = heads x head dim (``d_inner``),
``m_heads``, ``m_hd`` (P), ``m_state`` (N), ``m_groups`` (G), ``m_conv`` (convolution
width) and ``m_chunk`` (Q, the scan's chunk length). Tensor parallelism splits the heads and
the groups (column-parallel ``in_proj``, row-parallel ``out_proj``, like attention); with
sequence parallelism the pre-norm runs on the rank's sequence shard and the in-projection's
input is all-gathered, its output reduce-scattered, as the builder does for every linear.

Forward, per micro-batch of ``T`` tokens on one rank:

* ``mamba.norm`` the pre-norm (RMSNorm over ``h``);
* ``mamba.in_proj`` ``h -> 2 d_inner + 2 G N + heads`` (z, x, B, C, dt), a GEMM;
* ``mamba.conv`` the causal depthwise convolution and SiLU over x, B and C
  (``conv_dim = d_inner + 2 G N`` channels, ``m_conv`` taps), memory-bound;
* ``mamba.ssd`` the chunked state-space scan (class ``scan``; five Triton kernels:
  chunk cumsum, chunk states, state passing, ``C B^T`` per chunk, chunk scan), with the
  matmul FLOPs of those kernels, ``T heads P (4 N + Q) + 2 T Q N G`` (the states of each
  chunk ``2 T heads P N``, their contribution to the outputs ``2 T heads P N``, the causal
  half of the in-chunk product ``T heads P Q``, and the in-chunk ``C B^T`` ``2 T Q N G``;
  tile-ai/tilelang ``benchmark/mamba2`` counts the chunk scan the same way), and bytes: x,
  B, C, dt in, y out, and the fp32 chunk states (``T / Q`` chunks of ``heads P N``) written,
  read and rewritten by the state passing and read by the chunk scan;
* ``mamba.gated_norm`` RMSNorm of y gated by SiLU(z) (``RMSNormGated``), memory-bound;
* ``mamba.out_proj`` ``d_inner -> h``, a GEMM; then the residual add.

Context parallelism (``cp > 1``; ``MambaContextParallel``, ``megatron/core/ssm/
mamba_context_parallel.py``): the convolution and the scan need whole sequences, so the
in-projection's output moves from sequence- to head-parallel and the scan's output back, by
all-to-alls over the CP group. Forward: ``mamba.cp_pack`` (each of z, x, B, C, dt copied
into the all-to-all's layout, ``all_to_all_sp2hp``), five all-to-alls ``mamba.cp_z``,
``cp_x``, ``cp_B``, ``cp_C``, ``cp_dt`` (B and C repeated over the CP ranks that share a group
when a TP rank holds fewer groups than ``cp``), ``mamba.cp_unpack`` (their concatenation and
the undoing of attention's load-balanced chunk order, two copies); after the scan
``mamba.cp_repack`` (the load-balanced order again), the all-to-all ``mamba.cp_y`` and
``mamba.cp_y_unpack`` (``all_to_all_hp2sp``'s concatenation). Each rank then scans
``cp`` times the tokens over ``1 / cp`` of the heads: the convolution's and the scan's FLOPs
and bytes per rank do not change, except the in-chunk ``C B^T`` of a repeated group, which
each of its CP ranks computes (``2 T Q N max(cp, G / tp)`` per rank). Backward: the same
all-to-alls and copies in reverse.

Backward: the GEMMs twice their forward FLOPs; the scan 2.5 times (its backward re-runs the
cumsum, chunk-state, state-passing and ``C B^T`` kernels, then about ten gradient kernels);
the memory-bound ops as the other templates (:func:`tracesim.template.primitives.backward_of`).
"""

from __future__ import annotations

from tracesim.specs.model import ModelSpec
from tracesim.template.layer import TemplateOp
from tracesim.template.primitives import T, norm_op, op, residual

#: copies of B and C per group on a rank after the repeat over the CP ranks sharing it
GROUP_REPEAT = "max(1, cp*tp/m_groups)"
#: the in-projection's output pieces exchanged over the CP group: (name, width per TP rank)
CP_PIECES = (("z", "m_inner/tp"), ("x", "m_inner/tp"), ("B", f"m_groups*m_state/tp*{GROUP_REPEAT}"),
             ("C", f"m_groups*m_state/tp*{GROUP_REPEAT}"), ("dt", "m_heads/tp"))

#: width of the in-projection's output: z, x (d_inner each), B, C (G N each), dt (heads)
IN_WIDTH = "(2*m_inner + 2*m_groups*m_state + m_heads)"
#: channels of the causal convolution (x, B, C)
CONV_DIM = "(m_inner + 2*m_groups*m_state)"
#: the scan's kernels forward and backward (the host's launches; module docstring)
SSD_KERNELS_FWD = 5
SSD_KERNELS_BWD = 14


def mamba_ops(model: ModelSpec) -> list[TemplateOp]:
    """The forward ops of one ``M`` layer (module docstring)."""
    states = f"4*({T}/m_chunk)*m_heads*m_hd*m_state/tp"  # fp32 chunk states, bytes
    return [
        norm_op("mamba.norm", "block", model, "mamba"),
        op("mamba.in_proj", "block", "gemm", f"2*{T}*h*{IN_WIDTH}/tp",
           f"eb*({T}*h + h*{IN_WIDTH}/tp + {T}*{IN_WIDTH}/tp)", f"{T}*{IN_WIDTH}",
           params=f"h*{IN_WIDTH}/tp", part="mamba", shard="feature", tp_style="colwise",
           shape=f"1, {T}, {IN_WIDTH}/tp, h"),
        *_cp_in(),
        op("mamba.conv", "block", "elementwise", f"(2*m_conv + 5)*{T}*{CONV_DIM}/tp",
           f"2*eb*{T}*{CONV_DIM}/tp + eb*{CONV_DIM}*(m_conv + 1)/tp", f"{T}*{CONV_DIM}",
           params=f"{CONV_DIM}*(m_conv + 1)/tp", part="mamba", shard="feature"),
        op("mamba.ssd", "block", "scan",
           f"{T}*m_heads*m_hd*(4*m_state + m_chunk)/tp + 2*{T}*m_chunk*m_state*max(cp, m_groups/tp)",
           f"eb*{T}*(2*m_inner + 2*m_groups*m_state + m_heads)/tp + 4*{states}",
           f"{T}*m_inner", params="3*m_heads/tp", part="mamba", shard="feature"),
        *_cp_out(),
        op("mamba.gated_norm", "block", "norm", f"8*{T}*m_inner/tp", f"3*eb*{T}*m_inner/tp",
           f"{T}*m_inner", params="m_inner/tp", part="mamba", shard="feature"),
        op("mamba.out_proj", "block", "gemm", f"2*{T}*m_inner*h/tp",
           f"eb*({T}*m_inner/tp + m_inner*h/tp + {T}*h)", f"{T}*h", params="m_inner*h/tp",
           part="mamba", shard="feature", tp_style="rowwise", shape=f"1, {T}, h, m_inner/tp"),
        residual("mamba.residual", "mamba", dropout=False),
    ]


def _copy(name: str, copies: int, width: str, out: str) -> TemplateOp:
    """``copies`` device copies of the rank's ``T x width`` elements (read and write)."""
    return op(name, "block", "memcpy", "0", f"{2 * copies}*eb*{T}*{width}", out,
              part="mamba", shard="feature", when="cp - 1")


def _exchange(name: str, width: str, out: str) -> TemplateOp:
    """An all-to-all over the CP group of the rank's ``T x width`` elements (``out``: the
    mixer's tensor it belongs to, unsharded)."""
    return TemplateOp(name, "block", "fwd", "comm", out=out, part="mamba", kind="comm",
                      collective="all_to_all", group_kind="cp", msg_bytes=f"eb*{T}*{width}")


def _cp_in() -> list[TemplateOp]:
    """The mixer's inputs to head-parallel (module docstring)."""
    width, out = "(" + " + ".join(w for _, w in CP_PIECES) + ")", f"{T}*{IN_WIDTH}"
    return [_copy("mamba.cp_pack", 1, width, out),
            *(_exchange(f"mamba.cp_{n}", w, out) for n, w in CP_PIECES),
            _copy("mamba.cp_unpack", 2, width, out)]


def _cp_out() -> list[TemplateOp]:
    """The scan's output back to sequence-parallel (module docstring)."""
    out = f"{T}*m_inner"
    return [_copy("mamba.cp_repack", 1, "m_inner/tp", out),
            _exchange("mamba.cp_y", "m_inner/tp", out),
            _copy("mamba.cp_y_unpack", 1, "m_inner/tp", out)]
