"""Per-GPU memory estimate: parameters, gradients, optimizer states and activations.

Model states follow the ZeRO paper (Rajbhandari et al. 2020): per parameter, the weight in
the compute dtype (``max(eb, 2)`` bytes), its gradient (``max(eb, 2)``) and Adam's states
(12 bytes: fp32 master weight and two moments in mixed precision; 8 in pure fp32, where the
weight is its own master). ZeRO-1 shards the optimizer states over the data-parallel (x
context-parallel) group, ZeRO-2 also the gradients, ZeRO-3 / FSDP also the weights (plus two
gathered layers in flight: the current one and the prefetched one; the stage's dense weights
whole with ``fsdp_keep_gathered``, its gradients unsharded with ``fsdp_defer_sync``). Expert
weights shard over the expert-data-parallel group instead.

Activations per transformer layer and micro-batch follow Korthikanti et al. 2022 ("Reducing
Activation Recomputation in Large Transformer Models"), generalised to any FFN width,
SwiGLU, grouped-query attention with any query width ``qd = heads x head_dim``, multi-head
latent attention, MoE and context parallelism (the sequence split over ``cp``)::

    attention  2sbh (QKV input) + 2sb qd (Q) + 4sb kvh (K, V) + 2sb qd (proj input) + sbh (mask)
               + 5 b heads s^2 / cp (scores, softmax, dropout; absent with flash attention
               or selective recomputation)
    MLA        2sbh (down-projection input) + 2sb (q_lora + kv_lora + qk_rope) (latent norm
               inputs) + 2sb (q_lora + kv_lora) (up-projection inputs, replicated like the
               QKV input) + 4sb heads (qk_dim + v_dim) (Q, K, V, proj input)
    MLP        2sbh (fc1 input) + 4sbf (GELU input, fc2 input) + sbh (mask)
               or, SwiGLU: 2sbh + 6sbf
    MoE        2sbh (router / shared-expert input) + 6sb (top_k load moe_ffn + shared_ffn)
               (SwiGLU) + 2sbh top_k load (the routed copies, the grouped GEMMs' input:
               gathered over TP, never split; ``load`` times their quantization padding,
               :mod:`tracesim.template.moe_padding`); with ``--etp`` other than TP the routed
               copies and expert features are those of ``ParallelSpec.expert_token_split``
               and the expert TP degree
    norms      4sbh
    Mamba-2    2sbh (in-projection input) + 2sb (2 d_inner + 2 G N + heads) (its output)
               + 4sb d_inner (the scan's and the gated norm's outputs); a hybrid model's
               layer holds one mixer (attention, MLP, MoE or Mamba-2) and one norm (2sbh)

with ``load`` the busiest expert's tokens over the mean (``--moe-imbalance``).

with 2-byte elements scaled to the dtype (masks stay 1 byte). Without sequence parallelism
the norm inputs, the QKV / fc1 inputs and the dropout masks are replicated over the TP group
and the rest is split by ``tp``; with it everything is split. Full recomputation keeps only
each layer's input (``2sbh``, split with SP). The number of micro-batches a stage holds at
once is counted from the pipeline schedule itself (forwards run minus backwards run, at the
worst point), weighted by the layers of each chunk. The last stage also holds one
micro-batch's fp32 logits.

Not counted: allocator fragmentation, framework workspace (cuBLAS, NCCL buffers), and
temporary buffers inside kernels; real jobs need a few GiB on top.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracesim.build.schedules import iteration_items
from tracesim.specs.hybrid import ATTENTION, MAMBA, d_inner, in_width
from tracesim.specs.model import DTYPE_BYTES, ModelSpec
from tracesim.specs.parallel import ParallelSpec, stage_split
from tracesim.template.moe_padding import moe_padding
from tracesim.template.optimizer import state_bytes

GiB = float(1 << 30)


@dataclass(frozen=True)
class MemoryEstimate:
    """Memory per GPU in GiB for the worst pipeline stage, plus every stage's total."""

    params_gib: float
    grads_gib: float
    optimizer_gib: float
    activations_gib: float
    total_gib: float
    worst_stage: int
    per_stage_gib: tuple[float, ...]
    capacity_gib: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        """True if the worst stage fits the device memory (or the capacity is unknown)."""
        return self.capacity_gib <= 0 or self.total_gib <= self.capacity_gib

    def to_dict(self) -> dict[str, Any]:
        return {
            "params": round(self.params_gib, 3),
            "grads": round(self.grads_gib, 3),
            "optimizer": round(self.optimizer_gib, 3),
            "activations": round(self.activations_gib, 3),
            "total": round(self.total_gib, 3),
            "worst_stage": self.worst_stage,
            "capacity": self.capacity_gib,
            "fits": self.fits,
        }


