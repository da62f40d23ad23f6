"""tracesim task graph -> AICB workload (one rank's program; see :mod:`tracesim.interop.aicb_graph`)."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import numpy as np

from tracesim.errors import InputError
from tracesim.graph.chunks import expand_chunks
from tracesim.graph.taskgraph import TaskGraph
from tracesim.interop.aicb import (
    POLICIES,
    AicbComm,
    AicbRow,
    AicbWorkload,
    make_token,
    split_token,
)

_NAME = re.compile(r"^(?P<row>.+)\.(?P<slot>fwd|ig|wg)(?:_comm:(?P<tok>[A-Z_]+)|(?P<done>_done))?$")


def graph_to_aicb(graph: TaskGraph, rank: int | None = None) -> tuple[AicbWorkload, list[str]]:
    """One rank's program of ``graph`` as an AICB workload, plus what could not be written.

    A graph imported from an AICB file is written back row for row (every number kept);
    any other graph is cut into rows along the rank's compute lane (module docstring of
    :mod:`tracesim.interop.aicb_graph`). ``rank`` defaults to the lowest rank.
    """
    graph = expand_chunks(graph)  # one row per communication operation
    ranks = graph.ranks
    if not ranks:
        raise InputError("the graph has no tasks", "graph")
    r = ranks[0] if rank is None else int(rank)
    if r not in ranks:
        raise InputError(f"rank {r} is not in the graph (ranks {ranks[0]}..{ranks[-1]})", "--rank")
    if graph.meta.get("source_format") == "aicb" and isinstance(graph.meta.get("aicb"), dict):
        exact = _exact(graph, r)
        if exact is not None:
            return exact, []
    return _generic(graph, r)


def _exact(graph: TaskGraph, r: int) -> AicbWorkload | None:
    """Rows rebuilt from an AICB import's tasks; None when the structure is not intact."""
    head = graph.meta["aicb"]
    t = graph.tasks[graph.tasks["rank"].to_numpy() == r]
    rows: dict[int, dict[str, Any]] = defaultdict(dict)
    for name, kind, dur, coll, msg, layer in zip(
            t["name"], t["kind"], t["dur_ns"], t["collective"], t["msg_bytes"], t["layer"],
            strict=True):
        if str(name).startswith("recompute:"):
            continue
        m = _NAME.match(str(name))
        if m is None or layer < 0:
            return None
        row = rows[int(layer)]
        row.setdefault("name", m.group("row"))
        slot = m.group("slot")
        if m.group("done"):
            row.setdefault("update", []).append(int(dur))
        elif m.group("tok") is not None:
            tok = m.group("tok")
            if (tok == "NONE") != (kind != "coll"):
                return None
            if tok != "NONE":
                try:
                    base, _ = split_token(tok)
                except KeyError:
                    return None
                if make_token(str(coll), "", "fwd").split("_")[0] != base:
                    return None
            row[slot + "_comm"] = AicbComm(tok, int(msg))
        else:
            row[slot] = int(dur)
    n = len(rows)
    if sorted(rows) != list(range(n)):
        return None
    reserved = list(head.get("reserved") or [-1] * n)
    updates = list(head.get("update_ns") or [0] * n)
    out = []
    for i in range(n):
        row = rows[i]
        need = ("fwd", "ig", "wg", "fwd_comm", "ig_comm", "wg_comm")
        if any(k not in row for k in need) or len(reserved) != n or len(updates) != n:
            return None
        upd = max(row["update"]) if row.get("update") else int(updates[i])
        out.append(AicbRow(row["name"], int(reserved[i]), row["fwd"], row["fwd_comm"], row["ig"],
                           row["ig_comm"], row["wg"], row["wg_comm"], upd))
    return AicbWorkload(
        policy=str(head.get("policy", POLICIES[0])), tp=int(head["tp"]), ep=int(head["ep"]),
        pp=int(head["pp"]), vpp=int(head["vpp"]), ga=int(head["ga"]),
        all_gpus=int(head["all_gpus"]), pp_comm_bytes=int(head["pp_comm_bytes"]),
        rows=tuple(out), checkpoints=tuple(head.get("checkpoints") or ()),
        checkpoint_initiates=tuple(head.get("checkpoint_initiates") or ()),
    )


