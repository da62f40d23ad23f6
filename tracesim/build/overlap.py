"""Communication overlaps as task-graph mechanisms (docs/stacks.md is the manual).

Tensor parallelism (the ``ROp.overlap`` marks of :mod:`tracesim.template.resolve`):

* **ring exchange** (Transformer Engine userbuffers ``ring_exchange``; the all-gather in
  front of ``qkv`` / ``fc1`` forward and of ``proj`` / ``fc2`` data gradient, and with the
  FP8 configurations the reduce-scatter after ``proj`` / ``fc2`` forward): the GEMM runs as
  ``tp`` chunks along its tokens and the collective as ``tp - 1`` chunks on the TP lane;
  chunk ``k`` of the GEMM waits for chunk ``k`` of the all-gather (the first chunk is the
  rank's own shard), a reduce-scatter chunk waits for its GEMM chunk. A layer's exposed TP
  time is then ``max(0, C - G (n-1)/n)`` for an all-gather of ``C`` before a GEMM of ``G``
  (``n = tp``), and about one chunk of the reduce-scatter after it;
* **pipeline** (``pipeline``, the BF16 configurations' reduce-scatter after ``proj`` /
  ``fc2``): 4 GEMM chunks, each followed by the reduce-scatter of its output; the last
  chunk's reduce-scatter is exposed;

Each GEMM chunk costs ``dur_ns / n`` times the op's ``chunk_ratio(n)``: the chunk at its own
shape, up to three side by side (:func:`tracesim.template.ub_chunks.chunk_slowdown`).

The chunks are equal, so these pipelines have closed forms, and that is what is emitted
(``_ring_in``, ``_chunks_out``): with GEMM chunks of ``g`` and transfer chunks of ``c``, an
all-gather of ``n - 1`` chunks before ``n`` GEMM chunks ends the GEMM ``g + max((n-1) g,
(n-1) c)`` after its start: one transfer task of ``n - 1`` chunks beside one GEMM task of
``n - 1`` chunks, then one GEMM task of the last chunk after both (3 tasks for ``2n - 1``);
``m`` reduce-scatter chunks after ``m`` GEMM chunks end the last transfer ``max(g + m c,
m g + c)`` after the start: the first GEMM chunk; the next ``m - 1`` GEMM chunks (one task)
beside the first ``m - 1`` transfers (one task); the last transfer after both; with
``ring``, the rank's own GEMM chunk last (4 or 5 tasks for ``2m`` or ``2m + 1``). A transfer
task of ``k`` chunks has ``chunks = k`` (the task graph's ``chunks`` column) and ``k`` times
the rounded chunk size in ``msg_bytes`` (the bytes the chunks move): the network
model runs ``k`` operations of ``msg_bytes / k`` back to back, each paying its own latency
(a userbuffers ring step, or an NCCL collective of that size where userbuffers does not
apply), so alone on its links it lasts exactly the ``k`` chunk tasks it replaces. A merged
GEMM task lasts its chunks' summed (SM-slowed) durations, and the host launch model
(:mod:`tracesim.build.host`) issues it as its ``chunks`` pieces, so the iteration time is
the chunked pipeline's to the ns (``tests/test_overlap_closed_form.py`` replays both;
:data:`CHUNKED` emits every chunk as its own task) except where (1) other flows share the
TP links while a pipeline runs (the flow network: a merged transfer sends its chunks
back to back where the chunked form may wait for a GEMM chunk between them, so they meet
the other flows at other moments; the pipeline's end is the same uncontended) or (2) the
host is behind inside a pipeline (its waits fall on a merged task instead of the chunk
they delay). Both move the small test layouts by under 0.1% (docs/stacks.md, "Closed forms").
* **bulk** (``bulk``; and Megatron-Core / TE's asynchronous NCCL collectives without
  userbuffers): in the backward of a column-parallel linear the re-gather of its input
  runs during the data-gradient GEMM, and the reduce-scatter (all-reduce) of that gradient
  during the weight-gradient GEMM; the backward GEMM (``2 x`` forward FLOPs) is its two
  halves of equal FLOPs.

With userbuffers on, every TP transfer task these overlaps emit carries the network algorithm
``userbuffers`` (:data:`UB_ALGORITHM`, the task's ``algorithm`` column): Transformer Engine
moves it with copy engines and its own kernels, not NCCL, so the network model times it
without NCCL's protocols and base latency (:mod:`tracesim.network.collectives.userbuffers`).
NCCL's asynchronous backward overlap (``tp_bwd_overlap`` without userbuffers) and the TP
collectives outside these patterns stay NCCL collectives.

A communication kernel beside a GEMM takes streaming multiprocessors from it
(``comm_interference``): the GEMM runs on ``S - s`` of the device's ``S`` SMs, its time
times ``S / (S - s)``. ``s`` is the userbuffers configuration's ``num_sm`` for the GEMM
(:mod:`tracesim.specs.ub_config`: the Megatron-Bridge configuration the stack runs, or one
given; ring exchange moves data with the copy engines and 1 SM), and :data:`NCCL_SMS` for an
NCCL collective, charged only
for the time it overlaps (its uncongested estimate, capped by the compute it overlaps).

Memory contention: a transfer beside compute moves its bytes through the GPU's memory,
``(n - 1) / n`` of the message each way over a group of ``n``; the compute lasts longer by
that memory time (``Overlaps.contention_ns``, with ``comm_interference``): the TP transfers
of every pattern above, the data-parallel buckets and ZeRO-3 / FSDP collectives beside a pass
(:func:`tracesim.build.dpsync.interference`), ring attention's blocks (:meth:`Unit.ring`,
the block sent and the one received). Checked on pytorch/pytorch #172714's
GEMM beside an NCCL all-gather on 8 H100 (``benchmarks/kernels/overlap_contention.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from tracesim.build.units import Unit
from tracesim.specs import ub_config
from tracesim.template.fp8 import AMAX_SUFFIX
from tracesim.template.resolve import ROp
from tracesim.template.ub_chunks import PIPE_SPLITS

#: the compute beside a transfer loses this times its memory time (docstring, "Memory contention")
CONTENTION = 1.0
#: SMs an NCCL collective occupies while it overlaps compute: the 16 SMs Transformer Engine's
#: norm kernels leave free for concurrent communication in the Megatron-Bridge recipes
#: (``NVTE_FWD/BWD_LAYERNORM_SM_MARGIN=16``, scripts/performance/perf_plugins.py @v0.2.1)
NCCL_SMS = 16

#: the network algorithm of a userbuffers transfer (tracesim.network.collectives.userbuffers:
#: copy engines and userbuffers' own kernels over NVLink, no NCCL protocol or base latency)
UB_ALGORITHM = "userbuffers"

#: emit the chunked pipelines chunk by chunk instead of their closed forms (the tests and
#: benchmarks that check the closed forms against them set it; the replay never does)
CHUNKED = False

#: uncongested time (ns) of a collective: (collective, group kind, message bytes) -> ns
CommEstimateFn = Callable[..., float]  # (collective, gkind, msg_bytes[, algorithm]) -> ns


@dataclass(frozen=True)
class Overlaps:
    """The overlap switches of a layout on a device (:func:`overlaps_for`)."""

    tp: int = 1
    ub: bool = False  # userbuffers TP overlap
    tp_bwd: bool = False  # asynchronous NCCL backward overlap
    interference: bool = False
    sm_count: int = 0
    config: str = "bridge-bf16"  # a shipped userbuffers configuration, where ub_table is empty
    #: the configuration run (:func:`tracesim.specs.ub_config.running`)
    ub_table: tuple[ub_config.Entry, ...] = ()
    #: an FP8 run with per-tensor scaling: a pipelined reduce-scatter whose configuration sets
    #: ``fp8_buf`` moves one byte per element
    fp8_rs: bool = False
    estimate: CommEstimateFn | None = None
    chunked: bool = False  # every chunk its own task (:data:`CHUNKED`)
    #: NCCL's CTA cap per group kind (the cluster spec's ``collectives.max_ctas``)
    ctas: tuple[tuple[str, int], ...] = ()
    #: the device's memory bandwidth, bytes/s (0: unknown, no memory contention)
    hbm_Bps: float = 0.0

    def nccl_sms(self, kind: str) -> int:
        """SMs an NCCL collective on the communicator of group kind ``kind`` takes:
        :data:`NCCL_SMS`, or the communicator's CTA cap where it is lower (a CTA per SM)."""
        for k, n in self.ctas:
            if k == kind:
                return min(NCCL_SMS, n)
        return NCCL_SMS

    def _ub(self, role: str, pass_: str) -> ub_config.Entry:
        table = self.ub_table or ub_config.SHIPPED[self.config]
        return ub_config.setting(table, role, pass_)

    def ub_method(self, role: str, pass_: str) -> tuple[str, int]:
        """(method, SMs) of linear ``role``'s userbuffers overlap in ``pass_`` (``fprop`` |
        ``dgrad`` | ``wgrad``)."""
        e = self._ub(role, pass_)
        return e[1], e[2]

    def ub_splits(self, role: str) -> int:
        """GEMM chunks of ``role``'s pipelined forward reduce-scatter (``num_splits``)."""
        return self._ub(role, "fprop")[3] or PIPE_SPLITS

    def ub_rs_bytes(self, role: str) -> float:
        """``role``'s forward reduce-scatter's wire bytes over its BF16 size: 0.5 with
        ``fp8_buf`` in an FP8 run with per-tensor scaling (pipelined only), else 1."""
        return 0.5 if self.fp8_rs and self._ub(role, "fprop")[4] else 1.0

    def slowed(self, dur_ns: float, sms: int, overlapped_ns: float | None = None) -> int:
        """``dur_ns`` of compute with ``sms`` SMs taken for ``overlapped_ns`` of it (all of
        it when None): the overlapped part runs at ``(S - s) / S`` of the speed."""
        if not self.interference or self.sm_count <= sms or sms <= 0:
            return int(round(dur_ns))
        part = dur_ns if overlapped_ns is None else min(max(overlapped_ns, 0.0), dur_ns)
        return int(round(dur_ns + part * sms / (self.sm_count - sms)))

    def contention_ns(self, collective: str, msg_bytes: float, compute_ns: float,
                      group: int | None = None) -> float:
        """Compute time a transfer of ``msg_bytes`` over ``group`` ranks (None: TP) takes from
        ``compute_ns`` of compute beside it (module docstring, "Memory contention"): its bytes
        through this GPU's memory (an all-reduce twice) at the memory bandwidth, at most the compute."""
        n = self.tp if group is None else group
        if not self.interference or self.hbm_Bps <= 0 or msg_bytes <= 0 or compute_ns <= 0 or n <= 1:
            return 0.0
        share = 2.0 * (n - 1) / n * (2.0 if collective == "all_reduce" else 1.0)
        return min(compute_ns, CONTENTION * share * msg_bytes / self.hbm_Bps * 1e9)

    def est(self, collective: str, gkind: str, msg_bytes: int, algorithm: str = "") -> float | None:
        if self.estimate is None:
            return None
        more = (algorithm,) if algorithm else ()
        return float(self.estimate(collective, gkind, msg_bytes, *more))


