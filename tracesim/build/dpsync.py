"""Data-parallel synchronisation of a stage program: gradient buckets and the distributed
optimizer's parameter all-gather.

* :func:`grad_buckets`: the gradients of a model chunk, reduced in buckets (all-reduce; a
  reduce-scatter with ZeRO >= 1, Megatron's distributed optimizer) on the ``comm:dp`` lane,
  each bucket launched when the last micro-batch's backward has produced it
  (``dp_overlap``, Megatron's ``overlap_grad_reduce``) or after the whole backward;
* :func:`param_gathers`: with ``overlap_param_gather`` (ZeRO 1-2) the updated parameters are
  all-gathered per bucket at the start of the next iteration, on the ``comm:dp_ag`` lane, in
  the order the forward needs them; the first forward pass of each model chunk waits at
  each layer for that layer's bucket only (the prefetch of Megatron's forward pre-hooks,
  ``align_param_gather``: all buckets are launched at the start);
* :func:`interference`: the compute time a chunk's overlapped buckets take from the pass
  they overlap (:func:`tracesim.build.overlap.overlap_extra_ns`);
* :func:`optimizer_step`: the optimizer over the stage's local parameters once they are
  synchronised;
* :func:`nan_checked` / :func:`nan_check_after`: with ``grad_nan_check`` (Megatron-Core's
  ``ddp_config.check_for_nan_in_grad``), each bucket's NaN check before its reduction, run
  by ``start_grad_sync`` (``megatron/core/distributed/param_and_grad_buffer.py``): in the
  last micro-batch's backward hook when the reduction overlaps the backward, in
  ``finish_grad_sync`` after it otherwise. It takes ``grad_data.norm(p=2)`` of the whole
  bucket on the compute stream (memory-bound, the device's ``reduction`` class) and tests
  it on the host, ``grad_nan_syncs`` device-to-host syncs per bucket by Megatron-Core
  version: 0.12 on, ``check_grads`` passes the norm to the rerun state machine's
  ``validate_result`` twice, with ``torch.isnan`` and ``torch.isinf``, each read on the host
  (``if result_rejected``, in every rerun mode): 2; up to 0.9, ``assert not
  norm.isnan()``: 1 (0.9 ORs the bucket group's norms first; a group is one bucket but
  with FP8 parameters); 0.10 and 0.11 return from ``validate_result`` before the test when
  the rerun state machine is disabled, its default: 0, the norm alone. After each sync the
  compute stream idles for the sync (``sync_us``) and the launches the host issues before
  the GPU has work again: the next test after a sync, the reduction and the next backward
  kernel after the last (``syncs`` syncs and ``syncs + 1`` launches at the host model's
  backward launch time and CPU speed; without a host model the kernels alone). The check
  delays the bucket's reduction and everything after it in the backward; in the pipeline's
  cooldown the stages' checks add up along the last micro-batch's path. A last backward that
  ``--moe-a2a-overlap`` merges with a forward keeps neither this nor :func:`interference`
  (the merge takes the chunk's plain backward).

A bucket holds ``bucket_size_params()`` parameters (Megatron-Core's ``max(40M, 1M x dp)``,
or ``bucket_params``); dense parameters reduce over DP x CP (``dpcp``), expert parameters
over the expert-data-parallel group (``edp``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from tracesim.build.overlap import Overlaps, overlap_extra_ns, stretched
from tracesim.build.units import Program, Unit
from tracesim.template.layer import TemplateOp, evaluate
from tracesim.template.optimizer import WHOLE_BUFFER

if TYPE_CHECKING:
    from tracesim.build.builder import _StageBuilder

#: the NaN check's task name (without overlapped reduction)
NAN_CHECK = "dp.grad_nan_check"


def _segments(sb: _StageBuilder, unit: Unit, g: int, forward: bool) -> list[tuple[int, float, float]]:
    """(task of ``unit`` that starts (forward) / finishes (backward) the segment, dense
    params, expert params) of chunk ``g``'s prologue, layers and epilogue, in pass order."""
    res = sb.res
    rows: list[tuple[int, float, float]] = []
    if forward:
        if g == 0:
            rows.append((unit.layer_start.get(-1, -1), res.prologue.params, 0.0))
        for layer in sb._layers(g):
            sec = res.layer(sb.model, layer)
            rows.append((unit.layer_start.get(layer, -1), sec.params - sec.expert_params,
                         sec.expert_params))
        for key in sb._mtp(g):
            rows.append((unit.layer_start.get(key, -1), *_mtp_params(sb, key)))
        if g == sb.n_chunks - 1:
            rows.append((unit.layer_start.get(-2, -1), res.epilogue.params, 0.0))
        return rows
    if g == sb.n_chunks - 1:
        rows.append((unit.marks["epilogue"], res.epilogue.params, 0.0))
    for key in reversed(sb._mtp(g)):
        rows.append((unit.layer_end[key], *_mtp_params(sb, key)))
    for layer in reversed(sb._layers(g)):
        sec = res.layer(sb.model, layer)
        rows.append((unit.layer_end[layer], sec.params - sec.expert_params, sec.expert_params))
    if g == 0:
        rows.append((unit.tail, res.prologue.params, 0.0))
    return rows


