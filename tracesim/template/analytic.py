"""First-principles layer templates for the ``gpt``, ``llama`` and ``moe`` families.

The op list follows Megatron-LM's transformer layer (pre-norm; fused QKV; column-parallel
QKV / fc1, row-parallel proj / fc2) with FLOPs and bytes written as expressions of the model
dimensions (see :mod:`tracesim.template.layer`). ``T = b*s/cp`` are a rank's tokens per
micro-batch. Counting conventions:

* GEMM ``[M, K] x [K, N]``: ``2 M K N`` FLOPs; bytes = inputs + weight + output.
* Attention core: ``4 T s h`` FLOPs per layer forward (scores and context, full square as
  Narayanan et al. count it); ``flash`` is one fused op, ``unfused`` is Megatron-2021's
  scores / scale-mask-softmax / dropout / context sequence that materialises the
  ``b x heads x T x s`` probability matrix.
* Backward: GEMMs and the unfused attention matmuls 2x the forward FLOPs (input and weight
  gradients), flash attention 2.5x (it recomputes the scores), element-wise and norm ops
  1.5x / 2x the forward bytes.
* Optimizer (Adam, mixed precision): 12 FLOPs and ``28 + eb`` bytes per local parameter
  (read gradient, master weight, two moments; write them back and the compute-dtype copy).
"""

from __future__ import annotations

from tracesim.specs.model import ModelSpec
from tracesim.template.layer import LayerTemplate, TemplateOp

T = "(b*s/cp)"
ATTENTION_IMPLS = ("flash", "unfused")

_BWD_FLOPS = {"gemm": 2.0, "attention": 2.0, "embedding": 0.0}
_BWD_BYTES = {"gemm": 2.0, "attention": 2.0, "norm": 2.0, "elementwise": 1.5, "softmax": 1.5,
              "embedding": 2.0}


def _op(name: str, section: str, op_class: str, flops: str, nbytes: str, out: str, **kw) -> TemplateOp:
    return TemplateOp(name=name, section=section, phase="fwd", op_class=op_class, flops=flops,
                      bytes=nbytes, out=out, **kw)


def _scaled(expr: str, factor: float) -> str:
    if factor == 0 or expr in ("", "0"):
        return "0"
    return expr if factor == 1 else f"{factor:g}*({expr})"


def backward_of(op: TemplateOp, flash: bool = True) -> TemplateOp:
    """The backward op of a forward compute op (same name, phase ``bwd``, no params)."""
    ff = _BWD_FLOPS.get(op.op_class, 1.0)
    if op.op_class == "attention" and flash:
        ff = 2.5
    fb = _BWD_BYTES.get(op.op_class, 1.5)
    return op.replace(phase="bwd", flops=_scaled(op.flops, ff), bytes=_scaled(op.bytes, fb),
                      params="0")


def _norm_op(name: str, section: str, model: ModelSpec, part: str = "") -> TemplateOp:
    ln = model.norm == "layernorm"
    return _op(name, section, "norm", f"{5 if ln else 4}*{T}/tps*h", f"2*eb*{T}/tps*h", f"{T}*h",
               params="2*h" if ln else "h", part=part, shard="sequence")


def _residual(name: str, model: ModelSpec, part: str, dropout: bool) -> TemplateOp:
    nbytes = f"(3*eb+1)*{T}/tps*h" if dropout else f"3*eb*{T}/tps*h"
    return _op(name, "block", "elementwise", f"2*{T}/tps*h", nbytes, f"{T}*h", part=part,
               shard="sequence")


