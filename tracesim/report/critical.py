"""The critical path of a replay and its top contributors.

Walking back from the task that ends last: a task started when the latest of its
constraints was met, its previous task on the same lane (program order, plus the lane's
``gap_ns``) or an explicit predecessor (edges), so the path continues through whichever of
them ended last. A collective or send/recv cannot start before its last member arrives: the
path jumps to that member (on whichever rank it is) and charges the operation from that
arrival to its end; waiting for the late member is thereby charged to what made it late.
Time on the path not covered by any task (lane gaps) is charged to ``(lane gap: untraced time)``.

The path's pieces add up to the iteration time (the makespan). Contributors group the
path by task name (communication by collective and group kind), in seconds. A recorded run
replays all its profiled steps, which need not be consecutive (a bundle interleaves
unprofiled steps and the profiler's calibration cycles between them): its contributors count
only the path inside the replayed steps (from the first rank's begin marker of a step to the
last rank's end marker), so the time between steps, untraced, does not crowd out what the
steps ran.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracesim.build.units import run_parts
from tracesim.graph.taskgraph import COMM_KINDS, TaskGraph


def critical_path(graph: TaskGraph, start_ns: np.ndarray, end_ns: np.ndarray) -> list[tuple[int, int, int]]:
    """The critical path as ``(task, from_ns, to_ns)`` pieces, latest first (task -1: gap)."""
    t = graph.tasks
    n = len(t)
    if n == 0:
        return []
    lane = t["lane"].to_numpy()
    kind = t["kind"].to_numpy()
    is_comm = np.isin(kind, COMM_KINDS)
    # previous task on the same lane (lanes run in ascending task id)
    order = np.lexsort((np.arange(n), lane))
    prev_lane = np.full(n, -1, dtype=np.int64)
    same = lane[order][1:] == lane[order][:-1]
    prev_lane[order[1:][same]] = order[:-1][same]
    # explicit predecessors: the latest-ending one per destination
    src = graph.edges["src"].to_numpy().astype(np.int64)
    dst = graph.edges["dst"].to_numpy().astype(np.int64)
    best_pred = np.full(n, -1, dtype=np.int64)
    if len(src):
        o = np.lexsort((end_ns[src], dst))
        last = np.ones(len(o), dtype=bool)
        last[:-1] = dst[o][1:] != dst[o][:-1]
        best_pred[dst[o][last]] = src[o][last]
    # the latest-arriving member of every communication operation
    last_member = np.arange(n, dtype=np.int64)
    ci = np.flatnonzero(is_comm)
    if len(ci):
        codes, _ = pd.factorize(t["match_key"].to_numpy()[ci])
        lm = np.full(codes.max() + 1, -1, dtype=np.int64)
        o = np.lexsort((ci, start_ns[ci], codes))  # by op, then start: last one wins
        lm[codes[o]] = ci[o]
        last_member[ci] = lm[codes]
    pieces: list[tuple[int, int, int]] = []
    cur = int(np.argmax(end_ns))
    hi = int(end_ns[cur])
    seen = 0
    while cur >= 0 and seen <= 2 * n:
        seen += 1
        if is_comm[cur]:
            cur = int(last_member[cur])
        s = int(start_ns[cur])
        if hi > s:
            pieces.append((cur, s, hi))
        cands = [int(p) for p in (prev_lane[cur], best_pred[cur]) if p >= 0]
        if not cands:
            break
        p = max(cands, key=lambda x: (int(end_ns[x]), x))
        pe = min(int(end_ns[p]), s)
        if s > pe:
            pieces.append((-1, pe, s))
        cur, hi = p, pe
    return pieces


def top_contributors(graph: TaskGraph, start_ns: np.ndarray, end_ns: np.ndarray,
                     top: int = 10) -> list[dict[str, Any]]:
    """Critical-path time grouped by what ran: ``name``, ``category`` (the op class, or the
    communication group kind), ``time_s``, ``share`` (of the path), ``count`` (pieces)."""
    return critical_summary(graph, start_ns, end_ns, top)[0]


def critical_summary(graph: TaskGraph, start_ns: np.ndarray, end_ns: np.ndarray,
                     top: int = 10) -> tuple[list[dict[str, Any]], float]:
    """:func:`top_contributors` and the length of the path (s): the whole replayed span,
    or, where the graph marks its steps (a recorded run, whose profiled steps are replayed
    together), the path's time inside them (module docstring)."""
    pieces = critical_path(graph, start_ns, end_ns)
    windows = step_windows(graph, start_ns, end_ns)
    if windows is not None:
        pieces = [(task, a2, b2) for task, a, b in pieces for a2, b2 in _clip(a, b, windows)]
    if not pieces:
        return [], 0.0
    t = graph.tasks
    names = t["name"].astype(str).to_numpy()
    kind = t["kind"].to_numpy()
    coll = t["collective"].astype(str).to_numpy()
    gk = t["group_kind"].astype(str).to_numpy()
    opc = t["op_class"].astype(str).to_numpy()
    runs = _runs(t)
    acc: dict[tuple[str, str], list[float]] = {}
    total = 0
    for task, a, b in pieces:
        total += b - a
        parts: list[tuple[tuple[str, str], float]]
        if task < 0:
            parts = [(("(lane gap: untraced time)", "idle"), b - a)]
        elif kind[task] in COMM_KINDS:
            parts = [((f"{coll[task] or kind[task]} ({gk[task] or 'other'})", gk[task] or "comm"), b - a)]
        elif runs is not None and runs[1][runs[0][task]]:
            parts = _split(runs[1][runs[0][task]], int(start_ns[task]), int(end_ns[task]), a, b)
        else:
            parts = [((_short(names[task]), opc[task]), b - a)]
        for key, dt in parts:
            v = acc.setdefault(key, [0.0, 0])
            v[0] += dt
            v[1] += 1
    rows: list[dict[str, Any]] = [
        {"name": k[0], "category": k[1], "time_s": v[0] * 1e-9,
         "share": v[0] / total if total else 0.0, "count": int(v[1])} for k, v in acc.items()]
    rows.sort(key=lambda r: (-float(r["time_s"]), str(r["name"])))
    return rows[:top], total * 1e-9


