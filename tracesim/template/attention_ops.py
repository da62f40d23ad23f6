"""Attention ops of the analytic template: multi-head / grouped-query attention (optionally
with a sliding window and a per-head width other than ``hidden / heads``), and multi-head
latent attention (MLA, DeepSeek-V2/V3) as Megatron-Core's ``MLASelfAttention`` runs it.

Symbols (:data:`tracesim.template.layer.SYMBOLS`): ``qd`` is the query width
``heads * qk_dim``, ``kvh`` the key (and value) width of grouped-query attention, ``win``
the keys each query attends to (``min(s, sliding window)`` in a windowed layer, else
``s``). Attention FLOPs count the full ``T x win`` score square, as Narayanan et al. count
``T x s``: ``2 T win heads qk_dim`` for the scores and ``2 T win heads v_dim`` for the
context; a fused (flash) kernel skips the blocks outside a window, the unfused kernels of
2021 do not (they keep ``s``).

MLA (Megatron-Core, ``q_lora_rank`` > 0): the down projections ``q_down`` (``h -> q_lora``)
and ``kv_down`` (``h -> kv_lora + qk_rope``) are replicated over the TP group and run on the
rank's sequence shard; RMSNorms on the latents; with sequence parallelism the latents are
all-gathered (one all-gather of ``q_lora + kv_lora + qk_rope`` per token, the ``out`` of
``kv_norm``) for the column-parallel up projections ``q_up`` (``q_lora -> heads *
qk_dim``) and ``kv_up`` (``kv_lora -> heads * (qk_nope + v_dim)``), which split the heads
over TP like the rest of the attention. Without query compression (``q_lora_rank`` 0) a
column-parallel ``q`` projection reads the hidden state instead.

Context parallelism (``cp`` > 1) runs the fused core as ring attention, Transformer Engine's
``AttnFuncWithCPAndKVP2P``: one kernel per step (the cost model prices them at their keys
per query, :func:`tracesim.template.resolve._timed`) and after each a merge of the step's
partial result, ``attn.cp_merge`` (memory-bound; only where cp > 1): forward the output
corrected by the step's log-sum-exp (``flash_attn_fwd_out_correction``: read the step's
output, read and write the running one; the first step writes it, ``..._init``: 2 passes;
a step from a higher rank covers half the queries), backward the query gradient and the
key / value gradients accumulated per step (``bwd_dq_update`` / ``bwd_dkv_update``: copy,
then add). Over the ranks' mix of full and half steps that is ``2 + 2.25 (cp - 1)`` passes
over the rank's output (forward) or its query plus local key and value gradients (backward).
The ring splits the merges with the kernels, one after each step.
"""

from __future__ import annotations

from tracesim.specs.model import ModelSpec
from tracesim.template.layer import TemplateOp
from tracesim.template.primitives import T, norm_op, op, residual


def attention_ops(model: ModelSpec, bias: bool, rotary: bool, flash: bool) -> list[TemplateOp]:
    """The forward ops of one layer's attention part (``part="attn"``)."""
    if model.is_mla:
        return _mla_ops(model, flash)
    return _gqa_ops(model, bias, rotary, flash)


#: ring attention's merge of each step's partial result (module docstring)
CP_MERGE = "attn.cp_merge"
#: passes over the merged tensor, summed over the steps of a ring of ``cp`` (module docstring)
_CP_PASSES = "(2 + 2.25*(cp - 1))"


def cp_merge_backward_bytes(model: ModelSpec) -> str:
    """Bytes of the backward's merges: the rank's query gradient and its own keys' and
    values' gradients, :data:`_CP_PASSES` times (module docstring)."""
    if model.is_mla:
        qk, kv = "heads*qk_dim", "b*s*heads*(qk_dim + v_dim)"
    else:
        qk, kv = "qd", "2*b*s*kvh"
    return f"eb*{_CP_PASSES}*({T}*{qk} + {kv}/cp)/tp"


def _core(flash: bool, qk: str, v: str, k_elems: str, v_elems: str) -> list[TemplateOp]:
    """Scores and context over ``win`` (flash) or ``s`` (unfused) keys per query; ``qk`` and
    ``v`` are the query/key and value widths summed over heads, ``k_elems`` and ``v_elems``
    the key and value elements of one micro-batch."""
    if flash:
        flops = f"4*{T}*win*{qk}/tp" if qk == v else f"2*{T}*win*({qk}+{v})/tp"
        q_o = f"2*{T}*{qk}" if qk == v else f"{T}*({qk}+{v})"
        kv = f"2*{k_elems}" if k_elems == v_elems else f"{k_elems} + {v_elems}"
        return [op("attn.core", "block", "attention", flops, f"eb*({q_o} + {kv})/tp",
                   f"{T}*{v}", part="attn", shard="feature", recompute=True, causal=True,
                   shape=f"b*heads/tp, s/cp, win, {qk}/heads"),
                op(CP_MERGE, "block", "elementwise", f"3*{_CP_PASSES}*{T}*{v}/tp",
                   f"eb*{_CP_PASSES}*{T}*{v}/tp", f"{T}*{v}", part="attn", shard="feature",
                   recompute=True, when="cp - 1")]
    probs = f"heads*{T}*s/tp"  # attention probabilities: T = b s / cp queries x s keys
    return [
        op("attn.scores", "block", "gemm", f"2*{T}*s*{qk}/tp",
           f"eb*({T}*{qk} + {k_elems})/tp + eb*{probs}", probs, part="attn",
           shard="feature", recompute=True, shape=f"b*heads/tp, s/cp, s, {qk}/heads"),
        op("attn.softmax", "block", "softmax", f"5*{probs}", f"2*eb*{probs}", probs,
           part="attn", shard="feature", recompute=True),
        op("attn.dropout", "block", "elementwise", f"{probs}", f"(2*eb+1)*{probs}", probs,
           part="attn", shard="feature", recompute=True),
        op("attn.context", "block", "gemm", f"2*{T}*s*{v}/tp",
           f"eb*({probs} + ({v_elems} + {T}*{v})/tp)", f"{T}*{v}", part="attn",
           shard="feature", recompute=True, shape=f"b*heads/tp, s/cp, {v}/heads, s"),
    ]


