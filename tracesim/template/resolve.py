"""Resolve a layer template for one model and layout: numbers, durations and TP communication.

:func:`resolve_template` evaluates every template op's expressions for a
:class:`~tracesim.specs.model.ModelSpec` and a
:class:`~tracesim.specs.parallel.ParallelSpec`, asks a duration function for each
compute op, and inserts the tensor-parallel communication that Megatron's f / g operators
imply:

* walking a section's forward ops, the activation is ``full`` (replicated over the TP group,
  or sequence-sharded with ``--sp``), ``sharded`` (features split, after a column-parallel
  linear) or ``partial`` (partial sums, after a row-parallel linear or a vocab-parallel
  embedding);
* entering a column-parallel linear from ``full`` is Megatron's *f*: nothing forward
  (all-gather with SP), all-reduce of the input gradient backward (reduce-scatter with SP);
* a op that needs ``full`` input after ``partial`` is *g*: all-reduce forward
  (reduce-scatter with SP), nothing backward (all-gather with SP);
* after ``sharded`` it is an all-gather forward (a column-parallel linear with gathered
  output), nothing backward;
* a row-parallel linear fed ``full`` input slices it locally (all-gather of the input
  gradient backward).

The backward communication sits between the backward ops of the two forward ops it
separates. Between a MoE block's EP dispatch and combine (the routed experts) the same rules
run on the expert tensor-parallel group: with ``ParallelSpec.etp`` other than ``tp`` its
degree is ``etp``, its group kind ``etp`` and its gathers the sequence-parallel kind (each
rank dispatched distinct tokens). Plans (``ParallelSpec.tp_plan``: module-name glob ->
``colwise`` | ``rowwise`` | ``replicate``) override the template's marks.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from tracesim.ops.dtypes import WIRE_BYTES
from tracesim.specs import hybrid
from tracesim.specs.model import DTYPE_BYTES, ModelSpec
from tracesim.specs.parallel import ParallelSpec
from tracesim.specs.ub_config import pipe_splits
from tracesim.template.durations import gradient_shapes
from tracesim.template.fp8 import AMAX_SUFFIX
from tracesim.template.layer import LayerTemplate, TemplateOp, evaluate, shape_parts, symbol_env
from tracesim.template.moe_ops import dispatch_algorithm, is_expert_op
from tracesim.template.mtp import mtp_ops
from tracesim.template.sections import Resolved, ROp, Section
from tracesim.template.ub_chunks import PIPE_SPLITS, chunk_slowdown

#: duration of one compute op: (op_class, flops, bytes, template op) -> ns
OpTimeFn = Callable[[str, float, float, TemplateOp, float], int]  # class, flops, bytes, op, units


def _plan_style(op: TemplateOp, par: ParallelSpec) -> str:
    style = op.tp_style
    for pattern, s in par.tp_plan:
        if fnmatch.fnmatchcase(op.module, pattern):
            style = s
    return style


_TORCH_TYPES = {"fp32": "float", "bf16": "c10::BFloat16", "fp16": "c10::Half", "fp8": "c10::Float8_e4m3fn"}


@lru_cache(maxsize=65536)
def _leaf_cost(name: str, dims_json: str, dtype: str) -> tuple[float, float, float]:
    """(flops, bytes, work units) of a leaf op at concrete dims."""
    from tracesim.ops.classify import op_cost

    dims = json.loads(dims_json)
    tname = _TORCH_TYPES.get(dtype, "float")
    types = ["TensorList" if (isinstance(d, list) and d and isinstance(d[0], list))
             else (tname if isinstance(d, list) and d else "") for d in dims]
    c = op_cost(name, dims, types)
    return c.flops, c.bytes, c.units


def _eval_shapes(shapes: Any, env: Mapping[str, float]) -> Any:
    if isinstance(shapes, list):
        return [_eval_shapes(x, env) for x in shapes]
    if isinstance(shapes, str):
        return max(int(round(evaluate(shapes, env))), 1)
    return shapes


def op_numbers_units(op: TemplateOp, env: Mapping[str, float], env_full: Mapping[str, float],
                     dtype: str) -> tuple[float, float, float]:
    """(flops, bytes, work units) of ``op`` for one rank: expressions, or re-costed recorded
    leaves (at the unsharded target dimensions ``env_full``) times the split expressions. The
    units are those of the largest leaf times the FLOPs split (tensor parallelism splits the
    heads), at least 1; 1 for an op without leaves or from a template without ``src_units``."""
    if not op.leaves:
        return evaluate(op.flops, env), evaluate(op.bytes, env), 1.0
    leaves = [_leaf_cost(name, json.dumps(_eval_shapes(shapes, env_full)), dtype)
              for name, shapes in json.loads(op.leaves)]
    split = evaluate(op.flops, env)
    flops = sum(f for f, _, _ in leaves) * split
    nbytes = sum(b for _, b, _ in leaves) * evaluate(op.bytes, env)
    units = 1.0
    if op.src_units > 0:
        largest = max(leaves, key=lambda x: x[0])[2] if leaves else 1.0
        units = max(largest * split, 1.0)
    return flops, nbytes, units


def op_numbers(op: TemplateOp, env: Mapping[str, float], env_full: Mapping[str, float],
               dtype: str) -> tuple[float, float]:
    """(flops, bytes) of :func:`op_numbers_units`."""
    flops, nbytes, _ = op_numbers_units(op, env, env_full, dtype)
    return flops, nbytes


def op_units(op: TemplateOp, env: Mapping[str, float], env_full: Mapping[str, float],
             dtype: str) -> float:
    """Work units of :func:`op_numbers_units`."""
    return op_numbers_units(op, env, env_full, dtype)[2]


def _comm(name: str, collective: str, gkind: str, msg: float, phase: str, overlap: str = "",
          ub: str = "", algorithm: str = "") -> ROp:
    return ROp(name=name, kind="coll", op_class="comm", phase=phase, collective=collective,
               gkind=gkind, msg_bytes=int(round(msg)), overlap=overlap, ub=ub, algorithm=algorithm)


#: operand bytes per element of a low-precision GEMM (its ``eb``): FP8 one, NVFP4 half a byte
#: plus its scales (the wire bytes)
_LOW_EB = {"fp8": 1.0, "mxfp8": 1.0, "nvfp4": WIRE_BYTES["nvfp4"]}


def _ub_role(op: TemplateOp, style: str) -> str:
    """The userbuffers name of a transformer layer's linear (``qkv``, ``proj``, ``fc1``,
    ``fc2``), "" for other ops (MoE experts, the LM head: Transformer Engine does not
    overlap them)."""
    if op.section != "block" or op.part not in ("attn", "mlp") or style not in ("colwise", "rowwise"):
        return ""
    if op.part == "attn":
        return "qkv" if style == "colwise" else "proj"
    return "fc1" if style == "colwise" else "fc2"


def _timed(op: TemplateOp, env: Mapping[str, float], flops: float) -> tuple[TemplateOp, float]:
    """``op`` as the duration function sees it, and the FLOPs its kernel runs: the shape
    evaluated to numbers; a causal fused attention over the full sequence runs half of the
    ``T x s`` square its ``flops`` count (the keys per query of its shape halved too). Under
    context parallelism the rank runs it as ring attention's ``cp`` kernels (Transformer
    Engine's ``AttnFuncWithCPAndKVP2P`` on the load-balanced chunks ``r`` and ``2cp-1-r``),
    each on 1/cp of the FLOPs: the diagonal step causal over the rank's own chunks (``s/(2cp)``
    keys per query on average), the steps from lower ranks its queries against half a chunk
    pair (``s/(2cp)`` keys), the steps from higher ranks half its queries against a whole pair
    (``s/cp``): ranks average half of each. Their time is the FLOPs at the harmonic mean of the
    keys per query, ``2 s / (3 cp + 1)`` (``s/2`` at cp 1), the length the shape carries."""
    causal = op.causal and env["win"] >= env["s"]
    frac = 0.5 if causal else 1.0
    parts = shape_parts(op.shape)
    if not parts:
        return op, flops * frac
    vals = [max(evaluate(p, env), 1.0) for p in parts]
    if op.op_class == "attention":
        vals[2] = max(vals[2] * (2.0 / (3.0 * env["cp"] + 1.0) if causal else 1.0), 1.0)
    return op.replace(shape=",".join(f"{v:.6g}" for v in vals)), flops * frac


def _resolve_section(
    fwd_ops: Sequence[TemplateOp],
    bwd_ops: Sequence[TemplateOp],
    model: ModelSpec,
    par: ParallelSpec,
    op_time: OpTimeFn,
    *,
    end_full: bool,
    window: int = 0,
    regather: bool = False,
) -> Section:
    eb = DTYPE_BYTES[par.act_dtype]
    env_tp = symbol_env(model, par)
    env_rep = symbol_env(model, par, tp_active=False)
    # model FLOPs: no split, and the routed tokens of a balanced, dropless router
    env_full = symbol_env(model, par.replace(tp=1, sp=False, cp=1, ep=1, etp=0, moe_imbalance=1.0,
                                             moe_capacity_factor=0.0))
    env_full.update(moe_pad=1.0, moe_pad_a2a=1.0)  # padding is no model FLOP
    folded = par.expert_tp != par.tp
    env_etp = {**env_tp, "tp": float(par.expert_tp)} if folded else env_tp
    if window > 0:  # a sliding-window layer: ``win`` keys per query
        for env_ in (env_tp, env_rep, env_full, env_etp):
            env_["win"] = float(min(window, par.seq_len))
    state = "full"
    in_experts = False  # between the EP dispatch and combine
    out_prev = 0.0  # elements of the last op's output (unsharded)
    out_wire = float(eb)  # the bytes per element a TP all-gather of it moves
    prev_dtype = ""  # the compute dtype of the last compute op
    fwd: list[ROp] = []
    fwd_index: dict[str, int] = {}
    bwd_inserts: list[tuple[int, ROp]] = []  # (fwd boundary index, comm) in fwd order
    env_of: dict[str, dict[str, float]] = {}
    params = 0.0
    expert_params = 0.0
    model_flops = 0.0
    tensors = 0.0

    def group() -> tuple[int, bool, str, dict[str, float]]:
        """(degree, sequence-parallel, group kind, env) of the TP group in use."""
        if in_experts and folded:
            return par.expert_tp, True, "etp", env_etp
        return par.tp, par.sp, "tp", env_tp

    def to_full(i: int, name: str) -> None:
        nonlocal state
        tp, sp, gk, _ = group()
        if tp == 1:
            state = "full"
            return
        if state == "partial":
            # the partial sums of a row-parallel GEMM right before: its output can be
            # reduce-scattered chunk by chunk, and its backward's gathered gradient fed in
            prev = fwd[-1] if fwd and fwd[-1].kind == "gpu" else None
            role = prev.ub if prev is not None and prev.op_class == "gemm" else ""
            fwd.append(_comm(f"{name}.tp_g", "reduce_scatter" if sp else "all_reduce", gk,
                             out_prev * eb, "fwd", "rs_prev" if sp and role else "", role))
            if sp:  # an FP8 GEMM's output gradient is quantized before it is gathered
                grad_wire = WIRE_BYTES.get(prev_dtype, float(eb))
                bwd_inserts.append((i, _comm(f"{name}.tp_g", "all_gather", gk, out_prev * grad_wire,
                                             "bwd", "ag_next" if role else "", role)))
        elif state == "sharded":
            fwd.append(_comm(f"{name}.tp_gather", "all_gather", gk, out_prev * out_wire, "fwd"))
        state = "full"

    for i, op in enumerate(fwd_ops):
        fwd_index.setdefault(op.name, i)
        if op.when and evaluate(op.when, env_tp) <= 0:  # not on this layout
            continue
        style = _plan_style(op, par)
        env = env_rep
        tp, sp, gk, env_x = group()
        if op.kind == "comm":
            if op.name.endswith(AMAX_SUFFIX):  # current scaling's amax: with SP only
                if tp > 1 and sp:
                    fwd.append(_comm(op.name, op.collective, gk, evaluate(op.msg_bytes, env_x), "fwd"))
                continue
            if op.group_kind == "tp":
                if tp > 1 and state == "sharded":
                    fwd.append(_comm(op.name, op.collective, gk, evaluate(op.msg_bytes, env_x), "fwd"))
            else:
                if op.group_kind != "cp":  # a Mamba mixer's CP exchange keeps the TP split
                    to_full(i, op.name)
                size = {"ep": par.ep, "cp": par.cp, "dp": par.dp}.get(op.group_kind, 1)
                if size > 1:
                    fwd.append(_comm(op.name, op.collective, op.group_kind, evaluate(op.msg_bytes, env_tp), "fwd",
                                     algorithm=dispatch_algorithm(op, model, par)))
                if (op.group_kind, op.collective) == ("ep", "all_to_all"):  # dispatch in, combine out
                    in_experts = not in_experts
            out_prev, out_wire = evaluate(op.out, env_tp), float(eb)
            continue
        role = _ub_role(op, style)
        if style == "colwise":
            if state != "full":
                to_full(i, op.name)
            if tp > 1:
                if sp:  # the input as it was cast (FP8: gathered quantized, as TE does)
                    fwd.append(_comm(f"{op.name}.tp_f", "all_gather", gk, out_prev * out_wire, "fwd",
                                     "ag_next" if role else "", role))
                    if regather:  # Megatron keeps the sharded input and gathers it again
                        bwd_inserts.append((i + 1, _comm(f"{op.name}.tp_regather", "all_gather", gk,
                                                         out_prev * out_wire, "bwd", "bulk_dgrad",
                                                         role)))
                bwd_inserts.append((i, _comm(f"{op.name}.tp_f", "reduce_scatter" if sp else "all_reduce",
                                             gk, out_prev * eb, "bwd", "bulk_wgrad", role)))
            env = env_x
            state = "sharded"
        elif style == "rowwise":
            if state == "partial":
                to_full(i, op.name)
            if state == "full" and tp > 1:
                bwd_inserts.append((i, _comm(f"{op.name}.tp_slice", "all_gather", gk, out_prev * eb,
                                             "bwd")))
            env = env_x
            state = "partial"
        elif style == "vocab":
            env = env_tp
            state = "partial"
        elif style == "replicate":
            to_full(i, op.name)
        elif op.shard == "feature":
            env = env_x if state == "sharded" else env_rep
        else:
            to_full(i, op.name)  # sequence ops: tps (bound in env_rep) is the SP split
        env_of[op.name] = env
        p = evaluate(op.params, env)
        params += p
        tensors += evaluate(op.tensors, env)
        if is_expert_op(op):
            expert_params += p
        model_flops += op_numbers(op, env_full, env_full, par.dtype)[0]
        fwd.append(_compute(op, "fwd", env, env_full, par, op_time, role, p))
        out_prev = evaluate(op.out, env_x)
        out_wire = WIRE_BYTES.get(op.out_dtype, float(eb))
        prev_dtype = op.dtype
    if end_full:
        to_full(len(fwd_ops), "end")

    # backward: template order, with the mirrored TP communication
    bwd: list[ROp] = []
    pending = sorted(bwd_inserts, key=lambda x: -x[0])
    for op in bwd_ops:
        ref = op.fwd or op.name
        idx = fwd_index.get(ref, len(fwd_ops))
        while pending and idx < pending[0][0]:
            bwd.append(pending.pop(0)[1])
        if op.kind == "comm":
            size = {"ep": par.ep, "cp": par.cp, "dp": par.dp, "tp": par.tp}.get(op.group_kind, 1)
            if op.name.endswith(AMAX_SUFFIX) and not par.sp:
                size = 1
            if size > 1:
                bwd.append(_comm(op.name, op.collective, op.group_kind, evaluate(op.msg_bytes, env_tp), "bwd",
                                 algorithm=dispatch_algorithm(op, model, par)))
            continue
        if op.when and evaluate(op.when, env_tp) <= 0:
            continue
        env = env_of.get(ref, env_rep)
        bwd.append(_compute(op, "bwd", env, env_full, par, op_time,
                            _ub_role(op, _plan_style(op, par)), 0.0))
    bwd.extend(c for _, c in pending)
    return Section(tuple(fwd), tuple(bwd), params, expert_params, model_flops, tensors)


def _compute(op: TemplateOp, phase: str, env: Mapping[str, float], env_full: Mapping[str, float],
             par: ParallelSpec, op_time: OpTimeFn, role: str, params: float) -> ROp:
    """The resolved compute op: an FP8 GEMM's operands are one byte (``eb`` 1), an NVFP4 one's
    half a byte and its scales; the duration of the kernel's own work (:func:`_timed`)."""
    if op.dtype in _LOW_EB:
        env = {**env, "eb": _LOW_EB[op.dtype]}
    flops, nbytes, units = op_numbers_units(op, env, env_full, par.dtype)
    timed, run_flops = _timed(op, env, flops)
    dur = op_time(op.op_class, run_flops, nbytes, timed, units)
    slow: tuple[tuple[int, float], ...] = ()
    if role and par.tp_comm_overlap and par.tp > 1 and op.op_class == "gemm":
        slow = tuple((n, chunk_slowdown(op_time, timed, run_flops, nbytes, units, dur, n))
                     for n in sorted({par.tp, PIPE_SPLITS, *pipe_splits(par.tp_comm_overlap_cfg)}))
    share = 0.5
    if role and phase == "bwd" and op.op_class == "gemm" and dur > 0 and shape_parts(timed.shape):
        dgrad_shape, _ = gradient_shapes(shape_parts(timed.shape))  # the data gradient alone
        dgrad = timed.replace(phase="fwd", shape=",".join(dgrad_shape))
        share = min(max(op_time(op.op_class, run_flops / 2, nbytes / 2, dgrad, units) / dur, 0.0), 1.0)
    reduce = 0
    if (role in ("proj", "fc2") and phase == "fwd" and par.tp_comm_overlap and par.sp
            and par.tp > 1 and op.op_class == "gemm"):
        reduce = ub_reduce_ns(op, evaluate(op.out, env), par.tp, op_time)
    return ROp(op.name, "gpu", op.op_class, phase, flops, nbytes, dur, recompute=op.recompute,
               params=params, ub=role, chunk_slow=slow, dgrad_share=share, ub_reduce_ns=reduce)