def _attention_ops(model: ModelSpec, bias: bool, rotary: bool, flash: bool) -> list[TemplateOp]:
    qkv_w = "(h+2*kvh)"
    ops = [
        _norm_op("ln1", "block", model, "attn"),
        _op("attn.qkv", "block", "gemm", f"2*{T}*h*{qkv_w}/tp",
            f"eb*({T}*h + h*{qkv_w}/tp + {T}*{qkv_w}/tp)", f"{T}*{qkv_w}",
            params=f"(h*{qkv_w}{' + ' + qkv_w if bias else ''})/tp", part="attn",
            shard="feature", tp_style="colwise"),
    ]
    if rotary:
        ops.append(_op("attn.rope", "block", "elementwise", f"6*{T}*(h+kvh)/tp",
                       f"2*eb*{T}*(h+kvh)/tp", f"{T}*{qkv_w}", part="attn", shard="feature"))
    if flash:
        ops.append(_op("attn.core", "block", "attention", f"4*{T}*s*h/tp",
                       f"eb*(2*{T}*h + 2*b*s*kvh)/tp", f"{T}*h", part="attn", shard="feature",
                       recompute=True))
    else:
        probs = f"b*heads*{T}*s/tp"
        ops += [
            _op("attn.scores", "block", "attention", f"2*{T}*s*h/tp",
                f"eb*({T}*h + b*s*kvh)/tp + eb*{probs}", probs, part="attn", shard="feature",
                recompute=True),
            _op("attn.softmax", "block", "softmax", f"5*{probs}", f"2*eb*{probs}", probs,
                part="attn", shard="feature", recompute=True),
            _op("attn.dropout", "block", "elementwise", f"{probs}", f"(2*eb+1)*{probs}", probs,
                part="attn", shard="feature", recompute=True),
            _op("attn.context", "block", "attention", f"2*{T}*s*h/tp",
                f"eb*({probs} + (b*s*kvh + {T}*h)/tp)", f"{T}*h", part="attn", shard="feature",
                recompute=True),
        ]
    ops += [
        _op("attn.proj", "block", "gemm", f"2*{T}*h*h/tp", f"eb*({T}*h/tp + h*h/tp + {T}*h)",
            f"{T}*h", params=f"h*h/tp{' + h' if bias else ''}", part="attn", shard="feature",
            tp_style="rowwise"),
        _residual("attn.residual", model, "attn", dropout=bias),
    ]
    return ops


def _mlp_ops(model: ModelSpec, bias: bool) -> list[TemplateOp]:
    gated = model.activation == "swiglu"
    g = 2 if gated else 1
    ops = [
        _norm_op("ln2", "block", model, "mlp"),
        _op("mlp.fc1", "block", "gemm", f"{2 * g}*{T}*h*ffn/tp",
            f"eb*({T}*h + {g}*h*ffn/tp + {g}*{T}*ffn/tp)", f"{g}*{T}*ffn",
            params=f"({g}*h*ffn{' + ffn' if bias else ''})/tp", part="mlp", shard="feature",
            tp_style="colwise"),
        _op("mlp.act", "block", "elementwise", f"{5 if gated else 8}*{T}*ffn/tp",
            f"{3 if gated else 2}*eb*{T}*ffn/tp", f"{T}*ffn", part="mlp", shard="feature"),
        _op("mlp.fc2", "block", "gemm", f"2*{T}*ffn*h/tp", f"eb*({T}*ffn/tp + h*ffn/tp + {T}*h)",
            f"{T}*h", params=f"h*ffn/tp{' + h' if bias else ''}", part="mlp", shard="feature",
            tp_style="rowwise"),
        _residual("mlp.residual", model, "mlp", dropout=bias),
    ]
    return ops


def _moe_ops(model: ModelSpec, bias: bool) -> list[TemplateOp]:
    gated = model.activation == "swiglu"
    g = 2 if gated else 1
    tk = f"{T}*top_k"
    a2a = f"eb*{T}/tps*top_k*h"
    local_w = "experts/ep*h*moe_ffn/tp"
    return [
        _norm_op("ln2", "block", model, "moe"),
        _op("moe.router", "block", "gemm", f"2*{T}/tps*h*experts",
            f"eb*({T}/tps*h + h*experts + {T}/tps*experts)", f"{T}*experts",
            params="h*experts", part="moe", shard="sequence"),
        _op("moe.topk", "block", "softmax", f"6*{T}/tps*experts", f"3*eb*{T}/tps*experts",
            f"{T}*top_k", part="moe", shard="sequence"),
        _op("moe.permute", "block", "elementwise", "0", f"2*eb*{tk}/tps*h", f"{tk}*h",
            part="moe", shard="sequence"),
        TemplateOp("moe.dispatch", "block", "fwd", "comm", out=f"{tk}*h", part="moe",
                   kind="comm", collective="all_to_all", group_kind="ep", msg_bytes=a2a),
        _op("moe.fc1", "block", "gemm", f"{2 * g}*{tk}*h*moe_ffn/tp",
            f"eb*({tk}*h + {g}*{local_w} + {g}*{tk}*moe_ffn/tp)", f"{g}*{tk}*moe_ffn",
            params=f"{g}*{local_w}", part="moe", shard="feature", tp_style="colwise"),
        _op("moe.act", "block", "elementwise", f"{5 if gated else 8}*{tk}*moe_ffn/tp",
            f"{3 if gated else 2}*eb*{tk}*moe_ffn/tp", f"{tk}*moe_ffn", part="moe",
            shard="feature"),
        _op("moe.fc2", "block", "gemm", f"2*{tk}*moe_ffn*h/tp",
            f"eb*({tk}*moe_ffn/tp + {local_w} + {tk}*h)", f"{tk}*h", params=local_w,
            part="moe", shard="feature", tp_style="rowwise"),
        TemplateOp("moe.combine", "block", "fwd", "comm", out=f"{tk}*h", part="moe",
                   kind="comm", collective="all_to_all", group_kind="ep", msg_bytes=a2a),
        _op("moe.unpermute", "block", "elementwise", f"2*{tk}/tps*h", f"2*eb*{tk}/tps*h",
            f"{T}*h", part="moe", shard="sequence"),
        _residual("moe.residual", model, "moe", dropout=bias),
    ]


