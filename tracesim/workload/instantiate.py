"""Instantiate stage programs for global ranks: lanes, groups, peers and match keys.

Every rank of a pipeline stage runs its stage's program (built once by the builder); only
the rank id, lane ids, group indices, peers and match keys differ. Match keys make the
engine pair the tasks of one collective (``<gkind><group>|<instance>|<local>``, equal on
all members because they run the same program), of one pipeline transfer
(``pp<pipe>|f|<chunk>|<mb>``) and of one ring-attention step (``cp<group>|<instance>|<local>|
<source cp index>``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from tracesim.workload.graph import EDGE_COLUMNS, TASK_COLUMNS, TaskGraph, make_lanes
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


def _frame(cols: dict[str, np.ndarray], columns: Mapping[str, Any]) -> pd.DataFrame:
    """A DataFrame over ``cols`` (already of the right dtypes) without copying them: object
    columns stay object (their strings shared, not re-inferred as Arrow strings), nothing is
    consolidated. ``columns`` gives the column order; extra ``cols`` follow."""
    order = list(columns) + [c for c in cols if c not in columns]
    return pd.DataFrame({c: pd.Series(cols[c], dtype=cols[c].dtype, copy=False) for c in order},
                        copy=False)


class _StageCache:
    """What every rank of one pipeline stage shares: lanes, comm-task codes, durations."""

    def __init__(self, prog: dict[str, np.ndarray], placement: Placement,
                 comm_time: Callable[[str, str, int, int], int]):
        self.n = len(prog["lane"])
        self.lanes, inv = np.unique(prog["lane"].astype(str), return_inverse=True)
        self.lane_inv = inv.astype(np.int32)
        self.comm = np.flatnonzero(prog["kind"] != "gpu")
        gk = prog["gkind"]
        self.report = np.array([REPORT_KIND.get(k, "") for k in gk], dtype=object)
        self.dur = _comm_durations(prog, placement, comm_time)
        gk_comm = [str(k) for k in gk[self.comm]]
        self.kinds = list(dict.fromkeys(gk_comm))  # first-appearance order (group numbering)
        self.kind_code = np.array([self.kinds.index(k) for k in gk_comm], dtype=np.int64)
        sels = [str(x) for x in prog["peer_sel"][self.comm]]
        self.sel_code = np.array([_SELECTORS.index(x) if x in _SELECTORS else 0 for x in sels],
                                 dtype=np.int64)
        self.keys = prog["key"][self.comm].astype(object)
        self.ring = np.flatnonzero(self.sel_code >= 3)  # ring-attention transfers (cp_next / cp_prev)
        self.src = prog["src"]
        self.dst = prog["dst"]


#: peer selectors of the builder's comm tasks, by code
_SELECTORS = ("", "pp_next", "pp_prev", "cp_next", "cp_prev")


def instantiate(
    stage_progs: Sequence[dict[str, np.ndarray]],
    ranks: Sequence[int],
    placement: Placement,
    comm_time: Callable[[str, str, int, int], int],
    representatives: bool,
) -> TaskGraph:
    """One :class:`TaskGraph` holding the programs of ``ranks``.

    Columns are filled per rank with vectorised copies of the stage program into arrays
    allocated once for all ranks (strings are shared, not copied); only a rank's group ids,
    peers and match keys are computed per rank.
    """
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

    caches: dict[int, _StageCache] = {}
    stage_of = [placement.coord(r).pp for r in ranks]
    for st in sorted(set(stage_of)):
        caches[st] = _StageCache(stage_progs[st], placement, comm_time)
    n = sum(caches[st].n for st in stage_of)
    n_e = sum(len(caches[st].src) for st in stage_of)
    i32 = {c: np.empty(n, dtype=np.int32) for c in ("rank", "lane", "layer", "group", "peer")}
    i64 = {c: np.empty(n, dtype=np.int64) for c in ("dur_ns", "msg_bytes")}
    f64 = {c: np.empty(n, dtype=np.float64) for c in ("flops", "bytes")}
    obj = {c: np.empty(n, dtype=object) for c in ("kind", "name", "op_class", "phase", "collective",
                                                    "group_kind")}
    keys = np.full(n, "", dtype=object)
    src = np.empty(n_e, dtype=np.int64)
    dst = np.empty(n_e, dtype=np.int64)
    lane_rank: list[int] = []
    lane_name: list[str] = []
    off = eoff = 0
    for rank, stage in zip(ranks, stage_of, strict=True):
        c = placement.coord(rank)
        prog, sc = stage_progs[stage], caches[stage]
        hi = off + sc.n
        lane_base = len(lane_name)
        lane_rank += [rank] * len(sc.lanes)
        lane_name += [str(x) for x in sc.lanes]
        i32["rank"][off:hi] = rank
        i32["lane"][off:hi] = sc.lane_inv + lane_base
        i32["layer"][off:hi] = prog["layer"]
        i32["group"][off:hi] = -1
        i32["peer"][off:hi] = -1
        i64["dur_ns"][off:hi] = sc.dur
        i64["msg_bytes"][off:hi] = prog["msg_bytes"]
        f64["flops"][off:hi] = prog["flops"]
        f64["bytes"][off:hi] = prog["bytes"]
        for col in ("kind", "name", "op_class", "phase", "collective"):
            obj[col][off:hi] = prog[col]
        obj["group_kind"][off:hi] = sc.report
        if len(sc.comm):
            g_of_kind = np.array([gid(k, rank) for k in sc.kinds], dtype=np.int64)
            g = g_of_kind[sc.kind_code]
            cidx = sc.comm + off
            i32["group"][cidx] = g
            cp_next = placement.rank(c.tp, (c.cp + 1) % par.cp, c.dp, c.pp)
            cp_prev = placement.rank(c.tp, (c.cp - 1) % par.cp, c.dp, c.pp)
            peers = np.array([-1, placement.next_stage_rank(rank), placement.prev_stage_rank(rank),
                              cp_next, cp_prev], dtype=np.int64)
            i32["peer"][cidx] = peers[sc.sel_code]
            prefix = np.array([f"{k}{gi}|" for k, gi in zip(sc.kinds, g_of_kind.tolist(), strict=True)],
                              dtype=object)
            k = prefix[sc.kind_code] + sc.keys
            if len(sc.ring):
                if representatives:
                    suffix = np.array(["", "", "", f"|self{rank}", f"|self{rank}"], dtype=object)
                else:
                    suffix = np.array(["", "", "", f"|{c.cp}", f"|{(c.cp - 1) % par.cp}"], dtype=object)
                k[sc.ring] = k[sc.ring] + suffix[sc.sel_code[sc.ring]]
            keys[cidx] = k
        ne = len(sc.src)
        src[eoff : eoff + ne] = sc.src + off
        dst[eoff : eoff + ne] = sc.dst + off
        off, eoff = hi, eoff + ne
    data: dict[str, np.ndarray] = {**i32, **i64, **f64, **obj, "match_key": keys}
    data["task_id"] = np.arange(n, dtype=np.int64)
    data["gap_ns"] = np.zeros(n, dtype=np.int64)
    data["step"] = np.full(n, "", dtype=object)
    if representatives:
        # a representative's collective has one present member: the engine must not wait
        # for the absent (symmetric) ones; the full group stays in ``sym_group`` for
        # tracesim.workload.symmetry.SymmetricComm
        data["sym_group"] = data["group"].copy()
        coll = data["kind"] == "coll"
        data["group"] = np.where(coll, -1, data["group"]).astype(np.int32)
    tasks = _frame(data, TASK_COLUMNS)
    edges = _frame({"src": src, "dst": dst, "kind": np.full(n_e, "dep", dtype=object)}, EDGE_COLUMNS)
    lanes = make_lanes({"rank": lane_rank, "name": lane_name, "kind": ["gpu"] * len(lane_name)})
    return TaskGraph(tasks, edges, lanes, tuple(groups))
