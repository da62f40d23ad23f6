"""The builder: a model spec, a parallel layout and a layer template -> per-rank task graphs.

:func:`build_graph` resolves the template (:mod:`tracesim.template.resolve`), builds one
:class:`~tracesim.build.units.Unit` per (pipeline stage, model chunk, pass), lays the
units out in the order of the pipeline schedule (:mod:`tracesim.build.schedules`) with
the point-to-point transfers between stages, the data-parallel gradient synchronisation and
the optimizer step, and instantiates the program of each stage for its ranks with numpy
column operations.

Lanes per rank (all ``gpu``): ``compute``; ``comm:tp``, ``comm:ep``, ``comm:cp`` /
``comm:cp_recv`` (ring attention), ``comm:dp`` (gradient all-reduce / reduce-scatter,
ZeRO all-gathers after the optimizer), ``comm:dp_ag`` (ZeRO-3 / FSDP parameter
all-gathers), ``comm:pp_fs`` / ``comm:pp_fr`` (activations: send to the next stage,
receive from the previous), ``comm:pp_bs`` / ``comm:pp_br`` (gradients), ``comm:pp_ag``
(Megatron's scatter/gather of pipeline activations over the TP group). Separate lanes play
the role of NCCL's separate streams, so gradient reduction overlaps the backward pass.

``representatives=True`` builds one rank per pipeline stage (TP, CP and DP index 0): all
other ranks of a stage run the same program, so their collectives are stood in for by the
representative alone (a collective with one present member; the comm model is given the
full group by :class:`tracesim.engine.symmetry.SymmetricComm`) and ring-attention
transfers are matched with the rank's own send/receive pair.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracesim.build import a2a_overlap, dpsync, fp8_delayed, shared_overlap
from tracesim.build.host import host_bound, host_model, is_sync
from tracesim.build.instantiate import REPORT_KIND, StagePrograms, instantiate
from tracesim.build.offload import Offload, add_waits
from tracesim.build.overlap import (
    CommEstimateFn,
    emit,
    overlaps_for,
    stretch_cols,
    stretched,
)
from tracesim.build.recompute import op_shares, rerun
from tracesim.build.schedules import iteration_items
from tracesim.build.units import Program, Unit
from tracesim.errors import InputError
from tracesim.graph.taskgraph import TaskGraph
from tracesim.specs.model import DTYPE_BYTES, ModelSpec
from tracesim.specs.parallel import ParallelSpec, stage_split, validate_layout
from tracesim.specs.placement import Placement
from tracesim.template.layer import LayerTemplate
from tracesim.template.resolve import OpTimeFn, Resolved, resolve_template

CommTimeFn = Callable[[str, str, int, int], int]  # (collective, gkind, ranks, bytes) -> ns
_EMPTY = Unit().freeze()


@dataclass(frozen=True)
class BuildResult:
    """The task graph plus what the report needs about it."""

    graph: TaskGraph
    resolved: Resolved
    placement: Placement
    stage_params: tuple[float, ...]  # local parameters of one rank per stage
    stage_expert_params: tuple[float, ...]
    info: dict[str, Any] = field(default_factory=dict)
    programs: StagePrograms | None = None  # what the graph's ranks were given


def _free(collective: str, gkind: str, ranks: int, msg_bytes: int) -> int:  # no network model
    return 0


class _StageBuilder:
    """Builds the program (task columns + local edges) of one pipeline stage."""

    def __init__(self, model: ModelSpec, par: ParallelSpec, res: Resolved, op_time: OpTimeFn,
                 template: LayerTemplate, stage: int, merge: bool = False, ov: Any = None,
                 offload: Offload | None = None, cpu_speed: float = 1.0):
        self.model, self.par, self.res, self.stage = model, par, res, stage
        self.offload = offload
        self.merge = merge
        self.op_time, self.template = op_time, template
        self.ov = ov if ov is not None else overlaps_for(par)
        self.split = stage_split(model, par)
        self.starts = np.concatenate([[0], np.cumsum(self.split)]).astype(int)
        self.n_chunks = len(self.split)
        self.eb = DTYPE_BYTES[par.act_dtype]
        self.grad_bytes = par.grad_bytes
        # FP8 parameters all-gathered as FP8 (one byte) with fp8_param_gather
        self.param_bytes = 1 if par.dtype == "fp8" and par.fp8_param_gather else max(self.eb, 2)
        self.dpcp = par.dp * par.cp
        self.shard = par.shard_params and self.dpcp > 1
        kvh = model.kv_heads * model.head_dim
        self.ring_msg = int(2 * par.micro_batch * (par.seq_len / par.cp) * kvh / par.tp * self.eb)
        if model.is_mla:  # MLA's keys and values after the up projection, every head
            kv_width = model.heads * (model.qk_head_dim + model.v_dim)
            self.ring_msg = int(par.micro_batch * (par.seq_len / par.cp) * kv_width / par.tp * self.eb)
        self.host = host_model(model, par, template.meta, cpu_speed) if par.host_launch else None
        self.host_wait_ns: dict[str, float] = {"fwd": 0.0, "bwd": 0.0}  # per micro-batch, all chunks
        self.synced = False  # a forward unit waits for the GPU: the backward starts in lock step
        self.shares = op_shares(model) if par.recompute == "op" else {}
        self.offload_wait_ns: dict[str, float] = {"fwd": 0.0, "bwd": 0.0}  # the same, activation copies

    def _host(self, u: Unit, phase: str) -> None:
        """The GPU's waits for the host launching the unit's kernels (:mod:`host`); a backward
        starts in lock step with the GPU when a forward of the stage waited for it."""
        if self.host is None:
            return
        c = u.cols
        chain = [i for i in range(len(u)) if (c["kind"][i] == "gpu" and c["lane"][i] == "compute")
                 or (c["kind"][i] == "coll" and c["lane"][i] in ("comm:tp", "comm:ep"))]
        self.synced |= phase == "fwd" and any(is_sync(str(c["name"][i]), "fwd") for i in chain)
        self.host_wait_ns[phase] += host_bound(c, chain, self.host, phase == "bwd" and self.synced)

    def _offload(self, u: Unit, phase: str, first: dict[int, int]) -> None:
        if self.offload is not None:
            self.offload_wait_ns[phase] += add_waits(self.offload, u, phase, first)

    def _layers(self, g: int) -> range:
        return range(int(self.starts[g]), int(self.starts[g + 1]))

    def _mtp(self, g: int) -> range:
        """The multi-token-prediction modules chunk ``g`` runs after its layers (the last
        chunk), keyed as layers past the model's last (:mod:`tracesim.template.mtp`)."""
        n = self.par.mtp_layers if g == self.n_chunks - 1 and self.res.mtp_in is not None else 0
        return range(self.model.layers, self.model.layers + n)

    def _mtp_sections(self, key: int) -> list[Any]:
        """The sections of MTP module ``key`` in forward order: in, its layer, out."""
        return [self.res.mtp_in, self.res.layer(self.model, key), self.res.mtp_out]

    def _emit(self, u: Unit, ops, layer: int, phase: str, prefix: str = "") -> None:
        """Append resolved ops, turning the attention-core run into a ring when cp > 1 and
        the other ops into the TP overlaps the layout switches on (:mod:`overlap`)."""
        cp = self.par.cp
        i = 0
        ops = list(ops)
        plain: list = []
        while i < len(ops):
            r = ops[i]
            if cp > 1 and r.recompute and r.kind == "gpu":
                emit(u, plain, self.ov, layer=layer, phase=phase, prefix=prefix)
                plain = []
                j = i
                while j < len(ops) and ops[j].recompute and ops[j].kind == "gpu":
                    j += 1
                msg = self.ring_msg * (2 if phase == "bwd" and not prefix else 1)
                # the block sent and the one received pass through memory beside the chunk
                hold = self.ov.contention_ns("send", 2 * msg, sum(r.dur_ns for r in ops[i:j]) / cp, group=2)
                u.ring(ops[i:j], cp, msg, layer=layer, phase=phase, prefix=prefix,
                       overlap=self.par.cp_overlap, contention_ns=hold)
                i = j
                continue
            plain.append(r)
            i += 1
        emit(u, plain, self.ov, layer=layer, phase=phase, prefix=prefix)

    def _gather(self, u: Unit, params: float, layer: int, phase: str, prev_first: int) -> int:
        return u.async_comm(lane="comm:dp_ag", name="zero3.all_gather", collective="all_gather",
                            gkind="dpcp", msg_bytes=int(params * self.param_bytes), layer=layer,
                            phase=phase, after=prev_first)

    @staticmethod
    def _first_compute(u: Unit, start: int, default: int = -1) -> int:
        """The unit's first compute task from index ``start`` on (``default``: none)."""
        return next((k for k in range(start, len(u)) if u.cols["lane"][k] == "compute"), default)

    def _link_first(self, u: Unit, start: int, ag: int) -> int:
        first = self._first_compute(u, start)
        u.edge(ag, first)
        return first

    def forward_unit(self, g: int, gather: bool = True) -> Unit:
        """Model chunk ``g``'s forward pass; ``gather``: with sharded parameters, each
        segment all-gathers its parameters first (FSDP)."""
        u = Unit()
        res = self.res
        prev_first = -1
        segs: list[tuple[int, Any]] = []
        if g == 0:
            segs.append((-1, res.prologue))
        segs += [(layer, res.layer(self.model, layer)) for layer in self._layers(g)]
        for key in self._mtp(g):
            segs += [(key, sec) for sec in self._mtp_sections(key)]
        if g == self.n_chunks - 1:
            segs.append((-1, res.epilogue))
        for k, (layer, sec) in enumerate(segs):
            start = len(u)
            ag = self._gather(u, sec.params, layer, "fwd", prev_first) if gather and self.shard and sec.params else -1
            self._emit(u, sec.fwd, layer, "fwd")
            fp8_delayed.after(u, self, g, layer, "fwd")  # delayed FP8 scaling's amax reduction
            key = layer if layer >= 0 else (-1 if k == 0 and g == 0 else -2)
            first = self._first_compute(u, start)
            if first >= 0 and key not in u.layer_start:  # an MTP module: its first piece
                u.layer_start[key] = first
            prev_first = self._link_first(u, start, ag) if ag >= 0 else prev_first
            if ag >= 0:
                self._fsdp_interference(u, start, sec.params * self.param_bytes, "all_gather")
        u.close()
        self._offload(u, "fwd", {})
        self._host(u, "fwd")
        return (u.compacted() if self.merge else u).freeze()

    def _fsdp_interference(self, u: Unit, start: int, nbytes: float, collective: str) -> None:
        """ZeRO-3 / FSDP: the segment's compute loses the SMs of its collective and the memory
        time of its bytes."""
        est = self.ov.est(collective, "dpcp", int(nbytes))
        if est:
            busy = sum(u.cols["dur_ns"][i] for i in range(start, len(u)) if u.cols["lane"][i] == "compute")
            stretch_cols(u, start, dpsync.lost_ns(self.ov, est, busy, collective, [(nbytes, self.dpcp)]))

    def backward_unit(self, g: int, gather: bool = True, reduce: bool = True) -> Unit:
        """Model chunk ``g``'s backward pass; with sharded parameters each segment
        all-gathers its parameters first (``gather``) and reduce-scatters its gradients
        after (``reduce``)."""
        u = Unit()
        res = self.res
        segs: list[tuple[int, Any, bool]] = []
        if g == self.n_chunks - 1:
            segs.append((-1, res.epilogue, False))
        for key in reversed(self._mtp(g)):
            mtp_in, layer_sec, mtp_out = self._mtp_sections(key)
            segs += [(key, mtp_out, False), (key, layer_sec, True), (key, mtp_in, False)]
        segs += [(layer, res.layer(self.model, layer), True) for layer in reversed(self._layers(g))]
        if g == 0:
            segs.append((-1, res.prologue, False))
        prev_first = -1
        first_layer = int(self.starts[g])
        n_full = self.par.recompute_layers or len(self._layers(g)) + len(self._mtp(g))
        first: dict[int, int] = {}
        for layer, sec, is_layer in segs:
            start = len(u)
            name = ("layer" if is_layer else "epilogue" if sec is res.epilogue
                    else "mtp" if sec is res.mtp_in or sec is res.mtp_out else "prologue")
            ag = self._gather(u, sec.params, layer, "bwd", prev_first) if gather and self.shard and sec.params else -1
            if is_layer and self.par.recompute == "full" and layer - first_layer < n_full:
                self._emit(u, sec.fwd, layer, "bwd", prefix="recompute:")
                fp8_delayed.recomputed(u, self, layer)  # the checkpoint's own FP8 region
            bwd, cut = list(sec.bwd), len(sec.bwd)
            again = rerun(self.par, sec.fwd, self.shares) if is_layer else []
            if again and self.par.recompute == "selective":  # before the first recomputed op's backward
                names = {x.name for x in again}
                cut = next((k for k, r in enumerate(bwd) if r.name in names), cut)
            elif again:  # op-level: the block's forward reruns when its backward starts
                cut = 0
            self._emit(u, bwd[:cut], layer, "bwd")
            if cut < len(bwd):
                self._emit(u, again, layer, "bwd", prefix="recompute:")
                self._emit(u, bwd[cut:], layer, "bwd")
            fp8_delayed.after(u, self, g, layer, "bwd")
            u.marks[name] = u.tail
            if is_layer:
                first[layer] = self._first_compute(u, start, start)
            if ag >= 0:
                prev_first = self._link_first(u, start, ag)
            if self.shard and sec.params and reduce:
                u.async_comm(lane="comm:dp", name="zero3.reduce_scatter", collective="reduce_scatter",
                             gkind="dpcp", msg_bytes=int(sec.params * self.grad_bytes), layer=layer,
                             phase="bwd", after=u.tail)
            if self.shard and sec.params and (gather or reduce):
                self._fsdp_interference(u, start, sec.params * (self.param_bytes * gather
                                                                + self.grad_bytes * reduce), "all_gather")
        u.close()
        self._offload(u, "bwd", first)
        self._host(u, "bwd")
        return (u.compacted() if self.merge else u).freeze()


