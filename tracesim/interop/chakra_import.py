"""Reading Chakra execution traces into a tracesim task graph (see :mod:`tracesim.interop.chakra`).

Files tracesim wrote carry ``tracesim.*`` attributes and come back exactly (same tasks in the
same order, lanes, groups, match keys, nanosecond durations). For other files: durations are
``duration_micros`` x 1000; COMP nodes run on lane ``cpu`` or ``compute`` by ``is_cpu_op``
(absent: GPU, as ASTRA-sim reads it), collectives on ``comm:pg<name>``, sends / receives on
``send`` / ``recv``, other node types (metadata, memory) on ``other``; tasks are ordered
topologically (smallest node id first among the ready ones); collectives on one
communicator match across ranks by their order, sends and receives by (src, dst, tag,
order); a collective's ranks come from the communicator-group JSON (``pg_name`` empty or
``0``: all ranks).
"""

from __future__ import annotations

import heapq
import json
import re
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.graph.taskgraph import TaskGraph, make_edges, make_lanes, make_tasks
from tracesim.interop import chakra_schema as pb
from tracesim.interop.chakra_schema import COMM_NAMES
from tracesim.trace.kineto import load_json_file

_ET_NAME = re.compile(r"^(?P<stem>.+)\.(?P<rank>\d+)\.et$")


def find_et_files(prefix: str | Path) -> tuple[Path, dict[int, Path]]:
    """The prefix and the ``{rank: file}`` of a set of ET files.

    ``prefix`` may be the prefix itself (``run/workload``), one of the files
    (``run/workload.0.et``) or a directory holding the files of exactly one prefix.
    """
    p = Path(prefix)
    if p.is_dir():
        stems = {m.group("stem") for f in p.glob("*.et") if (m := _ET_NAME.match(f.name))}
        if len(stems) != 1:
            raise InputError(f"expected the ET files of one prefix (<prefix>.<rank>.et), found "
                             f"{len(stems)} prefixes", p)
        p = p / stems.pop()
    elif (m := _ET_NAME.match(p.name)) is not None:
        p = p.parent / m.group("stem")
    files = {}
    parent = p.parent if str(p.parent) else Path(".")
    if parent.is_dir():
        for f in parent.iterdir():
            m = _ET_NAME.match(f.name)
            if m and m.group("stem") == p.name:
                files[int(m.group("rank"))] = f
    if not files:
        raise InputError("no Chakra ET files <prefix>.<rank>.et found", p)
    return p, dict(sorted(files.items()))