def _gqa_ops(model: ModelSpec, bias: bool, rotary: bool, flash: bool) -> list[TemplateOp]:
    qkv_w = "(qd+2*kvh)"
    ops = [
        norm_op("ln1", "block", model, "attn"),
        op("attn.qkv", "block", "gemm", f"2*{T}*h*{qkv_w}/tp",
           f"eb*({T}*h + h*{qkv_w}/tp + {T}*{qkv_w}/tp)", f"{T}*{qkv_w}",
           params=f"(h*{qkv_w}{' + ' + qkv_w if bias else ''})/tp", part="attn",
           shard="feature", tp_style="colwise", shape=f"1, {T}, {qkv_w}/tp, h"),
    ]
    if model.qk_norm:  # Qwen3: RMSNorm over each query and key head (TE's norm kernel)
        ops.append(op("attn.qk_norm", "block", "norm", f"4*{T}*(qd+kvh)/tp",
                      f"2*eb*{T}*(qd+kvh)/tp", f"{T}*(qd+kvh)", params="2*head_dim",
                      part="attn", shard="feature"))
    if rotary:
        ops.append(op("attn.rope", "block", "elementwise", f"6*{T}*(qd+kvh)/tp",
                      f"2*eb*{T}*(qd+kvh)/tp", f"{T}*{qkv_w}", part="attn", shard="feature"))
    ops += _core(flash, "qd", "qd", "b*s*kvh", "b*s*kvh")
    ops += [
        op("attn.proj", "block", "gemm", f"2*{T}*qd*h/tp", f"eb*({T}*qd/tp + qd*h/tp + {T}*h)",
           f"{T}*h", params=f"qd*h/tp{' + h' if bias else ''}", part="attn", shard="feature",
           tp_style="rowwise", shape=f"1, {T}, h, qd/tp"),
        residual("attn.residual", "attn", dropout=bias),
    ]
    return ops


def _gemm(name: str, k: str, n: str, *, seq: bool, **kw: object) -> TemplateOp:
    """A bias-free linear ``[tokens, k] x [k, n]``: replicated over TP on the sequence shard
    (``seq``) or with ``n`` split over TP."""
    if seq:
        tok = f"{T}/tps"
        return op(name, "block", "gemm", f"2*{tok}*{k}*{n}", f"eb*({tok}*{k} + {k}*{n} + {tok}*{n})",
                  f"{T}*{n}", params=f"{k}*{n}", part="attn", shard="sequence",
                  shape=f"1, {tok}, {n}, {k}", **kw)
    return op(name, "block", "gemm", f"2*{T}*{k}*{n}/tp", f"eb*({T}*{k} + {k}*{n}/tp + {T}*{n}/tp)",
              f"{T}*{n}", params=f"{k}*{n}/tp", part="attn", shard="feature",
              shape=f"1, {T}, {n}/tp, {k}", **kw)


def _mla_ops(model: ModelSpec, flash: bool) -> list[TemplateOp]:
    latent_kv = "(kv_lora+qk_rope)"
    kv_up = "heads*(qk_dim-qk_rope+v_dim)"  # keys' no-position part and values, every head
    compress_q = model.q_lora_rank > 0
    gathered = "(q_lora+kv_lora+qk_rope)" if compress_q else "(h+kv_lora+qk_rope)"
    ops = [norm_op("ln1", "block", model, "attn")]
    if compress_q:
        ops.append(_gemm("attn.q_down", "h", "q_lora", seq=True))
    ops.append(_gemm("attn.kv_down", "h", latent_kv, seq=True))
    if compress_q:
        ops.append(norm_op("attn.q_norm", "block", model, "attn", width="q_lora"))
    ops.append(norm_op("attn.kv_norm", "block", model, "attn", width="kv_lora",
                       out=f"{T}*{gathered}"))
    ops += [
        _gemm("attn.q_up" if compress_q else "attn.q", "q_lora" if compress_q else "h", "qd",
              seq=False, tp_style="colwise"),
        _gemm("attn.kv_up", "kv_lora", kv_up, seq=False),
        op("attn.rope", "block", "elementwise", f"6*{T}*(heads*qk_rope/tp + qk_rope)",
           f"2*eb*{T}*(heads*qk_rope/tp + qk_rope)", f"{T}*qd", part="attn", shard="feature"),
    ]
    ops += _core(flash, "heads*qk_dim", "heads*v_dim", "b*s*heads*qk_dim", "b*s*heads*v_dim")
    ops += [
        op("attn.proj", "block", "gemm", f"2*{T}*heads*v_dim*h/tp",
           f"eb*({T}*heads*v_dim/tp + heads*v_dim*h/tp + {T}*h)", f"{T}*h",
           params="heads*v_dim*h/tp", part="attn", shard="feature", tp_style="rowwise",
           shape=f"1, {T}, h, heads*v_dim/tp"),
        residual("attn.residual", "attn", dropout=False),
    ]
    return ops