def _mtp_params(sb: _StageBuilder, key: int) -> tuple[float, float]:
    """(dense params, expert params) of multi-token-prediction module ``key``; with
    ``mtp_repeated`` the depths run the first module's weights, which own them all (their
    gradients are whole after its backward, the last of the modules')."""
    if sb.par.mtp_repeated and key != sb.model.layers:
        return 0.0, 0.0
    secs = sb._mtp_sections(key)
    expert = secs[1].expert_params
    return sum(sec.params for sec in secs) - expert, expert


def _groups(sb: _StageBuilder) -> list[tuple[str, int, int]]:
    """(group kind, params column, group size) of the data-parallel groups with > 1 rank."""
    edp = sb.par.edp
    return [(gk, col, size) for gk, col, size in (("dpcp", 1, sb.dpcp), ("edp", 2, edp)) if size > 1]


def _bucket_ends(sb: _StageBuilder, unit: Unit, g: int, bucket: int) -> list[tuple[str, int, float, int]]:
    """(group kind, task of ``unit`` after which the bucket's gradients are whole, its
    parameters, its number) of chunk ``g``'s gradient buckets, per group in backward order."""
    par = sb.par
    order = _segments(sb, unit, g, forward=False)
    out: list[tuple[str, int, float, int]] = []
    for gk, col, _ in _groups(sb):
        acc = 0.0
        n = 0
        for j, row in enumerate(order):
            acc += row[col]
            last = j == len(order) - 1
            cap = par.first_bucket_params if n == 0 and g == sb.n_chunks - 1 and par.first_bucket_params else bucket
            if acc > 0 and (acc >= cap or last):
                out.append((gk, row[0], acc, n))
                acc = 0.0
                n += 1
    return out


def _grad_collective(sb: _StageBuilder) -> str:
    """The gradient buckets' collective: a reduce-scatter with ZeRO >= 1, else an all-reduce."""
    return "reduce_scatter" if sb.par.zero >= 1 else "all_reduce"


def grad_buckets(sb: _StageBuilder, prog: Program, unit: Unit, off: int, g: int, bucket: int,
                 after: int | None) -> list[int]:
    """Gradient buckets of chunk ``g`` after its last backward (module docstring); ``after``:
    a task every bucket waits for (the end of the backward), None: each bucket waits for its
    layers only."""
    coll = _grad_collective(sb)
    out: list[int] = []
    for gk, end, params, n in _bucket_ends(sb, unit, g, bucket):
        t = prog.extra_task(lane="comm:dp", kind="coll", name=f"dp.{coll}", phase="bwd",
                            collective=coll, gkind=gk, msg_bytes=int(params * sb.grad_bytes),
                            key=f"g{g}|{gk}|{n}")
        prog.edge(off + end if after is None else after, t)
        out.append(t)
    return out


def last_backward(sb: _StageBuilder, unit: Unit, g: int, bucket: int) -> Unit:
    """Chunk ``g``'s last backward ``unit`` when its buckets are reduced during it: its
    compute from the first bucket's end on slowed by the reductions beside it
    (:func:`interference`), and each bucket's NaN check (:func:`nan_checked`)."""
    coll = _grad_collective(sb)
    ns, start, moved = bucket_comm_ns(sb, g, coll, sb.grad_bytes, False, unit)
    unit = stretched(unit, start + 1, interference(sb, unit, ns, start + 1, coll, moved))
    return nan_checked(sb, unit, g, bucket)


def nan_check_ns(sb: _StageBuilder, params: float) -> float:
    """GPU time (ns) of the NaN check of one gradient bucket of ``params`` parameters
    (module docstring): the norm over its gradient buffer, the one-element tests, and, with
    a host model, what the compute stream idles across their host syncs."""
    nbytes = params * sb.grad_bytes
    ns = float(sb.op_time("reduction", 0.0, nbytes, TemplateOp(NAN_CHECK, "block", "bwd", "reduction",
                                                                flops="0", bytes=str(nbytes)), 1.0))
    syncs = sb.par.grad_nan_syncs
    test = TemplateOp(NAN_CHECK, "block", "bwd", "elementwise", flops="0", bytes="8")
    ns += syncs * sb.op_time("elementwise", 0.0, 8.0, test, 1.0)
    host = sb.host
    if host is not None and syncs:
        ns += syncs * host.sync_us * 1e3 + (syncs + 1) * host.launch_us_bwd / host.cpu_speed * 1e3
    return ns


