"""The MoE block of the analytic template, in the order Megatron-Core's ``MoELayer`` runs it.

``shared_experts_compute`` (a dense MLP of width ``shared_ffn`` that every token runs,
column/row-parallel over TP like any MLP), then ``router_and_preprocess`` (router GEMM, top-k,
permutation of the ``top_k`` copies of each token), ``dispatch`` (all-to-all over the EP
group), the sorting of the received tokens by local expert (``moe.sort``; they arrive
grouped by source rank), ``routed_experts_compute`` (one grouped GEMM per expert projection
over the rank's local experts: ``fc1`` (gate and up with SwiGLU), activation, ``fc2``), the
reverse sorting (``moe.unsort``), ``combine`` (all-to-all back) and the unpermutation, which
adds the shared experts' output. The two sorts are Megatron-Core's ``sort_chunks_by_idxs``
in ``MoEAlltoAllTokenDispatcher.dispatch_postprocess`` / ``combine_preprocess`` (core_v0.15.0;
a transpose copy with a capacity factor): one read and one write of the rank's routed
tokens each, only where a rank holds more than one expert (``when``) and with the ``alltoall``
dispatcher. The flex dispatcher (``--moe-dispatcher deepep`` / ``hybridep``) permutes the
received tokens by expert itself (no sort) and its dispatch and combine run the
deduplicated all-to-all (:func:`dispatch_algorithm`, :mod:`tracesim.network.collectives.dedup`:
a token crosses to a rank once, to a node once); the permutations keep the template's sizes.

With a latent MoE (``moe_latent``, Nemotron 3 Super) the tokens are projected to ``moe_h``
features after the router (``moe.latent_down``, a GEMM replicated over TP) and back after the
unpermutation (``moe.latent_up``); permutation, dispatch, the routed experts and combine run
at ``moe_h`` (Megatron-Core ``MoELayer``: ``fc1_latent_proj`` / ``fc2_latent_proj``), the
router and the shared experts at ``h``.

Sizes, with ``T`` a rank's tokens per micro-batch (:data:`tracesim.template.primitives.T`)
and ``h`` read as ``moe_h`` between the two latent projections:

* dispatch and combine: ``T/tps * top_k * h * eb * moe_load * moe_pad_a2a`` bytes per rank
  and direction (``moe_pad_a2a``: the router's quantization padding,
  :mod:`tracesim.template.moe_padding`; ``msg_bytes`` in the nccl-tests convention), forward
  and backward: each rank sends its own (sequence-parallel) tokens, and the all-to-all ends
  when the rank with the busiest experts has received its ``moe_load`` times the mean
  (dispatch) and sent it back (combine), so it is priced at that size (balanced: the mean; a
  capacity factor below 1: the kept share);
* the grouped GEMMs run ``experts/ep`` local experts with ``ep * T * top_k / experts *
  moe_load * moe_pad / ets`` tokens each (``moe_pad``: their quantization padding), ``T *
  top_k * moe_load * moe_pad / ets`` in all, and read every local expert's weights (``1/tp``
  of each, ``tp`` bound to the expert TP degree there);
  ``moe_load`` (``--moe-imbalance``, capped by ``--moe-capacity-factor``) is the busiest
  expert's tokens over the mean, so the GEMMs are those of the rank that gates the combine
  all-to-all;
* with expert tensor parallelism > 1 (``--etp``, by default = TP, sequence parallelism on)
  the dispatched tokens are all-gathered over the expert-TP group before ``fc1`` and
  reduce-scattered after ``fc2`` (:mod:`tracesim.template.resolve`); ``ets`` (the token
  split) is 1 when the experts use the TP group, else ``tps / etp``: with ``--etp 1`` and
  TP 2 a rank's experts run only its own ``T/2`` routed tokens, with no expert-TP
  communication and whole expert weights.
"""

from __future__ import annotations

from tracesim.network.collectives.dedup import algorithm_name as dedup_name
from tracesim.specs.model import ModelSpec
from tracesim.specs.parallel import ParallelSpec
from tracesim.template.layer import TemplateOp
from tracesim.template.primitives import T, mlp, norm_op, op, residual

#: routed token copies of a rank's micro-batch, and those its local experts run (gated rank)
ROUTED = f"{T}*top_k*moe_pad_a2a"
EXPERT_TOKENS = f"{T}*top_k*moe_load*moe_pad/ets"
#: positive where a rank holds more than one routed expert and receives its tokens by source
#: rank (``TemplateOp.when``): the flex dispatcher's receive-side permutation orders them by
#: expert itself (Megatron-Core ``_DeepepManager.get_permuted_hidden_states_by_experts``)
LOCAL_EXPERTS = "(experts/ep - 1)*a2a_sorted"
#: HybridEP's per-forward routing metadata (:func:`moe_ops`): forward only
ROUTE_GATHER = "moe.route_gather"
ROUTE_PREP = "moe.route_prep"
FORWARD_ONLY = (ROUTE_GATHER, ROUTE_PREP)