def step_windows(graph: TaskGraph, start_ns: np.ndarray, end_ns: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray] | None:
    """The replayed steps' windows (ns; sorted, disjoint, overlapping steps merged): each
    step from its earliest ``begin`` marker to its latest ``end`` marker over the ranks, or
    None when the graph marks no complete step (a workload built from a template)."""
    t = graph.tasks
    if "marker" not in t or "step" not in t:
        return None
    marker = t["marker"].astype(str).to_numpy()
    step = t["step"].astype(str).to_numpy()
    lo: dict[str, int] = {}
    hi: dict[str, int] = {}
    for i in np.flatnonzero(marker == "begin").tolist():
        lo[step[i]] = min(lo.get(step[i], int(start_ns[i])), int(start_ns[i]))
    for i in np.flatnonzero(marker == "end").tolist():
        hi[step[i]] = max(hi.get(step[i], int(end_ns[i])), int(end_ns[i]))
    spans = sorted((lo[k], hi[k]) for k in lo if k in hi and hi[k] > lo[k])
    if not spans:
        return None
    merged: list[list[int]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    arr = np.array(merged, dtype=np.int64)
    return arr[:, 0], arr[:, 1]


def _clip(a: int, b: int, windows: tuple[np.ndarray, np.ndarray]) -> list[tuple[int, int]]:
    """The parts of ``[a, b)`` inside the windows."""
    ws, we = windows
    k = max(int(np.searchsorted(we, a, side="right")), 0)
    out: list[tuple[int, int]] = []
    while k < len(ws) and ws[k] < b:
        lo, hi = max(a, int(ws[k])), min(b, int(we[k]))
        if hi > lo:
            out.append((lo, hi))
        k += 1
    return out


def _runs(t: pd.DataFrame) -> tuple[np.ndarray, list[list[tuple[str, str, int]]]] | None:
    """The ops a merged compute task stands for (the builder's ``run`` column): a code per
    task and the ops of each code ([] for one op; the last entry, code -1, too), or None
    when the graph has no such column."""
    if "run" not in t:
        return None
    col = t["run"]
    if not isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype("category")
    table = [run_parts(str(x)) for x in col.cat.categories] + [[]]
    return col.cat.codes.to_numpy(), table


def _split(parts: list[tuple[str, str, int]], s0: int, e0: int, a: int, b: int
           ) -> list[tuple[tuple[str, str], float]]:
    """The piece ``[a, b)`` of a merged task running ``[s0, e0)`` split over the ops it
    stands for: each ran its share of the task's time (its duration over their sum), in
    order, so the split is what a replay with one task per op puts on the path."""
    total = sum(d for _, _, d in parts)
    out: list[tuple[tuple[str, str], float]] = []
    t = float(s0)
    for name, cls, d in parts:
        u = t + (e0 - s0) * (d / total if total else 1.0 / len(parts))
        ov = min(b, u) - max(a, t)
        if ov > 0:
            out.append(((_short(name), cls), ov))
        t = u
    return out or [((_short(parts[0][0]), parts[0][1]), float(b - a))]


def _short(name: str) -> str:
    """Merged compute tasks are named ``first..last``: keep them recognisable but short."""
    return name if len(name) <= 60 else name[:28] + "..." + name[-28:]
