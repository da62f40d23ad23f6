"""The SimPy replay of task graphs.

Semantics (DESIGN.md, "Task graph and replay semantics"):

* each lane is one SimPy process that walks its tasks in ascending ``task_id`` order;
* a task starts at ``max(lane_free + gap_ns, all predecessors finished)``;
* a compute task (``cpu`` / ``gpu``) then occupies its lane for ``dur_ns``;
* a communication task (``coll`` / ``send`` / ``recv``) waits until every task with the same
  ``match_key`` (one per member rank) has started, then all members run the operation
  together: with a :class:`~tracesim.engine.comm.CommModel` the network decides when it ends;
  without one it takes the smallest ``dur_ns`` among the members (in a recorded trace the
  members that arrived early also recorded their waiting time, so the smallest recorded
  duration is the one closest to the transfer itself);
* when nothing can move but tasks remain (a cycle, a collective whose members never
  arrive), :class:`~tracesim.errors.ReplayError` names the blocked tasks.

Determinism: equal inputs give identical results. SimPy orders simultaneous events by
(time, priority, scheduling order); lanes are started in lane-index order, successors are
released in ascending task id order, and nothing depends on hashing or wall-clock time.
Simulated time is integer nanoseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import simpy

from tracesim.engine.comm import CommModel
from tracesim.errors import ReplayError
from tracesim.workload.graph import TaskGraph

_KIND_CODES = {"cpu": 0, "gpu": 1, "coll": 2, "send": 3, "recv": 4}


@dataclass(frozen=True)
class ReplayResult:
    """Per-task simulated times (integer ns, index = task id) and run statistics."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    makespan_ns: int
    events: int

    def lane_busy_ns(self, graph: TaskGraph) -> np.ndarray:
        """Busy time per lane (sum of task durations on the lane), ns."""
        lanes = graph.tasks["lane"].to_numpy()
        return np.bincount(lanes, weights=self.end_ns - self.start_ns, minlength=len(graph.lanes))


@dataclass
class _Coll:
    members: int
    arrived: int
    ranks: list[int]
    dur_ns: int
    event: simpy.Event | None


