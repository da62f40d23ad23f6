"""AICB workloads <-> tracesim task graphs.

Import (:func:`aicb_to_graph`) follows SimAI's ``HYBRID_TRANSFORMER(_FWD_IN_BCKWD)`` loop for
one pass (one iteration) on every rank of ``all_gpus``, all ranks running the rows:

* forward, rows in file order: forward compute, then the forward collective, blocking
  (the next compute waits for it);
* backward, rows in reverse order: (``FWD_IN_BCKWD``: at a row listed in
  ``checkpoint_initiates``, the forward of the rows from the nearest checkpoint up to it is
  recomputed first), input-gradient compute, its collective (blocking), weight-gradient
  compute, its collective issued without waiting (lane ``comm:dp``, overlapping the rest of
  the backward; the iteration ends when the last one has finished);
* each collective is followed by the row's process time (SimAI adds it to every
  collective's completion): a task on the compute lane after a blocking collective, on
  ``comm:dp`` after a weight-gradient one; ``NONE`` columns give a zero-duration placeholder that keeps
  the column's size (so every number of the row survives), and no delay.

Ranks are laid out as SimAI's MockNccl groups: rank = t + tp (s + pp d), d = e + ep q
(t: TP index, s: pipeline stage, e: expert index, q: expert-data index); the TP group varies
t, DP varies d, EP varies e, DP_EP varies q. SimAI's workload files hold one pipeline
stage's rows and SimAI models the pipeline with a formula; here every stage runs the rows
and stages do not exchange activations (see docs/interop.md).

Export (:func:`graph_to_aicb`): a graph imported from AICB comes back row for row. Any other
graph (one rank of it) is cut into rows along its compute lane: compute runs up to a
blocking collective become forward rows (``phase == fwd``) or input-gradient rows;
collectives nothing waits for become weight-gradient columns. Backward rows are written in
reverse before the forward rows, so that SimAI's forward (file order) and backward (reverse
order) sweeps replay them in the graph's order. Lost: point-to-point transfers (PP), CP
collectives, the optimizer's wait for the gradient reduction, lane gaps beyond compute time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracesim.errors import InputError
from tracesim.graph.taskgraph import TaskGraph, make_edges, make_lanes, make_tasks
from tracesim.interop.aicb import (
    POLICIES,
    AicbComm,
    AicbRow,
    AicbWorkload,
)

_SLOTS = ("fwd", "ig", "wg")
_REPORT = {"tp": "tp", "ep": "ep", "dp": "dp", "dp_ep": "dp"}


@dataclass(frozen=True)
class Layout:
    """SimAI's rank layout for tp, pp, dp, ep (see the module docstring)."""

    tp: int
    pp: int
    dp: int
    ep: int

    def group(self, kind: str, rank: int) -> tuple[int, ...]:
        t, rest = rank % self.tp, rank // self.tp
        s, d = rest % self.pp, rest // self.pp
        e, q = d % self.ep, d // self.ep

        def r(t_: int, d_: int) -> int:
            return t_ + self.tp * (s + self.pp * d_)

        if kind == "tp":
            return tuple(r(x, d) for x in range(self.tp))
        if kind == "dp":
            return tuple(r(t, x) for x in range(self.dp))
        if kind == "ep":
            return tuple(r(t, x + self.ep * q) for x in range(self.ep))
        if kind == "dp_ep":
            return tuple(r(t, e + self.ep * x) for x in range(self.dp // self.ep))
        raise ValueError(kind)


class _Program:
    """The task columns and local edges of one rank's program."""

    def __init__(self) -> None:
        self.cols: dict[str, list[Any]] = defaultdict(list)
        self.src: list[int] = []
        self.dst: list[int] = []
        self.cursor = -1  # the task the next compute waits for (when not on the compute lane)
        self.cursor_on_compute = True
        self.last_wg = -1  # the previous weight-gradient collective (they queue on comm:dp)

    def add(self, **kw: Any) -> int:
        i = len(self.cols["name"])
        for k in ("lane", "kind", "name", "dur_ns", "phase", "layer", "collective", "gkind",
                  "msg_bytes", "op_class", "key"):
            self.cols[k].append(kw.get(k, {"dur_ns": 0, "layer": -1, "msg_bytes": 0}.get(k, "")))
        return i

    def edge(self, a: int, b: int) -> None:
        self.src.append(a)
        self.dst.append(b)

    def compute(self, name: str, dur_ns: int, phase: str, row: int) -> int:
        i = self.add(lane="compute", kind="gpu", name=name, dur_ns=dur_ns, phase=phase, layer=row,
                     op_class="other")
        if self.cursor >= 0 and not self.cursor_on_compute:
            self.edge(self.cursor, i)
        self.cursor, self.cursor_on_compute = i, True
        return i

    def comm(self, row: AicbRow, idx: int, slot: str, after: int, phase: str, tag: str = "",
             keytag: str = "") -> None:
        c: AicbComm = getattr(row, slot)
        name = f"{tag}{row.name}.{slot}"
        group = c.group(slot)
        if not c.collective:
            p = self.add(lane="comm:dp" if slot == "wg" else "comm:tp", kind="gpu",
                         name=f"{name}_comm:NONE", phase=phase, layer=idx, msg_bytes=c.size_bytes,
                         op_class="comm")
            self.edge(after, p)
            return
        lane = "comm:dp" if slot == "wg" else ("comm:tp" if group == "tp" else "comm:ep")
        k = self.add(lane=lane, kind="coll", name=f"{name}_comm:{c.token}", phase=phase,
                     layer=idx, collective=c.collective, gkind=group, msg_bytes=c.size_bytes,
                     op_class="comm", key=f"{keytag}{idx}|{slot}")
        self.edge(after, k)
        if slot == "wg":
            if self.last_wg >= 0:  # explicit queueing edge, so breakdowns follow the chain
                self.edge(self.last_wg, k)
            self.last_wg = k
        # the process time after the collective: on the compute lane when it blocks; on the
        # data-parallel lane, part of that lane's communication work
        done = self.add(lane=lane if slot == "wg" else "compute", kind="gpu", name=f"{name}_done",
                        dur_ns=row.update_ns, phase=phase, layer=idx,
                        op_class="comm" if slot == "wg" else "other",
                        gkind=group if slot == "wg" else "")
        self.edge(k, done)
        if slot != "wg":
            self.cursor, self.cursor_on_compute = done, True


def _program(w: AicbWorkload, file: Any = None) -> _Program:
    prog = _Program()
    rows = w.rows
    for i, row in enumerate(rows):
        f = prog.compute(f"{row.name}.fwd", row.fwd_ns, "fwd", i)
        prog.comm(row, i, "fwd", f, "fwd")
    initiates = set(w.checkpoint_initiates) if w.policy == POLICIES[0] else set()
    for i in range(len(rows) - 1, -1, -1):
        row = rows[i]
        if i in initiates:
            starts = [c for c in w.checkpoints if c <= i]
            if not starts:
                raise InputError(f"row {i} initiates a forward recomputation but no checkpoint "
                                 f"row precedes it", file, "line 1")
            for j in range(max(starts), i):
                f = prog.compute(f"recompute:{rows[j].name}.fwd", rows[j].fwd_ns, "bwd", j)
                prog.comm(rows[j], j, "fwd", f, "bwd", "recompute:", f"r{i}|")
        g = prog.compute(f"{row.name}.ig", row.ig_ns, "bwd", i)
        prog.comm(row, i, "ig", g, "bwd")
        h = prog.compute(f"{row.name}.wg", row.wg_ns, "bwd", i)
        prog.comm(row, i, "wg", h, "bwd")
    return prog


def aicb_to_graph(w: AicbWorkload, file: Any = None, *, one_rank: bool = False) -> TaskGraph:
    """The per-rank task graph of ``w`` for all ``all_gpus`` ranks (see the module docstring).

    ``one_rank``: build rank 0 only, for a symmetric replay (every rank runs the same rows):
    its collectives have no present partner (``group`` -1) and keep their full group in the
    ``sym_group`` column, which :class:`tracesim.engine.symmetry.SymmetricComm` hands to
    the network model (traffic of the other ranks' groups is not simulated).
    """
    if not w.rows:
        raise InputError("the workload has no rows", file)
    prog = _program(w, file)
    cols = {k: np.asarray(v, dtype=object) for k, v in prog.cols.items()}
    n = len(cols["name"])
    lay = Layout(w.tp, w.pp, w.dp, w.ep)
    lane_names = sorted(set(cols["lane"].tolist()))
    lane_of = np.array([lane_names.index(x) for x in cols["lane"]], dtype=np.int64)
    comm = np.flatnonzero(cols["kind"] == "coll")
    groups: dict[tuple[int, ...], int] = {}
    parts: dict[str, list[Any]] = defaultdict(list)
    src, dst = np.asarray(prog.src, dtype=np.int64), np.asarray(prog.dst, dtype=np.int64)
    ranks = [0] if one_rank else list(range(w.all_gpus))
    for k, rank in enumerate(ranks):
        group = np.full(n, -1, dtype=np.int64)
        key = np.full(n, "", dtype=object)
        for i in comm.tolist():
            members = lay.group(cols["gkind"][i], rank)
            gi = groups.setdefault(members, len(groups))
            group[i] = gi
            key[i] = f"{cols['gkind'][i]}{gi}|{cols['key'][i]}"
        parts["rank"].append(np.full(n, rank))
        parts["lane"].append(lane_of + k * len(lane_names))
        parts["group"].append(group)
        parts["match_key"].append(key)
        parts["src"].append(src + k * n)
        parts["dst"].append(dst + k * n)
    reps = len(ranks)
    tasks = make_tasks({
        "rank": np.concatenate(parts["rank"]), "lane": np.concatenate(parts["lane"]),
        "kind": np.tile(cols["kind"], reps), "name": np.tile(cols["name"], reps),
        "dur_ns": np.tile(cols["dur_ns"].astype(np.int64), reps),
        "op_class": np.tile(cols["op_class"], reps), "phase": np.tile(cols["phase"], reps),
        "layer": np.tile(cols["layer"].astype(np.int64), reps),
        "collective": np.tile(cols["collective"], reps),
        "group": np.full(n, -1) if one_rank else np.concatenate(parts["group"]),
        "group_kind": np.tile(np.array([_REPORT.get(g, "") for g in cols["gkind"]], dtype=object), reps),
        "msg_bytes": np.tile(cols["msg_bytes"].astype(np.int64), reps),
        "match_key": np.concatenate(parts["match_key"]),
    })
    if one_rank:
        tasks["sym_group"] = np.concatenate(parts["group"])
    lanes = make_lanes({"rank": np.repeat(np.asarray(ranks), len(lane_names)),
                        "name": lane_names * reps, "kind": ["gpu"] * (len(lane_names) * reps)})
    edges = make_edges(np.concatenate(parts["src"]), np.concatenate(parts["dst"]), "dep")
    meta = {
        "source_format": "aicb",
        "representatives": one_rank,
        "parallel": {"tp": w.tp, "pp": w.pp, "dp": w.dp, "ep": w.ep, "vpp": w.vpp,
                     "num_micro": w.ga},
        "aicb": {"policy": w.policy, "tp": w.tp, "ep": w.ep, "pp": w.pp, "vpp": w.vpp, "ga": w.ga,
                 "all_gpus": w.all_gpus, "pp_comm_bytes": w.pp_comm_bytes,
                 "checkpoints": list(w.checkpoints),
                 "checkpoint_initiates": list(w.checkpoint_initiates),
                 "reserved": [r.reserved for r in w.rows],
                 "update_ns": [r.update_ns for r in w.rows]},
    }
    return TaskGraph(tasks, edges, lanes, tuple(sorted(groups, key=groups.__getitem__)), meta)


def simai_bubble_s(graph: TaskGraph, result: Any, aicb: Mapping[str, Any]) -> float:
    """SimAI's bubble formula: (pp - 1) / (ga x vpp) x the non-embedding rows' forward,
    input-gradient and weight-gradient compute plus their blocking communication (rank 0)."""
    t = graph.tasks
    r0 = t["rank"].to_numpy() == graph.ranks[0]
    names = t["name"].to_numpy().astype(str)
    lanes = graph.lanes["name"].to_numpy().astype(str)[t["lane"].to_numpy()]
    dur = result.end_ns - result.start_ns
    keep = r0 & ~np.char.startswith(names, "embedding_layer.") & ~np.char.startswith(names, "recompute:")
    keep &= ~(lanes == "comm:dp")  # weight-gradient collectives are not blocking
    total_ns = float(dur[keep].sum())
    pp, ga, vpp = int(aicb["pp"]), int(aicb["ga"]), int(aicb["vpp"])
    return total_ns * 1e-9 * (pp - 1) / (ga * vpp)