def overlaps_for(par: object, sm_count: int = 0, blackwell: bool = False,
                 estimate: CommEstimateFn | None = None,
                 ctas: tuple[tuple[str, int], ...] = (), hbm_GBps: float = 0.0) -> Overlaps:
    """:class:`Overlaps` of layout ``par`` (a ParallelSpec) on a device of ``sm_count``
    SMs (0: unknown, no interference) and ``hbm_GBps`` of memory bandwidth, NCCL
    communicators capped at ``ctas``."""
    fp8 = getattr(par, "dtype", "") == "fp8"
    return Overlaps(tp=int(getattr(par, "tp", 1)), ub=bool(getattr(par, "tp_comm_overlap", False)),
                    tp_bwd=bool(getattr(par, "tp_bwd_overlap", False)),
                    interference=bool(getattr(par, "comm_interference", False)),
                    sm_count=int(sm_count),
                    ub_table=ub_config.running(tuple(getattr(par, "tp_comm_overlap_cfg", ())),
                                               fp8, blackwell),
                    fp8_rs=fp8 and getattr(par, "fp8_recipe", "") in ("delayed", "current"),
                    estimate=estimate, chunked=CHUNKED, ctas=tuple(ctas), hbm_Bps=hbm_GBps * 1e9)


def _is_tp(r: ROp, marks: tuple[str, ...]) -> bool:
    return r.kind != "gpu" and r.gkind == "tp" and r.overlap in marks