def nan_checked(sb: _StageBuilder, unit: Unit, g: int, bucket: int) -> Unit:
    """Chunk ``g``'s last backward ``unit`` with each gradient bucket's NaN check
    (``grad_nan_check``): the last compute task up to the bucket's end lasts the check's
    :func:`nan_check_ns` longer, which delays the bucket's reduction and the backward after it."""
    a = unit.arrays
    if not sb.par.grad_nan_check or a is None:
        return unit
    dur = a["dur_ns"].copy()
    comp = np.flatnonzero(a["lane"] == "compute")
    for _, end, params, _ in _bucket_ends(sb, unit, g, bucket):
        before = comp[comp <= end]
        if len(before):
            dur[before[-1]] += int(round(nan_check_ns(sb, params)))
    return replace(unit, arrays={**a, "dur_ns": dur})


def nan_check_after(sb: _StageBuilder, prog: Program, chunks: Sequence[tuple[Unit, int, int]],
                    bucket: int, tail: int) -> int:
    """Without overlapped reduction, the NaN checks of every bucket of ``chunks`` ((unit,
    offset, chunk) of each chunk's last backward) as one compute task after task ``tail``,
    the end of the backward; returns the task the reductions wait for (``tail`` without
    ``grad_nan_check``)."""
    if not sb.par.grad_nan_check:
        return tail
    ns = sum(nan_check_ns(sb, params) for unit, _, g in chunks for _, _, params, _ in _bucket_ends(sb, unit, g, bucket))
    t = prog.extra_task(lane="compute", kind="gpu", name=NAN_CHECK, op_class="reduction", phase="bwd",
                        dur_ns=int(round(ns)))
    prog.edge(tail, t)
    return t


def param_gathers(sb: _StageBuilder, prog: Program, unit: Unit, off: int, g: int,
                  bucket: int) -> list[int]:
    """The parameter all-gathers of chunk ``g`` in the next iteration's first forward of it
    (unit copy at ``off``), each segment's first compute task waiting for its bucket's."""
    order = _segments(sb, unit, g, forward=True)
    out: list[int] = []
    for gk, col, _ in _groups(sb):
        acc = 0.0
        waiting: list[int] = []
        n = 0
        for j, row in enumerate(order):
            acc += row[col]
            if row[col] > 0 and row[0] >= 0:
                waiting.append(row[0])
            if acc > 0 and (acc >= bucket or j == len(order) - 1):
                t = prog.extra_task(lane="comm:dp_ag", kind="coll", name="dp.param_all_gather",
                                    phase="fwd", collective="all_gather", gkind=gk,
                                    msg_bytes=int(acc * sb.param_bytes), key=f"pag{g}|{gk}|{n}")
                for w in waiting:
                    prog.edge(t, off + w)
                out.append(t)
                acc, waiting, n = 0.0, [], n + 1
    return out


def bucket_comm_ns(sb: _StageBuilder, g: int, collective: str, nbytes_per_param: float,
                   forward: bool, unit: Unit) -> tuple[float, int, list[tuple[float, int]]]:
    """(estimated time of chunk ``g``'s buckets of ``collective``, index of the unit task
    after which the first one starts, (bytes, group size) per data-parallel group), 0 time
    when there is no estimate."""
    order = _segments(sb, unit, g, forward)
    total = 0.0
    moved: list[tuple[float, int]] = []
    for gk, col, size in _groups(sb):
        params = sum(r[col] for r in order)
        if params > 0:
            est = sb.ov.est(collective, gk, int(params * nbytes_per_param))
            total += est or 0.0
            moved.append((params * nbytes_per_param, size))
    first = 0 if forward else min((r[0] for r in order if r[0] >= 0), default=0)
    return total, first, moved


def interference(sb: _StageBuilder, unit: Unit, comm_ns: float, start: int, collective: str = "",
                 moved: list[tuple[float, int]] | None = None) -> float:
    """Compute time lost by ``unit`` to ``comm_ns`` of NCCL collectives that overlap its
    compute from task ``start`` on: their SMs (:func:`tracesim.build.overlap.overlap_extra_ns`)
    and, for ``moved`` (bytes, group size) of ``collective``, the memory time of their bytes
    (:meth:`tracesim.build.overlap.Overlaps.contention_ns`)."""
    from tracesim.build.overlap import compute_ns

    return lost_ns(sb.ov, comm_ns, compute_ns(unit, start), collective, moved or ())


