"""Dependencies between the host threads of one rank, for the extractor (:mod:`tracesim.trace.rankgraph`).

Which op on one thread a task on another thread waited for: a ``c10d::`` call and the backend
op it enqueued, a thread woken right after another thread's op ended, and the execution
trace's data dependencies.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import pandas as pd

from tracesim.trace.et import data_dependencies, event_key


class HostTasks(Protocol):
    """What these functions need of the rank being extracted
    (:class:`tracesim.trace.rankgraph.RankExtractor`): its op table, task rows, lanes, the
    task of each op row, and a way to add an edge."""

    ops: pd.DataFrame
    rows: list[dict[str, Any]]
    lanes: list[dict[str, Any]]
    task_of: dict[int, int]

    def edge(self, a: int, b: int, kind: str) -> None: ...

#: a host thread idle for at least this long, that resumed at most _THREAD_WAKE_NS after an
#: op on another thread of its rank ended, was waiting for that op; the time between the
#: two stays as the resumed task's gap (the wake-up latency)
_THREAD_IDLE_NS = 200_000
_THREAD_WAKE_NS = 100_000
#: ... and at most this long after a collective that a backend thread ran (``gloo:*``): a
#: wait on an asynchronous collective (DDP's end of backward) wakes up hundreds of
#: microseconds late when the ranks' threads share a few cores
_COLL_WAKE_NS = 1_000_000
#: timestamps of old traces are float microseconds near 1e15, good to ~0.25 us; ops that
#: overlap by less than this are in sequence, not nested
_NEST_TOL_NS = 500


def thread_edges(ex: HostTasks) -> None:
    """Cross-thread dependencies of the host lanes.

    * a ``c10d::<op>`` call enqueues work that a backend thread runs as ``gloo:<op>``:
      the k-th of each are linked, and the backend op starts when it is enqueued;
    * a thread that sat idle for a while and resumed right after an op on another thread
      of the rank ended was woken by it (the autograd engine handing back to the main
      thread, a wait on an asynchronous collective): that op -> the resumed task.
    """
    rows = ex.rows
    host = [k for k, r in enumerate(rows) if "rec_start" in r and ex.lanes[r["lane"]]["kind"] == "cpu"]
    if not host:
        return
    enq: dict[str, list[int]] = {}
    run: dict[str, list[int]] = {}
    for k in host:
        nm = rows[k]["name"]
        if nm.startswith("c10d::"):
            enq.setdefault(nm[6:].strip("_"), []).append(k)
        elif nm.startswith("gloo:"):
            run.setdefault(nm[5:].strip("_").replace("_", ""), []).append(k)
    for op, ks in enq.items():
        rs = run.get(op.replace("_", ""), [])
        for a, b in zip(sorted(ks, key=lambda k: rows[k]["rec_start"]),
                        sorted(rs, key=lambda k: rows[k]["rec_start"]), strict=False):
            if rows[b]["rec_start"] >= rows[a]["rec_start"]:
                ex.edge(a, b, "thread")
                rows[b]["gap_ns"] = 0
    # a waker is an executing collective or the last op of a burst of backward work on
    # another thread (its own thread then goes idle); polling threads never wake anyone
    next_start: dict[int, int] = {}
    by_lane: dict[int, list[int]] = {}
    for k in host:
        by_lane.setdefault(rows[k]["lane"], []).append(k)
    for ks in by_lane.values():
        ks.sort(key=lambda k: rows[k]["rec_start"])
        for a, b in zip(ks, ks[1:], strict=False):
            next_start[a] = rows[b]["rec_start"]

    def waker(k: int) -> bool:
        r = rows[k]
        if r["name"].startswith(("gloo:", "nccl:")):
            return True
        idle_after = next_start.get(k, 1 << 62) - r["rec_end"] >= _THREAD_IDLE_NS
        return r.get("phase") == "bwd" and idle_after

    ends = sorted((rows[k]["rec_end"], k) for k in host if waker(k))
    end_ts = np.array([e for e, _ in ends], dtype=np.int64)
    prev_end_on_lane: dict[int, int] = {}
    for k in sorted(host, key=lambda k: (rows[k]["lane"], k)):
        r = rows[k]
        lane = r["lane"]
        prev = prev_end_on_lane.get(lane)
        prev_end_on_lane[lane] = r["rec_end"]
        if prev is None or r["gap_ns"] < _THREAD_IDLE_NS:
            continue
        j = int(np.searchsorted(end_ts, r["rec_start"], side="right")) - 1
        while j >= 0 and rows[ends[j][1]]["lane"] == lane:
            j -= 1
        if j < 0:
            continue
        e_other, other = ends[j]
        limit = _COLL_WAKE_NS if rows[other]["name"].startswith(("gloo:", "nccl:")) else _THREAD_WAKE_NS
        if r["rec_start"] - e_other <= limit and e_other > prev:
            ex.edge(other, k, "thread")
            r["gap_ns"] = min(int(r["gap_ns"]), max(0, int(r["rec_start"] - e_other)))

def data_edges(ex: HostTasks, et: pd.DataFrame) -> None:
    """Execution-trace data dependencies between host ops on different threads."""
    key = event_key(ex.ops)
    row_of = {int(k): i for i, k in enumerate(key.tolist()) if k >= 0}
    for p, c in data_dependencies(et):
        a, b = ex.task_of.get(row_of.get(p, -1)), ex.task_of.get(row_of.get(c, -1))
        if a is None or b is None:
            continue
        ra, rb = ex.rows[a], ex.rows[b]
        if ra["lane"] != rb["lane"] and ra.get("rec_end", 0) <= rb.get("rec_start", 0) + _NEST_TOL_NS:
            ex.edge(a, b, "data")