def read_et(path: Path) -> tuple[Any, list[Any]]:
    """The GlobalMetadata message and the Node messages of one ET file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", path) from None
    nodes = []
    meta = None
    try:
        for off, body in pb.iter_delimited(data):
            msg = pb.GlobalMetadata() if meta is None else pb.Node()
            try:
                msg.ParseFromString(body)
            except Exception as exc:  # protobuf DecodeError
                raise InputError(f"not a Chakra ET message ({exc})", path, f"byte {off}") from None
            if meta is None:
                meta = msg
            else:
                nodes.append(msg)
    except ValueError as exc:
        raise InputError(f"truncated ET file: {exc}", path) from None
    if meta is None:
        raise InputError("empty ET file (no GlobalMetadata)", path)
    return meta, nodes


def _attrs(msg: Any, plain: bool = False) -> dict[str, Any]:
    return {a.name: pb.attr_value(a) for a in msg.attr
            if not (plain and a.name.startswith("tracesim."))}


def _order(nodes: list[Any], deps: list[set[int]], ids: dict[int, int], path: Path) -> list[int]:
    """Positions of ``nodes`` in a topological order (smallest node id first among ready)."""
    n = len(nodes)
    indeg = [len(d) for d in deps]
    succ: list[list[int]] = [[] for _ in range(n)]
    for v, ds in enumerate(deps):
        for d in ds:
            succ[ids[d]].append(v)
    heap = [(nodes[v].id, v) for v in range(n) if indeg[v] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, v = heapq.heappop(heap)
        out.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, (nodes[w].id, w))
    if len(out) != n:
        stuck = min(nodes[v].id for v in range(n) if indeg[v] > 0)
        raise InputError("the dependencies form a cycle", path, f"node {stuck}")
    return out


def load_comm_groups(path: str | Path | None) -> dict[str, tuple[int, ...]]:
    """Read an ASTRA-sim communicator-group JSON (``{"<id>": [ranks]}``)."""
    if path is None:
        return {}
    p = Path(path)
    data = load_json_file(p, expected="a JSON file")
    if not isinstance(data, dict):
        raise InputError("expected a mapping of group id -> list of ranks", p)
    out = {}
    for k, v in data.items():
        if not isinstance(v, list) or not all(isinstance(r, int) and r >= 0 for r in v) or not v:
            raise InputError(f"expected a non-empty list of ranks, got {v!r}", p, str(k))
        out[str(k)] = tuple(sorted(v))
    return out


def import_chakra(prefix: str | Path, comm_groups: str | Path | Mapping[str, Any] | None = None,
                  *, plain: bool = False) -> TaskGraph:
    """Read ``<prefix>.<rank>.et`` files (and the communicator-group JSON) as a task graph.

    Args:
        prefix: the ET prefix, one ET file, or a directory with one prefix's files.
        comm_groups: the communicator-group JSON (path or parsed mapping); by default
            ``<prefix>.json`` when it exists.
        plain: ignore the ``tracesim.*`` attributes, reading the files as another tool
            (ASTRA-sim) sees them: microsecond durations, no lanes.

    Raises:
        InputError: naming the file and node for undecodable messages, dependencies on
            missing nodes, cycles, unknown communicators or collective types.
    """
    prefix, files = find_et_files(prefix)
    if comm_groups is None:
        default = Path(f"{prefix}.json")
        groups_by_pg = load_comm_groups(default if default.exists() else None)
    elif isinstance(comm_groups, Mapping):
        groups_by_pg = {str(k): tuple(sorted(int(r) for r in v)) for k, v in comm_groups.items()}
    else:
        groups_by_pg = load_comm_groups(comm_groups)
    all_ranks = tuple(files)
    rows: dict[str, list[Any]] = defaultdict(list)
    lane_rows: list[tuple[int, str, str]] = []
    edges: list[tuple[int, int, str]] = []
    groups: dict[tuple[int, ...], int] = {}
    graph_meta: dict[str, Any] = {}
    for r, path in files.items():
        gm, nodes = read_et(path)
        gattrs = _attrs(gm, plain)
        if "tracesim.meta_json" in gattrs and not graph_meta:
            try:
                graph_meta = dict(json.loads(gattrs["tracesim.meta_json"]))
            except ValueError:
                graph_meta = {}
        ids: dict[int, int] = {}
        for i, nd in enumerate(nodes):
            if nd.id in ids:
                raise InputError("duplicate node id", path, f"node {nd.id}")
            ids[nd.id] = i
        deps = []
        for nd in nodes:
            ds = set(nd.data_deps) | set(nd.ctrl_deps)
            missing = [d for d in ds if d not in ids]
            if missing:
                raise InputError(f"depends on missing node {missing[0]}", path, f"node {nd.id}")
            deps.append(ds)
        native = not plain and bool(nodes) and all(
            any(x.name == "tracesim.lane" for x in nd.attr) for nd in nodes)
        # tracesim's own files keep the task order (lanes run in it); others: topological
        order = list(range(len(nodes))) if native else _order(nodes, deps, ids, path)
        base = len(rows["name"])
        pos = {v: base + k for k, v in enumerate(order)}
        lanes: dict[str, int] = {}
        last_on_lane: dict[int, int] = {}
        ordinals: dict[tuple, int] = defaultdict(int)
        for v in order:
            nd = nodes[v]
            a = _attrs(nd, plain)
            task = _task(nd, a, r, path, groups_by_pg, all_ranks, ordinals)
            lane_name = str(a.get("tracesim.lane") or task.pop("_lane"))
            task.pop("_lane", None)
            if lane_name not in lanes:
                lanes[lane_name] = len(lane_rows)
                lane_kind = str(a.get("tracesim.lane_kind") or ("cpu" if task["kind"] == "cpu" else "gpu"))
                lane_rows.append((r, lane_name, lane_kind))
            lane = lanes[lane_name]
            members = task.pop("_members")
            task["group"] = groups.setdefault(members, len(groups)) if members else -1
            task["lane"] = lane
            for col, val in task.items():
                rows[col].append(val)
            me = pos[v]
            prev = last_on_lane.get(lane, -1)
            for d in sorted(deps[v], key=lambda x: pos[ids[x]]):
                s = pos[ids[d]]
                if s != prev:
                    edges.append((s, me, "data"))
            last_on_lane[lane] = me
    tasks = make_tasks(dict(rows))
    lane_df = make_lanes({"rank": [x[0] for x in lane_rows], "name": [x[1] for x in lane_rows],
                          "kind": [x[2] for x in lane_rows]})
    edge_df = make_edges([e[0] for e in edges], [e[1] for e in edges], [e[2] for e in edges])
    group_list = tuple(sorted(groups, key=lambda g: groups[g]))
    graph_meta["imported_from"] = {"format": "chakra", "prefix": str(prefix)}
    graph = TaskGraph(tasks, edge_df, lane_df, group_list, graph_meta)
    try:
        graph.validate()
    except ValueError as exc:
        raise InputError(f"the ET files do not form a replayable graph: {exc}", prefix) from None
    return graph


def _task(nd: Any, a: Mapping[str, Any], r: int, path: Path,
          groups_by_pg: Mapping[str, tuple[int, ...]], all_ranks: tuple[int, ...],
          ordinals: dict[tuple, int]) -> dict[str, Any]:
    """The task-table row of one node (plus ``_lane`` default and ``_members``)."""
    where = f"node {nd.id}"
    dur = a.get("tracesim.dur_ns")
    dur_ns = int(dur) if dur is not None else int(nd.duration_micros) * 1000
    task: dict[str, Any] = {
        "rank": r, "name": nd.name, "dur_ns": dur_ns,
        "gap_ns": int(a.get("tracesim.gap_ns", 0)),
        "op_class": str(a.get("tracesim.op_class", "other")),
        "phase": str(a.get("tracesim.phase", "other")),
        "step": str(a.get("tracesim.step", "")),
        "layer": int(a.get("tracesim.layer", -1)),
        "group_kind": str(a.get("tracesim.group_kind", "")),
        "flops": float(a.get("tracesim.flops", a.get("num_ops", 0) or 0)),
        "bytes": float(a.get("tracesim.bytes", a.get("tensor_size", 0) or 0)),
        "collective": "", "msg_bytes": int(a.get("tracesim.msg_bytes", 0)), "peer": -1,
        "_members": (),
    }
    typ = nd.type
    key = a.get("tracesim.match_key")
    if typ == pb.COMM_COLL_NODE:
        ctype = int(a.get("comm_type", -1) or 0) if "comm_type" in a else -1
        if ctype not in COMM_NAMES:
            raise InputError(f"collective without a known comm_type ({a.get('comm_type')!r})",
                             path, where)
        pg = str(a.get("pg_name", "") or "")
        if pg in ("", "0"):
            members = all_ranks
        elif pg in groups_by_pg:
            members = groups_by_pg[pg]
        else:
            raise InputError(f"communicator group {pg!r} is not in the communicator-group JSON",
                             path, where)
        if r not in members:
            raise InputError(f"rank {r} is not a member of communicator group {pg!r}", path, where)
        coll = str(a.get("tracesim.collective") or COMM_NAMES[ctype])
        if key is None:
            n = ordinals[("coll", pg)]
            ordinals[("coll", pg)] = n + 1
            key = f"coll|{pg}|{n}"
        task.update(kind="coll", collective=coll, msg_bytes=int(a.get("comm_size", 0) or 0),
                    op_class=str(a.get("tracesim.op_class", "comm")), _members=members,
                    _lane=f"comm:pg{pg or 0}")
    elif typ in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
        send = typ == pb.COMM_SEND_NODE
        src = int(a.get("comm_src", r if send else -1))
        dst = int(a.get("comm_dst", r if not send else -1))
        if (src if send else dst) != r:
            raise InputError(f"{'send' if send else 'receive'} of rank {r} names "
                             f"{'comm_src' if send else 'comm_dst'} {src if send else dst}",
                             path, where)
        peer = dst if send else src
        if peer < 0 or peer not in all_ranks:
            raise InputError(f"peer rank {peer} has no ET file", path, where)
        if key is None:
            ident = (src, dst, int(a.get("comm_tag", 0) or 0))
            n = ordinals[("p2p",) + ident]
            ordinals[("p2p",) + ident] = n + 1
            key = f"p2p|{ident[0]}|{ident[1]}|{ident[2]}|{n}"
        task.update(kind="send" if send else "recv", collective="send" if send else "recv",
                    peer=peer, msg_bytes=int(a.get("comm_size", 0) or 0),
                    op_class=str(a.get("tracesim.op_class", "comm")),
                    _lane="send" if send else "recv")
    else:
        cpu = bool(a.get("is_cpu_op", False)) if typ == pb.COMP_NODE else False
        kind = str(a.get("tracesim.kind") or ("cpu" if cpu else "gpu"))
        lane = {pb.COMP_NODE: "cpu" if cpu else "compute"}.get(typ, "other")
        task.update(kind=kind, _lane=lane)
    task["match_key"] = key or ""
    return task