def ub_reduce_ns(op: TemplateOp, out_elems: float, tp: int, op_time: OpTimeFn) -> int:
    """The reduction kernel that ends Transformer Engine's ring-exchange reduce-scatter of a
    row-parallel GEMM's ``out_elems`` partial sums (``CommOverlapP2PBase::split_overlap_rs``:
    each GEMM chunk's partial sums of one rank's tokens go to that rank, then ``reduce_bf16``
    on the main stream adds the ``tp`` chunks into the rank's ``out_elems / tp`` outputs). The
    reduce-scatter's buffers are BF16 whatever the GEMM's precision (``fp8_buf`` is set for
    the all-gather overlaps only, ``transformer_engine/pytorch/module/base.py``): it reads
    ``tp`` chunks and writes one, 2 bytes an element, a memory-bound kernel."""
    n = out_elems / tp
    kernel = op.replace(name=f"{op.name}#reduce", op_class="elementwise", shape="", dtype="bf16",
                        measured_ns=0.0, src_flops=0.0, src_bytes=0.0, src_units=0.0, calls="0",
                        quant="", leaves="", phase="fwd")
    return int(op_time("elementwise", n * (tp - 1), n * (tp + 1) * 2.0, kernel, 1.0))


def resolve_template(
    template: LayerTemplate, model: ModelSpec, par: ParallelSpec, op_time: OpTimeFn
) -> Resolved:
    """Evaluate ``template`` for ``model`` on layout ``par``; ``op_time`` gives compute ns."""

    def of_ops(fwd_ops: Sequence[TemplateOp], bwd_ops: Sequence[TemplateOp], end_full: bool,
               window: int = 0) -> Section:
        return _resolve_section(fwd_ops, bwd_ops, model, par, op_time, end_full=end_full,
                                window=window, regather=bool(template.meta.get("sp_regather")))

    def sec(section: str, parts: Sequence[str] | None, end_full: bool, window: int = 0) -> Section:
        return of_ops(template.select(section, "fwd", parts), template.select(section, "bwd", parts),
                      end_full, window)

    has_moe = model.is_moe and bool(template.select("block", "fwd", ("moe",)))
    window = max((model.window(i) for i in range(model.layers)), default=0)
    res = Resolved(
        prologue=sec("prologue", None, True),
        dense=sec("block", ("attn", "mlp"), True),
        moe=sec("block", ("attn", "moe"), True) if has_moe else None,
        epilogue=sec("epilogue", None, False),
        optimizer=(),
        env=symbol_env(model, par),
        dense_windowed=sec("block", ("attn", "mlp"), True, window) if window else None,
        moe_windowed=sec("block", ("attn", "moe"), True, window) if window and has_moe else None,
    )
    if model.is_hybrid:
        kinds = sorted(set(model.hybrid_pattern))
        res = dataclasses.replace(res, hybrid=tuple(
            (c, sec("block", (hybrid.PARTS[c],), True)) for c in kinds))
    if par.mtp_layers:
        pieces = mtp_ops(template, model)
        res = dataclasses.replace(res, mtp_in=of_ops(*pieces["in"], True),
                                  mtp_out=of_ops(*pieces["out"], False))
    opt = optimizer_ops(template, res, model)
    if template.plain is not None and any(par.bf16_layers):
        res = dataclasses.replace(res, bf16_layers=par.bf16_layers,
                                  plain=resolve_template(template.plain, model, par, op_time))
        # the once-per-step weight cast: the quantized layers' weights only
        share = repr(1.0 - sum(par.bf16_layers) / model.layers)
        opt = tuple(o.replace(flops=f"{share}*({o.flops})", bytes=f"{share}*({o.bytes})")
                    if o.name == "fp8.weight_cast" else o for o in opt)
    return dataclasses.replace(res, optimizer=opt)