def moe_ops(model: ModelSpec, bias: bool) -> list[TemplateOp]:
    """The forward ops of one MoE layer's MLP part (``part="moe"``)."""
    tk = ROUTED
    a2a = f"eb*{T}/tps*top_k*moe_h*moe_load*moe_pad_a2a"  # the busiest rank's receive side
    sort = f"2*eb*{EXPERT_TOKENS}*moe_h"  # read and write the rank's dispatched tokens
    ops = [norm_op("ln2", "block", model, "moe")]
    if model.shared_experts > 0:
        ops += mlp("moe.shared", "moe", model, "shared_ffn", T, bias=False)
    ops += [
        op("moe.router", "block", "gemm", f"2*{T}/tps*h*experts",
           f"eb*({T}/tps*h + h*experts + {T}/tps*experts)", f"{T}*experts",
           params="h*experts", part="moe", shard="sequence", shape=f"1, {T}/tps, experts, h"),
        op("moe.topk", "block", "softmax", f"6*{T}/tps*experts", f"3*eb*{T}/tps*experts",
           f"{T}*top_k", part="moe", shard="sequence"),
        # latent MoE (Megatron-Core's fc1_latent_proj, replicated over TP): the tokens go
        # to the experts at moe_h wide
        op("moe.latent_down", "block", "gemm", f"2*{T}/tps*h*moe_h",
           f"eb*({T}/tps*h + h*moe_h + {T}/tps*moe_h)", f"{T}*moe_h", params="h*moe_h",
           part="moe", shard="sequence", when="latent", shape=f"1, {T}/tps, moe_h, h"),
        op("moe.permute", "block", "elementwise", "0", f"2*eb*{tk}/tps*moe_h", f"{tk}*moe_h",
           part="moe", shard="sequence"),
        # HybridEP's metadata for a new routing (``HybridEPBuffer.dispatch_with_permute``
        # without a handle): the routing map all-gathered over the EP group (one byte per
        # token and expert), then its preprocessing kernel (reads it, writes an int32 index
        # per token of the group); the backward reuses both
        TemplateOp(ROUTE_GATHER, "block", "fwd", "comm", out=f"{tk}*moe_h", part="moe", kind="comm",
                   collective="all_gather", group_kind="ep", msg_bytes=f"ep*{T}/tps*experts",
                   when="hybridep"),
        op(ROUTE_PREP, "block", "elementwise", "0", f"ep*{T}/tps*(experts + 4)", f"{tk}*moe_h",
           part="moe", when="hybridep"),
        TemplateOp("moe.dispatch", "block", "fwd", "comm", out=f"{EXPERT_TOKENS}*moe_h",
                   part="moe", kind="comm", collective="all_to_all", group_kind="ep",
                   msg_bytes=a2a),
    ]
    ops.append(op("moe.sort", "block", "elementwise", "0", sort, f"{EXPERT_TOKENS}*moe_h",
                  part="moe", when=LOCAL_EXPERTS))
    ops += mlp("moe", "moe", model, "moe_ffn", EXPERT_TOKENS, bias=False,
               param_scale="experts/ep*", h="moe_h")
    ops += [
        op("moe.unsort", "block", "elementwise", "0", sort, f"{EXPERT_TOKENS}*moe_h", part="moe",
           when=LOCAL_EXPERTS),
        TemplateOp("moe.combine", "block", "fwd", "comm", out=f"{tk}*moe_h", part="moe",
                   kind="comm", collective="all_to_all", group_kind="ep", msg_bytes=a2a),
        op("moe.unpermute", "block", "elementwise", f"2*{tk}/tps*moe_h", f"2*eb*{tk}/tps*moe_h",
           f"{T}*moe_h", part="moe", shard="sequence"),
        op("moe.latent_up", "block", "gemm", f"2*{T}/tps*moe_h*h",
           f"eb*({T}/tps*moe_h + moe_h*h + {T}/tps*h)", f"{T}*h", params="moe_h*h",
           part="moe", shard="sequence", when="latent", shape=f"1, {T}/tps, h, moe_h"),
        residual("moe.residual", "moe", dropout=bias),
    ]
    return ops


def dispatch_algorithm(op: TemplateOp, model: ModelSpec, par: ParallelSpec) -> str:
    """The network algorithm of a comm op: for the EP all-to-alls of the flex dispatcher
    (``--moe-dispatcher deepep`` / ``hybridep``) the deduplicated all-to-all of the model's
    routing (:mod:`tracesim.network.collectives.dedup`), else "" (NCCL's choice)."""
    if op.group_kind != "ep" or op.collective != "all_to_all" or par.moe_dispatcher == "alltoall":
        return ""
    return dedup_name(model.experts, model.top_k, model.router_groups, model.router_group_topk,
                      par.moe_routing == "round-robin")


def is_expert_op(template_op: TemplateOp) -> bool:
    """Whether ``template_op`` owns routed-expert weights (sharded over EP; their gradients
    are reduced over the expert-data-parallel group): the grouped GEMMs of a MoE block, not
    its shared experts."""
    return (template_op.part == "moe" and template_op.tp_style in ("colwise", "rowwise")
            and not template_op.module.startswith("moe.shared"))


#: template op of the routed experts' second-projection bias where a stack adds it eagerly
EXPERT_BIAS = "moe.expert_bias"


def expert_bias_ops() -> tuple[TemplateOp, TemplateOp]:
    """(forward, backward) of the routed experts' ``fc2`` bias added expert by expert after
    the grouped GEMM, as Megatron-Core 0.15's ``TEGroupedMLP._apply_bias`` does: per local
    expert a product of the bias with the tokens' routing probabilities and a sum (each a
    pass over the expert's ``[tokens, h]`` output), then one concatenation: forward, write the
    product, read it and the output, write the sum, read and write the concatenation (6
    element passes); backward, the reductions of the two products' gradients (read the output
    gradient twice, write and read two products: 6) and the split's concatenation (2)."""
    rows = EXPERT_TOKENS
    fwd = op(EXPERT_BIAS, "block", "elementwise", f"2*{rows}*h", f"6*eb*{rows}*h", f"{rows}*h",
             part="moe", shard="feature")
    bwd = fwd.replace(phase="bwd", flops=f"4*{rows}*h", bytes=f"8*eb*{rows}*h", params="0")
    return fwd, bwd