def _stage_program(sb: _StageBuilder, placement: Placement, comm_free: bool) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    model, par, stage = sb.model, sb.par, sb.stage
    pp, m, v = par.pp, par.num_micro, par.chunks
    n_chunks = sb.n_chunks
    overlap_a2a = par.moe_a2a_overlap and not a2a_overlap.why_not(par, model)
    items = iteration_items(par.schedule, pp, stage, m, v, par.pp_rounds)
    items, steady = a2a_overlap.reorder(items) if overlap_a2a else (items, [])
    # FSDP gathers (forward, and backward unless kept from the forward) and reduces at every
    # micro-batch; fsdp_keep_gathered: gathers at each chunk's first forward only,
    # fsdp_defer_sync: reduces at its last backward only
    keep, defer = sb.shard and par.fsdp_keep_gathered, sb.shard and par.fsdp_defer_sync
    bwd_gather = par.fsdp_reshard and not keep
    fwd_units = {c: sb.forward_unit(c * pp + stage) for c in range(v)}
    bwd_units = {c: sb.backward_unit(c * pp + stage, bwd_gather) for c in range(v)}
    variants: dict[tuple[str, int], Unit] = {}  # a chunk's pass without them

    def unit_of(i: int) -> Unit:
        it = items[i]
        if (it.kind == "F" and (not keep or i == first_f[it.chunk])
                or it.kind == "B" and (not defer or i == last_b[it.chunk])):
            return (fwd_units if it.kind == "F" else bwd_units)[it.chunk]
        if (it.kind, it.chunk) not in variants:  # the host waits are the chunk's, counted once
            kept = dict(sb.host_wait_ns), dict(sb.offload_wait_ns), sb.synced
            g = it.chunk * pp + stage
            variants[it.kind, it.chunk] = (sb.forward_unit(g, False) if it.kind == "F"
                                           else sb.backward_unit(g, bwd_gather, False))
            sb.host_wait_ns, sb.offload_wait_ns, sb.synced = kept
        return variants[it.kind, it.chunk]
    prog = Program()
    tp = par.tp
    act_bytes = par.micro_batch * (par.seq_len / par.cp) * model.hidden * sb.eb
    p2p_bytes = int(act_bytes / tp)
    last_b = {c: max(i for i, it in enumerate(items) if it.kind == "B" and it.chunk == c) for c in range(v)}
    first_f = {c: min(i for i, it in enumerate(items) if it.kind == "F" and it.chunk == c) for c in range(v)}
    merged_with = a2a_overlap.pairs(items, steady, {*last_b.values(), *first_f.values()})
    views: dict[int, tuple[Unit, int]] = {}  # a merged pair's backward item: its view, offset
    merges: dict = {}  # a2a_overlap.merge's cache
    slowdown = a2a_overlap.slowdown(sb.ov, par.moe_dispatcher)
    # the distributed optimizer's parameter all-gather in the first forward of each chunk
    gather_early = (par.overlap_param_gather and 1 <= par.zero < 3 and not sb.shard
                    and sb.dpcp > 1)
    reduce_early = par.dp_overlap and not sb.shard and sb.dpcp > 1
    grad_sync: list[int] = []
    bucket = par.bucket_size_params()
    deferred: list[tuple[Unit, int, int]] = []
    pending_send: int | None = None  # Megatron's p2p is blocking: the next pass waits for it
    for idx, it in enumerate(items):
        g = it.chunk * pp + stage
        tag = f"{it.kind}{it.chunk}.{it.mb}"
        if it.kind == "F":
            unit = unit_of(idx)
            recv_key, send_key, recv_lane, send_lane = f"f|{g}|{it.mb}", f"f|{g + 1}|{it.mb}", "comm:pp_fr", "comm:pp_fs"
            has_recv, has_send, rsel, ssel = g > 0, g < n_chunks - 1, "pp_prev", "pp_next"
        else:
            unit = unit_of(idx)
            recv_key, send_key, recv_lane, send_lane = f"b|{g}|{it.mb}", f"b|{g - 1}|{it.mb}", "comm:pp_br", "comm:pp_bs"
            has_recv, has_send, rsel, ssel = g < n_chunks - 1, g > 0, "pp_next", "pp_prev"
        entry_dep: int | None = None
        if has_recv:
            entry_dep = prog.extra_task(lane=recv_lane, kind="recv", name=f"pp.recv_{'act' if it.kind == 'F' else 'grad'}",
                                        phase="fwd" if it.kind == "F" else "bwd", collective="recv",
                                        gkind="pp", msg_bytes=p2p_bytes, peer_sel=rsel, key=recv_key)
            if tp > 1 and not par.sp:
                ag = prog.extra_task(lane="comm:pp_ag", kind="coll", name="pp.gather", phase="fwd" if it.kind == "F" else "bwd",
                                     collective="all_gather", gkind="tp", msg_bytes=int(act_bytes), key=f"{tag}|ppag")
                prog.edge(entry_dep, ag)
                entry_dep = ag
        if it.kind == "F" and gather_early and idx == first_f[it.chunk]:
            ns, _, moved = dpsync.bucket_comm_ns(sb, g, "all_gather", sb.param_bytes, True, unit)
            unit = stretched(unit, 0, dpsync.interference(sb, unit, ns, 0, "all_gather", moved))
        elif it.kind == "B" and reduce_early and idx == last_b[it.chunk]:
            unit = dpsync.last_backward(sb, unit, g, bucket)
        mg = (a2a_overlap.merge(unit, unit_of(idx + 1), merges, *slowdown)
              if idx in merged_with else None)
        if mg is not None:
            nb = items[idx + 1]
            off = prog.add_unit(mg[0], f"{tag}+B{nb.chunk}.{nb.mb}")
            unit, views[idx + 1] = mg[1], (mg[2], off)
        elif idx in views:  # one program unit per item: an empty one for the merged backward
            (unit, off), pending_send = views.pop(idx), None
            prog.add_unit(_EMPTY, tag)
        else:
            off = prog.add_unit(unit, tag)
        if it.kind == "F" and gather_early and idx == first_f[it.chunk]:
            dpsync.param_gathers(sb, prog, unit, off, g, bucket)
        for dep in (entry_dep, pending_send if par.p2p_blocking else None):
            if dep is not None:
                for e in unit.entry:
                    prog.edge(dep, off + e)
        pending_send = None
        if has_send:
            s = prog.extra_task(lane=send_lane, kind="send", name=f"pp.send_{'act' if it.kind == 'F' else 'grad'}",
                                phase="fwd" if it.kind == "F" else "bwd", collective="send", gkind="pp",
                                msg_bytes=p2p_bytes, peer_sel=ssel, key=send_key)
            prog.edge(off + unit.tail, s)
            pending_send = s
        if it.kind == "B" and idx == last_b[it.chunk] and not sb.shard and sb.dpcp > 1:
            deferred.append((unit, off, g))
            if par.dp_overlap:
                grad_sync += dpsync.grad_buckets(sb, prog, unit, off, g, bucket, None)
    if deferred and not par.dp_overlap:
        after = dpsync.nan_check_after(sb, prog, deferred, bucket, prog.offsets[-1] + prog.units[-1][0].tail)
        for unit, off, g in deferred:
            grad_sync += dpsync.grad_buckets(sb, prog, unit, off, g, bucket, after)
    # tied embeddings, or the copy MTP looks its inputs up in: first and last stage
    # all-reduce the word-embedding gradient (Megatron-Core's embedding group)
    emb_params = model.vocab * model.hidden / tp
    has_emb = bool(sb.template.select("prologue")) and bool(sb.template.select("epilogue"))
    if (model.tied_embeddings or sb._mtp(sb.n_chunks - 1)) and has_emb and pp > 1 and stage in (0, pp - 1):
        c_emb = 0 if stage == 0 else v - 1
        unit = unit_of(last_b[c_emb])
        off = prog.offsets[last_b[c_emb]]
        e = prog.extra_task(lane="comm:dp", kind="coll", name="emb.all_reduce", phase="bwd",
                            collective="all_reduce", gkind="emb", msg_bytes=int(emb_params * sb.grad_bytes), key="emb")
        prog.edge(off + unit.tail, e)
        grad_sync.append(e)
    params, expert = dpsync.optimizer_step(sb, prog, grad_sync, emb_params, gather_early)
    info = {"params": params, "expert_params": expert, "items": len(items),
            "host_wait_ns": dict(sb.host_wait_ns), "offload_wait_ns": dict(sb.offload_wait_ns)}
    return prog.arrays(), info


