"""Instantiate stage programs for global ranks: lanes, groups, peers and match keys.

Every rank of a pipeline stage runs its stage's program (built once by the builder); only
the rank id, lane ids, group indices, peers and match keys differ. Match keys make the
engine pair the tasks of one collective (``<gkind><group>|<instance>|<local>``, equal on
all members because they run the same program), of one pipeline transfer
(``pp<pipe>|f|<chunk>|<mb>``) and of one ring-attention step (``cp<group>|<instance>|<local>|
<source cp index>``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tracesim.workload.graph import TaskGraph, make_edges, make_lanes, make_tasks
from tracesim.workload.placement import Placement

REPORT_KIND = {"tp": "tp", "cp": "cp", "ep": "ep", "dpcp": "dp", "edp": "dp", "emb": "pp", "pp": "pp"}


def _comm_durations(prog: dict[str, np.ndarray], placement: Placement,
                    comm_time: Callable[[str, str, int, int], int]) -> np.ndarray:
    dur = prog["dur_ns"].copy()
    comm = np.flatnonzero(prog["kind"] != "gpu")
    sizes = {k: len(placement.groups(k)[0]) for k in ("tp", "cp", "ep", "dpcp", "edp", "emb")}
    sizes["pp"] = 2
    for i in comm:
        gk = prog["gkind"][i]
        dur[i] = int(comm_time(str(prog["collective"][i]), str(gk), sizes.get(gk, 2), int(prog["msg_bytes"][i])))
    return dur


def instantiate(
    stage_progs: Sequence[dict[str, np.ndarray]],
    ranks: Sequence[int],
    placement: Placement,
    comm_time: Callable[[str, str, int, int], int],
    representatives: bool,
) -> TaskGraph:
    """One :class:`TaskGraph` holding the programs of ``ranks``."""
    par = placement.par
    groups: list[tuple[int, ...]] = []
    group_ids: dict[tuple[str, int], int] = {}

    def gid(kind: str, rank: int) -> int:
        local = int(placement.group_index(kind)[rank])
        key = (kind, local)
        if key not in group_ids:
            group_ids[key] = len(groups)
            groups.append(placement.groups(kind)[local])
        return group_ids[key]

    stage_cache: dict[int, tuple] = {}
    cols: dict[str, list[np.ndarray]] = {c: [] for c in (
        "rank", "lane", "kind", "name", "dur_ns", "op_class", "flops", "bytes", "phase", "layer",
        "collective", "group", "group_kind", "msg_bytes", "peer", "match_key")}
    src_parts: list[np.ndarray] = []
    dst_parts: list[np.ndarray] = []
    lane_rank: list[int] = []
    lane_name: list[str] = []
    offset = 0
    for rank in ranks:
        c = placement.coord(rank)
        stage = c.pp
        prog = stage_progs[stage]
        if stage not in stage_cache:
            uniq, inv = np.unique(prog["lane"].astype(str), return_inverse=True)
            gk = prog["gkind"]
            comm = np.flatnonzero(prog["kind"] != "gpu")
            report = np.array([REPORT_KIND.get(k, "") for k in gk], dtype=object)
            stage_cache[stage] = (uniq, inv, comm, report, _comm_durations(prog, placement, comm_time))
        uniq, inv, comm, report, dur = stage_cache[stage]
        n = len(prog["lane"])
        lane_base = len(lane_name)
        lane_rank += [rank] * len(uniq)
        lane_name += [str(x) for x in uniq]
        group = np.full(n, -1, dtype=np.int32)
        peer = np.full(n, -1, dtype=np.int32)
        keys = np.full(n, "", dtype=object)
        nxt = placement.next_stage_rank(rank)
        prv = placement.prev_stage_rank(rank)
        cp_next = placement.rank(c.tp, (c.cp + 1) % par.cp, c.dp, c.pp)
        cp_prev = placement.rank(c.tp, (c.cp - 1) % par.cp, c.dp, c.pp)
        gk_arr, key_arr, sel_arr = prog["gkind"], prog["key"], prog["peer_sel"]
        cache_g: dict[str, int] = {}
        for i in comm.tolist():
            gk = gk_arr[i]
            if gk not in cache_g:
                cache_g[gk] = gid(gk, rank)
            g = cache_g[gk]
            group[i] = g
            sel = sel_arr[i]
            if sel == "pp_next":
                peer[i] = nxt
            elif sel == "pp_prev":
                peer[i] = prv
            elif sel == "cp_next":
                peer[i] = cp_next
            elif sel == "cp_prev":
                peer[i] = cp_prev
            if gk == "pp":
                keys[i] = f"pp{g}|{key_arr[i]}"
            elif sel in ("cp_next", "cp_prev"):
                if representatives:
                    keys[i] = f"cp{g}|{key_arr[i]}|self{rank}"
                else:
                    src_cp = c.cp if sel == "cp_next" else (c.cp - 1) % par.cp
                    keys[i] = f"cp{g}|{key_arr[i]}|{src_cp}"
            else:
                keys[i] = f"{gk}{g}|{key_arr[i]}"
        cols["rank"].append(np.full(n, rank, dtype=np.int32))
        cols["lane"].append((inv + lane_base).astype(np.int32))
        cols["kind"].append(prog["kind"])
        cols["name"].append(prog["name"])
        cols["dur_ns"].append(dur)
        cols["op_class"].append(prog["op_class"])
        cols["flops"].append(prog["flops"])
        cols["bytes"].append(prog["bytes"])
        cols["phase"].append(prog["phase"])
        cols["layer"].append(prog["layer"])
        cols["collective"].append(prog["collective"])
        cols["group"].append(group)
        cols["group_kind"].append(report)
        cols["msg_bytes"].append(prog["msg_bytes"])
        cols["peer"].append(peer)
        cols["match_key"].append(keys)
        src_parts.append(prog["src"] + offset)
        dst_parts.append(prog["dst"] + offset)
        offset += n
    data = {k: np.concatenate(v) if v else np.array([]) for k, v in cols.items()}
    if representatives:
        # a representative's collective has one present member: the engine must not wait
        # for the absent (symmetric) ones; the full group stays in ``sym_group`` for
        # tracesim.workload.symmetry.SymmetricComm
        data["sym_group"] = data["group"].copy()
        coll = data["kind"] == "coll"
        data["group"] = np.where(coll, -1, data["group"]).astype(np.int32)
    tasks = make_tasks(data)
    edges = make_edges(np.concatenate(src_parts) if src_parts else [], np.concatenate(dst_parts) if dst_parts else [], "dep")
    lanes = make_lanes({"rank": lane_rank, "name": lane_name, "kind": ["gpu"] * len(lane_name)})
    return TaskGraph(tasks, edges, lanes, tuple(groups))
