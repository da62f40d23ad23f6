"""First-principles layer templates for the ``gpt``, ``llama`` and ``moe`` families.

The op list follows Megatron-LM's transformer layer (pre-norm; fused QKV; column-parallel
QKV / fc1, row-parallel proj / fc2) with FLOPs and bytes written as expressions of the model
dimensions (see :mod:`tracesim.template.layer`). ``T = b*s/cp`` are a rank's tokens per
micro-batch. Counting conventions:

* GEMM ``[M, K] x [K, N]``: ``2 M K N`` FLOPs; bytes = inputs + weight + output.
* Attention core: ``4 T s h`` FLOPs per layer forward (scores and context, full square as
  Narayanan et al. count it; ``2 T win heads (qk_dim + v_dim)`` in general, with ``win`` the
  keys of a sliding window); ``flash`` is one fused op, ``unfused`` is Megatron-2021's
  scores / scale-mask-softmax / dropout / context sequence that materialises the
  ``b x heads x T x s`` probability matrix.
* Backward: GEMMs and the unfused attention matmuls 2x the forward FLOPs (input and weight
  gradients), flash attention 2.5x (it recomputes the scores), element-wise and norm ops
  1.5x / 2x the forward bytes.
* Optimizer (Adam, mixed precision): 12 FLOPs and ``28 + eb`` bytes per local parameter
  (read gradient, master weight, two moments; write them back and the compute-dtype copy).

The attention variants (grouped-query with any head width, sliding window, multi-head latent
attention) live in :mod:`tracesim.template.attention_ops`, the MoE block (shared experts,
grouped expert GEMMs, all-to-all dispatch and combine, load imbalance) in
:mod:`tracesim.template.moe_ops`; docs/moe.md is the manual.
"""

from __future__ import annotations

from tracesim.specs.model import ModelSpec
from tracesim.template.attention_ops import CP_MERGE, attention_ops, cp_merge_backward_bytes
from tracesim.template.layer import LayerTemplate, TemplateOp
from tracesim.template.mamba_ops import mamba_ops
from tracesim.template.moe_ops import FORWARD_ONLY, moe_ops
from tracesim.template.optimizer import optimizer_op
from tracesim.template.primitives import T, backward_of, mlp, norm_op, op, residual

ATTENTION_IMPLS = ("flash", "flash2", "unfused")

__all__ = ["ATTENTION_IMPLS", "T", "backward_of", "first_principles_template"]

def _mlp_ops(model: ModelSpec, bias: bool) -> list[TemplateOp]:
    """The dense MLP (``part="mlp"``): dense layers, and the first ``first_k_dense`` layers of
    a MoE model."""
    return [norm_op("ln2", "block", model, "mlp"), *mlp("mlp", "mlp", model, "ffn", T, bias),
            residual("mlp.residual", "mlp", dropout=bias)]


def _moe_ops(model: ModelSpec, bias: bool) -> list[TemplateOp]:
    """The MoE block (``part="moe"``, :mod:`tracesim.template.moe_ops`)."""
    return moe_ops(model, bias)


def _prologue(model: ModelSpec, learned_pos: bool, dropout: bool) -> list[TemplateOp]:
    ops = [op("embed.tok", "prologue", "embedding", "0", f"2*eb*{T}*h", f"{T}*h",
               params="vocab*h/tp", shard="feature", tp_style="vocab")]
    if learned_pos:
        ops.append(op("embed.pos", "prologue", "elementwise", f"{T}/tps*h", f"3*eb*{T}/tps*h",
                       f"{T}*h", params="s*h", shard="sequence"))
    if dropout:
        ops.append(op("embed.dropout", "prologue", "elementwise", f"{T}/tps*h",
                       f"(2*eb+1)*{T}/tps*h", f"{T}*h", shard="sequence"))
    return ops


def _epilogue(model: ModelSpec) -> list[TemplateOp]:
    return [
        norm_op("norm_f", "epilogue", model),
        op("head", "epilogue", "gemm", f"2*{T}*h*vocab/tp",
            f"eb*({T}*h + h*vocab/tp + {T}*vocab/tp)", f"{T}*vocab",
            params="0" if model.tied_embeddings else "h*vocab/tp", shard="feature",
            tp_style="colwise", shape=f"1, {T}, vocab/tp, h"),
        op("loss", "epilogue", "softmax", f"5*{T}*vocab/tp", f"12*{T}*vocab/tp", f"{T}",
            shard="feature"),
        TemplateOp("loss.allreduce", "epilogue", "fwd", "comm", out=f"{T}", kind="comm",
                   collective="all_reduce", group_kind="tp", msg_bytes=f"12*{T}"),
    ]


def first_principles_template(model: ModelSpec, attention: str = "flash") -> LayerTemplate:
    """The analytical template of ``model``'s family (no measured durations).

    ``attention`` is ``flash`` (one fused attention kernel, today's default), ``flash2`` (the
    same kernel, timed at FlashAttention-2's rates: :mod:`tracesim.template.durations`) or
    ``unfused`` (Megatron-LM 2021: separate scores, softmax, dropout and context kernels).
    """
    if attention not in ATTENTION_IMPLS:
        raise ValueError(f"attention must be one of {ATTENTION_IMPLS}, got {attention!r}")
    flash = attention != "unfused"
    llama_like = model.norm == "rmsnorm"
    bias = not llama_like
    # Nemotron-H's attention layers have no position embedding (the Mamba layers order)
    rotary = (llama_like or model.is_mla) and not model.is_hybrid
    learned_pos = not llama_like and not model.is_mla
    fwd: list[TemplateOp] = []
    fwd += _prologue(model, learned_pos=learned_pos, dropout=bias)
    fwd += attention_ops(model, bias, rotary, flash)
    fwd += _mlp_ops(model, bias)
    if model.is_moe:
        fwd += _moe_ops(model, bias)
    if model.is_hybrid:
        fwd += mamba_ops(model)
    fwd += _epilogue(model)
    ops: list[TemplateOp] = []
    for section in ("prologue", "block", "epilogue"):
        sec = [o for o in fwd if o.section == section]
        ops += sec
        for o in reversed(sec):
            if o.name in FORWARD_ONLY:  # HybridEP's routing metadata: reused backward
                continue
            if o.kind == "comm":
                if o.group_kind in ("ep", "cp"):  # all-to-all gradients flow back the same way
                    ops.append(o.replace(phase="bwd"))
                continue
            bwd = backward_of(o, flash)
            if o.name == CP_MERGE:  # the gradients the ring accumulates, not the output
                bwd = bwd.replace(bytes=cp_merge_backward_bytes(model))
            ops.append(bwd)
    ops.append(optimizer_op("adam", master=True))
    meta = {"source": "first-principles", "family": model.family, "attention": attention}
    tpl = LayerTemplate(tuple(ops), meta)
    tpl.check()
    return tpl