def build_graph(
    model: ModelSpec,
    par: ParallelSpec,
    template: LayerTemplate,
    op_time: OpTimeFn,
    *,
    comm_time: CommTimeFn | None = None,
    representatives: bool = False,
    gpus: int | None = None,
    merge_compute: bool = False,
    sm_count: int = 0,
    blackwell: bool = False,
    comm_estimate: CommEstimateFn | None = None,
    hbm_GBps: float = 0.0,
    ranks: Sequence[int] | None = None,
    offload: Offload | None = None,
    nccl_ctas: tuple[tuple[str, int], ...] = (),
    cpu_speed: float = 1.0,
) -> BuildResult:
    """Build the per-rank task graphs of ``model`` on layout ``par``.

    Args:
        model: the model spec.
        par: the parallel layout (validated here; InputError names what disagrees).
        template: the layer template (first-principles or trace-derived).
        op_time: compute duration in ns for (op_class, flops, bytes, template op).
        comm_time: duration in ns of a collective / transfer when the replay has no network
            model; ``None`` makes communication free.
        representatives: build one rank per pipeline stage only (see the module docstring).
        gpus: the cluster's GPU count, checked against ``par.world``.
        merge_compute: merge runs of consecutive compute tasks (:meth:`Unit.compacted`).
        sm_count, blackwell: the device's SMs (0: unknown: overlapped compute is not slowed)
            and whether it is a Blackwell GPU (its userbuffers settings), for the overlaps
            of :mod:`tracesim.build.overlap`; ``hbm_GBps``: its memory bandwidth (0: unknown:
            overlapped transfers take no memory time from the compute, ``Overlaps.contention_ns``).
        comm_estimate: uncongested time (ns) of a collective ``(collective, group kind,
            bytes)``: how long an NCCL collective takes SMs from the compute it overlaps
            (None: not charged).
        ranks: the ranks the graph holds (default: every rank, or the representatives);
            ``BuildResult.programs`` gives the graphs of the others on demand.
        offload: activation offloading to host memory (:mod:`tracesim.build.offload`).
        nccl_ctas: NCCL's CTA cap per group kind (a cluster spec's ``collectives.max_ctas``):
            an NCCL collective overlapping compute takes that many SMs where it is below 16.
        cpu_speed: the host CPU's speed (a cluster spec's ``host_cpu``, :mod:`host`).
    """
    progs = stage_programs(model, par, template, op_time, comm_time=comm_time, gpus=gpus,
                           merge_compute=merge_compute, sm_count=sm_count, blackwell=blackwell,
                           comm_estimate=comm_estimate, offload=offload, nccl_ctas=nccl_ctas,
                           cpu_speed=cpu_speed, hbm_GBps=hbm_GBps)
    placement = progs.placement
    if ranks is None:
        ranks = placement.representatives() if representatives else list(range(par.world))
    graph = instantiate(progs.progs, ranks, placement, progs.comm_time, representatives)
    graph = graph.replace(meta={**progs.meta, "representatives": representatives})
    return BuildResult(
        graph=graph, resolved=progs.resolved, placement=placement,
        stage_params=tuple(i["params"] for i in progs.infos),
        stage_expert_params=tuple(i["expert_params"] for i in progs.infos),
        info={"stages": list(progs.infos)},
        programs=progs,
    )


