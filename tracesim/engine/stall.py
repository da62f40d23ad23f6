"""Breaking a stalled replay by falling back to the recorded order (see :mod:`tracesim.engine.replay`).

A replay stalls when nothing can move but tasks remain: a task waits for a predecessor that
never runs (a cycle of dependencies, an edge inferred wrongly from a recording), or a
collective waits for members that never arrive (their ranks' traces are absent, or the
ranks issued their operations in different orders). For recorded traces the replay does not
stop there: the blocked task whose recorded start is earliest (``rec_start`` where the graph
has it, else the task id) is released, by dropping the dependency that cannot be resolved:

* a task waiting on predecessors starts now, without the unfinished ones (each dropped edge
  is counted under its edge kind);
* the members of a collective (or of a send/recv pair) that have arrived run the operation
  without the others, for their recorded duration (the shortest of theirs), counted as
  ``collective-unmatched`` (``p2p-unmatched`` for send/recv). Members arriving after that run
  alone in turn, at the next stall.

Everything here runs only once a replay has stalled; the replay's normal path does not touch
it. Deterministic: choices depend on recorded starts and task ids only.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np

from tracesim.graph.taskgraph import TaskGraph, column_codes

#: what a graph's ``meta["on_stall"]`` (or ``replay(on_stall=...)``) may say
STALL_MODES = ("error", "fallback")
#: an operation that was run without its missing members never completes normally again
FORCED = 1 << 30


class StallBreaker:
    """Finds the blocked task to release and what to drop; counts the fallbacks by kind."""

    def __init__(self, graph: TaskGraph, first_of_lane: Sequence[int]):
        t = graph.tasks
        n = len(t)
        self.cursor = [int(x) for x in first_of_lane]  # first unfinished task per lane
        if "rec_start" in t:
            rec = np.asarray(t["rec_start"].to_numpy(), dtype=np.float64)
            self.rec = np.where(np.isnan(rec), np.inf, rec)
        else:
            self.rec = np.zeros(n)
        src = graph.edges["src"].to_numpy().astype(np.int64)
        dst = graph.edges["dst"].to_numpy().astype(np.int64)
        order = np.lexsort((src, dst))
        self.pred = src[order]
        kcodes, self.kind_names = column_codes(graph.edges["kind"])
        self.pred_kind = np.asarray(kcodes)[order] if len(order) else np.zeros(0, dtype=np.int64)
        self.pred_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=n), out=self.pred_ptr[1:])
        self.counts: dict[str, int] = {}

    def count(self, kind: str, n: int = 1) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + n

    def pick(self, end: array, start: array, waiting: bytearray, kind: memoryview,
             nxt: array) -> int:
        """The blocked task to release: of the first unfinished task of every lane, the one
        with the earliest recorded start (then the lowest id); -1 if every task ended."""
        best, best_key = -1, (np.inf, 0)
        for ln, t in enumerate(self.cursor):
            while t >= 0 and end[t] >= 0:
                t = nxt[t]
            self.cursor[ln] = t
            if t < 0 or not (waiting[t] or (kind[t] >= 2 and start[t] >= 0)):
                continue
            key = (float(self.rec[t]), t)
            if best < 0 or key < best_key:
                best, best_key = t, key
        return best

    def drop_predecessors(self, t: int, end: array) -> None:
        """Count the edges into ``t`` from tasks that have not finished (they are dropped)."""
        lo, hi = int(self.pred_ptr[t]), int(self.pred_ptr[t + 1])
        for k in range(lo, hi):
            if end[int(self.pred[k])] < 0:
                self.count(self.kind_names[int(self.pred_kind[k])] if self.kind_names else "edge")

    def arrived(self, c: int, member_ptr: array, members: array, start: array,
                end: array) -> list[int]:
        """The members of operation ``c`` that have arrived and wait for the others."""
        return [m for m in (members[k] for k in range(member_ptr[c], member_ptr[c + 1]))
                if start[m] >= 0 and end[m] < 0]


def stall_mode(graph: TaskGraph, on_stall: str | None) -> str:
    """What a stall does: ``on_stall`` if given, else the graph's ``meta["on_stall"]``, else
    ``"error"`` (hand-made and built graphs: a stall there is a bug to report)."""
    mode = on_stall if on_stall is not None else str(graph.meta.get("on_stall", "error"))
    if mode not in STALL_MODES:
        raise ValueError(f"on_stall must be one of {STALL_MODES}, not {mode!r}")
    return mode
