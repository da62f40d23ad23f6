"""One rank's lanes, tasks and edges from its op table (see :mod:`tracesim.trace.extract`).

:class:`RankExtractor` does the work described in the extractor's module docstring for a
single rank; :func:`tracesim.trace.extract.extract` runs it per rank and joins the parts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracesim.errors import InputError
from tracesim.trace.cpulanes import keep_outside, own_stretches, relabel_gloo, whole_comm_leaves
from tracesim.trace.overhead import overhead_in
from tracesim.trace.threads import data_edges, thread_edges

_STEP_RE = re.compile(r"^ProfilerStep#\d+$")
#: op table columns a task copies from its op
_TASK_FIELDS = ("op_class", "flops", "bytes", "step", "phase", "layer", "collective", "msg_bytes",
                "event_id", "scope", "cat", "peer", "dtype", "pg", "comm_seq", "comm_meta",
                "group_kind", "group_ranks", "group_source")
_HOST_CATS = ("cpu_op", "annotation", "runtime", "comm")
_GPU_CATS = ("kernel", "memcpy", "memset")
_SYNC_CALLS = {"DeviceSynchronize", "StreamSynchronize", "EventSynchronize", "CtxSynchronize"}
#: a GPU op counts as having waited when it started this much after it was free to start
_WAIT_SLACK_NS = 2_000
#: ...and an op on another stream ended at most this long before it started
_EVENT_MATCH_NS = 10_000
#: longest device-side gap between a GPU op and the moment it was free to start that is
#: kept as GPU scheduling overhead when an event edge explains the rest of the wait
_GPU_GAP_MAX_NS = 20_000
#: a launch call longer than this that returned right after some GPU op ended was waiting
#: for a free slot in the device's launch queue (the queue holds ~1024 pending launches)
_QUEUE_WAIT_MIN_NS = 50_000
_QUEUE_MATCH_NS = 20_000
#: a copy call counts as blocking when it returned no earlier than this before the copy ended
_BLOCKING_SLACK_NS = 1_000
#: a synchronising call waited only for GPU work that ended before it returned (plus this,
#: for the clocks of host and device)
_SYNC_SLACK_NS = 5_000


@dataclass(frozen=True)
class ExtractOptions:
    """Extraction choices.

    Attributes:
        profiler_overhead_ns: per traced host op, removed from the host lanes to predict
            the unprofiled run (0 keeps the profiled timing). Measured separately by the
            collector (meta.yaml ``profiler_overhead``), never fitted here.
        infer_stream_waits: add inferred ``event`` edges for old traces without cuda_sync.
    """

    profiler_overhead_ns: float = 0.0
    #: per traced annotation (record_function blocks such as module scopes); None: the same
    #: as ``profiler_overhead_ns``
    annotation_overhead_ns: float | None = None
    #: per rank (op, annotation) overhead in ns, overriding the two above for that rank
    rank_overhead_ns: tuple[tuple[int, float, float], ...] = ()
    infer_stream_waits: bool = True
    #: replay all ranks together: a common time origin (ranks recorded on one host share a
    #: clock) and collectives matched across ranks (each takes the shortest member's
    #: recorded time; the rest of every member's wait comes out of the simulation)
    joint_ranks: bool = False


def _runtime_base(name: str) -> str:
    for prefix in ("cuda", "hip"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


#: timestamps of old traces are float microseconds near 1e15, good to ~0.25 us; events that
#: overlap by less than this are siblings, not parent and child
_NEST_TOL_NS = 500


def _leaves(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Boolean mask (over time-sorted events) of events that contain no later event."""
    if len(ts) == 0:
        return np.zeros(0, dtype=bool)
    big = np.iinfo(np.int64).max // 2
    nxt = np.append(ts[1:], big)
    nxt_end = np.append(end[1:], big)
    contains_next = (nxt < end) & (nxt_end <= end + _NEST_TOL_NS)
    return ~contains_next


