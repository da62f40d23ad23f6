"""Communication of an extracted graph: process groups, a metadata summary, and matching the
ranks' operations when several ranks are replayed jointly (for :mod:`tracesim.trace.extract`).

Executing communication tasks are the GPU kernels of class ``comm`` (NCCL / RCCL kernels,
and other kernels launched inside a collective's host events) and the ``gloo:*`` ops that
gloo runs on its own threads. Each carries ``collective``, ``msg_bytes`` (nccl-tests
convention), ``dtype``, ``peer`` (send / recv), ``pg`` / ``comm_seq`` (process group name and
per-group sequence number, where recorded), ``group`` (an index into ``graph.groups``: every
member rank of its process group, also those whose traces are absent), ``group_source`` (how
the ranks are known: ``recorded``; ``pg_config``: the job's only process group; ``size``: only
the group's size was recorded, the ranks are a plausible guess; ``world``: nothing was
recorded, the recorded world is assumed; "" unknown) and ``comm_meta`` (``full``: the host
events around its launch give collective and size; ``collective_only``: they name the
collective, not its size; ``kernel_name``: only the kernel's name says what it is;
``none``). ``graph.meta["comm_metadata"]`` counts them (``size_unknown``: ``msg_bytes`` 0).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from tracesim.graph.taskgraph import TaskGraph

_TEMP = ("group_ranks",)
_COMM_STR = ("dtype", "pg", "comm_meta", "group_source", "group_kind")
_LEVELS = ("full", "collective_only", "kernel_name")


def executing_comm(t: pd.DataFrame) -> np.ndarray:
    """Mask of the executing communication tasks (module docstring)."""
    gloo = t["name"].astype(str).str.startswith("gloo:").to_numpy(dtype=bool)
    return ((t["kind"].to_numpy() == "gpu") & (t["op_class"].to_numpy() == "comm")) | gloo


def comm_groups(tasks: pd.DataFrame) -> tuple[pd.DataFrame, tuple[tuple[int, ...], ...], dict[str, Any]]:
    """Turn the tasks' recorded group ranks into ``graph.groups`` indices (in order of first
    use); returns the tasks, the groups and the ``comm_metadata`` summary."""
    t = tasks
    for col in _COMM_STR:
        if col in t:
            t[col] = t[col].fillna("")
    for col, empty in (("peer", -1), ("comm_seq", -1)):
        if col in t:
            t[col] = t[col].fillna(empty).astype(np.int64 if col == "comm_seq" else np.int32)
    groups: dict[tuple[int, ...], int] = {}
    if "group_ranks" in t:
        gidx = np.full(len(t), -1, dtype=np.int32)
        text = t["group_ranks"].fillna("").to_numpy()
        for i in np.flatnonzero(text != "").tolist():
            try:
                ranks = tuple(sorted({int(x) for x in json.loads(text[i])}))
            except (ValueError, TypeError):
                continue
            if ranks:
                gidx[i] = groups.setdefault(ranks, len(groups))
        t["group"] = gidx
        t = t.drop(columns=list(_TEMP))
    meta = _summary(t, tuple(groups))
    return t, tuple(groups), meta


def _summary(t: pd.DataFrame, groups: tuple[tuple[int, ...], ...]) -> dict[str, Any]:
    ex = executing_comm(t)
    n = int(ex.sum())
    meta = t["comm_meta"].to_numpy()[ex] if "comm_meta" in t else np.array([""] * n, dtype=object)
    src = t["group_source"].to_numpy()[ex] if "group_source" in t else np.array([""] * n, dtype=object)
    size0 = int((t["msg_bytes"].to_numpy()[ex] <= 0).sum())
    out: dict[str, Any] = {
        "tasks": n,
        **{k: int((meta == k).sum()) for k in _LEVELS},
        "size_unknown": size0,
        "group_source": {k: int((src == k).sum()) for k in ("recorded", "pg_config", "size", "world")},
    }
    out["none"] = int(n - sum(out[k] for k in _LEVELS))
    out["group_source"]["unknown"] = int(n - sum(out["group_source"].values()))
    if "group_source" in t:
        g = t["group"].to_numpy()
        gs = t["group_source"].to_numpy()
        guessed = sorted({int(x) for x in g[(g >= 0) & np.isin(gs, ("size", "world"))]})
        out["groups_assumed"] = guessed  # ranks not recorded: a plausible guess
    out["groups"] = len(groups)
    return out


def match_collectives(graph: TaskGraph) -> TaskGraph:
    """Turn the executing comm tasks of the ranks into matched operations (joint replay).

    A collective's members are its process group's ranks (all of them must be in the graph);
    on each, the operation is the one with the same per-group sequence number (the recorded
    ``comm_seq``, else the rank's k-th operation on that group in recorded order). A send on
    rank a to rank b and a recv on b from a are a pair when each is the k-th between them.
    Operations of unknown group are matched over all the graph's ranks, the k-th of each
    type on every rank (a data-parallel recording has one process group). What does not
    match on every member keeps its recorded time (kind ``gpu``).
    """
    t = graph.tasks.copy()
    ex = np.flatnonzero(executing_comm(t))
    if not len(ex):
        return graph
    ranks = tuple(graph.ranks)
    present = set(ranks)
    groups = list(graph.groups)
    rank = t["rank"].to_numpy()
    coll = t["collective"].to_numpy().astype(str)
    group = t["group"].to_numpy()
    peer = t["peer"].to_numpy() if "peer" in t else np.full(len(t), -1)
    seq = t["comm_seq"].to_numpy() if "comm_seq" in t else np.full(len(t), -1)
    pg = t["pg"].to_numpy() if "pg" in t else np.array([""] * len(t), dtype=object)
    rec = t["rec_start"].to_numpy() if "rec_start" in t else t["task_id"].to_numpy()
    rec = np.where(np.isnan(rec.astype(float)), np.inf, rec.astype(float))
    keys: dict[int, tuple[str, tuple[int, ...]]] = {}  # task -> (key, member ranks)
    counters: dict[tuple, int] = {}
    for i in sorted(ex.tolist(), key=lambda i: (int(rank[i]), rec[i], i)):
        r = int(rank[i])
        ctr: tuple
        if coll[i] in ("send", "recv") and peer[i] >= 0 and peer[i] != r:
            a, b = (r, int(peer[i])) if coll[i] == "send" else (int(peer[i]), r)
            members: tuple[int, ...] = (a, b)
            base = f"p2p:{a}->{b}|#"
            ctr = ("p2p", r, coll[i], int(peer[i]))
        elif 0 <= group[i] < len(groups):
            members = groups[group[i]]
            base = f"pg:{pg[i]}:{','.join(map(str, members))}|"
            base += f"s{int(seq[i])}." if seq[i] >= 0 else "#"
            ctr = ("pg", r, base)
        else:  # unknown group: the k-th of its type over all ranks
            members = ranks
            base = f"{coll[i]}#"
            ctr = ("all", r, coll[i])
        n = counters.get(ctr, 0)
        counters[ctr] = n + 1
        keys[i] = (f"{base}{n}", members)
    by_key: dict[str, list[int]] = {}
    for i, (k, _) in keys.items():
        by_key.setdefault(k, []).append(i)
    kind = t["kind"].to_numpy().astype(object).copy()
    mkey = t["match_key"].to_numpy().astype(object).copy()
    new_group = group.astype(np.int32).copy()
    gk = t["group_kind"].to_numpy().astype(object).copy()
    unmatched = 0
    for k, idx in by_key.items():
        members = keys[idx[0]][1]
        ok = (len(members) > 1 and set(members) <= present and len(idx) == len(members)
              and {int(rank[i]) for i in idx} == set(members)
              and ({coll[i] for i in idx} == {"send", "recv"} if k.startswith("p2p:")
                   else len({coll[i] for i in idx}) == 1))
        if not ok:
            unmatched += len(idx)
            continue
        if k.startswith("p2p:"):
            for i in idx:
                kind[i] = coll[i]
                mkey[i] = k
            continue
        if members not in groups:
            groups.append(members)
        g = groups.index(members)
        for i in idx:
            kind[i] = "coll"
            mkey[i] = k
            new_group[i] = g
            if not gk[i] and members == ranks:
                gk[i] = "dp"
    t["kind"] = kind
    t["match_key"] = mkey
    t["group"] = new_group
    t["group_kind"] = gk
    meta = dict(graph.meta)
    cm = dict(meta.get("comm_metadata") or {})
    cm["unmatched"] = unmatched
    meta["comm_metadata"] = cm
    return graph.replace(tasks=t, groups=tuple(groups), meta=meta)
