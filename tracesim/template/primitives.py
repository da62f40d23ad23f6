"""Building blocks of the analytic templates: op constructors and the backward rule.

Shared by :mod:`tracesim.template.analytic` (the layer as a whole),
:mod:`tracesim.template.attention_ops` (standard, grouped-query, sliding-window and
multi-head latent attention) and :mod:`tracesim.template.moe_ops` (the MoE block). The
counting conventions are those of :mod:`tracesim.template.analytic`.
"""

from __future__ import annotations

import re

from tracesim.specs.model import ModelSpec
from tracesim.template.layer import TemplateOp

#: a rank's tokens per micro-batch (the sequence split over context parallelism)
T = "(b*s/cp)"

#: backward over forward FLOPs and bytes per class; the Mamba-2 scan re-runs part of its
#: forward (tracesim.template.mamba_ops)
_BWD_FLOPS = {"gemm": 2.0, "attention": 2.0, "embedding": 0.0, "scan": 2.5}
_BWD_BYTES = {"gemm": 2.0, "attention": 2.0, "norm": 2.0, "elementwise": 1.5, "softmax": 1.5,
              "embedding": 2.0, "scan": 2.5, "memcpy": 1.0}


def op(name: str, section: str, op_class: str, flops: str, nbytes: str, out: str,
       **kw: object) -> TemplateOp:
    """A forward compute op (``kw``: further :class:`TemplateOp` fields)."""
    return TemplateOp(name=name, section=section, phase="fwd", op_class=op_class, flops=flops,
                      bytes=nbytes, out=out, **kw)  # type: ignore[arg-type]


def _scaled(expr: str, factor: float) -> str:
    if factor == 0 or expr in ("", "0"):
        return "0"
    return expr if factor == 1 else f"{factor:g}*({expr})"


def backward_of(fwd: TemplateOp, flash: bool = True) -> TemplateOp:
    """The backward op of a forward compute op (same name, phase ``bwd``, no params)."""
    ff = _BWD_FLOPS.get(fwd.op_class, 1.0)
    if fwd.op_class == "attention" and flash:
        ff = 2.5
    fb = _BWD_BYTES.get(fwd.op_class, 1.5)
    return fwd.replace(phase="bwd", flops=_scaled(fwd.flops, ff), bytes=_scaled(fwd.bytes, fb),
                       params="0")


def norm_op(name: str, section: str, model: ModelSpec, part: str = "", width: str = "h",
            out: str = "") -> TemplateOp:
    """A LayerNorm / RMSNorm over ``width`` features of every token (sequence-parallel)."""
    ln = model.norm == "layernorm"
    return op(name, section, "norm", f"{5 if ln else 4}*{T}/tps*{width}",
              f"2*eb*{T}/tps*{width}", out or f"{T}*{width}",
              params=f"2*{width}" if ln else width, part=part, shard="sequence")


def residual(name: str, part: str, dropout: bool) -> TemplateOp:
    """The residual add (with the dropout mask of gpt-style blocks)."""
    nbytes = f"(3*eb+1)*{T}/tps*h" if dropout else f"3*eb*{T}/tps*h"
    return op(name, "block", "elementwise", f"2*{T}/tps*h", nbytes, f"{T}*h", part=part,
              shard="sequence")


def mlp(prefix: str, part: str, model: ModelSpec, width: str, tokens: str, bias: bool,
        param_scale: str = "", h: str = "h") -> list[TemplateOp]:
    """A two-layer MLP ``fc1`` (column-parallel; gate and up with SwiGLU), activation, ``fc2``
    (row-parallel) over ``tokens`` tokens of ``width`` hidden features. ``param_scale`` (e.g.
    ``experts/ep*``) multiplies the weights: a grouped GEMM over the rank's local experts;
    ``h`` is a token's width in and out (a latent MoE's routed experts: ``moe_h``)."""
    ops = _mlp(prefix, part, model, width, tokens, bias, param_scale)
    if h == "h":
        return ops
    word = re.compile(r"\bh\b")
    return [o.replace(**{k: word.sub(h, getattr(o, k)) for k in ("flops", "bytes", "out", "params", "shape")})
            for o in ops]


def _mlp(prefix: str, part: str, model: ModelSpec, width: str, tokens: str, bias: bool,
         param_scale: str) -> list[TemplateOp]:
    gated = model.activation == "swiglu"
    g = 2 if gated else 1
    w1 = f"{g}*{param_scale}h*{width}/tp"
    w2 = f"{param_scale}h*{width}/tp"
    p1 = f"({g}*h*{width} + {width})/tp" if bias else w1
    p2 = f"{w2} + h" if bias else w2
    nb = f"({param_scale.rstrip('*')})" if param_scale else "1"
    m = f"{tokens}/{nb}" if param_scale else tokens
    return [
        op(f"{prefix}.fc1", "block", "gemm", f"{2 * g}*{tokens}*h*{width}/tp",
           f"eb*({tokens}*h + {w1} + {g}*{tokens}*{width}/tp)", f"{g}*{tokens}*{width}",
           params=p1, part=part, shard="feature", tp_style="colwise",
           shape=f"{nb}, {m}, {g}*{width}/tp, h"),
        op(f"{prefix}.act", "block", "elementwise", f"{5 if gated else 8}*{tokens}*{width}/tp",
           f"{3 if gated else 2}*eb*{tokens}*{width}/tp", f"{tokens}*{width}", part=part,
           shard="feature"),
        op(f"{prefix}.fc2", "block", "gemm", f"2*{tokens}*{width}*h/tp",
           f"eb*({tokens}*{width}/tp + {w2} + {tokens}*h)", f"{tokens}*h", params=p2,
           part=part, shard="feature", tp_style="rowwise", shape=f"{nb}, {m}, h, {width}/tp"),
    ]