# ------------------------------------------------------------------------------ generic


def _base(name: Any) -> str:
    """An op's name without its instance suffix (``attn.qkv.tp_f#1-3`` -> ``attn.qkv.tp_f``)."""
    return str(name).split("#", 1)[0]


def _layout(graph: TaskGraph, r: int, t: Any) -> dict[str, int]:
    """tp, pp, dp, ep, vpp, ga of the graph (from its meta, else from its groups)."""
    raw = graph.meta.get("parallel")
    par: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
    world = len(graph.ranks)
    sizes: dict[str, int] = {}
    for gk, g in zip(t["group_kind"], t["group"], strict=True):
        if gk and g >= 0 and gk not in sizes:
            sizes[gk] = len(graph.groups[g])
    tp = int(par.get("tp") or sizes.get("tp", 1))
    pp = int(par.get("pp") or 1)
    ep = int(par.get("ep") or sizes.get("ep", 1))
    return {"tp": tp, "pp": pp, "ep": ep, "all_gpus": world, "vpp": int(par.get("vpp") or 1),
            "ga": int(par.get("num_micro") or 1)}


def _generic(graph: TaskGraph, r: int) -> tuple[AicbWorkload, list[str]]:
    warnings: list[str] = []
    tasks = graph.tasks
    sel = np.flatnonzero(tasks["rank"].to_numpy() == r)
    t = tasks.iloc[sel]
    lane_names = graph.lanes["name"].to_numpy().astype(str)
    lane = t["lane"].to_numpy()
    kind = t["kind"].to_numpy().astype(str)
    gpu_lanes = lane[kind == "gpu"]
    named = [ln for ln in np.unique(lane) if lane_names[ln] == "compute"]
    if named:
        clane = int(named[0])
    elif len(gpu_lanes):
        clane = int(np.bincount(gpu_lanes).argmax())
    else:
        raise InputError(f"rank {r} has no GPU compute lane to cut into rows", "graph")
    ids = sel.tolist()
    pos = {g: i for i, g in enumerate(ids)}
    on_c = (lane == clane) & (kind == "gpu")
    preds: dict[int, list[int]] = defaultdict(list)
    succs: dict[int, list[int]] = defaultdict(list)
    for s, d in zip(graph.edges["src"].to_numpy().tolist(), graph.edges["dst"].to_numpy().tolist(),
                    strict=True):
        if s in pos and d in pos:
            preds[pos[d]].append(pos[s])
            succs[pos[s]].append(pos[d])
    compute = np.flatnonzero(on_c).tolist()
    nxt = {a: b for a, b in zip(compute, compute[1:], strict=False)}

    def walk(start: int, nbrs: dict[int, list[int]], pick: Any) -> int:
        seen, frontier = {start}, [start]
        found: list[int] = []
        for _ in range(8):
            nf: list[int] = []
            for v in frontier:
                for w in nbrs.get(v, ()):
                    if w in seen:
                        continue
                    seen.add(w)
                    (found if on_c[w] else nf).append(w)
            if found:
                return pick(found)
            frontier = nf
        return -1

    lay = _layout(graph, r, t)
    dp = lay["all_gpus"] // (lay["tp"] * lay["pp"])
    anchored: dict[int, list[tuple[int, str, AicbComm]]] = defaultdict(list)
    cols = {c: t[c].to_numpy() for c in ("collective", "group", "group_kind", "msg_bytes", "name",
                                         "phase", "dur_ns", "gap_ns")}
    skipped: dict[str, int] = defaultdict(int)
    rewritten: dict[tuple[str, str], int] = defaultdict(int)
    pp_bytes = 0
    for i in np.flatnonzero(kind != "gpu").tolist():
        if kind[i] in ("send", "recv"):
            pp_bytes = max(pp_bytes, int(cols["msg_bytes"][i]))
            skipped["point-to-point transfers (pipeline)"] += 1
            continue
        if kind[i] != "coll":
            continue
        gk = str(cols["group_kind"][i])
        size = len(graph.groups[cols["group"][i]]) if cols["group"][i] >= 0 else 0
        group = {"tp": "tp", "ep": "ep"}.get(gk, "")
        if gk == "dp":
            group = "dp_ep" if lay["ep"] > 1 and size == dp // lay["ep"] else "dp"
        if not group or str(cols["collective"][i]) not in ("all_reduce", "all_gather",
                                                           "reduce_scatter", "all_to_all"):
            skipped[f"{gk or 'ungrouped'} {cols['collective'][i]}"] += 1
            continue
        anchor = walk(i, preds, max)
        waiter = walk(i, succs, min)
        blocking = waiter >= 0 and waiter == nxt.get(anchor, compute[0] if anchor < 0 and compute else -2)
        phase = str(cols["phase"][anchor]) if anchor >= 0 else "fwd"
        if group in ("dp", "dp_ep"):
            if phase == "fwd":
                skipped[f"forward-phase {gk} {cols['collective'][i]}"] += 1
                continue
            if blocking:
                rewritten[(_base(cols["name"][i]), "a blocking data-parallel collective is "
                           "written as a weight-gradient (non-blocking) column")] += 1
            slot = "wg"
        else:
            if not blocking:
                rewritten[(_base(cols["name"][i]), f"a non-blocking {gk} collective is written "
                           "as a blocking one")] += 1
            slot = "fwd" if phase == "fwd" else "ig"
        tok = make_token(str(cols["collective"][i]), group, slot)
        anchored[anchor].append((i, slot, AicbComm(tok, int(cols["msg_bytes"][i]))))
    for (name, what), k in rewritten.items():  # one line per op, not per instance
        warnings.append(f"{name}: {what}" + (f" ({k} times)" if k > 1 else ""))
    for what, k in skipped.items():
        warnings.append(f"{k} {what} not representable in AICB rows; left out")
    none = AicbComm("NONE", 0)
    fwd_rows: list[AicbRow] = []
    bwd_rows: list[AicbRow] = []
    acc = 0
    acc_phase = "fwd"
    last_name = "start"

    def flush(slot: str | None, comm: AicbComm | None) -> None:
        nonlocal acc
        name = re.sub(r"\s+", "_", last_name) or "row"
        if acc_phase == "fwd" and slot in (None, "fwd"):
            fwd_rows.append(AicbRow(name, -1, acc, comm or none, 0, none, 0, none, 0))
        elif slot == "wg":
            bwd_rows.append(AicbRow(name, -1, 0, none, acc, none, 0, comm or none, 0))
        else:
            bwd_rows.append(AicbRow(name, -1, 0, none, acc, comm or none, 0, none, 0))
        acc = 0

    for _, slot, c in anchored.get(-1, []):
        flush(slot, c)
    for i in compute:
        ph = "fwd" if str(cols["phase"][i]) == "fwd" else "bwd"
        if ph != acc_phase and acc:
            flush(None, None)
        acc_phase = ph
        acc += int(cols["dur_ns"][i]) + int(cols["gap_ns"][i])
        last_name = str(cols["name"][i])
        for _, slot, c in anchored.get(i, []):
            flush(slot, c)
    if acc:
        flush(None, None)
    rows = tuple(reversed(bwd_rows)) + tuple(fwd_rows)
    w = AicbWorkload(policy=POLICIES[0], tp=lay["tp"], ep=lay["ep"], pp=lay["pp"], vpp=lay["vpp"],
                     ga=lay["ga"], all_gpus=lay["all_gpus"],
                     pp_comm_bytes=pp_bytes if lay["pp"] > 1 else 0, rows=rows)
    if lay["all_gpus"] % (lay["tp"] * lay["pp"]) or (lay["all_gpus"] // (lay["tp"] * lay["pp"])) % lay["ep"]:
        raise InputError(f"the graph's {lay['all_gpus']} ranks do not split into tp {lay['tp']} x "
                         f"pp {lay['pp']} (ep {lay['ep']})", "graph", "meta.parallel")
    return w, warnings