def optimizer_ops(template: LayerTemplate, res: Resolved, model: ModelSpec) -> tuple[TemplateOp, ...]:
    """The template's optimizer ops for one model and layout: an op's ``calls`` expression
    (of ``tensors``, see :class:`TemplateOp`) becomes calls per local parameter
    (``<number>*params``), from the rank's parameter tensors and parameters before any
    pipeline or ZeRO split, so that the builder's local parameter count (a pipeline stage's,
    a ZeRO shard's) gives the stage's share of the calls."""
    sections = [res.prologue, res.epilogue] + [res.layer(model, i) for i in range(model.layers)]
    n_params = sum(s.params for s in sections)
    n_tensors = sum(s.tensors for s in sections)
    out = []
    for op in template.select("optimizer"):
        if op.calls not in ("", "0"):
            per_param = (evaluate(op.calls, {**res.env, "tensors": n_tensors}) / n_params
                         if n_params > 0 and n_tensors > 0 else 0.0)  # no tensor counts: no split
            op = op.replace(calls=f"{per_param!r}*params" if per_param > 0 else "0")
        out.append(op)
    return tuple(out)


def model_flops_per_iteration(resolved: Resolved, model: ModelSpec, par: ParallelSpec) -> float:
    """Model FLOPs of one iteration (forward + backward = 3x forward, no recomputation).

    Summed over the whole model (all layers, embeddings, head, multi-token-prediction
    modules) and the global batch; the forward FLOPs come from the template evaluated without any parallel split.
    """
    per_mb = resolved.prologue.model_flops_fwd + resolved.epilogue.model_flops_fwd
    for layer in range(model.layers + par.mtp_layers):
        per_mb += resolved.layer(model, layer).model_flops_fwd
    for sec in (resolved.mtp_in, resolved.mtp_out):
        if sec is not None:
            per_mb += par.mtp_layers * sec.model_flops_fwd
    micro_batches = par.global_batch / par.micro_batch
    return 3.0 * per_mb * micro_batches
