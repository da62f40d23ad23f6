"""Units: the task list of one pass (forward or backward) of one model chunk, for one rank.

A :class:`Unit` is built once per (pipeline stage, model chunk, pass) and copied for every
micro-batch by the builder. Tasks are columns (Python lists until frozen); edges are local
indices. Lanes are names (``compute``, ``comm:tp``, ...), resolved to global lanes when the
builder instantiates a rank.

Inside a unit the *chain* (compute ops and the blocking communication between them: TP
collectives, EP all-to-all, the context-parallel ring) runs in order; an edge joins two
consecutive chain tasks whenever they sit on different lanes. Asynchronous tasks (ZeRO-3
parameter all-gathers and gradient reduce-scatters) hang off the chain by explicit edges.

A :class:`Program` is one pipeline stage's program: the unit copies in schedule order and the
tasks outside any unit (point-to-point transfers, gradient buckets, the optimizer step).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracesim.template.resolve import ROp

COLUMNS = ("lane", "kind", "name", "op_class", "phase", "flops", "bytes", "dur_ns", "layer",
           "collective", "gkind", "msg_bytes", "peer_sel", "key", "algorithm", "chunks", "run")

#: separators of a merged task's ``run`` column: the ops it stands for, each ``name``,
#: ``op_class`` and ``dur_ns`` (:meth:`Unit.compacted`, :func:`run_parts`)
RUN_SEP, FIELD_SEP = "\x1e", "\x1f"

#: lane per communication group kind
COMM_LANE = {"tp": "comm:tp", "etp": "comm:tp", "ep": "comm:ep", "cp": "comm:cp", "dpcp": "comm:dp",
             "edp": "comm:dp", "emb": "comm:dp"}


@dataclass
class Unit:
    """Tasks of one pass of one model chunk on one rank (see the module docstring)."""

    cols: dict[str, list] = field(default_factory=lambda: {c: [] for c in COLUMNS})
    src: list[int] = field(default_factory=list)
    dst: list[int] = field(default_factory=list)
    entry: list[int] = field(default_factory=list)  # chain tasks with no chain predecessor
    tail: int = -1  # last chain task
    tail_lane: str = ""
    first_compute: int = -1
    layer_end: dict[int, int] = field(default_factory=dict)  # layer -> its last compute task
    layer_start: dict[int, int] = field(default_factory=dict)  # segment -> its first compute task
    marks: dict[str, int] = field(default_factory=dict)  # section name -> its last chain task
    joins: list[int] = field(default_factory=list)  # off-chain tasks the next chain task waits for
    arrays: dict[str, np.ndarray] | None = None
    #: the side chain (:meth:`side_chain`): its last task and lane; -1: not forked
    side_tail: int = -1
    side_lane: str = ""
    last_compute: int = -1  # the chain's last compute task

    def __len__(self) -> int:
        return len(self.cols["lane"])

    def add(self, *, lane: str, kind: str, name: str, op_class: str = "comm", phase: str = "fwd",
            flops: float = 0.0, nbytes: float = 0.0, dur_ns: int = 0, layer: int = -1,
            collective: str = "", gkind: str = "", msg_bytes: int = 0, peer_sel: str = "",
            key: str = "", algorithm: str = "", chunks: int = 1, run: str = "") -> int:
        """Append a task; ``chunks``: the pieces of an op it stands for (a communication
        task: that many operations of ``msg_bytes / chunks`` back to back; a compute task:
        that many kernels, for the host launch model, :mod:`tracesim.build.host`); ``run``:
        the ops a merged compute task stands for (:meth:`compacted`; "" for one op)."""
        i = len(self)
        c = self.cols
        c["lane"].append(lane)
        c["kind"].append(kind)
        c["name"].append(name)
        c["op_class"].append(op_class)
        c["phase"].append(phase)
        c["flops"].append(flops)
        c["bytes"].append(nbytes)
        c["dur_ns"].append(int(dur_ns))
        c["layer"].append(layer)
        c["collective"].append(collective)
        c["gkind"].append(gkind)
        c["msg_bytes"].append(int(msg_bytes))
        c["peer_sel"].append(peer_sel)
        c["key"].append(key if key or kind == "gpu" else str(i))
        c["algorithm"].append(algorithm)
        c["chunks"].append(int(chunks))
        c["run"].append(run)
        return i

    def edge(self, a: int, b: int) -> None:
        if a >= 0 and b >= 0 and a != b:
            self.src.append(a)
            self.dst.append(b)

    def _chain(self, i: int, lane: str) -> None:
        if self.tail < 0 and not self.joins:
            self.entry.append(i)
        elif self.tail >= 0 and self.tail_lane != lane:
            self.edge(self.tail, i)
        for j in self.joins:
            self.edge(j, i)
        self.joins = []
        self.tail = i
        self.tail_lane = lane
        if lane == "compute":
            self.last_compute = i

    @contextmanager
    def side_chain(self) -> Iterator[None]:
        """Tasks appended inside run on a side stream (the shared experts' stream of
        Megatron-Core's ``--moe-shared-expert-overlap``): a second chain that forks from the
        main chain's last compute task and waits for nothing the main chain runs after it
        (the communication task that is the main chain's tail, above all). The compute lane
        still runs in order, so the main chain's next compute task follows them there. Later
        side chains continue it until :meth:`end_side` ends it."""
        main = (self.tail, self.tail_lane, self.joins)
        if self.side_tail < 0:
            self.side_tail, self.side_lane = self.last_compute, "compute"
        self.tail, self.tail_lane, self.joins = self.side_tail, self.side_lane, []
        try:
            yield
        finally:
            self.side_tail, self.side_lane = self.tail, self.tail_lane
            self.tail, self.tail_lane, self.joins = main

    def end_side(self) -> None:
        """End the side chain: the main chain's next task waits for its last task (on the
        compute lane, lane order does that already); the next :meth:`side_chain` forks anew."""
        if self.side_tail >= 0 and self.side_lane != "compute":
            self.joins = [*self.joins, self.side_tail]
        self.side_tail, self.side_lane = -1, ""

    def close(self) -> None:
        """End the chain on a task that follows every pending join (a zero-length compute
        task), so that what waits for the unit's tail waits for them too."""
        if self.joins:
            self.compute_task("join", layer=-1, phase=self.cols["phase"][self.joins[-1]])

    def compute_task(self, name: str, *, layer: int, phase: str, op_class: str = "other",
                     flops: float = 0.0, nbytes: float = 0.0, dur_ns: int = 0,
                     chain: bool = True, chunks: int = 1, collective: str = "", gkind: str = "",
                     msg_bytes: int = 0) -> int:
        """A compute task (on the chain unless ``chain`` is False: then only explicit edges
        order it); ``chunks``: as for :meth:`add`; ``collective``, ``gkind``, ``msg_bytes``: a
        collective timed on the compute stream (op class ``comm``)."""
        i = self.add(lane="compute", kind="gpu", name=name, op_class=op_class, phase=phase,
                     flops=flops, nbytes=nbytes, dur_ns=dur_ns, layer=layer, chunks=chunks,
                     collective=collective, gkind=gkind, msg_bytes=msg_bytes)
        if self.first_compute < 0:
            self.first_compute = i
        if chain:
            self._chain(i, "compute")
        if layer >= 0:
            self.layer_end[layer] = i
        return i

    def op(self, r: ROp, *, layer: int, phase: str | None = None, prefix: str = "") -> int:
        """Append a resolved op to the chain (compute on ``compute``, comm on its group lane)."""
        ph = phase or r.phase
        if r.kind == "gpu":
            i = self.add(lane="compute", kind="gpu", name=prefix + r.name, op_class=r.op_class,
                         phase=ph, flops=r.flops, nbytes=r.bytes, dur_ns=r.dur_ns, layer=layer)
            if self.first_compute < 0:
                self.first_compute = i
            self._chain(i, "compute")
            if layer >= 0:
                self.layer_end[layer] = i
            return i
        lane = COMM_LANE[r.gkind]
        i = self.add(lane=lane, kind="coll", name=prefix + r.name, phase=ph, layer=layer,
                     collective=r.collective, gkind=r.gkind, msg_bytes=r.msg_bytes,
                     algorithm=r.algorithm)
        self._chain(i, lane)
        return i

    def ring(self, core: Sequence[ROp], steps: int, msg_bytes: int, *, layer: int,
             phase: str, prefix: str = "", overlap: bool = True, contention_ns: float = 0.0) -> None:
        """Ring attention over ``steps`` context-parallel ranks: the core ops run once per
        step on 1/steps of the keys while the key/value block moves one rank on
        (``overlap``; False: each step's core waits for that step's transfer too). An
        overlapped step's core ops take ``contention_ns`` more in all (shared in proportion
        to their times): the memory time of the block the GPU sends and receives beside them."""
        self.close()
        kv_ready = self.tail
        prev_recv = -1
        chunk_ns = sum(r.dur_ns for r in core) / steps
        held = 1.0 + (contention_ns / chunk_ns if overlap and chunk_ns > 0 else 0.0)
        for j in range(steps):
            send = recv = -1
            if j < steps - 1:
                send = self.add(lane="comm:cp", kind="send", name=f"{prefix}cp.ring", phase=phase,
                                layer=layer, collective="send", gkind="cp", msg_bytes=msg_bytes,
                                peer_sel="cp_next")
                pair = str(send)
                self.cols["key"][send] = pair
                recv = self.add(lane="comm:cp_recv", kind="recv", name=f"{prefix}cp.ring",
                                phase=phase, layer=layer, collective="recv", gkind="cp",
                                msg_bytes=msg_bytes, peer_sel="cp_prev", key=pair)
                self.edge(kv_ready if j == 0 else prev_recv, send)
                if not overlap and j > 0:  # the transfer waits for the previous chunk
                    self.edge(self.tail, send)
                if self.tail < 0:
                    self.entry.append(send)
            grow = held if send >= 0 else 1.0
            for k, r in enumerate(core):
                i = self.add(lane="compute", kind="gpu", name=f"{prefix}{r.name}", op_class=r.op_class,
                             phase=phase, flops=r.flops / steps, nbytes=r.bytes / steps,
                             dur_ns=int(round(r.dur_ns / steps * grow)), layer=layer)
                if self.first_compute < 0:
                    self.first_compute = i
                self._chain(i, "compute")
                if k == 0 and prev_recv >= 0:
                    self.edge(prev_recv, i)
                if k == 0 and not overlap and recv >= 0:
                    self.edge(recv, i)  # serial: transfer, chunk, transfer, chunk, ...
                self.layer_end[layer] = i
            prev_recv = recv

    def async_comm(self, *, lane: str, name: str, collective: str, gkind: str, msg_bytes: int,
                   layer: int, phase: str, after: int = -1) -> int:
        """A communication task off the chain, started after task ``after`` (if any)."""
        i = self.add(lane=lane, kind="coll", name=name, phase=phase, layer=layer,
                     collective=collective, gkind=gkind, msg_bytes=msg_bytes)
        self.edge(after, i)
        return i

    def compacted(self) -> Unit:
        """A copy with runs of consecutive compute tasks of one layer and phase merged into one
        task (durations, FLOPs and bytes summed) wherever nothing else joins the run: no edge
        leaves a task before the run's end or enters one after its start. The replay is the
        same (a lane runs its tasks back to back); the graph is several times smaller. A
        merged task is named ``first..last`` and its ``run`` column lists every op it stands
        for (name, class, duration; :func:`run_parts`), so that reports can split its time."""
        n = len(self)
        c = self.cols
        has_out, has_in = set(self.src), set(self.dst)
        out = Unit()
        group = [0] * n
        best: list[float] = []
        parts: dict[int, list[str]] = {}

        def part(i: int) -> str:
            return c["run"][i] or FIELD_SEP.join((c["name"][i], c["op_class"][i], str(c["dur_ns"][i])))

        for i in range(n):
            merge = (
                i > 0 and c["lane"][i] == "compute" and c["lane"][i - 1] == "compute"
                and c["kind"][i] == "gpu" and c["kind"][i - 1] == "gpu"
                and c["layer"][i] == c["layer"][i - 1] and c["phase"][i] == c["phase"][i - 1]
                and (i - 1) not in has_out and i not in has_in
            )
            if merge:
                g = group[i - 1]
                group[i] = g
                oc = out.cols
                oc["flops"][g] += c["flops"][i]
                oc["bytes"][g] += c["bytes"][i]
                oc["dur_ns"][g] += c["dur_ns"][i]
                oc["name"][g] = oc["name"][g].split("..")[0] + ".." + c["name"][i]
                if g not in parts:  # the first merge: task i - 1 began the run
                    parts[g] = [part(i - 1)]
                parts[g].append(part(i))
                if c["dur_ns"][i] > best[g]:
                    best[g] = c["dur_ns"][i]
                    oc["op_class"][g] = c["op_class"][i]
                continue
            group[i] = out.add(lane=c["lane"][i], kind=c["kind"][i], name=c["name"][i],
                               op_class=c["op_class"][i], phase=c["phase"][i], flops=c["flops"][i],
                               nbytes=c["bytes"][i], dur_ns=c["dur_ns"][i], layer=c["layer"][i],
                               collective=c["collective"][i], gkind=c["gkind"][i],
                               msg_bytes=c["msg_bytes"][i], peer_sel=c["peer_sel"][i], key=c["key"][i],
                               algorithm=c["algorithm"][i], chunks=c["chunks"][i],
                               run=c["run"][i])
            best.append(c["dur_ns"][i])
        for g, ps in parts.items():
            out.cols["run"][g] = RUN_SEP.join(ps)
        for a, b in zip(self.src, self.dst, strict=True):
            out.edge(group[a], group[b])
        out.entry = list(dict.fromkeys(group[e] for e in self.entry))
        out.tail = group[self.tail] if self.tail >= 0 else -1
        out.first_compute = group[self.first_compute] if self.first_compute >= 0 else -1
        out.layer_end = {k: group[v] for k, v in self.layer_end.items()}
        out.layer_start = {k: group[v] for k, v in self.layer_start.items()}
        out.marks = {k: group[v] for k, v in self.marks.items()}
        return out

    def freeze(self) -> Unit:
        """Convert the columns to numpy arrays (``arrays``); returns self."""
        a: dict[str, np.ndarray] = {}
        for c, vals in self.cols.items():
            if c in ("flops", "bytes"):
                a[c] = np.asarray(vals, dtype=np.float64)
            elif c in ("dur_ns", "msg_bytes"):
                a[c] = np.asarray(vals, dtype=np.int64)
            elif c == "chunks":
                a[c] = np.asarray(vals, dtype=np.int32)
            elif c == "layer":
                a[c] = np.asarray(vals, dtype=np.int32)
            else:
                arr = np.empty(len(vals), dtype=object)
                arr[:] = vals
                a[c] = arr
        a["src"] = np.asarray(self.src, dtype=np.int64)
        a["dst"] = np.asarray(self.dst, dtype=np.int64)
        self.arrays = a
        return self


class Program:
    """Accumulates unit copies (in schedule order) and extra tasks of one stage."""

    def __init__(self) -> None:
        self.units: list[tuple[Unit, str]] = []
        self.offsets: list[int] = []
        self.n_unit_tasks = 0
        self.extra = Unit()
        self.x_src: list[int] = []  # edges between unit tasks (>= 0) and extras (encoded < 0)
        self.x_dst: list[int] = []

    def add_unit(self, unit: Unit, tag: str) -> int:
        off = self.n_unit_tasks
        self.units.append((unit, tag))
        self.offsets.append(off)
        self.n_unit_tasks += len(unit)
        return off

    def extra_task(self, **kw: Any) -> int:
        return -1 - self.extra.add(**kw)

    def edge(self, a: int, b: int) -> None:
        self.x_src.append(a)
        self.x_dst.append(b)

    def arrays(self) -> dict[str, np.ndarray]:
        ex = self.extra.freeze().arrays
        assert ex is not None
        n_u = self.n_unit_tasks
        out: dict[str, np.ndarray] = {}
        for col in ex:
            if col in ("src", "dst"):
                continue
            parts = [u.arrays[col] for u, _ in self.units] + [ex[col]]  # type: ignore[index]
            out[col] = np.concatenate(parts) if parts else ex[col]
        # local keys of unit comm tasks get the instance tag
        keys = out["key"]
        for (u, tag), off in zip(self.units, self.offsets, strict=True):
            a = u.arrays
            assert a is not None
            comm = np.flatnonzero(a["kind"] != "gpu")
            keys[off + comm] = [f"{tag}|{k}" for k in a["key"][comm].tolist()]
        srcs = [u.arrays["src"] + off for (u, _), off in zip(self.units, self.offsets, strict=True)]  # type: ignore[index]
        dsts = [u.arrays["dst"] + off for (u, _), off in zip(self.units, self.offsets, strict=True)]  # type: ignore[index]
        xs = np.asarray(self.x_src, dtype=np.int64)
        xd = np.asarray(self.x_dst, dtype=np.int64)
        xs = np.where(xs < 0, n_u + (-1 - xs), xs)
        xd = np.where(xd < 0, n_u + (-1 - xd), xd)
        srcs += [ex["src"] + n_u, xs]
        dsts += [ex["dst"] + n_u, xd]
        out["src"] = np.concatenate(srcs)
        out["dst"] = np.concatenate(dsts)
        return out


def run_parts(run: str) -> list[tuple[str, str, int]]:
    """The (name, op class, duration ns) of each op a merged task's ``run`` stands for, in
    the order they ran ([] for a task of one op)."""
    out = []
    for p in run.split(RUN_SEP) if run else ():
        name, cls, dur = p.split(FIELD_SEP)
        out.append((name, cls, int(dur)))
    return out