def replay(
    graph: TaskGraph,
    comm: CommModel | None = None,
    *,
    observers: Iterable[Callable[[int, int, int], None]] = (),
) -> ReplayResult:
    """Replay ``graph`` and return the simulated start / end time of every task.

    Args:
        graph: the task graph (all ranks).
        comm: communication model; ``None`` uses the recorded ``dur_ns`` of comm tasks.
        observers: callables ``f(task_id, start_ns, end_ns)`` called as each task ends
            (metric collectors subscribe here; the engine itself does no I/O).
    """
    tasks = graph.tasks
    n = len(tasks)
    lane = tasks["lane"].to_numpy()
    dur = tasks["dur_ns"].to_numpy().astype(np.int64)
    gap = tasks["gap_ns"].to_numpy().astype(np.int64)
    if n and (dur.min() < 0 or gap.min() < 0):
        raise ReplayError("negative dur_ns or gap_ns in the task graph")
    kinds = tasks["kind"].to_numpy()
    bad = set(np.unique(kinds.astype(str)).tolist()) - set(_KIND_CODES)
    if bad:
        raise ReplayError(f"unknown task kind(s) {sorted(bad)} in the task graph")
    kind = np.array([_KIND_CODES[k] for k in kinds], dtype=np.int8)
    rank = tasks["rank"].to_numpy()

    # explicit edges in CSR form; lane order is implicit
    src = graph.edges["src"].to_numpy().astype(np.int64)
    dst = graph.edges["dst"].to_numpy().astype(np.int64)
    order = np.lexsort((dst, src))
    src, dst = src[order], dst[order]
    succ_ptr = np.searchsorted(src, np.arange(n + 1))
    succ = dst.tolist()
    succ_ptr_l = succ_ptr.tolist()
    pending = np.bincount(dst, minlength=n).tolist()

    # collectives and p2p pairs by match key
    comm_mask = kind >= 2
    coll_id = np.full(n, -1, dtype=np.int64)
    colls: list[_Coll] = []
    if comm_mask.any():
        keys = tasks["match_key"].to_numpy()[comm_mask]
        codes, uniq = _factorize(keys)
        coll_id[comm_mask] = codes
        counts = np.bincount(codes, minlength=len(uniq))
        idx = np.flatnonzero(comm_mask)
        min_dur = np.full(len(uniq), np.iinfo(np.int64).max)
        np.minimum.at(min_dur, codes, dur[idx])
        member_ranks: list[list[int]] = [[] for _ in uniq]
        for t, c in zip(idx.tolist(), codes.tolist(), strict=True):
            member_ranks[c].append(int(rank[t]))
        group_col = tasks["group"].to_numpy()
        expected = counts.copy()
        first = np.full(len(uniq), -1, dtype=np.int64)
        first[codes[::-1]] = idx[::-1]
        for c in range(len(uniq)):
            t0 = int(first[c])
            if kind[t0] in (3, 4):
                expected[c] = 2
            elif group_col[t0] >= 0 and group_col[t0] < len(graph.groups):
                expected[c] = len(graph.groups[group_col[t0]])
            if counts[c] > expected[c]:
                raise ReplayError(
                    f"collective {uniq[c]!r} has {counts[c]} member tasks but its group has "
                    f"{expected[c]} ranks"
                )
        colls = [
            _Coll(int(expected[c]), 0, sorted(member_ranks[c]), int(min_dur[c]), None)
            for c in range(len(uniq))
        ]
    coll_name = tasks["collective"].to_numpy()
    group_kind = tasks["group_kind"].to_numpy()
    msg = tasks["msg_bytes"].to_numpy()
    peer = tasks["peer"].to_numpy()

    env = simpy.Environment()
    if comm is not None:
        comm.attach(env)
    start = np.full(n, -1, dtype=np.int64)
    end = np.full(n, -1, dtype=np.int64)
    waiters: dict[int, simpy.Event] = {}
    obs = list(observers)
    n_events = 0
    dur_l = dur.tolist()
    gap_l = gap.tolist()
    kind_l = kind.tolist()
    coll_l = coll_id.tolist()

    lane_order = np.argsort(lane, kind="stable")
    lane_ptr = np.searchsorted(lane[lane_order], np.arange(len(graph.lanes) + 1))
    lane_tasks = [lane_order[lane_ptr[i] : lane_ptr[i + 1]].tolist() for i in range(len(graph.lanes))]

    def finish(t: int) -> None:
        now = int(env.now)
        end[t] = now
        for f in obs:
            f(t, int(start[t]), now)
        for k in range(succ_ptr_l[t], succ_ptr_l[t + 1]):
            s = succ[k]
            pending[s] -= 1
            if pending[s] == 0:
                w = waiters.pop(s, None)
                if w is not None:
                    w.succeed()

    def start_comm(t: int) -> simpy.Event:
        c = colls[coll_l[t]]
        c.arrived += 1
        if c.event is None:
            c.event = env.event()
        if c.arrived == c.members:
            if comm is None:
                done = env.timeout(c.dur_ns)
            elif kind_l[t] == 2:
                done = comm.collective(str(coll_name[t]), tuple(c.ranks), int(msg[t]), str(group_kind[t]))
            else:
                s_rank, d_rank = _p2p_ends(int(kind_l[t]), int(rank[t]), int(peer[t]))
                done = comm.p2p(s_rank, d_rank, int(msg[t]))
            ev = c.event
            done.callbacks.append(lambda _e, ev=ev: ev.succeed())
        return c.event

    def lane_proc(ts: list[int]):
        nonlocal n_events
        for t in ts:
            g = gap_l[t]
            if g:
                yield env.timeout(g)
                n_events += 1
            if pending[t] > 0:
                w = env.event()
                waiters[t] = w
                yield w
                n_events += 1
            start[t] = int(env.now)
            if coll_l[t] >= 0:
                yield start_comm(t)
                n_events += 1
            else:
                d = dur_l[t]
                if d:
                    yield env.timeout(d)
                    n_events += 1
            finish(t)

    for ts in lane_tasks:
        if ts:
            env.process(lane_proc(ts))
    env.run()
    unfinished = np.flatnonzero(end < 0)
    if len(unfinished):
        raise ReplayError(_blocked_message(graph, unfinished, start, pending, coll_id, colls))
    makespan = int(end.max() - min(0, int(start.min()))) if n else 0
    return ReplayResult(start, end, makespan, n_events)


def _factorize(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    uniq, codes = np.unique(keys.astype(str), return_inverse=True)
    return codes.astype(np.int64), uniq


def _p2p_ends(kind: int, rank: int, peer: int) -> tuple[int, int]:
    return (rank, peer) if kind == 3 else (peer, rank)


def _blocked_message(graph, unfinished, start, pending, coll_id, colls) -> str:
    t = graph.tasks
    lanes = t["lane"].to_numpy()
    parts = []
    for ln in np.unique(lanes[unfinished])[:5]:
        first = int(unfinished[lanes[unfinished] == ln][0])
        row = t.iloc[first]
        why = []
        if pending[first] > 0:
            why.append(f"waits on {pending[first]} unfinished predecessor(s)")
        elif coll_id[first] >= 0 and start[first] >= 0:
            c = colls[coll_id[first]]
            why.append(f"collective {row['match_key']!r} has {c.arrived} of {c.members} members")
        else:
            why.append("its lane is blocked earlier")
        parts.append(f"task {first} {row['name']!r} (rank {row['rank']}, lane {ln}): {', '.join(why)}")
    more = "" if len(np.unique(lanes[unfinished])) <= 5 else " ..."
    return (
        f"replay deadlocked with {len(unfinished)} of {len(t)} tasks unfinished; blocked: "
        + "; ".join(parts) + more
    )