class RankExtractor:
    """Builds one rank's tasks, lanes and edges (see the module docstring)."""

    def __init__(self, ops: pd.DataFrame, rank: int, opt: ExtractOptions, t0: int | None = None):
        self.t0 = t0
        self.ops = ops.reset_index(drop=True)
        self.rank = rank
        self.opt = opt
        o = self.ops
        self.col = {c: o[c].to_numpy() for c in _TASK_FIELDS if c in o}
        for c, empty in (("comm_meta", ""), ("pg", ""), ("comm_seq", -1), ("group_source", ""),
                         ("group_kind", "")):  # op tables of schema 1
            self.col.setdefault(c, np.full(len(o), empty, dtype=object))
        self.cat = o["cat"].to_numpy()
        self.name = o["name"].to_numpy()
        self.ts = o["ts_ns"].to_numpy().astype(np.int64)
        self.end = self.ts + o["dur_ns"].to_numpy().astype(np.int64)
        self.lane_col = o["lane"].to_numpy()
        self.corr = o["correlation"].to_numpy()
        self.stream = o["stream"].to_numpy()
        self.event_id = o["event_id"].to_numpy()
        self.is_step = np.array([bool(_STEP_RE.match(x)) for x in self.name], dtype=bool) & np.isin(
            self.cat, ("annotation", "cpu_op")
        )
        self.host = np.isin(self.cat, _HOST_CATS) & ~self.is_step
        self.gpu_idx = np.flatnonzero(np.isin(self.cat, _GPU_CATS))
        self.on_cpu = not len(self.gpu_idx)  # recorded on a CPU (tracesim.trace.cpulanes)
        if self.on_cpu:
            relabel_gloo(self.col, o)
        self.gpu_by_corr: dict[int, list[int]] = {}
        for i in self.gpu_idx.tolist():
            if self.corr[i] >= 0:
                self.gpu_by_corr.setdefault(int(self.corr[i]), []).append(i)
        self.sync_by_corr = {
            int(self.corr[i]): i for i in np.flatnonzero(self.cat == "sync").tolist() if self.corr[i] >= 0
        }
        order = self.gpu_idx[np.argsort(self.end[self.gpu_idx], kind="stable")]
        self.gpu_by_end = order
        self.gpu_end_sorted = self.end[order]
        self.rows: list[dict] = []
        self.lanes: list[dict] = []
        self.task_of: dict[int, int] = {}        # op row -> task (launch part of split calls)
        self.launch_of: dict[int, int] = {}      # GPU op row -> launching runtime op row
        self.launch_end: dict[int, int] = {}     # runtime op row -> recorded launch-part end
        self.pending_sync: list[tuple[int, int, int | None]] = []  # (runtime row, wait task, stream|None)
        self.src: list[int] = []
        self.dst: list[int] = []
        self.kinds: list[str] = []

    # -- small helpers
    def edge(self, a: int, b: int, kind: str) -> None:
        if a != b:
            self.src.append(a)
            self.dst.append(b)
            self.kinds.append(kind)
            if kind == "event":
                self.explain_wait(b)

    def explain_wait(self, task: int) -> None:
        """An event edge explains a GPU op's wait: keep only a short scheduling gap."""
        row = self.rows[task]
        if row["gap_ns"] > _GPU_GAP_MAX_NS:
            row["gap_ns"] = 0

    def add_task(self, lane_id: int, i: int | None, kind: str, nm: str, dur: int, gap: int) -> int:
        tid = len(self.rows)
        row: dict = {"rank": self.rank, "lane": lane_id, "kind": kind, "name": nm,
                     "dur_ns": int(dur), "gap_ns": int(max(gap, 0)), "src_event": -1}
        if i is not None:
            c = self.col
            row.update(
                op_class=c["op_class"][i], flops=float(c["flops"][i]), bytes=float(c["bytes"][i]),
                step=c["step"][i], phase=c["phase"][i], layer=int(c["layer"][i]),
                collective=c["collective"][i], msg_bytes=int(c["msg_bytes"][i]),
                src_event=int(c["event_id"][i]), scope=c["scope"][i], cat=c["cat"][i],
            )
            if c["comm_meta"][i]:  # a communication op: its metadata (tracesim.trace.comms)
                row.update(peer=int(c["peer"][i]), dtype=c["dtype"][i], pg=c["pg"][i],
                           comm_seq=int(c["comm_seq"][i]), comm_meta=c["comm_meta"][i],
                           group_kind=c["group_kind"][i], group_ranks=c["group_ranks"][i],
                           group_source=c["group_source"][i])
        self.rows.append(row)
        return tid

    # -- host lanes
    def host_lanes(self) -> None:
        host = self.host
        if not host.any():
            raise InputError(f"rank {self.rank}: the trace has no host (CPU) events", "trace")
        t0 = int(self.ts[host | self.is_step].min()) if self.t0 is None else self.t0
        ts, end, name = self.ts, self.end, self.name
        step_rows = np.flatnonzero(self.is_step)
        op_ov, an_ov = _rank_overhead(self.opt, self.rank)
        # recorded on a CPU: a compute op's arithmetic is a task too, a communication op one
        # task over its whole window
        own = own_stretches(self.ops) if self.on_cpu else {}
        for ln in sorted(pd.unique(self.lane_col[host]), key=str):
            idx = np.flatnonzero(host & (self.lane_col == ln))
            order = idx[np.lexsort((self.event_id[idx], -end[idx], ts[idx]))]
            all_ts = ts[order]
            weights = np.where(self.cat[order] == "annotation", an_ov, op_ov)
            overhead = (all_ts, np.concatenate([[0.0], np.cumsum(weights)]))
            is_leaf = _leaves(all_ts, end[order])
            if self.on_cpu:
                is_leaf, folded = whole_comm_leaves(all_ts, end[order], self.cat[order] == "comm",
                                                    is_leaf, _NEST_TOL_NS)
                own = keep_outside(own, order[folded])
            leaf = order[is_leaf]
            items = [(int(ts[i]), 1, int(i)) for i in leaf]
            items += [(a, 3, i) for i, (a, _) in own.items() if self.lane_col[i] == ln]
            items += [(int(ts[s]), 0, int(s)) for s in step_rows if self.lane_col[s] == ln]
            items += [(int(end[s]), 2, int(s)) for s in step_rows if self.lane_col[s] == ln]
            items.sort()
            lane_id = len(self.lanes)
            self.lanes.append({"rank": self.rank, "name": f"cpu:{str(ln).split(':', 1)[-1]}", "kind": "cpu"})
            prev_end = t0
            # profiler overhead not yet taken out (a task shorter than the overhead of the
            # events around it passes the rest on to the next task of the lane)
            debt = 0
            for t_start, what, i in items:
                if what in (0, 2):
                    tag = "begin" if what == 0 else "end"
                    gap = max(0, t_start - prev_end)
                    ov = _overhead_in(overhead, prev_end, t_start) + debt
                    take = min(gap, ov)
                    gap -= take
                    debt = ov - take
                    tid = self.add_task(lane_id, None, "cpu", f"{name[i]}:{tag}", 0, gap)
                    self.rows[tid]["step"] = name[i]
                    self.rows[tid]["marker"] = tag
                    self.rows[tid]["src_event"] = int(self.event_id[i])
                    self.rows[tid]["measured_ns"] = int(end[i] - ts[i])
                    prev_end = max(prev_end, t_start)
                    continue
                s = max(own[i][0] if what == 3 else int(ts[i]), prev_end)
                e = max(own[i][1] if what == 3 else int(end[i]), s)
                ov = _overhead_in(overhead, prev_end, e) + debt
                gap = s - prev_end
                dur = e - s
                take = min(gap, ov)
                gap -= take
                take_dur = min(dur, ov - take)
                dur -= take_dur
                debt = ov - take - take_dur
                prev_end = e
                first_new = len(self.rows)
                if what == 3:
                    self.add_task(lane_id, i, "cpu", name[i], dur, gap)
                elif self.cat[i] == "runtime":
                    self.runtime_call(i, lane_id, gap, dur, s, e)
                else:
                    self.task_of[i] = self.add_task(lane_id, i, "cpu", name[i], dur, gap)
                for row in self.rows[first_new:]:
                    row["rec_start"], row["rec_end"] = s, e

    def runtime_call(self, i: int, lane_id: int, gap: int, dur: int, s: int, e: int) -> None:
        """A runtime call: plain, launching, or blocking (split into launch + wait parts)."""
        base = _runtime_base(self.name[i])
        launched = self.gpu_by_corr.get(int(self.corr[i]), [])
        for g in launched:
            self.launch_of[g] = i
        if base in _SYNC_CALLS:
            sync = self.sync_by_corr.get(int(self.corr[i]))
            target_stream = None
            if sync is not None and base == "StreamSynchronize" and self.stream[sync] >= 0:
                target_stream = int(self.stream[sync])
            if sync is not None and base == "EventSynchronize":
                ws = int(self.ops["wait_stream"].iat[sync])
                target_stream = ws if ws >= 0 else None
            tid = self.add_task(lane_id, i, "cpu", self.name[i], dur, gap)
            self.task_of[i] = tid
            self.launch_end[i] = e
            self.pending_sync.append((i, tid, target_stream))
            return
        first_start = min((int(self.ts[g]) for g in launched), default=e)
        if base == "GraphLaunch" and first_start < e:
            # a CUDA / HIP graph: its kernels (all with this call's correlation id) begin
            # to run while the call still submits the rest of the graph
            launch_dur = int(np.clip(first_start - s, 0, dur))
            lp = self.add_task(lane_id, i, "cpu", self.name[i], launch_dur, gap)
            self.add_task(lane_id, i, "cpu", f"{self.name[i]} (submit)", dur - launch_dur, 0)
            self.task_of[i] = lp
            self.launch_end[i] = s + launch_dur
            return
        if launched and dur > _QUEUE_WAIT_MIN_NS:
            freed = self.queue_slot_freed_by(i, s, e, launched, first_start)
            if freed is not None:
                # the launch queue was full: the call waited for an earlier GPU op to end
                wait_dur = max(0, e - int(self.end[freed]))
                launch_dur = min(dur - min(dur, wait_dur), _QUEUE_WAIT_MIN_NS)
                wp = self.add_task(lane_id, i, "cpu", f"{self.name[i]} (queue full)", 0, gap)
                lp = self.add_task(lane_id, i, "cpu", self.name[i], max(wait_dur, launch_dur), 0)
                self.task_of[i] = lp
                self.launch_end[i] = e
                self.pending_sync.append((i, wp, -2 - freed))
                return
        # a copy the call returned after (or during most of: pageable memory is staged
        # while the copy runs, the call returning before its last chunk lands) blocked it
        blocking = [g for g in launched if e >= self.end[g] - _BLOCKING_SLACK_NS
                    or (self.cat[g] == "memcpy" and 2 * (e - self.ts[g]) > self.end[g] - self.ts[g])]
        if launched and blocking:
            last_end = max(int(self.end[g]) for g in blocking)
            wait_dur = max(0, min(dur, e - last_end))
            launch_dur = int(np.clip(first_start - s, 0, max(0, dur - wait_dur)))
            lp = self.add_task(lane_id, i, "cpu", self.name[i], launch_dur, gap)
            wp = self.add_task(lane_id, i, "cpu", f"{self.name[i]} (wait)", wait_dur, 0)
            self.task_of[i] = lp
            self.launch_end[i] = s + launch_dur
            for g in blocking:
                self.pending_sync.append((i, wp, -2 - g))  # encoded: wait on op g itself
            return
        self.task_of[i] = self.add_task(lane_id, i, "cpu", self.name[i], dur, gap)
        self.launch_end[i] = e

    def queue_slot_freed_by(self, i: int, s: int, e: int, launched: list[int],
                            first_start: int) -> int | None:
        """The GPU op whose end let a long launch call return (launch queue back-pressure);
        None if the call's own GPU work had started before that op ended (then the call was
        not waiting for a slot before it could submit)."""
        k = int(np.searchsorted(self.gpu_end_sorted, e, side="right")) - 1
        while k >= 0 and self.gpu_by_end[k] in launched:
            k -= 1
        if k < 0:
            return None
        g = int(self.gpu_by_end[k])
        if int(self.gpu_end_sorted[k]) < s or e - int(self.gpu_end_sorted[k]) > _QUEUE_MATCH_NS:
            return None
        if first_start < int(self.end[g]) - _BLOCKING_SLACK_NS:
            return None
        return g

    # -- GPU lanes
    def gpu_lanes(self) -> None:
        ts, end = self.ts, self.end
        if not len(self.gpu_idx):
            return
        for ln in sorted(pd.unique(self.lane_col[self.gpu_idx]), key=lambda x: (len(str(x)), str(x))):
            lane_id = len(self.lanes)
            self.lanes.append({"rank": self.rank, "name": str(ln), "kind": "gpu"})
            idx = self.gpu_idx[self.lane_col[self.gpu_idx] == ln]
            order = idx[np.argsort(ts[idx], kind="stable")]
            prev_end = None
            for i in order.tolist():
                s = int(ts[i]) if prev_end is None else max(int(ts[i]), prev_end)
                e = max(int(end[i]), s)
                # device-side gap: time the op started after it was free to start (previous
                # op on the stream done, launch call returned); short gaps are GPU
                # scheduling overhead and kept, long ones are waits the edges explain.
                r = self.launch_of.get(i)
                cands = [x for x in (prev_end, self.launch_end.get(r) if r is not None else None) if x is not None]
                free = max(cands) if cands else s
                gap = s - free
                # a longer wait is kept too unless an event edge explains it (see
                # explain_wait): communication kernels of a one-rank trace waited for their
                # peers, and a sampled trace may lack the op that was waited for
                gap = max(0, gap)
                prev_end = e
                self.task_of[i] = self.add_task(lane_id, i, "gpu", self.name[i], e - s, gap)
                self.rows[self.task_of[i]]["rec_start"] = int(ts[i])
                self.rows[self.task_of[i]]["rec_end"] = int(end[i])

    # -- edges
    def launch_and_sync_edges(self) -> None:
        for g, r in self.launch_of.items():
            if r in self.task_of and g in self.task_of:
                self.edge(self.task_of[r], self.task_of[g], "launch")
        # last GPU op per stream launched before each sync call
        launched = sorted(
            (int(self.ts[r]), int(self.stream[g]), g) for g, r in self.launch_of.items() if g in self.task_of
        )
        launch_ts = np.array([x[0] for x in launched], dtype=np.int64)
        for r, wait_task, target in self.pending_sync:
            if target is not None and target <= -2:
                g = -2 - target
                self.edge(self.task_of[g], wait_task, "sync")
                continue
            k = int(np.searchsorted(launch_ts, int(self.ts[r]), side="left"))
            last: dict[int, int] = {}
            for _, st, g in launched[:k]:
                if (target is None or st == target) and (st not in last or self.end[g] >= self.end[last[st]]):
                    last[st] = g
            # a call cannot return before the work it waited for had ended: streams whose
            # last op ended later were not waited for (the call synchronised another one)
            returned = int(self.end[r]) + _SYNC_SLACK_NS
            last = {st: g for st, g in last.items() if int(self.end[g]) <= returned}
            if target is None and last and _runtime_base(self.name[r]) != "DeviceSynchronize":
                # a stream or event sync of unknown stream (older traces): the stream whose
                # work ended last before the call returned
                st = max(last, key=lambda x: (int(self.end[last[x]]), x))
                last = {st: last[st]}
            for g in last.values():
                self.edge(self.task_of[g], wait_task, "sync")
            if last:
                done = max(int(self.end[g]) for g in last.values())
                row = self.rows[wait_task]
                row["dur_ns"] = int(max(0, min(row["dur_ns"], int(self.end[r]) - done)))

    def stream_wait_edges(self) -> int:
        """Edges from cuda_sync 'Stream Wait Event' records; returns how many were found."""
        found = 0
        waits = np.flatnonzero((self.cat == "sync") & (self.ops["sync_kind"].to_numpy() == "Stream Wait Event"))
        if not len(waits):
            return 0
        # GPU ops per stream, in launch (correlation) order; the kernels of a CUDA graph
        # share one correlation id and run in recorded order
        per_stream: dict[int, list[tuple[int, int, int]]] = {}
        for g in self.gpu_idx.tolist():
            if g in self.task_of and self.corr[g] >= 0:
                per_stream.setdefault(int(self.stream[g]), []).append((int(self.corr[g]), int(self.ts[g]), g))
        corrs: dict[int, np.ndarray] = {}
        for st, v in per_stream.items():
            v.sort()
            corrs[st] = np.array([c for c, _, _ in v], dtype=np.int64)
        rec = self.ops["wait_record_corr"].to_numpy()
        wst = self.ops["wait_stream"].to_numpy()
        for w in waits.tolist():
            src_list = per_stream.get(int(wst[w]), [])
            dst_list = per_stream.get(int(self.stream[w]), [])
            if not src_list or not dst_list:
                continue
            k = int(np.searchsorted(corrs[int(wst[w])], int(rec[w])))
            j = int(np.searchsorted(corrs[int(self.stream[w])], int(self.corr[w])))
            if k > 0 and j < len(dst_list):
                a, b = src_list[k - 1][2], dst_list[j][2]
                # the recording must agree: the waiting op started after the other ended
                if int(self.end[a]) <= int(self.ts[b]) + _SYNC_SLACK_NS:
                    self.edge(self.task_of[a], self.task_of[b], "event")
                found += 1
        return found

    def inferred_stream_waits(self) -> None:
        """Old traces: an op that started late, right after another stream's op ended."""
        by_dev: dict[str, list[int]] = {}
        dev = self.ops["device"].to_numpy()
        for g in self.gpu_idx.tolist():
            by_dev.setdefault(str(dev[g]), []).append(g)
        for ops in by_dev.values():
            if len({int(self.stream[g]) for g in ops}) < 2:
                continue
            ops.sort(key=lambda g: (int(self.ts[g]), g))
            ends = sorted((int(self.end[g]), g) for g in ops)
            end_ts = np.array([x[0] for x in ends], dtype=np.int64)
            # per position in ``ends``: the last earlier position on another stream
            end_st = [int(self.stream[g]) for _, g in ends]
            other_before = [-1] * len(ends)
            for k in range(1, len(ends)):
                other_before[k] = k - 1 if end_st[k - 1] != end_st[k] else other_before[k - 1]
            prev_on_stream: dict[int, int] = {}
            for g in ops:
                st = int(self.stream[g])
                release = self.launch_end.get(self.launch_of.get(g, -1), int(self.ts[g]))
                p = prev_on_stream.get(st)
                if p is not None:
                    release = max(release, int(self.end[p]))
                prev_on_stream[st] = g
                if int(self.ts[g]) - release <= _WAIT_SLACK_NS:
                    continue
                k = int(np.searchsorted(end_ts, int(self.ts[g]) + 500, side="right")) - 1
                if k >= 0 and end_st[k] == st:
                    k = other_before[k]
                if k < 0:
                    continue
                e_other, other = ends[k]
                if int(self.ts[g]) - e_other <= _EVENT_MATCH_NS and e_other > release:
                    self.edge(self.task_of[other], self.task_of[g], "event")

    def build(self, et: pd.DataFrame | None = None) -> Part:
        self.host_lanes()
        if et is not None:
            data_edges(self, et)
        thread_edges(self)
        self.gpu_lanes()
        self.launch_and_sync_edges()
        if self.stream_wait_edges() == 0 and self.opt.infer_stream_waits:
            self.inferred_stream_waits()
        tasks = pd.DataFrame(self.rows)
        if "marker" not in tasks:
            tasks["marker"] = ""
        tasks["marker"] = tasks["marker"].fillna("")
        return Part(
            tasks,
            (np.array(self.src, dtype=np.int64), np.array(self.dst, dtype=np.int64), self.kinds),
            pd.DataFrame(self.lanes),
        )


def _rank_overhead(opt: ExtractOptions, rank: int) -> tuple[float, float]:
    """(per op, per annotation) profiler overhead in ns for ``rank``."""
    for rk, op_ns, an_ns in opt.rank_overhead_ns:
        if rk == rank:
            return float(op_ns), float(an_ns)
    op_ov = float(opt.profiler_overhead_ns)
    return op_ov, op_ov if opt.annotation_overhead_ns is None else float(opt.annotation_overhead_ns)


def _overhead_in(overhead: tuple[np.ndarray, np.ndarray], lo: int, hi: int) -> int:
    """Profiler overhead of the host events that start in [lo, hi) (cumulative weights)."""
    if overhead[1][-1] <= 0:
        return 0
    return int(overhead_in(overhead, lo, hi))


@dataclass
class Part:
    tasks: pd.DataFrame
    edges: tuple[np.ndarray, np.ndarray, list[str]]
    lanes: pd.DataFrame