def _attention_elements(model: ModelSpec, s: float, b: int,
                        mods: frozenset[str] = frozenset()) -> tuple[float, float]:
    """(split, replicated) 2-byte activation elements of one layer's attention (module doc);
    ``mods``: the recomputed modules (``mla_up_proj`` drops the up projections' Q, K, V)."""
    sbh = s * b * model.hidden
    if model.is_mla:
        lat = s * b * (model.q_lora_rank + model.kv_lora_rank)
        heads = s * b * model.heads
        split = 4 * heads * model.qk_head_dim + 4 * heads * model.v_dim  # Q, K; V, proj input
        if "mla_up_proj" in mods:
            split = 2 * heads * model.v_dim  # the proj input alone
        repl = 2 * sbh + 2 * (lat + s * b * model.qk_rope_head_dim) + 2 * lat
        return split, repl
    kvh = model.kv_heads * model.head_dim
    sbq = s * b * model.q_width
    return 2 * sbq + 4 * s * b * kvh + 2 * sbq, 2 * sbh


def _mlp_elements(model: ModelSpec, par: ParallelSpec, layer: int, s: float, b: int,
                  mods: frozenset[str] = frozenset()) -> tuple[float, float, float]:
    """(split, replicated, expert input) 2-byte activation elements of one layer's MLP or MoE
    block; the routed tokens' copies that reach the grouped GEMMs (the expert input) are
    gathered over the TP group, so they are not split. ``mods``: the recomputed modules, whose
    saved tensors are dropped (``mlp``: the dense MLP's; ``moe``: the whole block's but its
    input; ``moe_act``: the experts' activation output, fc2's input; ``shared_experts``)."""
    sbh = s * b * model.hidden
    per_f = 6 if model.activation == "swiglu" else 4  # fc1 output(s) and fc2 input, per feature
    if not model.moe_layer(layer):
        return (0.0 if "mlp" in mods else per_f * s * b * model.ffn_hidden), 2 * sbh, 0.0
    if "moe" in mods:
        return 0.0, 2 * sbh, 0.0
    routed = model.top_k * par.moe_load * moe_padding(model, par)[0]  # with quantization padding
    ets = par.expert_token_split  # 1 unless --etp folds the experts (then fewer tokens, wider)
    experts = model.moe_ffn * routed * (par.tp / (ets * par.expert_tp))
    shared = 0.0 if "shared_experts" in mods else per_f * model.shared_ffn
    split = (per_f - 2 if "moe_act" in mods else per_f) * experts + shared
    return split * s * b, 2 * sbh, 2 * s * b * model.moe_hidden * routed / ets


def _mamba_elements(model: ModelSpec, s: float, b: int) -> tuple[float, float]:
    """(split, replicated) 2-byte activation elements of one Mamba-2 mixer: the in-projection's
    output (z, x, B, C, dt), the scan's output and the gated norm's (the out-projection's
    input) split over TP; the in-projection's input replicated without SP."""
    return 2 * s * b * in_width(model) + 4 * s * b * d_inner(model), 2 * s * b * model.hidden


def layer_activation_bytes(model: ModelSpec, par: ParallelSpec, layer: int, *, flash: bool,
                           full: bool | None = None) -> float:
    """Activation bytes one rank keeps for one transformer layer and one micro-batch.

    ``full``: whether the layer's whole forward is recomputed (only its input kept); default
    ``--recompute full``, which with ``--recompute-layers N`` holds for the first N layers of
    each chunk only (:func:`estimate_memory` says which). ``--recompute selective`` drops the
    saved tensors of ``--recompute-modules`` (:func:`_mlp_elements`, :func:`_attention_elements`;
    ``layernorm``: the norms' outputs; ``core_attn``: the score matrix of attention without
    flash)."""
    eb = DTYPE_BYTES[par.dtype]
    scale = eb / 2.0
    s = par.seq_len / par.cp
    b, h, t = par.micro_batch, model.hidden, par.tp
    sbh = s * b * h
    if par.recompute == "full" if full is None else full:
        return 2 * sbh * scale / (t if par.sp else 1)
    mods = frozenset(par.recompute_modules) if par.recompute == "selective" else frozenset()
    dropout = model.norm == "layernorm"  # gpt-style blocks use dropout, llama-style do not
    mask = sbh if dropout else 0.0
    # element counts (2-byte elements) split by tp, and replicated ones (without SP)
    attn_split, attn_repl = _attention_elements(model, s, b, mods)
    mlp_split, mlp_repl, expert_in = _mlp_elements(model, par, layer, s, b, mods)
    norms = 0.0 if "layernorm" in mods else 4 * sbh
    kind = model.layer_kind(layer)
    if kind:  # a hybrid model's layer: one mixer and one norm
        norms /= 2
        if kind == MAMBA:
            attn_split, attn_repl = _mamba_elements(model, s, b)
        if kind in (MAMBA, ATTENTION):
            mlp_split = mlp_repl = expert_in = 0.0
        else:
            attn_split = attn_repl = 0.0
    split_b = (attn_split + mlp_split) * scale
    repl_b = (attn_repl + mlp_repl + norms) * scale + 2 * mask  # masks are 1 byte
    total = split_b / t + (repl_b / t if par.sp else repl_b)
    total += expert_in * scale
    if not flash and (par.recompute == "none" or (par.recompute == "selective"
                                                  and "core_attn" not in mods)):
        total += 5 * b * model.heads * s * par.seq_len / t * scale
    return total