def _op(u: Unit, r: ROp, ov: Overlaps, *, layer: int, phase: str, prefix: str) -> None:
    """:meth:`Unit.op`, except current scaling's amax all-reduce (4 bytes on the TP group,
    issued on the compute stream before the cast, :mod:`tracesim.template.fp8`): a
    compute-stream task of the collective's uncongested time (latency only; no flows), in
    the TP group's communication (``gkind`` tp); a collective on the network where no
    estimate is at hand."""
    ns = ov.est(r.collective, r.gkind, r.msg_bytes) if r.name.endswith(AMAX_SUFFIX) else None
    if ns is None:
        u.op(r, layer=layer, phase=phase, prefix=prefix)
        return
    u.compute_task(prefix + r.name, layer=layer, phase=phase, op_class="comm",
                   dur_ns=int(round(ns)), collective=r.collective, gkind=r.gkind,
                   msg_bytes=r.msg_bytes)


def emit(u: Unit, ops: Sequence[ROp], ov: Overlaps, *, layer: int, phase: str,
         prefix: str = "") -> None:
    """Append ``ops`` to ``u``'s chain, with the TP overlaps ``ov`` switches on (module
    docstring); unmarked ops (and all of them with every overlap off) as :meth:`Unit.op`.
    Runs of ``side`` ops go on the unit's side chain (:meth:`Unit.side_chain`), which ends
    (:meth:`Unit.end_side`) at the first op after its last run outside the MoE block (``moe.``)."""
    ops = list(ops)
    sides = [k for k, r in enumerate(ops) if r.side]
    if not sides:
        _emit_run(u, ops, ov, layer=layer, phase=phase, prefix=prefix)
        return
    end = next((k for k in range(sides[-1] + 1, len(ops)) if not ops[k].name.startswith("moe.")),
               len(ops))
    u.end_side()
    i = 0
    while i < len(ops):
        j = i + 1
        while j < len(ops) and ops[j].side == ops[i].side and j != end:
            j += 1
        if i == end:
            u.end_side()
        if ops[i].side:
            with u.side_chain():
                _emit_run(u, ops[i:j], ov, layer=layer, phase=phase, prefix=prefix)
        else:
            _emit_run(u, ops[i:j], ov, layer=layer, phase=phase, prefix=prefix)
        i = j
    u.end_side()