def stage_programs(
    model: ModelSpec,
    par: ParallelSpec,
    template: LayerTemplate,
    op_time: OpTimeFn,
    *,
    comm_time: CommTimeFn | None = None,
    gpus: int | None = None,
    merge_compute: bool = False,
    sm_count: int = 0,
    blackwell: bool = False,
    comm_estimate: CommEstimateFn | None = None,
    offload: Offload | None = None,
    nccl_ctas: tuple[tuple[str, int], ...] = (),
    cpu_speed: float = 1.0,
    hbm_GBps: float = 0.0,
) -> StagePrograms:
    """The stage programs :func:`build_graph` gives to ranks (same arguments)."""
    validate_layout(model, par, gpus)
    if offload is not None and (par.pp > 1 or par.recompute != "none"):
        raise InputError("activation offloading needs pp 1 and no recomputation (as "
                         "Megatron-Core's cpu_offloading)", "layout", "cpu_offload_layers")
    placement = Placement(par)
    res = resolve_template(template, model, par, op_time)
    stage_progs = []
    infos = []
    ov = overlaps_for(par, sm_count, blackwell, comm_estimate, nccl_ctas, hbm_GBps)
    if par.moe_shared_expert_overlap and not shared_overlap.why_not(par, model):
        res = shared_overlap.apply(res, ov)
    for stage in range(par.pp):
        sb = _StageBuilder(model, par, res, op_time, template, stage, merge_compute, ov, offload, cpu_speed)
        prog, info = _stage_program(sb, placement, comm_time is None)
        stage_progs.append(prog)
        infos.append(info)
    meta = {"builder": "tracesim.build.builder", "model": model.to_dict(),
            "parallel": par.to_dict(), "template": dict(template.meta)}
    return StagePrograms(tuple(stage_progs), tuple(infos), placement, res, comm_time or _free, meta)


__all__ = ["REPORT_KIND", "BuildResult", "CommTimeFn", "StagePrograms", "build_graph",
           "stage_programs"]
