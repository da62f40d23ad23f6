"""Where the iteration time goes, per rank: compute, exposed communication, bubble, idle.

For each rank, the compute lane's busy time is ``compute``. Every stretch in which the
compute lane is idle (before its first task, between tasks, and after its last task until
the end of the iteration) is attributed to what the next compute task waited for: its
latest-finishing explicit predecessor. A collective of kind k (tp, dp, cp, ep) makes the
whole stretch exposed k communication. A pipeline receive makes the transfer's own duration
exposed ``pp`` communication and the rest of the stretch pipeline bubble (waiting for the
neighbouring stage to compute). The stretch after the last compute task is charged to the
kind of the rank's last-finishing communication task (e.g. the gradient all-reduce or the
ZeRO all-gather after the optimizer). Anything else is ``idle``. The four parts sum to the
iteration time on every rank.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracesim.workload.graph import TaskGraph

KINDS = ("tp", "dp", "pp", "cp", "ep")


def rank_breakdowns(graph: TaskGraph, start_ns: np.ndarray, end_ns: np.ndarray,
                    makespan_ns: int) -> dict[int, dict[str, Any]]:
    """Breakdown (seconds) of every rank in ``graph``: compute_s, exposed_comm_s, bubble_s, idle_s."""
    t = graph.tasks
    lanes = graph.lanes
    lane_names = lanes["name"].to_numpy()
    kind = t["kind"].to_numpy()
    lane = t["lane"].to_numpy()
    rank = t["rank"].to_numpy()
    gk = t["group_kind"].to_numpy()
    is_compute = (kind == "gpu") & (lane_names[lane] == "compute")
    # binding (latest-finishing) explicit predecessor of every task
    src = graph.edges["src"].to_numpy()
    dst = graph.edges["dst"].to_numpy()
    n = len(t)
    bind = np.full(n, -1, dtype=np.int64)
    if len(src):
        order = np.lexsort((end_ns[src], dst))
        last = np.ones(len(order), dtype=bool)
        last[:-1] = dst[order][1:] != dst[order][:-1]
        sel = order[last]
        bind[dst[sel]] = src[sel]
    t0 = int(min(0, int(start_ns.min()))) if n else 0
    out: dict[int, dict[str, Any]] = {}
    for r in np.unique(rank):
        idx = np.flatnonzero((rank == r) & is_compute)
        idx = idx[np.argsort(start_ns[idx], kind="stable")]
        exposed = dict.fromkeys(KINDS, 0.0)
        bubble = idle = 0.0
        compute = float((end_ns[idx] - start_ns[idx]).sum())
        prev_end = t0
        for i in idx.tolist():
            gap = float(start_ns[i] - prev_end)
            prev_end = max(prev_end, int(end_ns[i]))
            if gap <= 0:
                continue
            p = int(bind[i])
            if p < 0 or kind[p] == "gpu":
                idle += gap
                continue
            k = str(gk[p]) or "dp"
            if kind[p] in ("recv", "send") and k == "pp":
                xfer = float(min(gap, end_ns[p] - start_ns[p]))
                exposed["pp"] += xfer
                bubble += gap - xfer
            else:
                exposed[k if k in exposed else "dp"] += gap
        tail = float(makespan_ns + t0 - prev_end) if makespan_ns else 0.0
        if tail > 0:
            comm = np.flatnonzero((rank == r) & (kind != "gpu"))
            if len(comm):
                last_c = comm[np.argmax(end_ns[comm])]
                if end_ns[last_c] > prev_end:
                    k = str(gk[last_c]) or "dp"
                    exposed[k if k in exposed else "dp"] += tail
                    tail = 0.0
            idle += tail
        out[int(r)] = {
            "compute_s": compute * 1e-9,
            "exposed_comm_s": {k: v * 1e-9 for k, v in exposed.items()},
            "bubble_s": bubble * 1e-9,
            "idle_s": idle * 1e-9,
        }
    return out


def mean_breakdown(per_rank: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Average of :func:`rank_breakdowns` over ranks (still sums to the iteration time)."""
    n = max(len(per_rank), 1)
    exposed = {k: sum(b["exposed_comm_s"][k] for b in per_rank.values()) / n for k in KINDS}
    return {
        "compute_s": sum(b["compute_s"] for b in per_rank.values()) / n,
        "exposed_comm_s": exposed,
        "bubble_s": sum(b["bubble_s"] for b in per_rank.values()) / n,
        "idle_s": sum(b["idle_s"] for b in per_rank.values()) / n,
    }