def _emit_run(u: Unit, ops: list[ROp], ov: Overlaps, *, layer: int, phase: str,
              prefix: str) -> None:
    i, n = 0, len(ops)
    bulk_on = ov.ub or ov.tp_bwd
    while i < n:
        r = ops[i]
        pre_marks = (("ag_next",) if ov.ub else ()) + (("bulk_dgrad",) if bulk_on else ())
        if _is_tp(r, pre_marks):
            j = i + 1
            while j < n and ((ops[j].kind == "gpu" and ops[j].op_class != "gemm")
                             or ops[j].name.endswith(AMAX_SUFFIX)):
                j += 1
            if j < n and ops[j].kind == "gpu" and ops[j].ub == r.ub:
                for k in range(i + 1, j):  # amax, quantize / cast kernels: before the comm (TE)
                    _op(u, ops[k], ov, layer=layer, phase=phase, prefix=prefix)
                post = _post(ops, j + 1, ov, bulk_on)
                _pattern(u, r, ops[j], post, ov, layer=layer, phase=phase, prefix=prefix)
                i = j + 1 + (post is not None)
                continue
        if r.kind == "gpu" and r.op_class == "gemm":
            post = _post(ops, i + 1, ov, bulk_on)
            if post is not None:
                _pattern(u, None, r, post, ov, layer=layer, phase=phase, prefix=prefix)
                i += 2
                continue
        _op(u, r, ov, layer=layer, phase=phase, prefix=prefix)
        i += 1


def _post(ops: Sequence[ROp], j: int, ov: Overlaps, bulk_on: bool) -> ROp | None:
    marks = (("rs_prev",) if ov.ub else ()) + (("bulk_wgrad",) if bulk_on else ())
    if j < len(ops) and _is_tp(ops[j], marks) and ops[j - 1].ub == ops[j].ub:
        return ops[j]
    return None


