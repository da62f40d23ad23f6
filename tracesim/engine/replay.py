"""The SimPy replay of task graphs.

Semantics (DESIGN.md, "Task graph and replay semantics"):

* each lane runs its tasks one at a time in ascending ``task_id`` order;
* a task starts at ``max(lane_free + gap_ns, all predecessors finished)``;
* a compute task (``cpu`` / ``gpu``) then occupies its lane for ``dur_ns``;
* a communication task (``coll`` / ``send`` / ``recv``) waits until every task with the same
  ``match_key`` (one per member rank) has started, then all members run the operation
  together: with a :class:`~tracesim.engine.comm.CommModel` the network decides when it ends;
  without one it takes the smallest ``dur_ns`` among the members (in a recorded trace the
  members that arrived early also recorded their waiting time, so the smallest recorded
  duration is the one closest to the transfer itself);
* when nothing can move but tasks remain (a cycle, a collective whose members never
  arrive), what happens is the graph's ``meta["on_stall"]`` (or the ``on_stall`` argument):
  ``"error"`` (the default; built and hand-made graphs) raises
  :class:`~tracesim.errors.ReplayError` naming the blocked tasks; ``"fallback"`` (graphs
  extracted from recordings) releases the blocked task whose recorded start is earliest,
  dropping the dependency that cannot be resolved, and goes on
  (:mod:`tracesim.engine.stall`); :attr:`ReplayResult.fallbacks` counts them by kind.

How it runs (the cost of a replay is its number of wake-ups): the SimPy environment is the
clock and the event queue shared with the communication model, but lanes are not SimPy
processes: a lane is a position in its task list, advanced by callbacks (no generator and no
event object per task beyond the one timeout that ends it). A run of compute tasks on one lane
that nothing can interleave with -- no task of the run but the last has a successor, and each
next task's predecessors have all finished when the run starts -- is timed in one step: its
start and end times follow by addition, and one timeout ends the whole run (coarsening at
replay time; the builder can also merge such runs into single tasks). Per-task state lives in
typed arrays (``array('q')`` / ``'i'`` / ``'h'``), not Python objects, and the task table's
numeric and categorical-code columns are read in place through memoryviews (no copies).

Determinism: equal inputs give identical results. SimPy orders simultaneous events by (time,
priority, scheduling order); lanes start in lane-index order, a finished task releases its
successors in ascending task id order, the members of a collective finish in ascending task
id order, lanes made ready at the same instant continue in the order they became ready, and
nothing depends on hashing or wall-clock time. Simulated time is integer nanoseconds.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from heapq import heappush

import numpy as np
import pandas as pd
import simpy

from tracesim.engine.comm import CommModel
from tracesim.engine.eventloop import internals as _internals
from tracesim.engine.eventloop import run_env as _run_env
from tracesim.engine.stall import FORCED, StallBreaker, stall_mode
from tracesim.errors import ReplayError
from tracesim.graph.taskgraph import TaskGraph, column_codes

_KIND_CODES = {"cpu": 0, "gpu": 1, "coll": 2, "send": 3, "recv": 4}


@dataclass(frozen=True)
class ReplayResult:
    """Per-task simulated times (integer ns, index = task id) and run statistics.

    ``events`` counts the engine's wake-ups: timeouts that end a compute run or a lane's
    gap, lanes resumed when their predecessors finished, and member tasks released by a
    finished communication operation.

    ``fallbacks`` counts the dependencies that could not be resolved and fell back to the
    recorded order (a stalled replay of a recording, see :mod:`tracesim.engine.stall`), by
    kind: an edge kind (``sync``, ``event``, ...) for each dropped edge,
    ``collective-unmatched`` / ``p2p-unmatched`` for each operation run without its missing
    members. Empty when nothing fell back.
    """

    start_ns: np.ndarray
    end_ns: np.ndarray
    makespan_ns: int
    events: int
    fallbacks: Mapping[str, int] = field(default_factory=dict)

    def fallback_summary(self) -> str:
        """One sentence for reports ("" when nothing fell back)."""
        n = sum(self.fallbacks.values())
        if not n:
            return ""
        kinds = ", ".join(f"{k}: {v}" for k, v in sorted(self.fallbacks.items()))
        return f"{n} dependencies fell back to the recorded order ({kinds})"

    def lane_busy_ns(self, graph: TaskGraph) -> np.ndarray:
        """Busy time per lane (sum of task durations on the lane), ns."""
        lanes = graph.tasks["lane"].to_numpy()
        return np.bincount(lanes, weights=self.end_ns - self.start_ns, minlength=len(graph.lanes))


def _i64(a: np.ndarray) -> array:
    """A typed ``array('q')`` copy of an integer numpy array (fast scalar access, 8 B/item)."""
    out = array("q")
    out.frombytes(np.ascontiguousarray(a, dtype=np.int64).data.cast("B"))
    return out


def _idx(a: np.ndarray) -> array:
    """A typed array of indices or counts: 4 B/item (``array('i')``) when they fit."""
    if len(a) and (int(a.max()) >= 2**31 or int(a.min()) < -(2**31)):
        return _i64(a)
    out = array("i")
    out.frombytes(np.ascontiguousarray(a, dtype=np.int32).data.cast("B"))
    return out


def _small(a: np.ndarray) -> array:
    """A typed array of small counts: 2 B/item (``array('h')``) when they fit."""
    if len(a) and int(a.max()) < 2**15:
        out = array("h")
        out.frombytes(np.ascontiguousarray(a, dtype=np.int16).data.cast("B"))
        return out
    return _idx(a)


def _view(a: np.ndarray) -> memoryview:
    """Scalar access to a 1-D numpy array (Python ints, as fast as a typed array) without
    copying it; ``a`` may be strided (a zero-stride column of one repeated value)."""
    return a.data if len(a) else np.zeros(0, dtype=a.dtype).data


def _kind_codes(col: pd.Series) -> np.ndarray:
    codes, names = column_codes(col)
    bad = sorted(set(names) - set(_KIND_CODES))
    if bad:
        raise ReplayError(f"unknown task kind(s) {bad} in the task graph")
    table = np.array([_KIND_CODES[k] for k in names] or [0], dtype=np.int8)
    return table[codes] if len(codes) else np.zeros(0, dtype=np.int8)


class _Comms:
    """Collectives and point-to-point pairs, one per match key, in arrays indexed by the
    match key's code (``coll_id``: the task table's own codes when the column is a
    Categorical; meaningful for communication tasks only)."""

    def __init__(self, graph: TaskGraph, kind: np.ndarray, dur: np.ndarray):
        tasks = graph.tasks
        idx = np.flatnonzero(kind >= 2)
        self.graph = graph
        self.coll_id, _ = column_codes(tasks["match_key"], names=False)
        if not len(idx):
            self.expected = self.arrived = array("q")
            self.member_ptr = self.members = array("q")
            self.min_dur = array("q")
            return
        codes = self.coll_id[idx].astype(np.int64)
        n_c = int(codes.max()) + 1
        counts = np.bincount(codes, minlength=n_c)
        min_dur = np.full(n_c, np.iinfo(np.int64).max)
        np.minimum.at(min_dur, codes, dur[idx])
        first = np.zeros(n_c, dtype=np.int64)  # unused codes: task 0, never read
        first[codes[::-1]] = idx[::-1]
        k0 = kind[first]
        g0 = tasks["group"].to_numpy()[first].astype(np.int64)
        sizes = np.array([len(g) for g in graph.groups] or [0], dtype=np.int64)
        has_group = (g0 >= 0) & (g0 < len(graph.groups))
        expected = np.where(has_group, sizes[np.where(has_group, g0, 0)], counts)
        expected = np.where((k0 == 3) | (k0 == 4), 2, expected)
        over = np.flatnonzero(counts > expected)
        if len(over):
            c = int(over[0])
            raise ReplayError(f"collective {self.key(c)!r} has {counts[c]} member tasks but its "
                              f"group has {expected[c]} ranks")
        order = np.lexsort((idx, codes))  # members of each operation in task id order
        ptr = np.zeros(n_c + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        self.expected = _idx(expected)
        self.arrived = array("i", bytes(4 * n_c))
        self.member_ptr = _idx(ptr)
        self.members = _idx(idx[order])
        self.min_dur = _i64(min_dur)

    def key(self, c: int) -> str:
        """The match key of operation ``c`` (for messages)."""
        return column_codes(self.graph.tasks["match_key"])[1][c]


def replay(
    graph: TaskGraph,
    comm: CommModel | None = None,
    *,
    observers: Iterable[Callable[[int, int, int], None]] = (),
    on_stall: str | None = None,
) -> ReplayResult:
    """Replay ``graph`` and return the simulated start / end time of every task.

    Args:
        graph: the task graph (all ranks).
        comm: communication model; ``None`` uses the recorded ``dur_ns`` of comm tasks.
        observers: callables ``f(task_id, start_ns, end_ns)`` called once per task when it
            has ended (metric collectors subscribe here; the engine itself does no I/O).
            Within a lane they are called in task order; the tasks of a coarsened run are
            reported when the run ends.
        on_stall: ``"error"`` or ``"fallback"`` (see the module docstring); ``None``: the
            graph's ``meta["on_stall"]``, else ``"error"``.
    """
    mode = stall_mode(graph, on_stall)
    tasks = graph.tasks
    n = len(tasks)
    lane_np = tasks["lane"].to_numpy()
    dur_np = tasks["dur_ns"].to_numpy()  # read in place (int64, or int32 when it fits)
    gap_np = tasks["gap_ns"].to_numpy()
    if dur_np.dtype.kind != "i" or gap_np.dtype.kind != "i":
        dur_np, gap_np = dur_np.astype(np.int64), gap_np.astype(np.int64)
    if n and (dur_np.min() < 0 or gap_np.min() < 0):
        raise ReplayError("negative dur_ns or gap_ns in the task graph")
    kind_np = _kind_codes(tasks["kind"])
    rank_np = tasks["rank"].to_numpy()

    # explicit edges in CSR form (successors in ascending task id); lane order is implicit
    src = graph.edges["src"].to_numpy()
    dst = graph.edges["dst"].to_numpy()
    order = np.lexsort((dst, src))
    succ = _idx(dst[order])
    del order
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    succ_ptr = _idx(ptr)
    in_deg = np.bincount(dst, minlength=n)
    pending = _small(in_deg)
    del src, dst, ptr, in_deg

    # next task on the same lane, and each lane's first task
    n_lanes = len(graph.lanes)
    by_lane = np.argsort(lane_np, kind="stable")
    nxt_np = np.full(n, -1, dtype=np.int32 if n < 2**31 else np.int64)
    same = lane_np[by_lane][1:] == lane_np[by_lane][:-1]
    nxt_np[by_lane[:-1][same]] = by_lane[1:][same]
    first_of_lane = np.full(n_lanes, -1, dtype=np.int64)
    first_of_lane[lane_np[by_lane[::-1]]] = by_lane[::-1]
    del by_lane, same

    cm = _Comms(graph, kind_np, dur_np)
    group_l = _view(np.ascontiguousarray(tasks["group"].to_numpy()))
    groups = [tuple(sorted(int(r) for r in g)) for g in graph.groups]
    coll_np, coll_names = column_codes(tasks["collective"])  # names by code, not per task
    gk_np, gk_names = column_codes(tasks["group_kind"])
    # the algorithm a task asks for (optional column; "" or absent: the model chooses)
    al_code, al_names = (column_codes(tasks["algorithm"]) if "algorithm" in tasks
                         else (np.zeros(0, dtype=np.int8), []))
    # the operations a comm task stands for, back to back (optional column; absent: one)
    chunks_np = tasks["chunks"].to_numpy() if "chunks" in tasks else None
    chunks = (_view(np.ascontiguousarray(chunks_np)) if chunks_np is not None and len(chunks_np)
              and int(chunks_np.max()) > 1 else None)
    del chunks_np
    # the columns a communication operation reads, as memoryviews (Python ints per item)
    coll_code, gk_code = _view(np.ascontiguousarray(coll_np)), _view(np.ascontiguousarray(gk_np))
    msg = _view(np.ascontiguousarray(tasks["msg_bytes"].to_numpy()))
    peer = _view(np.ascontiguousarray(tasks["peer"].to_numpy()))
    rank_of = _view(np.ascontiguousarray(rank_np))
    del coll_np, gk_np

    env = simpy.Environment()
    if comm is not None:
        comm.attach(env)
        bind = getattr(comm, "bind_activity", None)
        if bind is not None:  # traffic from outside the job stops when the job has ended
            bind(lambda: n_live > 0)
    dur, gap, nxt = _view(np.ascontiguousarray(dur_np)), _view(gap_np), _idx(nxt_np)
    coll = _view(cm.coll_id)  # operation of a communication task (no copy); see _Comms
    kind = _view(kind_np)  # int8 codes (_KIND_CODES)
    del dur_np, gap_np, nxt_np, lane_np
    start = array("q", [-1]) * n
    end = array("q", [-1]) * n
    waiting = bytearray(n)  # 1: the task's lane waits for its predecessors
    obs = list(observers)
    expected, arrived = cm.expected, cm.arrived
    member_ptr, members = cm.member_ptr, cm.members
    ready: list[int] = []  # tasks whose lane may proceed now (in order)
    n_events = 0
    n_live: int = 0  # timeouts and operations of the job in flight (see bind_activity below)
    timeout = env.timeout
    queue, eid = _internals(env)
    push = heappush

    def release(t: int, now: int) -> None:
        """Task ``t`` has ended at ``now``: record it and release its successors."""
        end[t] = now
        for f in obs:
            f(t, start[t], now)
        for k in range(succ_ptr[t], succ_ptr[t + 1]):
            s = succ[k]
            left = pending[s] - 1
            pending[s] = left
            if left == 0 and waiting[s]:
                waiting[s] = 0
                ready.append(s)

    def run_lane(t: int, gap_done: bool, now: int) -> None:
        """Advance a lane from task ``t`` at ``now`` (the previous task on the lane has ended)."""
        nonlocal n_events, n_live
        while t >= 0:
            if not gap_done and gap[t]:
                n_live += 1
                timeout(gap[t]).callbacks.append(gap_cb(t))
                return
            gap_done = False
            if pending[t]:
                waiting[t] = 1
                return
            start[t] = now
            if kind[t] >= 2:
                begin_comm(t)
                return
            # a run of compute tasks that nothing can interleave with ends in one timeout
            e = now + dur[t]
            chain = None
            while succ_ptr[t] == succ_ptr[t + 1]:
                u = nxt[t]
                if u < 0 or kind[u] >= 2 or pending[u]:
                    break
                end[t] = e
                if obs:
                    if chain is None:
                        chain = []
                    chain.append(t)
                e += gap[u]
                start[u] = e
                e += dur[u]
                t = u
            if e == now:  # zero duration: nothing to wait for
                if chain:
                    for c in chain:
                        for f in obs:
                            f(c, start[c], end[c])
                release(t, now)
                t = nxt[t]
                continue
            n_events += 1
            n_live += 1
            if queue is not None:  # what env.timeout(e - now) schedules, without the Timeout
                push(queue, (e, 1, next(eid), _Done(t, chain, e)))  # 1: simpy's NORMAL priority
            else:
                timeout(e - now).callbacks.append(_Done(t, chain, e))
            return

    def drain(now: int) -> None:
        nonlocal n_events
        while ready:
            batch = ready[:]
            ready.clear()
            for t in batch:
                n_events += 1
                run_lane(t, True, now)

    class _Done:
        """The event that ends a compute run on a lane at ``e``, and its callback (scheduled
        on SimPy's queue as a Timeout would be: it has the ``callbacks`` and ``_ok`` that
        :meth:`simpy.Environment.step` reads; or appended to a Timeout's callbacks)."""

        __slots__ = ("t", "chain", "e", "callbacks")
        _ok = True

        def __init__(self, t: int, chain: list[int] | None, e: int):
            self.t, self.chain, self.e = t, chain, e  # e: when the run ends (env.now then)
            self.callbacks: tuple[_Done, ...] | None = (self,)

        def __call__(self, _ev: simpy.Event) -> None:
            nonlocal n_live
            n_live -= 1
            t, now = self.t, self.e
            if self.chain:
                for c in self.chain:
                    for f in obs:
                        f(c, start[c], end[c])
            release(t, now)
            run_lane(nxt[t], False, now)
            drain(now)

    def gap_cb(t: int) -> Callable[[simpy.Event], None]:
        def cb(_ev: simpy.Event) -> None:
            nonlocal n_events, n_live
            n_events += 1
            n_live -= 1
            now = int(env.now)
            run_lane(t, True, now)
            drain(now)

        return cb

    def begin_comm(t: int) -> None:
        nonlocal n_live
        c = coll[t]
        got = arrived[c] + 1
        arrived[c] = got
        if got < expected[c]:
            return
        lo, hi = member_ptr[c], member_ptr[c + 1]
        done: simpy.Event
        if comm is None:
            done = timeout(cm.min_dur[c])
        elif kind[t] == 2:
            g = group_l[t]
            if 0 <= g < len(groups) and hi - lo == len(groups[g]):
                ranks = groups[g]  # every member present: the group's ranks
            elif hi - lo == 1:  # one member (a representative's collective)
                ranks = (rank_of[members[lo]],)
            else:
                ranks = tuple(sorted(rank_of[m] for m in members[lo:hi]))
            alg = al_names[al_code[t]] if al_names and al_code[t] >= 0 else ""
            k = chunks[t] if chunks is not None else 1
            if k > 1:
                done = comm.collective(coll_names[coll_code[t]], ranks, msg[t], gk_names[gk_code[t]],
                                       algorithm=alg, chunks=k)
            elif alg:
                done = comm.collective(coll_names[coll_code[t]], ranks, msg[t], gk_names[gk_code[t]],
                                       algorithm=alg)
            else:
                done = comm.collective(coll_names[coll_code[t]], ranks, msg[t], gk_names[gk_code[t]])
        elif kind[t] == 3:
            done = comm.p2p(rank_of[t], peer[t], msg[t], gk_names[gk_code[t]])
        else:
            done = comm.p2p(peer[t], rank_of[t], msg[t], gk_names[gk_code[t]])
        n_live += 1
        done.callbacks.append(finish_members(members[lo:hi]))

    def finish_members(ms: Sequence[int]) -> Callable[[simpy.Event], None]:
        """Callback of a finished communication operation: release its members ``ms``."""

        def finished(_ev: simpy.Event) -> None:
            nonlocal n_events, n_live
            n_events += len(ms)
            n_live -= 1
            now = int(env.now)
            for m in ms:
                release(m, now)
            for m in ms:
                run_lane(nxt[m], False, now)
            drain(now)

        return finished

    for t0 in first_of_lane.tolist():
        if t0 >= 0:
            run_lane(t0, False, 0)
            drain(0)
    _run_env(env)
    # the result shares the arrays' memory (no copy)
    start_np = np.frombuffer(start, dtype=np.int64) if n else np.zeros(0, dtype=np.int64)
    end_np = np.frombuffer(end, dtype=np.int64) if n else np.zeros(0, dtype=np.int64)
    fallbacks: dict[str, int] = {}
    if n and int(end_np.min()) < 0:
        if mode == "error":
            unfinished = np.flatnonzero(end_np < 0)
            raise ReplayError(_blocked_message(graph, unfinished, start_np, pending, cm, kind_np))
        # stalled: release the blocked task recorded first, until every task has ended
        sb = StallBreaker(graph, first_of_lane.tolist())
        while (t := sb.pick(end, start, waiting, kind, nxt)) >= 0:
            now = int(env.now)
            if waiting[t]:
                sb.drop_predecessors(t, end)
                pending[t] = 0
                waiting[t] = 0
                run_lane(t, True, now)
                drain(now)
            else:
                c = coll[t]
                ms = sb.arrived(c, member_ptr, members, start, end)
                expected[c] = FORCED  # later arrivals run alone too, at the next stall
                sb.count("collective-unmatched" if kind[t] == 2 else "p2p-unmatched")
                n_live += 1
                timeout(min(dur[m] for m in ms)).callbacks.append(finish_members(ms))
            _run_env(env)
        fallbacks = sb.counts
    makespan = int(end_np.max() - min(0, int(start_np.min()))) if n else 0
    return ReplayResult(start_np, end_np, makespan, n_events, fallbacks)


def _blocked_message(graph: TaskGraph, unfinished: np.ndarray, start: np.ndarray,
                     pending: array, cm: _Comms, kind: np.ndarray) -> str:
    t = graph.tasks
    lanes = t["lane"].to_numpy()
    parts = []
    for ln in np.unique(lanes[unfinished])[:5]:
        first = int(unfinished[lanes[unfinished] == ln][0])
        row = t.iloc[first]
        why = []
        c = int(cm.coll_id[first])
        if pending[first] > 0:
            why.append(f"waits on {pending[first]} unfinished predecessor(s)")
        elif kind[first] >= 2 and start[first] >= 0:
            why.append(f"collective {row['match_key']!r} has {cm.arrived[c]} of "
                       f"{cm.expected[c]} members")
        else:
            why.append("its lane is blocked earlier")
        parts.append(f"task {first} {row['name']!r} (rank {row['rank']}, lane {ln}): {', '.join(why)}")
    more = "" if len(np.unique(lanes[unfinished])) <= 5 else " ..."
    return (
        f"replay deadlocked with {len(unfinished)} of {len(t)} tasks unfinished; blocked: "
        + "; ".join(parts) + more
    )
