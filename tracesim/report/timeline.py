"""The simulated timeline as a Chrome / Kineto trace (``timeline.json.gz``).

Open it in Perfetto (ui.perfetto.dev) or chrome://tracing. Layout:

* one process per simulated rank (``pid`` = rank, named ``rank R``), one thread per lane
  (``tid`` = the lane's index on its rank, named after the lane: ``compute``, ``comm:tp``,
  ``comm:pp_fs``, ``cpu:1234``, ``stream:7``);
* one complete event (``ph: X``) per task, times in microseconds with nanosecond
  precision; GPU lanes' events have ``cat: kernel`` and ``args.stream`` like Kineto's, CPU
  lanes' ``cat: cpu_op``;
* collectives and send/recv are named ``ncclDevKernel_<Collective>_<kind>`` (so trace
  analysers such as HTA classify them as communication) and carry ``Collective name``,
  ``msg_bytes``, ``Group size``, ``Process Group Name`` and ``Process Group Ranks``;
* flow arrows (``ph: s`` / ``f``, ``cat: dependency``) for task-graph edges whose two ends
  are on different lanes.

Bounded for big runs: only the ranks that were simulated (a symmetric replay simulates one
representative per pipeline stage), at most ``max_ranks`` of them (the lowest rank numbers),
and at most ``max_flows`` arrows (the earliest by source end time). What was left out is
written in the trace's ``tracesim`` header.

:func:`write_kineto_ranks` writes the same events as one file per rank with Kineto's
``distributedInfo`` header, which is what Holistic Trace Analysis (``TraceAnalysis``) reads.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np

from tracesim.graph.taskgraph import COMM_KINDS, TaskGraph

#: defaults that keep a timeline openable in a browser
MAX_RANKS = 64
MAX_FLOWS = 20_000

_CAMEL = {
    "all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
    "all_to_all": "AllToAll", "broadcast": "Broadcast", "reduce": "Reduce", "send": "SendRecv",
    "recv": "SendRecv", "barrier": "Barrier",
}


def select_ranks(graph: TaskGraph, max_ranks: int = MAX_RANKS) -> list[int]:
    """The ranks a timeline shows: the simulated ones, the lowest ``max_ranks``."""
    ranks = sorted(int(r) for r in np.unique(graph.tasks["rank"].to_numpy()))
    return ranks[:max_ranks]


def chrome_events(graph: TaskGraph, start_ns: np.ndarray, end_ns: np.ndarray, *,
                  ranks: list[int] | None = None, max_flows: int = MAX_FLOWS,
                  methods: np.ndarray | None = None) -> tuple[list[dict], dict[str, Any]]:
    """Trace events of the given ranks and a summary of what was kept.

    Args:
        graph: the replayed graph.
        start_ns, end_ns: simulated task times (the engine's ReplayResult).
        ranks: ranks to include (default :func:`select_ranks`).
        max_flows: cap on dependency arrows.
        methods: per-task scaling method, written into each event's args when given.
    """
    ranks = select_ranks(graph) if ranks is None else ranks
    ev = _Events(graph, start_ns, end_ns, ranks, methods)
    return ev.trace(ranks, max_flows)


class _Events:
    """The trace events of a set of ranks, made once: each file (the timeline of all of
    them, one Kineto trace per rank) takes its ranks' share (:meth:`trace`)."""

    def __init__(self, graph: TaskGraph, start_ns: np.ndarray, end_ns: np.ndarray,
                 ranks: list[int], methods: np.ndarray | None):
        self.graph, self.start_ns, self.end_ns = graph, start_ns, end_ns
        t = graph.tasks
        lanes = graph.lanes
        self.n_simulated = len(np.unique(t["rank"].to_numpy()))
        self.lane_rank = lanes["rank"].to_numpy()
        self.lane_names = lanes["name"].astype(str).to_numpy()
        # tid: position of the lane among its rank's lanes
        self.tid = np.zeros(len(lanes), dtype=np.int64)
        for r in np.unique(self.lane_rank):
            at = np.flatnonzero(self.lane_rank == r)
            self.tid[at] = np.arange(len(at))
        self.idx = np.flatnonzero(np.isin(t["rank"].to_numpy(), ranks))
        self.task_rank = t["rank"].to_numpy()[self.idx]
        self.tasks = _task_events(graph, start_ns, end_ns, self.idx, self.tid,
                                  lanes["kind"].astype(str).to_numpy(), methods)

    def trace(self, ranks: list[int], max_flows: int) -> tuple[list[dict], dict[str, Any]]:
        """The events of ``ranks`` (a subset of those made) and what was kept."""
        ev: list[dict] = []
        tid = self.tid
        for r in ranks:
            ev.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}})
            ev.append({"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0, "args": {"sort_index": r}})
            for ln in np.flatnonzero(self.lane_rank == r).tolist():
                ev.append({"ph": "M", "name": "thread_name", "pid": r, "tid": int(tid[ln]),
                           "args": {"name": str(self.lane_names[ln])}})
                ev.append({"ph": "M", "name": "thread_sort_index", "pid": r, "tid": int(tid[ln]),
                           "args": {"sort_index": int(tid[ln])}})
        mine = np.isin(self.task_rank, ranks)
        if mine.all():
            ev.extend(self.tasks)
        else:
            ev.extend(self.tasks[j] for j in np.flatnonzero(mine).tolist())
        flows, n_cross, n_kept = _flow_events(self.graph, self.start_ns, self.end_ns, ranks, tid,
                                              max_flows)
        ev.extend(flows)
        info = {"ranks_shown": ranks, "ranks_simulated": self.n_simulated,
                "tasks_shown": int(mine.sum()), "flow_arrows": n_kept, "cross_lane_edges": n_cross,
                "max_flows": max_flows}
        return ev, info


def _task_events(graph: TaskGraph, start_ns: np.ndarray, end_ns: np.ndarray, idx: np.ndarray,
                 tid: np.ndarray, lane_kind: np.ndarray, methods: np.ndarray | None) -> list[dict]:
    """One complete event per task of ``idx`` (module docstring), in that order."""
    t = graph.tasks
    cols = {c: t[c].to_numpy()[idx] for c in ("rank", "lane", "kind", "name", "op_class", "phase",
                                              "layer", "collective", "group", "group_kind",
                                              "msg_bytes", "peer", "flops")}
    s = start_ns[idx]
    e = end_ns[idx]
    groups = graph.groups
    sym = t["sym_group"].to_numpy()[idx] if "sym_group" in t else None
    ev: list[dict] = []
    for j, task in enumerate(idx.tolist()):
        lane = int(cols["lane"][j])
        kind = str(cols["kind"][j])
        gpu = lane_kind[lane] == "gpu"
        args: dict[str, Any] = {"task_id": task, "correlation": task, "External id": task,
                                "phase": str(cols["phase"][j]), "op_class": str(cols["op_class"][j])}
        if gpu:
            args["stream"] = int(tid[lane]) + 1
            args["device"] = int(cols["rank"][j])
        if int(cols["layer"][j]) >= 0:
            args["layer"] = int(cols["layer"][j])
        if methods is not None:
            args["method"] = str(methods[task])
        if kind in COMM_KINDS:
            coll = str(cols["collective"][j]) or kind
            gk = str(cols["group_kind"][j]) or "other"
            name = f"ncclDevKernel_{_CAMEL.get(coll, coll.title().replace('_', ''))}_{gk}"
            g = int(cols["group"][j])
            if g < 0 and sym is not None:
                g = int(sym[j])
            members = list(groups[g]) if 0 <= g < len(groups) else []
            args.update({"op": str(cols["name"][j]), "Collective name": coll,
                         "msg_bytes": int(cols["msg_bytes"][j]), "group_kind": gk,
                         "Group size": len(members) if members else 2,
                         "Process Group Name": f"{gk}{g}" if g >= 0 else gk,
                         "Process Group Ranks": str(members)})
            if int(cols["peer"][j]) >= 0:
                args["peer"] = int(cols["peer"][j])
        else:
            name = str(cols["name"][j])
            if float(cols["flops"][j]) > 0:
                args["flops"] = float(cols["flops"][j])
        ev.append({"ph": "X", "cat": "kernel" if gpu else "cpu_op", "name": name,
                   "pid": int(cols["rank"][j]), "tid": int(tid[lane]),
                   "ts": round(int(s[j]) / 1e3, 3), "dur": round(int(e[j] - s[j]) / 1e3, 3),
                   "args": args})
    return ev


def _flow_events(graph: TaskGraph, start_ns: np.ndarray, end_ns: np.ndarray, ranks: list[int],
                 tid: np.ndarray, max_flows: int) -> tuple[list[dict], int, int]:
    """Dependency arrows across lanes between tasks of ``ranks`` (the earliest ``max_flows``
    by source end), the number of such edges and of arrows kept."""
    t = graph.tasks
    keep_rank = np.isin(t["rank"].to_numpy(), ranks)
    src = graph.edges["src"].to_numpy()
    dst = graph.edges["dst"].to_numpy()
    tl = t["lane"].to_numpy()
    cross = (tl[src] != tl[dst]) & keep_rank[src] & keep_rank[dst]
    src, dst = src[cross], dst[cross]
    order = np.argsort(end_ns[src], kind="stable")[:max_flows]
    trank = t["rank"].to_numpy()
    ev: list[dict] = []
    for k, o in enumerate(order.tolist()):
        a, b = int(src[o]), int(dst[o])
        ev.append({"ph": "s", "id": k, "cat": "dependency", "name": "dep", "pid": int(trank[a]),
                   "tid": int(tid[tl[a]]), "ts": round(int(end_ns[a]) / 1e3, 3)})
        ev.append({"ph": "f", "bp": "e", "id": k, "cat": "dependency", "name": "dep",
                   "pid": int(trank[b]), "tid": int(tid[tl[b]]),
                   "ts": round(int(max(start_ns[b], end_ns[a])) / 1e3, 3)})
    return ev, int(len(src)), int(len(order))


def write_timeline(path: str | Path, graph: TaskGraph, start_ns: np.ndarray, end_ns: np.ndarray,
                   *, max_ranks: int = MAX_RANKS, max_flows: int = MAX_FLOWS,
                   methods: np.ndarray | None = None, meta: dict | None = None,
                   kineto: str | Path | None = None) -> dict[str, Any]:
    """Write ``timeline.json.gz`` (module docstring), and with ``kineto`` (a folder) the
    per-rank traces of :func:`write_kineto_ranks` from the same events; returns what the
    timeline kept."""
    ranks = select_ranks(graph, max_ranks)
    made = _Events(graph, start_ns, end_ns, ranks, methods)
    events, info = made.trace(ranks, max_flows)
    doc = {"schemaVersion": 1, "displayTimeUnit": "ns",
           "tracesim": {**info, **(meta or {})}, "traceEvents": events}
    del events
    _dump_gz(Path(path), doc)
    del doc
    if kineto is not None:
        _write_kineto(Path(kineto), made, ranks, max_flows)
    return info


def write_kineto_ranks(folder: str | Path, graph: TaskGraph, start_ns: np.ndarray,
                       end_ns: np.ndarray, *, max_ranks: int = MAX_RANKS,
                       max_flows: int = MAX_FLOWS, methods: np.ndarray | None = None) -> list[Path]:
    """One Kineto-style trace per rank (``rank<R>.json.gz``), for HTA's TraceAnalysis."""
    ranks = select_ranks(graph, max_ranks)
    return _write_kineto(Path(folder), _Events(graph, start_ns, end_ns, ranks, methods), ranks,
                         max_flows)


def _write_kineto(folder: Path, made: _Events, ranks: list[int], max_flows: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for r in ranks:
        events, _ = made.trace([r], max_flows)
        doc = {"schemaVersion": 1,
               "distributedInfo": {"backend": "nccl", "rank": r, "world_size": made.n_simulated},
               "displayTimeUnit": "ns", "traceEvents": events}
        p = folder / f"rank{r}.json.gz"
        _dump_gz(p, doc)
        out.append(p)
    return out


def _dump_gz(path: Path, doc: dict) -> None:
    """Write JSON (``": "`` separators: HTA finds the rank with a regex) gzipped, atomically."""
    from tracesim.fileio import atomic_path

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, gzip.open(tmp, "wt", encoding="utf-8", compresslevel=6) as f:
        f.write(json.dumps(doc, separators=(",", ": ")))  # dumps: the C encoder, dump is pure Python