def _comm(u: Unit, r: ROp, name: str, msg: float, layer: int, phase: str, prefix: str,
          ov: Overlaps, chunks: int = 1) -> int:
    """A TP collective (``chunks`` chunks of ``msg / chunks`` back to back) beside a GEMM:
    a userbuffers transfer when userbuffers is on (:data:`UB_ALGORITHM`), else NCCL's."""
    return u.add(lane="comm:tp", kind="coll", name=prefix + name, phase=phase, layer=layer,
                 collective=r.collective, gkind="tp", msg_bytes=int(round(msg)),
                 algorithm=UB_ALGORITHM if ov.ub else "", chunks=chunks)


def _gemm(u: Unit, g: ROp, dur: float, frac: float, layer: int, phase: str, prefix: str,
          chain: bool = True, chunks: int = 1) -> int:
    return u.compute_task(prefix + g.name, layer=layer, phase=phase, op_class=g.op_class,
                          flops=g.flops * frac, nbytes=g.bytes * frac, dur_ns=int(round(dur)),
                          chain=chain, chunks=chunks)
def _pattern(u: Unit, pre: ROp | None, g: ROp, post: ROp | None, ov: Overlaps, *, layer: int,
             phase: str, prefix: str) -> None:
    """One GEMM with its overlapped collectives (module docstring)."""
    backward = g.phase == "bwd"
    if not backward:  # forward (also a recomputed forward): ring all-gather / reduce-scatter
        if pre is not None:
            _ring_in(u, pre, g, 1.0, ov, ov.tp, ov.ub_method(g.ub, "fprop")[1],
                     layer=layer, phase=phase, prefix=prefix)
        if post is not None:
            method, sms = ov.ub_method(g.ub, "fprop")
            if pre is None:
                _chunks_out(u, g, post, ov, method, sms, layer=layer, phase=phase, prefix=prefix)
            else:  # not in Megatron's layers: the reduce-scatter after the whole GEMM
                u.op(post, layer=layer, phase=phase, prefix=prefix)
        return
    # data and weight gradient: equal FLOPs, each at its own shape (ROp.dgrad_share)
    d_ns = g.dur_ns * g.dgrad_share
    w_ns = g.dur_ns - d_ns
    if pre is not None and pre.overlap == "ag_next":  # row-parallel: gathered gradient
        _ring_in(u, pre, g, 0.5, ov, ov.tp, ov.ub_method(g.ub, "dgrad")[1],
                 layer=layer, phase=phase, prefix=prefix, dur=d_ns)
        _gemm(u, g, w_ns, 0.5, layer, phase, prefix)
        if post is not None:
            u.op(post, layer=layer, phase=phase, prefix=prefix)
        return
    # column-parallel backward: input re-gather beside dgrad, dgrad reduce-scatter beside wgrad
    tail, joins = u.tail, list(u.joins)
    ag = -1
    if pre is not None:
        ag = _comm(u, pre, pre.name, pre.msg_bytes, layer, phase, prefix, ov)
        u.edge(tail, ag)
        for j in joins:
            u.edge(j, ag)
    ag_sms = ov.ub_method(g.ub, "dgrad")[1] if ov.ub else ov.nccl_sms("tp")
    rs_sms = ov.ub_method(g.ub, "wgrad")[1] if ov.ub else ov.nccl_sms("tp")
    ag_ns = None if ov.ub or pre is None else ov.est(pre.collective, "tp", pre.msg_bytes)
    rs_ns = None if ov.ub or post is None else ov.est(post.collective, "tp", post.msg_bytes)
    if pre is not None:
        d_ns = ov.slowed(d_ns, ag_sms, ag_ns) + int(round(ov.contention_ns(pre.collective, pre.msg_bytes, d_ns)))
    dgrad = _gemm(u, g, d_ns, 0.5, layer, phase, prefix)
    rs = -1
    if post is not None:
        rs = _comm(u, post, post.name, post.msg_bytes, layer, phase, prefix, ov)
        u.edge(dgrad, rs)
    if post is not None:
        w_ns = ov.slowed(w_ns, rs_sms, rs_ns) + int(round(ov.contention_ns(post.collective, post.msg_bytes, w_ns)))
    wgrad = _gemm(u, g, w_ns, 0.5, layer, phase, prefix)
    u.edge(ag, wgrad)
    if rs >= 0:
        u.joins.append(rs)