def _prologue(model: ModelSpec, learned_pos: bool, dropout: bool) -> list[TemplateOp]:
    ops = [_op("embed.tok", "prologue", "embedding", "0", f"2*eb*{T}*h", f"{T}*h",
               params="vocab*h/tp", shard="feature", tp_style="vocab")]
    if learned_pos:
        ops.append(_op("embed.pos", "prologue", "elementwise", f"{T}/tps*h", f"3*eb*{T}/tps*h",
                       f"{T}*h", params="s*h", shard="sequence"))
    if dropout:
        ops.append(_op("embed.dropout", "prologue", "elementwise", f"{T}/tps*h",
                       f"(2*eb+1)*{T}/tps*h", f"{T}*h", shard="sequence"))
    return ops


def _epilogue(model: ModelSpec) -> list[TemplateOp]:
    return [
        _norm_op("norm_f", "epilogue", model),
        _op("head", "epilogue", "gemm", f"2*{T}*h*vocab/tp",
            f"eb*({T}*h + h*vocab/tp + {T}*vocab/tp)", f"{T}*vocab",
            params="0" if model.tied_embeddings else "h*vocab/tp", shard="feature",
            tp_style="colwise"),
        _op("loss", "epilogue", "softmax", f"5*{T}*vocab/tp", f"12*{T}*vocab/tp", f"{T}",
            shard="feature"),
        TemplateOp("loss.allreduce", "epilogue", "fwd", "comm", out=f"{T}", kind="comm",
                   collective="all_reduce", group_kind="tp", msg_bytes=f"12*{T}"),
    ]


def first_principles_template(model: ModelSpec, attention: str = "flash") -> LayerTemplate:
    """The analytical template of ``model``'s family (no measured durations).

    ``attention`` is ``flash`` (one fused attention kernel, today's default) or ``unfused``
    (Megatron-LM 2021: separate scores, softmax, dropout and context kernels).
    """
    if attention not in ATTENTION_IMPLS:
        raise ValueError(f"attention must be one of {ATTENTION_IMPLS}, got {attention!r}")
    flash = attention == "flash"
    llama_like = model.norm == "rmsnorm"
    bias = not llama_like
    rotary = llama_like
    fwd: list[TemplateOp] = []
    fwd += _prologue(model, learned_pos=not rotary, dropout=bias)
    fwd += _attention_ops(model, bias, rotary, flash)
    fwd += _mlp_ops(model, bias)
    if model.is_moe:
        fwd += _moe_ops(model, bias)
    fwd += _epilogue(model)
    ops: list[TemplateOp] = []
    for section in ("prologue", "block", "epilogue"):
        sec = [op for op in fwd if op.section == section]
        ops += sec
        for op in reversed(sec):
            if op.kind == "comm":
                if op.group_kind == "ep":  # all-to-all gradients flow back the same way
                    ops.append(op.replace(phase="bwd"))
                continue
            ops.append(backward_of(op, flash))
    ops.append(TemplateOp("optimizer.step", "optimizer", "opt", "optimizer", flops="12*params",
                          bytes="params*(28+eb)"))
    meta = {"source": "first-principles", "family": model.family, "attention": attention}
    tpl = LayerTemplate(tuple(ops), meta)
    tpl.check()
    return tpl