def in_flight(par: ParallelSpec, stage: int) -> list[int]:
    """Peak micro-batches held per local chunk on ``stage`` (at the schedule's worst point)."""
    items = iteration_items(par.schedule, par.pp, stage, par.num_micro, par.chunks, par.pp_rounds)
    return [max(1, _peak(items, c)) for c in range(par.chunks)]


def _peak(items: list, chunk: int | None) -> int:
    cur = peak = 0
    for it in items:
        if chunk is not None and it.chunk != chunk:
            continue
        cur += 1 if it.kind == "F" else -1
        peak = max(peak, cur)
    return peak


def estimate_memory(
    model: ModelSpec,
    par: ParallelSpec,
    stage_params: tuple[float, ...],
    stage_expert_params: tuple[float, ...],
    *,
    flash: bool = True,
    capacity_gib: float = 0.0,
    offloaded_layers: int = 0,
    optimizer_bytes: float | None = None,
) -> MemoryEstimate:
    """Memory per GPU of every pipeline stage; the worst one is reported.

    Args:
        stage_params, stage_expert_params: local parameters of one rank per stage (from
            :class:`tracesim.build.builder.BuildResult`).
        flash: attention without a stored score matrix.
        capacity_gib: device memory (0: unknown).
        offloaded_layers: the first N layers' activations live in host memory (one stage,
            one micro-batch in flight); one layer's stay, the copy under way.
        optimizer_bytes: optimizer states per parameter (default: Adam's over master weights,
            :func:`tracesim.template.optimizer.state_bytes`).
    """
    eb = DTYPE_BYTES[par.dtype]
    wb = max(eb, 2)
    gb = par.grad_bytes  # the gradient buffer (Megatron's main_grad)
    ob = optimizer_bytes if optimizer_bytes is not None else state_bytes("adam", True, eb)
    dpcp = par.dp * par.cp
    edp = par.edp
    split = stage_split(model, par)
    totals = []
    rows = []
    for stage in range(par.pp):
        dense = stage_params[stage] - stage_expert_params[stage]
        expert = stage_expert_params[stage]
        # model states, each sharded by ZeRO stage
        w = dense * wb / (dpcp if par.shard_params else 1) + expert * wb / (edp if par.shard_params else 1)
        g = dense * gb / (dpcp if par.zero >= 2 or par.shard_params else 1) + expert * gb / (
            edp if par.zero >= 2 or par.shard_params else 1)
        o = dense * ob / (dpcp if par.zero >= 1 or par.shard_params else 1) + expert * ob / (
            edp if par.zero >= 1 or par.shard_params else 1)
        if par.shard_params and dpcp > 1 and par.fsdp_defer_sync:
            g += dense * wb * (1 - 1 / dpcp)  # unsharded, in the weights' dtype until reduced
        if par.shard_params and dpcp > 1 and par.fsdp_keep_gathered:
            w += dense * wb * (1 - 1 / dpcp)  # the stage's weights gathered for the iteration
        elif par.shard_params and dpcp > 1:
            n_layers = sum(split[c * par.pp + stage] for c in range(par.chunks))
            w += 2 * (stage_params[stage] / max(n_layers, 1)) * wb  # gathered layers in flight
        # activations: peak in-flight micro-batches per chunk x that chunk's layers
        held = in_flight(par, stage)
        act = 0.0
        layer0 = 0
        starts = [sum(split[:g]) for g in range(len(split))]
        for c in range(par.chunks):
            g_idx = c * par.pp + stage
            layer0 = starts[g_idx]
            n_full = par.recompute_layers or split[g_idx]  # the first N of the chunk
            per_mb = sum(layer_activation_bytes(
                model, par, li, flash=flash,
                full=par.recompute == "full" and li - layer0 < n_full)
                for li in range(layer0, layer0 + split[g_idx]))
            act += held[c] * per_mb
        if offloaded_layers:
            sizes = [layer_activation_bytes(model, par, li, flash=flash) for li in range(offloaded_layers)]
            act -= held[0] * (sum(sizes) - max(sizes))
        if stage == par.pp - 1:
            act += 4.0 * par.micro_batch * (par.seq_len / par.cp) * model.vocab / par.tp
            # multi-token-prediction modules: one more layer each on the last chunk (its
            # logits are freed before the next module's, like the main head's)
            act += held[par.chunks - 1] * par.mtp_layers * layer_activation_bytes(
                model, par, model.layers - 1, flash=flash)
        if stage == 0:
            act += held[0] * par.micro_batch * (par.seq_len / par.cp) * model.hidden * eb / (par.tp if par.sp else 1)
        rows.append((w, g, o, act))
        totals.append((w + g + o + act) / GiB)
    worst = max(range(par.pp), key=lambda i: totals[i])
    w, g, o, act = rows[worst]
    return MemoryEstimate(
        params_gib=w / GiB, grads_gib=g / GiB, optimizer_gib=o / GiB, activations_gib=act / GiB,
        total_gib=totals[worst], worst_stage=worst, per_stage_gib=tuple(totals),
        capacity_gib=float(capacity_gib),
        details={"in_flight_stage0": in_flight(par, 0)},
    )
