"""The Chakra exporter as it was before it wrote rank by rank: every node a protobuf message
built from the whole graph. Kept only as the reference the streamed writer's bytes are
compared with (tests/test_chakra_write.py)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tracesim.errors import InputError
from tracesim.fileio import atomic_path, write_json
from tracesim.graph.chunks import expand_chunks
from tracesim.graph.taskgraph import TaskGraph
from tracesim.interop import chakra_schema as pb
from tracesim.interop.chakra import ChakraExport
from tracesim.interop.chakra_schema import COMM_TYPES

ET_VERSION = "0.0.4"
_KIND_TYPES = {"cpu": pb.COMP_NODE, "gpu": pb.COMP_NODE, "coll": pb.COMM_COLL_NODE,
               "send": pb.COMM_SEND_NODE, "recv": pb.COMM_RECV_NODE}
_P = "tracesim."  # prefix of the attributes only tracesim reads


def _attr(node: Any, name: str, kind: str, value: Any) -> None:
    a = node.attr.add(name=name)
    if kind == "bool_list":
        a.bool_list.values.extend(bool(v) for v in value)
    else:
        setattr(a, kind, value)


def _lane_pred(graph: TaskGraph) -> np.ndarray:
    """Previous task on the same lane (-1 for the first task of a lane)."""
    lanes = graph.tasks["lane"].to_numpy()
    ids = np.arange(len(lanes))
    order = np.lexsort((ids, lanes))
    pred = np.full(len(lanes), -1, dtype=np.int64)
    same = lanes[order][1:] == lanes[order][:-1]
    pred[order[1:][same]] = order[:-1][same]
    return pred


def reference_export(graph: TaskGraph, prefix: str | Path, *, involved_dims: int = 4) -> ChakraExport:
    """Write ``graph`` as Chakra ET files ``<prefix>.<rank>.et`` plus ``<prefix>.json``.

    Args:
        graph: a task graph holding every rank (not a symmetry-reduced one).
        prefix: path prefix of the output files (its directory is created).
        involved_dims: length of the all-true ``involved_dim`` list put on collectives
            (ASTRA-sim's default when the attribute is absent is 4).

    Raises:
        InputError: the graph is symmetry-reduced, or has an edge between ranks, or a
            collective whose members disagree on its kind.
    """
    graph = expand_chunks(graph)  # one node per communication operation
    t = graph.tasks
    if graph.meta.get("representatives"):
        raise InputError("the graph holds one representative rank per stage; rebuild it with "
                         "every rank (no symmetry reduction) to export it", "graph", "meta")
    prefix = Path(prefix)
    n = len(t)
    rank = t["rank"].to_numpy()
    kind = t["kind"].to_numpy().astype(str)
    src = graph.edges["src"].to_numpy()
    dst = graph.edges["dst"].to_numpy()
    cross = np.flatnonzero(rank[src] != rank[dst])
    if len(cross):
        e = int(cross[0])
        raise InputError(f"edge {int(src[e])} -> {int(dst[e])} joins ranks {rank[src[e]]} and "
                         f"{rank[dst[e]]}; an ET file holds one rank", "graph", "edges")
    preds: list[list[int]] = [[] for _ in range(n)]
    for s, d in zip(src.tolist(), dst.tolist(), strict=True):
        preds[d].append(s)
    lane_pred = _lane_pred(graph)
    match = t["match_key"].to_numpy().astype(str)
    # communicator groups from actual membership; p2p tags per matched pair
    members: dict[str, list[int]] = defaultdict(list)
    for i in np.flatnonzero(kind == "coll").tolist():
        members[match[i]].append(int(rank[i]))
    group_ids: dict[tuple[int, ...], str] = {}
    comm_groups: dict[str, list[int]] = {}
    for key in sorted(members, key=lambda k: members[k][0] if members[k] else 0):
        ranks = tuple(sorted(set(members[key])))
        if ranks not in group_ids:
            gid = str(len(group_ids) + 1)
            group_ids[ranks] = gid
            comm_groups[gid] = list(ranks)
    p2p_keys = sorted(set(match[np.isin(kind, ("send", "recv"))].tolist()))
    tags = {k: i + 1 for i, k in enumerate(p2p_keys)}

    cols = {c: t[c].to_numpy() for c in ("name", "dur_ns", "gap_ns", "op_class", "flops",
                                         "bytes", "step", "phase", "layer", "collective",
                                         "group_kind", "msg_bytes", "peer", "lane")}
    if "algorithm" in t:
        cols["algorithm"] = t["algorithm"].to_numpy()
    lane_names = graph.lanes["name"].to_numpy().astype(str)
    lane_kinds = graph.lanes["kind"].to_numpy().astype(str)
    meta_json = json.dumps(dict(graph.meta), default=str, sort_keys=True)
    world = len(graph.ranks)
    files: list[Path] = []
    counts: dict[int, int] = {}
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for r in graph.ranks:
        idx = np.flatnonzero(rank == r)
        local = {int(g): i for i, g in enumerate(idx.tolist())}
        chunks = []
        gm = pb.GlobalMetadata(version=ET_VERSION)
        _attr(gm, "schema", "string_val", "tracesim")
        _attr(gm, _P + "rank", "int64_val", int(r))
        _attr(gm, _P + "world", "int64_val", world)
        _attr(gm, _P + "meta_json", "string_val", meta_json)
        chunks.append(pb.delimited(gm))
        for g in idx.tolist():
            chunks.append(pb.delimited(_node(g, int(r), local, kind[g], cols, preds[g], int(lane_pred[g]),
                                             lane_names, lane_kinds, match[g], members, group_ids,
                                             tags, involved_dims)))
        path = Path(f"{prefix}.{r}.et")
        with atomic_path(path) as tmp:
            tmp.write_bytes(b"".join(chunks))
        files.append(path)
        counts[int(r)] = len(idx)
    cg = Path(f"{prefix}.json")
    write_json(cg, comm_groups)
    return ChakraExport(tuple(files), cg, comm_groups, counts)


def _node(g: int, me: int, local: dict[int, int], kind: str, cols: Mapping[str, np.ndarray],
          preds: list[int], lane_pred: int, lane_names: np.ndarray, lane_kinds: np.ndarray,
          match: str, members: Mapping[str, list[int]], group_ids: Mapping[tuple[int, ...], str],
          tags: Mapping[str, int], involved_dims: int) -> Any:
    dur = int(cols["dur_ns"][g])
    node = pb.Node(id=local[g], name=str(cols["name"][g]), type=_KIND_TYPES[kind],
                   duration_micros=(dur + 500) // 1000)
    deps = sorted({local[p] for p in preds} | ({local[lane_pred]} if lane_pred >= 0 else set()))
    node.data_deps.extend(deps)
    if lane_pred >= 0:
        node.ctrl_deps.append(local[lane_pred])
    _attr(node, "is_cpu_op", "bool_val", kind == "cpu")
    flops, nbytes = float(cols["flops"][g]), float(cols["bytes"][g])
    msg = int(cols["msg_bytes"][g])
    if kind in ("cpu", "gpu"):
        _attr(node, "num_ops", "int64_val", int(round(flops)))
        _attr(node, "tensor_size", "uint64_val", int(round(nbytes)))
        if msg:
            _attr(node, _P + "msg_bytes", "int64_val", msg)
    elif kind == "coll":
        coll = str(cols["collective"][g])
        if coll not in COMM_TYPES:
            raise InputError(f"collective {coll!r} has no Chakra comm_type", "graph",
                             f"task {g}")
        _attr(node, "comm_type", "int64_val", COMM_TYPES[coll])
        _attr(node, "comm_size", "int64_val", msg)
        _attr(node, "pg_name", "string_val", group_ids[tuple(sorted(set(members[match])))])
        _attr(node, "involved_dim", "bool_list", [True] * involved_dims)
    else:
        peer = int(cols["peer"][g])
        s, d = (me, peer) if kind == "send" else (peer, me)
        _attr(node, "comm_src", "int32_val", s)
        _attr(node, "comm_dst", "int32_val", d)
        _attr(node, "comm_tag", "int32_val", tags[match])
        _attr(node, "comm_size", "int64_val", msg)
    lane = int(cols["lane"][g])
    _attr(node, _P + "dur_ns", "int64_val", dur)
    gap = int(cols["gap_ns"][g])
    if gap:
        _attr(node, _P + "gap_ns", "int64_val", gap)
    _attr(node, _P + "lane", "string_val", str(lane_names[lane]))
    _attr(node, _P + "lane_kind", "string_val", str(lane_kinds[lane]))
    _attr(node, _P + "kind", "string_val", kind)
    for key in ("op_class", "phase", "step", "group_kind", "collective"):
        v = str(cols[key][g])
        if v:
            _attr(node, _P + key, "string_val", v)
    algo = str(cols["algorithm"][g]) if "algorithm" in cols else ""
    if algo and algo not in ("nan", "None"):  # a task's own algorithm (userbuffers chunks)
        _attr(node, _P + "algorithm", "string_val", algo)
    if int(cols["layer"][g]) != -1:
        _attr(node, _P + "layer", "int64_val", int(cols["layer"][g]))
    if flops:
        _attr(node, _P + "flops", "double_val", flops)
    if nbytes:
        _attr(node, _P + "bytes", "double_val", nbytes)
    if match:
        _attr(node, _P + "match_key", "string_val", match)
    return node