def _ring_in(u: Unit, comm: ROp, g: ROp, frac: float, ov: Overlaps, n: int, sms: int, *,
             layer: int, phase: str, prefix: str, dur: float | None = None) -> None:
    """All-gather in ``n - 1`` chunks feeding ``n`` chunks of the GEMM (ring exchange).

    GEMM chunk ``k`` waits for chunk ``k - 1`` and for all-gather chunk ``k`` (chunk 0 is
    the rank's own shard), the all-gather chunks run back to back: with chunks of ``g``
    and ``c`` the GEMM ends ``g + max((n-1) g, (n-1) c)`` after the start. Emitted as that
    closed form: the whole all-gather (one task of ``n - 1`` chunks) beside the first
    ``n - 1`` GEMM chunks (one task), then the last GEMM chunk after both (or chunk by
    chunk with ``ov.chunked``)."""
    n = max(n, 2)
    total = g.dur_ns * frac if dur is None else dur
    plain = ov.slowed(total / n * g.chunk_ratio(n), sms)
    tail, joins = u.tail, list(u.joins)
    msg = int(round(comm.msg_bytes / (n - 1)))
    # the chunks beside a transfer (all but the last) lose its memory time
    chunk = plain + int(round(ov.contention_ns(comm.collective, msg, plain)))

    def first_comm(c: int) -> None:
        u.edge(tail, c)
        for j in joins:
            u.edge(j, c)

    if not ov.chunked:
        _gemm(u, g, chunk * (n - 1), frac * (n - 1) / n, layer, phase, prefix, chunks=n - 1)
        c = _comm(u, comm, f"{comm.name}#1-{n - 1}", msg * (n - 1), layer, phase, prefix, ov,
                  chunks=n - 1)
        first_comm(c)
        u.edge(c, _gemm(u, g, plain, frac / n, layer, phase, prefix))
        return
    for k in range(n):
        c = -1
        if k >= 1:
            c = _comm(u, comm, f"{comm.name}#{k}", msg, layer, phase, prefix, ov)
            if k == 1:
                first_comm(c)
        t = _gemm(u, g, chunk if k < n - 1 else plain, frac / n, layer, phase, prefix)
        u.edge(c, t)


def _chunks_out(u: Unit, g: ROp, comm: ROp, ov: Overlaps, method: str, sms: int, *,
                layer: int, phase: str, prefix: str) -> None:
    """GEMM chunks, each followed by the reduce-scatter of its output (``pipe``: 4 splits,
    every chunk's; ``ring``: ``tp`` splits, all but the rank's own (last) chunk's).

    With ``m`` reduce-scatter chunks of ``c`` after GEMM chunks of ``g``, chunks running
    back to back on their lanes, the last reduce-scatter ends
    ``max(g + m c, m g + c)`` after the start. Emitted as that closed form: the first GEMM
    chunk; the next ``m - 1`` GEMM chunks (one task) beside the reduce-scatters of the
    first ``m - 1`` chunks (one task, started by the first chunk); the last reduce-scatter
    chunk after both; then the ``ring`` method's own chunk on the GEMM lane (or chunk by
    chunk with ``ov.chunked``)."""
    splits = ov.ub_splits(g.ub) if method == "pipe" else max(ov.tp, 2)
    n_comm = splits if method == "pipe" else splits - 1
    plain = ov.slowed(g.dur_ns / splits * g.chunk_ratio(splits), sms)
    msg = int(round(comm.msg_bytes * ov.ub_rs_bytes(g.ub) / n_comm))
    # every chunk after the first runs beside a transfer and loses its memory time
    chunk = plain + int(round(ov.contention_ns(comm.collective, msg, plain)))
    if not ov.chunked:
        first = _gemm(u, g, plain, 1.0 / splits, layer, phase, prefix)
        rest = n_comm - 1
        before = first
        if rest:
            u.edge(first, _comm(u, comm, f"{comm.name}#1-{rest}", msg * rest, layer, phase,
                                prefix, ov, chunks=rest))
            before = _gemm(u, g, chunk * rest, rest / splits, layer, phase, prefix,
                           chunks=rest)
        last = _comm(u, comm, f"{comm.name}#{n_comm}", msg, layer, phase, prefix, ov)
        u.edge(before, last)
        own = splits - n_comm
        if own:
            _gemm(u, g, chunk * own, own / splits, layer, phase, prefix, chunks=own)
        u.joins.append(last)
        _ring_reduce(u, g, last, method, layer=layer, phase=phase, prefix=prefix)
        return
    last_c = -1
    for k in range(splits):
        t = _gemm(u, g, plain if k == 0 else chunk, 1.0 / splits, layer, phase, prefix)
        if k < n_comm:
            last_c = _comm(u, comm, f"{comm.name}#{k + 1}", msg, layer, phase, prefix, ov)
            u.edge(t, last_c)
    u.joins.append(last_c)
    _ring_reduce(u, g, last_c, method, layer=layer, phase=phase, prefix=prefix)