def lost_ns(ov: Overlaps, comm_ns: float, busy_ns: float, collective: str,
            moved: Sequence[tuple[float, int]]) -> float:
    """Compute time ``busy_ns`` of compute loses to ``comm_ns`` of data-parallel NCCL
    collectives beside it: their SMs, and the memory time of ``moved`` (bytes, group size) of
    ``collective``; at most ``busy_ns``."""
    extra = overlap_extra_ns(ov, comm_ns, busy_ns, ov.nccl_sms("dpcp"))
    if comm_ns > 0:
        extra += sum(ov.contention_ns(collective, nbytes, busy_ns, size) for nbytes, size in moved)
    return min(extra, busy_ns)


def stage_params(sb: _StageBuilder, stage: int) -> tuple[float, float]:
    """Local parameters of pipeline ``stage`` (its chunks' layers, MTP modules, embedding and
    head) and how many of them are routed-expert weights."""
    params = expert = 0.0
    for c in range(sb.par.chunks):
        g = c * sb.par.pp + stage
        for layer in sb._layers(g):
            sec = sb.res.layer(sb.model, layer)
            params += sec.params
            expert += sec.expert_params
        for key in sb._mtp(g):
            dense, routed = _mtp_params(sb, key)
            params += dense + routed
            expert += routed
        if g == 0:
            params += sb.res.prologue.params
        if g == sb.n_chunks - 1:
            params += sb.res.epilogue.params
            # MTP looks up the shifted inputs' embeddings: the last stage holds a copy of
            # the word embeddings (Megatron-Core), unless tied ones put it there already
            if sb._mtp(g) and stage != 0 and not sb.model.tied_embeddings:
                params += sb.res.prologue.params
    return params, expert


def optimizer_step(sb: _StageBuilder, prog: Program, grad_sync: list[int], emb_params: float,
                   gather_early: bool) -> tuple[float, float]:
    """The optimizer step over the stage's local (possibly sharded) parameters, after the
    gradient synchronisation tasks ``grad_sync`` (and, sharded, the last reduce-scatter), and
    ZeRO 1-2's parameter all-gather after it unless ``gather_early``; returns the stage's
    (parameters, expert parameters)."""
    par, model, stage, pp = sb.par, sb.model, sb.stage, sb.par.pp
    params, expert = stage_params(sb, stage)
    if emb_params and model.tied_embeddings and pp > 1 and stage == pp - 1:
        params += emb_params
    local = params - expert
    edp = par.edp
    if par.zero >= 1 or sb.shard:
        local = (params - expert) / sb.dpcp + expert / edp
    # the FP8 weight cast runs over the whole (gathered) local weights, the memset over the
    # whole gradient buffer (FSDP's sharded one: its shard), the rest over the shard
    whole = ("fp8.weight_cast",) + (() if sb.shard else WHOLE_BUFFER)
    envs = [(op, {**sb.res.env, "params": params if op.name in whole else local})
            for op in sb.res.optimizer]
    opt_flops = sum(evaluate(op.flops, env) for op, env in envs)
    opt_bytes = sum(evaluate(op.bytes, env) for op, env in envs)
    opt_ns = sum(sb.op_time(op.op_class, evaluate(op.flops, env), evaluate(op.bytes, env), op, 1.0)
                 for op, env in envs)
    opt = prog.extra_task(lane="compute", kind="gpu", name="optimizer.step", op_class="optimizer", phase="opt",
                          flops=opt_flops, nbytes=opt_bytes, dur_ns=opt_ns)
    for gsync in grad_sync:
        prog.edge(gsync, opt)
    if sb.shard:
        # the last ZeRO-3 reduce-scatter on the dp lane precedes the optimizer
        rs_idx = [i for (u, _), off in zip(prog.units, prog.offsets, strict=True)
                  for i in (off + np.flatnonzero(u.arrays["lane"] == "comm:dp")).tolist()]  # type: ignore[index]
        if rs_idx:
            prog.edge(rs_idx[-1], opt)
    if 1 <= par.zero < 3 and not par.fsdp and sb.dpcp > 1 and not gather_early:
        for gk, n in (("dpcp", params - expert), ("edp", expert)):
            if n and (gk == "dpcp" or edp > 1):
                ag = prog.extra_task(lane="comm:dp", kind="coll", name="zero.all_gather", phase="opt",
                                     collective="all_gather", gkind=gk, msg_bytes=int(n * sb.param_bytes),
                                     key=f"zag|{gk}")
                prog.edge(opt, ag)
    return params, expert
