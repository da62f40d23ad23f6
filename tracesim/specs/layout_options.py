"""A :class:`~tracesim.specs.parallel.ParallelSpec` from CLI-style options: the defaults that
follow from the model and the GPU count (data parallelism, global batch, sequence length,
dtype, Megatron-Core's sequence parallelism for MoE with TP) and the option names that are one
switch (:func:`parallel_from_options`). :func:`tracesim.specs.parallel.validate_layout` checks
the result."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracesim.errors import InputError
from tracesim.specs.model import ModelSpec
from tracesim.specs.names import graph_scopes, recompute_modules
from tracesim.specs.parallel import FP8_RECIPES, ParallelSpec
from tracesim.specs.stages import default_vpp, vpp_basis
from tracesim.specs.textopts import first_last, plan_pairs
from tracesim.specs.ub_config import load_ub_config


def _err(message: str, where: str) -> InputError:
    return InputError(message, "layout", where)


def parallel_from_options(opts: Mapping[str, Any], model: ModelSpec, gpus: int | None) -> ParallelSpec:
    """Build a :class:`ParallelSpec` from CLI-style options (``None`` or missing = default).

    ``dp`` defaults to ``gpus / (tp * pp * cp)``; ``global_batch`` to ``micro_batch * dp``
    (one micro-batch per replica); ``seq_len`` to the model's; ``dtype`` to the model's.
    Sequence parallelism is switched on for a MoE model with ``tp > 1`` (Megatron-core
    requires it) unless ``sp`` is given explicitly. ``overlap_p2p`` (Megatron's
    ``overlap_p2p_comm``) is ``not p2p_blocking``. The stack's defaults
    (:func:`tracesim.template.stacks.stack_defaults`) are applied by the caller.
    """

    def get(key: str, default: Any) -> Any:
        v = opts.get(key)
        return default if v is None else v

    tp, pp, cp = int(get("tp", 1)), int(get("pp", 1)), int(get("cp", 1))
    if opts.get("dp") is None:
        if gpus is None:
            dp = 1
        else:
            if gpus % (tp * pp * cp):
                raise _err(
                    f"the cluster's {gpus} GPUs are not divisible by tp {tp} x pp {pp} x cp {cp} "
                    f"= {tp * pp * cp}",
                    "dp",
                )
            dp = gpus // (tp * pp * cp)
    else:
        dp = int(opts["dp"])
    mb = int(get("micro_batch", 1))
    gb = int(get("global_batch", mb * dp))
    schedule = str(get("schedule", "1f1b"))
    vpp = int(get("vpp", 1))
    if opts.get("schedule") is None and vpp > 1:
        schedule = "interleaved"
    if schedule == "interleaved" and pp == 1:
        schedule, vpp = "1f1b", 1  # one stage: nothing to interleave
    elif schedule == "interleaved" and opts.get("vpp") is None:
        vpp = default_vpp(vpp_basis(opts, model.layers, pp), 1)
    sp_opt = opts.get("sp")
    sp = bool(sp_opt) if sp_opt is not None else (model.is_moe and tp > 1)
    stage_layers = opts.get("stage_layers")
    plan = opts.get("tp_plan") or ()
    if isinstance(plan, Mapping):
        plan = tuple((str(k), str(v)) for k, v in plan.items())
    if opts.get("grad_nan_syncs") is not None and opts.get("grad_nan_check") is None:
        # given alone it would change nothing; with the check turned off (a what-if) it rests
        raise _err("grad_nan_syncs needs grad_nan_check", "grad_nan_syncs")
    return ParallelSpec(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=int(get("ep", 1)),
        etp=int(get("etp", 0)),
        sp=sp,
        vpp=vpp,
        zero=int(get("zero", 0)),
        fsdp=bool(get("fsdp", False)),
        fsdp_reshard=bool(get("fsdp_reshard", True)),
        fsdp_defer_sync=bool(get("fsdp_defer_sync", False)),
        fsdp_keep_gathered=bool(get("fsdp_keep_gathered", False)),
        micro_batch=mb,
        global_batch=gb,
        seq_len=int(get("seq_len", model.seq_len)),
        schedule=schedule,
        recompute=str(get("recompute", "none")),
        recompute_modules=recompute_modules(get("recompute_modules", "core_attn")),
        recompute_layers=int(get("recompute_layers", 0) or 0),
        pp_rounds=int(get("pp_rounds", 1) or 1),
        dtype=str(get("dtype", model.dtype)),
        stage_layers=tuple(int(x) for x in stage_layers) if stage_layers else None,
        tp_plan=tuple(plan),
        bucket_params=int(get("bucket_params", 0)),
        first_bucket_params=int(get("first_bucket_params", 0)),
        dp_overlap=_one_switch(opts, "dp_overlap", "overlap_grad_reduce", True),
        grad_nan_check=bool(get("grad_nan_check", False)),
        grad_nan_syncs=int(get("grad_nan_syncs", 2)),
        moe_imbalance=float(get("moe_imbalance", 1.0)),
        moe_capacity_factor=float(get("moe_capacity_factor", 0.0)),
        moe_dispatcher=str(get("moe_dispatcher", "alltoall")),
        moe_routing=str(get("moe_routing", "uniform")),
        moe_a2a_overlap=bool(get("moe_a2a_overlap", False)),
        moe_shared_expert_overlap=bool(get("moe_shared_expert_overlap", False)),
        mtp_layers=int(get("mtp_layers", 0) or 0),
        mtp_repeated=bool(get("mtp_repeated", False)),
        moe_router_padding=bool(get("moe_router_padding", False)),
        moe_router_fusion=bool(get("moe_router_fusion", True)),
        first_stage_layers=int(get("first_stage_layers", 0)),
        last_stage_layers=int(get("last_stage_layers", 0)),
        p2p_blocking=not bool(get("overlap_p2p", not bool(get("p2p_blocking", True)))),
        stack=str(get("stack", "")),
        tp_comm_overlap=bool(get("tp_comm_overlap", False)),
        tp_comm_overlap_cfg=load_ub_config(opts.get("tp_comm_overlap_cfg")),
        tp_bwd_overlap=bool(get("tp_bwd_overlap", False)),
        overlap_param_gather=bool(get("overlap_param_gather", False)),
        grad_reduce_fp32=bool(get("grad_reduce_fp32", False)),
        cp_overlap=bool(get("cp_overlap", True)),
        comm_interference=bool(get("comm_interference", False)),
        fp8_recipe=str(get("fp8_recipe", "")),
        fp8_param_gather=bool(get("fp8_param_gather", False)),
        fp8_attention=bool(get("fp8_attention", False)),
        fp8_amax_tp_only=bool(get("fp8_amax_tp_only", False)),
        fp8_plan=plan_pairs(get("fp8_plan", ""), "--fp8-plan", ("bf16", *FP8_RECIPES)),
        bf16_layers=first_last(get("bf16_layers", "")),
        host_launch=bool(get("host_launch", False)),
        cuda_graphs=graph_scopes(get("cuda_graphs", "")),
    )


def _one_switch(opts: Mapping[str, Any], name: str, alias: str, default: bool) -> bool:
    """A switch given under either of two names; InputError when they disagree."""
    a, b = opts.get(name), opts.get(alias)
    if a is not None and b is not None and bool(a) != bool(b):
        raise _err(f"{name} {a} and {alias} {b} are one switch and disagree", alias)
    return bool(a if a is not None else (b if b is not None else default))


__all__ = ["parallel_from_options"]
