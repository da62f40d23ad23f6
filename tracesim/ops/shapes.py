"""The shape ``(batch, m, n, k)`` of GEMM and attention ops, for the shape-aware cost model.

* GEMM (``mm``, ``bmm``, ``matmul``, ``addmm`` family, ``linear``, ``_scaled_mm``): per-batch
  ``[m, k] x [k, n]`` with torch.matmul broadcasting (``linear``: m = all leading dims of the
  input, n = output features).
* Attention (the ops of :data:`tracesim.ops.rules._ATTN_ARGS`): batch x heads, query length,
  the mean key length per query (the key length; ``key - query / 2`` when causal, i.e. half
  the keys for a square causal mask), head dim.

Other ops (convolutions, einsum, grouped GEMMs, varlen attention) have no shape here: the cost
model times them with its size curves.
"""

from __future__ import annotations

from tracesim.ops.costrules import Args, _prod
from tracesim.ops.rules import _ATTN_ARGS, _mm

Shape = tuple[int, int, int, int]

_GEMM_OPERANDS = {
    **dict.fromkeys(("mm", "matmul", "bmm", "_scaled_mm"), (0, 1)),
    **dict.fromkeys(("addmm", "addmm_", "baddbmm", "baddbmm_", "_addmm_activation"), (1, 2)),
}


def _positive(s: tuple[int, ...]) -> Shape | None:
    if len(s) != 4 or not all(isinstance(x, int) and x > 0 for x in s):
        return None
    return (s[0], s[1], s[2], s[3])


def op_shape(name: str, a: Args) -> Shape | None:
    """``(batch, m, n, k)`` of a GEMM or attention op, None for other ops or unknown shapes."""
    base = name.split("::")[-1].strip()
    if base in _GEMM_OPERANDS:
        ia, ib = _GEMM_OPERANDS[base]
        return _positive(_mm(a.shape(ia), a.shape(ib)))
    if base == "linear":
        x, w = a.shape(0), a.shape(1)
        if not x or not w or len(w) != 2:
            return None
        return _positive((1, _prod(x[:-1]), w[0], x[-1]))
    if base in _ATTN_ARGS:
        return _attention_shape(base, a)
    return None


def _attention_shape(base: str, a: Args) -> Shape | None:
    qi, layout, ci, mi, _ = _ATTN_ARGS[base]
    q, k = a.shape(qi), a.shape(qi + 1)
    if not q or not k or len(q) != 4 or len(k) != 4:
        return None  # varlen (3-d) inputs: sequence boundaries unknown
    if layout == "bhle":
        units, lq, ls, e = q[0] * q[1], q[2], k[2], q[3]
    else:  # B, L, H, E
        units, lq, ls, e = q[0] * q[2], q[1], k[1], q[3]
    causal = a.value(ci) is True if ci is not None else (a.value(mi) in (1, 2) if mi is not None else False)
    kv = max(ls - lq // 2, 1) if causal else ls
    return _positive((units, lq, kv, e))
