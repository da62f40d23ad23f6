"""Where the iteration time goes: compute, exposed communication per kind, bubble, idle.

For one rank and a time window [t0, t1) of a replay:

* the rank's **device lanes** are its GPU lanes (its CPU lanes if it has no GPU lane, as in
  CPU recordings);
* ``compute_s`` is the time at least one non-communication task runs on a device lane;
* ``exposed_comm_s[k]`` is the time a communication task of group kind ``k`` runs while no
  compute runs (kinds are attributed in the order tp, cp, ep, pp, dp, other, so overlapping
  communication is counted once);
* the rest of the window is idle; in a pipeline-parallel job (the rank has pp transfers) it
  is reported as ``bubble_s`` (waiting for the neighbouring stage), otherwise as ``idle_s``.

So compute + sum(exposed comm) + bubble + idle == t1 - t0 exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracesim.engine.replay import ReplayResult
from tracesim.graph.taskgraph import COMM_KINDS, TaskGraph

COMM_ORDER = ("tp", "cp", "ep", "pp", "dp", "other")


def _merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return starts, ends
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    ms = s[idx]
    me = np.append(run_end[idx[1:] - 1], run_end[-1])
    return ms, me


def _covered(points: np.ndarray, ms: np.ndarray, me: np.ndarray) -> np.ndarray:
    if not len(ms):
        return np.zeros(len(points), dtype=bool)
    k = np.searchsorted(ms, points, side="right") - 1
    return (k >= 0) & (points < me[np.clip(k, 0, None)])


def breakdown(graph: TaskGraph, result: ReplayResult, rank: int, t0: int, t1: int) -> dict:
    """Breakdown of [t0, t1) on ``rank`` in seconds (see the module docstring)."""
    t = graph.tasks
    lanes_kind = graph.lanes["kind"].to_numpy()
    on_rank = t["rank"].to_numpy() == rank
    lane = t["lane"].to_numpy()
    has_gpu = bool(np.any(on_rank & (lanes_kind[lane] == "gpu")))
    device = on_rank & (lanes_kind[lane] == ("gpu" if has_gpu else "cpu"))
    kind = t["kind"].to_numpy()
    is_comm = np.isin(kind, COMM_KINDS) | (t["op_class"].to_numpy() == "comm")
    s = np.clip(result.start_ns, t0, t1)
    e = np.clip(result.end_ns, t0, t1)
    sets = {"compute": _merge(s[device & ~is_comm], e[device & ~is_comm])}
    gk = t["group_kind"].to_numpy()
    comm_on_rank = on_rank & is_comm
    for k in COMM_ORDER:
        sel = comm_on_rank & ((gk == k) if k != "other" else ~np.isin(gk, COMM_ORDER[:-1]))
        sets[k] = _merge(s[sel], e[sel])
    bounds = [np.array([t0, t1], dtype=np.int64)]
    for ms, me in sets.values():
        bounds += [ms, me]
    pts = np.unique(np.concatenate(bounds))
    pts = pts[(pts >= t0) & (pts <= t1)]
    seg = np.diff(pts).astype(np.float64)
    mid = pts[:-1]
    taken = _covered(mid, *sets["compute"])
    out: dict[str, Any] = {"compute_s": float(seg[taken].sum()) / 1e9}
    exposed = {}
    for k in COMM_ORDER:
        c = _covered(mid, *sets[k]) & ~taken
        exposed[k] = float(seg[c].sum()) / 1e9
        taken |= c
    idle = float(seg[~taken].sum()) / 1e9
    pipeline = bool(np.any(comm_on_rank & (gk == "pp")))
    out["exposed_comm_s"] = {k: exposed[k] for k in COMM_ORDER if k != "other" or exposed[k] > 0}
    out["bubble_s"] = idle if pipeline else 0.0
    out["idle_s"] = 0.0 if pipeline else idle
    return out
