"""Parallel layouts: how a model is split over GPUs (house style rule 1: the "how").

A :class:`ParallelSpec` holds the degrees of tensor (``tp``), pipeline (``pp``), data
(``dp``), context (``cp``) and expert (``ep``) parallelism plus the options that change the
task graph: sequence parallelism, virtual pipeline stages, ZeRO stage / FSDP, micro-batch and
global batch (in sequences), the pipeline schedule, activation recomputation and the compute
dtype. :func:`validate_layout` checks a spec against a model and a GPU count and raises
:class:`~tracesim.errors.InputError` naming the numbers that disagree;
:func:`tracesim.specs.layout_options.parallel_from_options` builds one from CLI-style options.

Conventions (Megatron-LM): ``world = tp * pp * dp * cp``; expert parallelism is carved out of
the data-parallel ranks (``ep`` divides ``dp``) unless an expert tensor-parallel degree
``etp`` is given: then the MoE layers fold ``etp x ep x edp`` over the ``tp x cp x dp`` ranks
of each pipeline stage (MoE parallel folding; ``ep * etp`` divides ``tp * cp * dp``);
``global_batch = micro_batch * dp * num_micro`` (``num_micro``: gradient accumulation steps).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tracesim.errors import InputError
from tracesim.specs.hybrid import check_mamba_cp
from tracesim.specs.model import DTYPE_BYTES, DTYPES, ModelSpec
from tracesim.specs.stages import (
    check_split,
    default_vpp,
    stage_layer_counts,
    stage_split,
)

SCHEDULES = ("gpipe", "1f1b", "interleaved")
RECOMPUTE = ("none", "selective", "full", "op")
FP8_RECIPES = ("current", "delayed", "mxfp8", "nvfp4", "blockwise")
#: MoE token dispatchers: Megatron-Core's all-to-all, the flex dispatcher's backends
MOE_DISPATCHERS = ("alltoall", "deepep", "hybridep")
MOE_ROUTINGS = ("uniform", "round-robin")
TP_STYLES = ("colwise", "rowwise", "replicate")


@dataclass(frozen=True)
class ParallelSpec:
    """A parallel layout and the training options that shape the per-rank task graphs.

    Attributes:
        tp, pp, dp, cp, ep: parallel degrees; ``ep`` divides ``dp`` (without ``etp``).
        etp: expert tensor-parallel degree (Megatron's ``expert_tensor_parallel_size``); 0:
            not given (routed experts split over TP, EP over DP ranks); given: MoE parallel
            folding, ``etp x ep x edp`` ranks of each stage (:mod:`tracesim.specs.placement`).
        sp: Megatron sequence parallelism (norms / dropout sharded over the TP group,
            all-gather / reduce-scatter instead of all-reduce).
        vpp: virtual pipeline stages (model chunks) per pipeline rank, for ``interleaved``.
        zero: ZeRO stage 0-3 (1: optimizer states sharded, 2: + gradients, 3: + parameters).
        fsdp: PyTorch FSDP (per-layer all-gather with prefetch; the pattern of ``zero=3``).
        fsdp_reshard: sharded parameters are freed after each forward and all-gathered again
            for the backward (FSDP2's ``reshard_after_forward``); off: gathered once per
            micro-batch.
        fsdp_defer_sync: gradients reduce-scattered at each chunk's last backward of the
            iteration only (FSDP2's ``set_requires_gradient_sync(False)`` between).
        fsdp_keep_gathered: sharded parameters gathered at each chunk's first forward of the
            iteration and kept (FSDP2's ``set_reshard_after_backward(False)`` between, and
            no resharding after the forward).
        micro_batch: sequences per micro-batch per data-parallel replica.
        global_batch: sequences per iteration over all replicas.
        seq_len: sequence length in tokens.
        schedule: ``gpipe`` | ``1f1b`` | ``interleaved``.
        pp_rounds: runs of the schedule per iteration, each over ``num_micro / pp_rounds``
            micro-batches with its own warm-up and drain (1: one run over all).
        recompute: activation recomputation ``none`` | ``selective`` | ``full`` | ``op``.
        recompute_modules: with ``selective``, the modules recomputed (Megatron-Core's
            names, :data:`tracesim.specs.names.RECOMPUTE_MODULES`).
        recompute_layers: with ``full``, only the first N layers of each model chunk (0: all).
        dtype: compute dtype ``fp32`` | ``bf16`` | ``fp16`` | ``fp8``.
        stage_layers: optional uneven split, transformer layers per pipeline stage
            (length ``pp``, or ``pp * vpp`` for interleaved, in model-chunk order).
        tp_plan: optional overrides of the Megatron column / row rule, as pairs of
            (module-name glob, ``colwise`` | ``rowwise`` | ``replicate``).
        bucket_params: DDP gradient bucket size in parameters (0: ``max(40e6, 1e6 * dp)``).
        first_bucket_params: size of the first gradient bucket (the last layers' gradients)
            in parameters; 0: the same as the others (PyTorch DDP caps it at 1 MiB).
        p2p_blocking: a pipeline pass starts only when the previous pass's send has
            completed (Megatron-LM's batched isend/irecv); False lets sends overlap it.
        dp_overlap: gradient buckets are reduced as soon as their layers' backward is done
            (DDP, Megatron's ``--overlap-grad-reduce``); False: after the backward pass.
        grad_nan_check: each gradient bucket's norm is checked for NaN and Inf on the host
            before its reduction (Megatron-Core's ``check_for_nan_in_grad``;
            :func:`tracesim.build.dpsync.nan_check_ns`).
        grad_nan_syncs: host syncs per bucket of that check (2: Megatron-Core 0.12 on; 1: up
            to 0.9; 0: 0.10 and 0.11, whose disabled rerun state machine skips the tests).
        moe_imbalance: MoE load imbalance, the busiest expert's routed tokens over the mean
            (>= 1); the expert GEMMs of every rank run at that load, since the rank holding
            the busiest expert gates the combine all-to-all (docs/moe.md).
        moe_capacity_factor: expert capacity in mean routed tokens per expert (Megatron's
            ``--moe-expert-capacity-factor``): tokens beyond it dropped; 0 dropless (default).
        moe_dispatcher: ``alltoall``, ``deepep`` or ``hybridep`` (docs/moe.md, "Dispatchers").
        moe_routing: how balanced routing picks a token's experts, ``uniform`` (distinct at
            random: Megatron's forced load balancing) or ``round-robin`` (``top_k``
            consecutive experts per token: NeMo AutoModel's fake balanced gate); it sets what
            the deduplicating dispatchers send.
        moe_a2a_overlap: steady-state forward / backward pairs merged, each one's EP
            all-to-alls beside the other's compute (:mod:`tracesim.build.a2a_overlap`).
        moe_shared_expert_overlap: shared experts beside the EP all-to-alls (build.shared_overlap).
        mtp_layers, mtp_repeated: multi-token-prediction modules on the last pipeline stage
            (Megatron-Core's ``--mtp-num-layers``, :mod:`tracesim.template.mtp`); the depths
            running one module's weights (``--mtp-use-repeated-layer``).
        moe_router_padding, moe_router_fusion: Megatron-Core's ``--moe-router-padding-for-
            quantization`` (:mod:`tracesim.template.moe_padding`), ``--moe-router-fusion``.
        first_stage_layers, last_stage_layers: transformer layers of the first / last
            pipeline stage (Megatron's ``decoder_first/last_pipeline_num_layers``); the other
            stages split the rest evenly; 0: not given.
        stack: the software stack the layout runs under (a name of
            :data:`tracesim.template.stacks.STACKS`, "" when none was named); the builder
            reads only the switches below, which the stack's defaults set.
        tp_comm_overlap: Transformer Engine userbuffers (needs ``sp`` and ``tp > 1``): the
            sequence-parallel all-gather / reduce-scatter around each linear split into
            chunks pipelined with the GEMM's chunks, and the backward's bulk overlaps
            (docs/stacks.md).
        tp_comm_overlap_cfg: the userbuffers configuration given (Megatron-LM's
            ``--tp-comm-overlap-cfg``): one ``(layer, method, num_sm, num_splits, fp8_buf)``
            per Transformer Engine layer name (:mod:`tracesim.specs.ub_config`); empty: the
            stack's.
        tp_bwd_overlap: a column-parallel linear's input-gradient all-reduce (reduce-scatter
            with ``sp``) runs during its weight-gradient GEMM, and with ``sp`` the re-gather
            of its input during its data-gradient GEMM (Megatron-Core / TE asynchronous NCCL
            collectives; with ``tp_comm_overlap`` the userbuffers do it instead).
        grad_reduce_fp32: gradients reduced in fp32 (4 bytes per parameter; Megatron-LM's
            default with bf16, torchtitan's FSDP reduce dtype); False: in the compute dtype.
        overlap_param_gather: the distributed optimizer's (``zero`` 1-2) parameter
            all-gather runs per bucket in the next iteration's first forward passes, each layer
            waiting for its bucket (``--overlap-param-gather``); False: after the step, exposed.
        cp_overlap: ring attention's key/value exchange runs during the attention chunks
            (every ring implementation does); False: each chunk waits for its exchange.
        comm_interference: communication kernels that overlap compute take streaming
            multiprocessors from it (the SM counts of :mod:`tracesim.build.overlap`); False:
            overlapped compute runs at full speed.
        fp8_recipe: recipe with ``dtype`` fp8: ``current`` (tensor-wise current scaling),
            ``delayed``, ``mxfp8`` or ``nvfp4`` (Blackwell), ``blockwise`` (1x128 / 128x128
            blocks, :mod:`tracesim.template.fp8`); "" for other dtypes.
        host_launch: model the host that launches the kernels (tracesim.build.host).
        cuda_graphs: CUDA-graph scopes whose kernels cost one graph launch on the host.
        fp8_param_gather: parameters are kept in FP8 for the data-parallel all-gather.
        fp8_attention: the fused attention runs in FP8 too (:mod:`tracesim.template.fp8`).
        fp8_amax_tp_only: delayed scaling reduces its amaxes over TP x CP only
            (Megatron's ``--tp-only-amax-red``; :mod:`tracesim.build.fp8_delayed`).
        fp8_plan: (module glob, recipe) pairs: the linears a glob matches run that recipe
            (``bf16``: not quantized); the first match wins (:func:`tracesim.template.fp8.fp8_template`).
        bf16_layers: (first, last) transformer layers kept in BF16 under FP8.
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 0
    sp: bool = False
    vpp: int = 1
    zero: int = 0
    fsdp: bool = False
    fsdp_reshard: bool = True
    fsdp_defer_sync: bool = False
    fsdp_keep_gathered: bool = False
    micro_batch: int = 1
    global_batch: int = 1
    seq_len: int = 2048
    schedule: str = "1f1b"
    pp_rounds: int = 1
    recompute: str = "none"
    recompute_modules: tuple[str, ...] = ("core_attn",)
    recompute_layers: int = 0
    dtype: str = "bf16"
    stage_layers: tuple[int, ...] | None = None
    tp_plan: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    bucket_params: int = 0
    first_bucket_params: int = 0
    p2p_blocking: bool = True
    dp_overlap: bool = True
    grad_nan_check: bool = False
    grad_nan_syncs: int = 2
    moe_imbalance: float = 1.0
    moe_capacity_factor: float = 0.0
    moe_dispatcher: str = "alltoall"
    moe_routing: str = "uniform"
    moe_a2a_overlap: bool = False
    moe_shared_expert_overlap: bool = False
    mtp_layers: int = 0
    mtp_repeated: bool = False
    moe_router_padding: bool = False
    moe_router_fusion: bool = True
    first_stage_layers: int = 0
    last_stage_layers: int = 0
    stack: str = ""
    tp_comm_overlap: bool = False
    tp_comm_overlap_cfg: tuple[tuple[str, str, int, int, bool], ...] = ()
    tp_bwd_overlap: bool = False
    overlap_param_gather: bool = False
    grad_reduce_fp32: bool = False
    cp_overlap: bool = True
    comm_interference: bool = False
    fp8_recipe: str = ""
    fp8_param_gather: bool = False
    fp8_attention: bool = False
    fp8_amax_tp_only: bool = False
    fp8_plan: tuple[tuple[str, str], ...] = ()
    bf16_layers: tuple[int, int] = (0, 0)
    host_launch: bool = False
    cuda_graphs: tuple[str, ...] = ()

    @property
    def act_dtype(self) -> str:
        """Dtype of activations, gradients between ops and non-GEMM kernels: the compute
        dtype, except under FP8, where only the linears' GEMM operands are FP8 (BF16)."""
        return "bf16" if self.dtype == "fp8" else self.dtype

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element of the gradient buffer and its reduction: 4 with
        ``grad_reduce_fp32``, else the activations' (at least 2)."""
        return 4 if self.grad_reduce_fp32 else max(DTYPE_BYTES[self.act_dtype], 2)

    @property
    def gemm_dtype(self) -> str:
        """The cost-model dtype of an FP8 GEMM: its block-scaled recipe's (``blockwise``: the
        device's block-scaled FP8 level, ``mxfp8``), else ``dtype``."""
        if self.dtype == "fp8" and self.fp8_recipe == "blockwise":
            return "mxfp8"
        block = self.dtype == "fp8" and self.fp8_recipe in ("mxfp8", "nvfp4")
        return self.fp8_recipe if block else self.dtype

    @property
    def world(self) -> int:
        """Number of GPUs (``tp * pp * dp * cp``)."""
        return self.tp * self.pp * self.dp * self.cp

    @property
    def expert_tp(self) -> int:
        """Tensor-parallel degree of the routed experts: ``etp``, else ``tp``."""
        return self.etp or self.tp

    @property
    def edp(self) -> int:
        """Expert data-parallel degree, the ranks that reduce one expert's gradients:
        ``tp * cp * dp / (ep * expert_tp)`` (``cp * dp / ep`` without ``etp``)."""
        return max(self.tp * self.cp * self.dp // (self.ep * self.expert_tp), 1)

    @property
    def expert_token_split(self) -> float:
        """A rank's routed token copies at the expert GEMMs are ``T * top_k`` over this: 1
        when the experts use the TP group (gathered over it), else ``tps / etp`` (the rank's
        own ``T / tps`` tokens gathered over the expert-TP group)."""
        return 1.0 if self.expert_tp == self.tp else (self.tp if self.sp else 1) / self.expert_tp

    @property
    def num_micro(self) -> int:
        """Micro-batches per pipeline per iteration (gradient accumulation steps)."""
        return self.global_batch // (self.micro_batch * self.dp)

    @property
    def chunks(self) -> int:
        """Model chunks per pipeline rank (``vpp`` for interleaved, else 1)."""
        return self.vpp if self.schedule == "interleaved" else 1

    @property
    def shard_params(self) -> bool:
        """Whether parameters are sharded over the data-parallel group (ZeRO-3 / FSDP)."""
        return self.fsdp or self.zero >= 3

    @property
    def moe_load(self) -> float:
        """Routed tokens of the busiest expert over the mean: ``moe_imbalance``, capped at the
        capacity factor when tokens are dropped."""
        cap = self.moe_capacity_factor
        return min(self.moe_imbalance, cap) if cap > 0 else self.moe_imbalance

    @property
    def moe_kept(self) -> float:
        """Share of the routed tokens dispatched to experts: 1 dropless, at most the capacity
        factor otherwise."""
        return min(1.0, self.moe_capacity_factor) if self.moe_capacity_factor > 0 else 1.0

    @property
    def tokens_per_iteration(self) -> int:
        return self.global_batch * self.seq_len

    def bucket_size_params(self) -> int:
        """DDP bucket size in parameters (Megatron-LM's default rule when unset)."""
        return self.bucket_params or max(40_000_000, 1_000_000 * self.dp)

    def replace(self, **changes: Any) -> ParallelSpec:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["stage_layers"] = list(self.stage_layers) if self.stage_layers else None
        d["tp_plan"] = {k: v for k, v in self.tp_plan}
        d["num_micro"] = self.num_micro
        d["world"] = self.world
        return d


def _err(message: str, where: str) -> InputError:
    return InputError(message, "layout", where)


def validate_layout(model: ModelSpec, par: ParallelSpec, gpus: int | None = None) -> None:
    """Check that ``par`` can run ``model`` on ``gpus`` GPUs; InputError names the numbers.

    Checks: degrees and batch sizes positive; ``tp*pp*dp*cp == gpus``; heads, kv heads,
    ffn divisible by ``tp``, (MoE) expert ffn by the expert TP degree; experts divisible by
    ``ep``; ``ep`` divides ``dp``, or with ``etp`` given ``ep * etp`` divides ``tp * cp * dp``
    (``etp`` other than ``tp`` needs ``sp`` when ``tp > 1``, as Megatron-Core's MoE); the
    pipeline split (:func:`tracesim.specs.stages.check_split`: layers divisible by ``pp``
    unless ``stage_layers`` or ``first/last_stage_layers`` say otherwise, every stage and
    model chunk with a layer); FP8 options with dtype fp8; the userbuffers TP overlap with
    ``tp > 1`` and ``sp``;
    global batch divisible by ``micro_batch * dp``; sequence divisible by ``cp`` (by
    ``2 cp`` for load-balanced ring attention) and, with sequence parallelism, by ``tp``;
    interleaved schedules need ``vpp > 1`` and micro-batches divisible by ``pp``.
    """
    for key in ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "global_batch", "seq_len"):
        value = getattr(par, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise _err(f"must be a positive integer, got {value!r}", key)
    for key, allowed in (("schedule", SCHEDULES), ("recompute", RECOMPUTE), ("dtype", DTYPES),
                         ("moe_dispatcher", MOE_DISPATCHERS), ("moe_routing", MOE_ROUTINGS)):
        if getattr(par, key) not in allowed:
            raise _err(f"{getattr(par, key)!r} is not one of {', '.join(allowed)}", key)
    if par.zero not in (0, 1, 2, 3):
        raise _err(f"ZeRO stage must be 0, 1, 2 or 3, got {par.zero!r}", "zero")
    if par.fsdp and par.zero not in (0, 3):
        raise _err(f"--fsdp shards like ZeRO-3 and cannot be combined with zero {par.zero}", "fsdp")
    for key, off in (("fsdp_reshard", not par.fsdp_reshard), ("fsdp_defer_sync", par.fsdp_defer_sync),
                     ("fsdp_keep_gathered", par.fsdp_keep_gathered)):
        if off and not par.shard_params:
            raise _err("applies to sharded parameters (--fsdp or --zero 3)", key)
    for pattern, style in par.tp_plan:
        if style not in TP_STYLES:
            raise _err(f"plan style {style!r} for {pattern!r} is not one of {', '.join(TP_STYLES)}", "tp_plan")
    if gpus is not None and par.world != gpus:
        raise _err(
            f"tp {par.tp} x pp {par.pp} x dp {par.dp} x cp {par.cp} = {par.world} GPUs, "
            f"but the cluster has {gpus}",
            "gpus",
        )
    t = par.tp
    keys: tuple[tuple[str, str], ...] = (("heads", "are"), ("kv_heads", "are"), ("ffn_hidden", "is"))
    if model.is_hybrid and "M" in model.hybrid_pattern:  # Megatron's MambaMixer splits both
        keys += (("mamba_heads", "are"), ("mamba_groups", "are"))
    for key, verb in keys:
        if getattr(model, key) % t:
            raise _err(f"{key} {getattr(model, key)} {verb} not divisible by tp {t}", "tp")
    if model.is_moe:
        ef = model.moe_ffn_hidden or model.ffn_hidden
        if ef % par.expert_tp:
            key = "etp" if par.etp else "tp"
            raise _err(f"moe_ffn_hidden {ef} is not divisible by {key} {par.expert_tp}", key)
        if model.experts % par.ep:
            raise _err(f"experts {model.experts} are not divisible by ep {par.ep}", "ep")
    elif par.ep > 1 or par.etp > 1:
        key = "ep" if par.ep > 1 else "etp"
        raise _err(f"{key} {getattr(par, key)} > 1 needs a model with experts ({model.name} has "
                   "none)", key)
    _check_experts(par)
    if not par.moe_imbalance >= 1.0:
        raise _err(f"the busiest expert's tokens over the mean are at least 1, got "
                   f"{par.moe_imbalance!r}", "moe_imbalance")
    if model.experts and model.top_k and par.moe_imbalance > model.experts / model.top_k:
        # every token routed to the busiest expert: T tokens against the mean T k / E
        raise _err(f"the busiest expert's tokens over the mean are at most experts / top_k = "
                   f"{model.experts} / {model.top_k} (every token routed to it), got "
                   f"{par.moe_imbalance:g}", "moe_imbalance")
    if not par.moe_capacity_factor >= 0.0:
        raise _err(f"must be > 0 (or 0: dropless), got {par.moe_capacity_factor!r}",
                   "moe_capacity_factor")
    if par.mtp_layers < 0:
        raise _err(f"must be >= 0, got {par.mtp_layers}", "mtp_layers")
    if par.mtp_layers > model.layers:  # each depth is one more layer (DeepSeek-V3: 1)
        raise _err(f"{par.mtp_layers} multi-token prediction depths are more than the model's "
                   f"{model.layers} layers", "mtp_layers")
    if par.mtp_repeated and not par.mtp_layers:
        raise _err("the MTP depths' shared layer needs --mtp-layers N", "mtp_repeated")
    if par.schedule == "interleaved":
        if par.vpp < 2:
            raise _err(f"the interleaved schedule needs vpp >= 2, got {par.vpp}", "vpp")
        if par.pp < 2:
            raise _err("the interleaved schedule needs pp >= 2", "pp")
    elif par.vpp != 1:
        raise _err(f"vpp {par.vpp} needs --schedule interleaved (got {par.schedule})", "vpp")
    check_split(model, par)
    if par.fp8_recipe and par.dtype != "fp8":
        raise _err(f"fp8_recipe {par.fp8_recipe!r} needs dtype fp8 (got {par.dtype})", "fp8_recipe")
    if par.fp8_recipe not in ("", *FP8_RECIPES):
        raise _err(f"{par.fp8_recipe!r} is not one of {', '.join(FP8_RECIPES)}", "fp8_recipe")
    if par.grad_nan_syncs not in (0, 1, 2):
        raise _err(f"grad_nan_syncs must be 0, 1 or 2 (got {par.grad_nan_syncs})", "grad_nan_syncs")
    if par.fp8_amax_tp_only and par.fp8_recipe != "delayed":
        raise _err(f"fp8_amax_tp_only needs fp8_recipe delayed (got {par.fp8_recipe or 'none'})",
                   "fp8_amax_tp_only")
    for key, given in (("fp8_plan", par.fp8_plan), ("bf16_layers", any(par.bf16_layers))):
        if given and par.dtype != "fp8":
            raise _err(f"{key} needs dtype fp8 (got {par.dtype})", key)
    if min(par.bf16_layers) < 0 or sum(par.bf16_layers) > model.layers:
        raise _err(f"{par.bf16_layers[0]},{par.bf16_layers[1]} BF16 layers of {model.layers}",
                   "bf16_layers")
    if par.tp_comm_overlap and not (par.tp > 1 and par.sp):
        raise _err("the userbuffers TP overlap needs tp > 1 with sequence parallelism "
                   f"(tp {par.tp}, sp {par.sp})", "tp_comm_overlap")
    per_step = par.micro_batch * par.dp
    if par.global_batch % per_step:
        raise _err(
            f"global batch {par.global_batch} is not divisible by micro-batch "
            f"{par.micro_batch} x dp {par.dp} = {per_step}",
            "global_batch",
        )
    m = par.num_micro
    rounds = par.pp_rounds
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1 or m % rounds:
        raise _err(f"{rounds!r} schedule runs do not split the {m} micro-batches per pipeline "
                   "evenly", "pp_rounds")
    if par.schedule == "interleaved" and (m // rounds) % par.pp:
        per = f" per schedule run ({m // rounds} = {m} / {rounds})" if rounds > 1 else f" ({m})"
        raise _err(
            f"interleaved 1F1B needs micro-batches{per} divisible by pp {par.pp}", "global_batch"
        )
    s = par.seq_len
    if par.cp > 1 and model.is_hybrid and "M" in model.hybrid_pattern:
        check_mamba_cp(model.mamba_heads, model.mamba_groups, par.tp, par.cp)
    if par.cp > 1 and s % (2 * par.cp):
        raise _err(f"seq_len {s} is not divisible by 2 x cp = {2 * par.cp} (ring attention)", "cp")
    if par.sp and s % (t * par.cp):
        raise _err(f"seq_len {s} is not divisible by tp {t} x cp {par.cp} (sequence parallel)", "sp")


def _check_experts(par: ParallelSpec) -> None:
    """The expert layout: EP inside DP, or folded over a stage's ranks with ``etp``."""
    if not par.etp:
        if par.dp % par.ep:
            raise _err(f"ep {par.ep} must divide dp {par.dp} (experts are split over DP ranks; "
                       "--etp folds EP over tp x cp x dp)", "ep")
        return
    if not isinstance(par.etp, int) or isinstance(par.etp, bool) or par.etp < 0:
        raise _err(f"must be a positive integer, got {par.etp!r}", "etp")
    stage = par.tp * par.cp * par.dp
    if stage % (par.ep * par.etp):
        raise _err(f"--ep {par.ep} x --etp {par.etp} = {par.ep * par.etp} must divide the "
                   f"{stage} ranks of a pipeline stage (tp {par.tp} x cp {par.cp} x dp {par.dp})",
                   "etp")
    if par.etp != par.tp and par.tp > 1 and not par.sp:
        raise _err(f"--etp {par.etp} other than tp {par.tp} needs sequence parallelism (--sp), "
                   "as Megatron-Core's MoE with TP", "etp")


__all__ = ["FP8_RECIPES", "RECOMPUTE", "SCHEDULES", "TP_STYLES", "ParallelSpec", "default_vpp",
           "stage_layer_counts", "stage_split", "validate_layout"]