def _ring_reduce(u: Unit, g: ROp, last: int, method: str, *, layer: int, phase: str,
                 prefix: str) -> None:
    """A ring-exchange reduce-scatter ends with the reduction of the received chunks on the
    GEMM's stream, after its own chunk and the last transfer (``ROp.ub_reduce_ns``; a
    chunk of the same C++ call for the host, ``name#reduce``)."""
    if method != "ring" or g.ub_reduce_ns <= 0:
        return
    t = u.compute_task(f"{prefix}{g.name}#reduce", layer=layer, phase=phase,
                       op_class="elementwise", dur_ns=int(g.ub_reduce_ns))
    u.edge(last, t)


def spread(dur: np.ndarray, extra_ns: float) -> np.ndarray:
    """``dur`` (ns) lasting ``extra_ns`` longer in all, in proportion: each task ends where
    the rounded, stretched running total of the durations does. A run of tasks stretched
    this way lasts exactly as long as the one merged task of their summed durations
    (:meth:`Unit.compacted` changes no simulated time)."""
    total = float(dur.sum())
    if total <= 0 or extra_ns <= 0:
        return dur
    ends = np.rint(np.cumsum(dur, dtype=np.float64) * (1.0 + extra_ns / total)).astype(np.int64)
    return np.diff(ends, prepend=0).astype(dur.dtype)


def stretched(unit: Unit, start: int, extra_ns: float) -> Unit:
    """A copy of frozen ``unit`` whose compute tasks from index ``start`` on last
    ``extra_ns`` longer in all, in proportion to their durations (a collective's SMs taken
    from the compute it overlaps; :func:`spread`)."""
    a = unit.arrays
    assert a is not None
    if extra_ns <= 0:
        return unit
    dur = a["dur_ns"].copy()
    sel = np.zeros(len(dur), dtype=bool)
    sel[start:] = a["lane"][start:] == "compute"
    if dur[sel].sum() <= 0:
        return unit
    dur[sel] = spread(dur[sel], extra_ns)
    return replace(unit, arrays={**a, "dur_ns": dur})


def overlap_extra_ns(ov: Overlaps, comm_ns: float, compute_ns: float, sms: int = NCCL_SMS) -> float:
    """Compute time lost to a collective of ``comm_ns`` overlapping ``compute_ns`` of
    compute: the overlapped span (the shorter) at ``s / (S - s)``."""
    if not ov.interference or ov.sm_count <= sms or comm_ns <= 0 or compute_ns <= 0:
        return 0.0
    return min(comm_ns, compute_ns) * sms / (ov.sm_count - sms)


def stretch_cols(u: Unit, start: int, extra_ns: float) -> None:
    """:func:`stretched` on an open unit (its columns), in place."""
    if extra_ns <= 0:
        return
    c = u.cols
    idx = [i for i in range(start, len(u)) if c["lane"][i] == "compute"]
    dur = spread(np.asarray([c["dur_ns"][i] for i in idx], dtype=np.int64), extra_ns)
    for i, d in zip(idx, dur.tolist(), strict=True):
        c["dur_ns"][i] = int(d)


def compute_ns(unit: Unit, start: int = 0) -> float:
    """Compute-lane time of a frozen ``unit`` from task ``start`` on."""
    a = unit.arrays
    assert a is not None
    sel = a["lane"][start:] == "compute"
    return float(a["dur_ns"][start:][sel].sum())
