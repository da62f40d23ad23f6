"""Per-rank assembly of imported Chakra nodes into task-graph columns.

:class:`Ranks` takes each rank's nodes as row ids of a
:class:`~tracesim.interop.chakra_decode.NodeTable` (file order) and computes, with array
operations, what the importer defines per rank: the task order (file order for tracesim's
own files, else topological with the smallest node id first among the ready ones), the
lanes in order of first use, communicator groups in order of first use, match keys (the
file's own, or ``coll|<pg>|<n>`` / ``p2p|<src>|<dst>|<tag>|<n>`` by order), peers, and
the edges (every dependency except the one on the previous task of the same lane). The
checks that name a rank (membership of the communicator, the rank a send or receive names)
are made here too; the first failing node in task order is reported, as a per-node reader
would report it.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracesim.errors import InputError
from tracesim.graph.taskgraph import (
    COMM_KINDS,
    EDGE_COLUMNS,
    TASK_COLUMNS,
    TaskGraph,
    categorical,
    code_dtype,
    make_lanes,
    order_of,
)
from tracesim.interop import chakra_schema as pb
from tracesim.interop.chakra_decode import NodeTable
from tracesim.interop.chakra_scan import ScannedFile

#: string columns of the task table and the NodeTable vocabulary each comes from
_STR_COLS = ("kind", "name", "op_class", "phase", "step", "group_kind", "collective")


@dataclass
class RankRows:
    """What one rank's tasks are, in task order: their node rows (``uids``), lanes (local
    numbers, in order of first use, and those lanes' name and kind codes), communicator
    members' codes (-1: not a collective), peers (-1: not a send / receive), match-key codes,
    and the edges (positions in the rank, ``src`` -> ``dst``, sorted by ``dst``)."""

    uids: np.ndarray
    lanes: np.ndarray
    lane_names: np.ndarray
    lane_kinds: np.ndarray
    members: np.ndarray
    peers: np.ndarray
    keys: np.ndarray
    src: np.ndarray
    dst: np.ndarray


class Ranks:
    """Accumulates the tasks, lanes, groups and edges of each rank in turn (:meth:`add`),
    then builds the :class:`TaskGraph` (:meth:`graph`). ``symmetry``: decides which ranks
    are kept (a rank it stands in for is checked against its representative, not stored)."""

    def __init__(self, table: NodeTable, all_ranks: tuple[int, ...], symmetry: Any = None):
        self.t = table
        self.symmetry = symmetry
        self.all_ranks = np.array(all_ranks, dtype=np.int64)
        self.ranks: list[int] = []
        self.counts: list[int] = []
        self.uids: list[np.ndarray] = []
        self.lane_ids: list[np.ndarray] = []
        self.group_ids: list[np.ndarray] = []
        self.peers: list[np.ndarray] = []
        self.keys: list[np.ndarray] = []
        self.src: list[np.ndarray] = []
        self.dst: list[np.ndarray] = []
        self.lane_rank: list[int] = []
        self.lane_name: list[int] = []  # codes into the "lane" vocabulary
        self.lane_kind: list[int] = []
        self.groups: list[tuple[int, ...]] = []
        self.gid = np.full(0, -1, dtype=np.int64)  # members code -> group index
        self.n = 0
        self.member_sets: dict[int, frozenset[int]] = {}

    # ------------------------------------------------------------------ one rank

    def add(self, r: int, path: Path, f: ScannedFile) -> None:
        """Add rank ``r``'s nodes (``f.uids``, file order); InputError naming ``path`` and
        the node for duplicate ids, missing dependencies, cycles and bad nodes."""
        t = self.t
        col = t.column
        uids = f.uids
        n = len(uids)
        ids = col("node_id")[uids]
        ident = bool(np.array_equal(ids, np.arange(n, dtype=np.uint64)))
        sidx = np.arange(n) if ident else np.argsort(ids, kind="stable")
        sorted_ids = ids[sidx]
        if n > 1 and not ident and np.any(sorted_ids[1:] == sorted_ids[:-1]):
            _duplicate(ids, path)
        dlen = col("dep_len")[uids]
        total = int(dlen.sum())
        owner = np.repeat(np.arange(n), dlen)
        at = np.repeat(col("dep_ptr")[uids] - (np.cumsum(dlen) - dlen), dlen) + np.arange(total)
        dep_ids = t.dep_flat[at]
        if ident:
            found = dep_ids < np.uint64(n)
            dep_idx = dep_ids.astype(np.int64)
        else:
            k = np.minimum(np.searchsorted(sorted_ids, dep_ids), max(n - 1, 0))
            found = sorted_ids[k] == dep_ids if n else np.zeros(total, dtype=bool)
            dep_idx = sidx[k]
        if not found.all():
            _missing(f, int(owner[~found].min()), ids, path)
        native = n > 0 and bool(col("has_lane")[uids].all())
        if native or bool(np.all(dep_ids < ids[owner])):
            order = None if native or ident else sidx
        else:
            order = _heap_order(ids, owner, dep_idx, path)
        if order is None:
            u, pos = uids, None
        else:
            u = uids[order]
            pos = np.empty(n, dtype=np.int64)
            pos[order] = np.arange(n)
        self._rank_rows(r, path, u, pos, owner, dep_idx)

    def _rank_rows(self, r: int, path: Path, u: np.ndarray, pos: np.ndarray | None,
                   owner: np.ndarray, dep_idx: np.ndarray) -> None:
        col = self.t.column
        n = len(u)
        typ = col("type")[u]
        coll = typ == pb.COMM_COLL_NODE
        send = typ == pb.COMM_SEND_NODE
        recv = typ == pb.COMM_RECV_NODE
        p2p = send | recv
        err = col("err")[u]
        bad = err >= 0
        members = col("members")[u]
        not_member = np.zeros(n, dtype=bool)
        if coll.any():
            for c in np.unique(members[coll & ~bad]).tolist():
                if c not in self.member_sets:
                    self.member_sets[c] = frozenset(self.t.member_list[c])
                if r not in self.member_sets[c]:
                    not_member |= coll & ~bad & (members == c)
        src = dst = peer = np.full(n, -1, dtype=np.int64)
        wrong_end = no_peer = np.zeros(n, dtype=bool)
        if p2p.any():
            src = np.where(col("src_has")[u], col("src")[u], np.where(send, r, -1))
            dst = np.where(col("dst_has")[u], col("dst")[u], np.where(recv, r, -1))
            wrong_end = p2p & ~bad & np.where(send, src != r, dst != r)
            peer = np.where(send, dst, np.where(recv, src, -1))
            no_peer = p2p & ~bad & ~wrong_end & ~np.isin(peer, self.all_ranks)
        fail = bad | not_member | wrong_end | no_peer
        if fail.any():
            self._raise(int(np.argmax(fail)), r, path, u, err, not_member, wrong_end, src, dst,
                        peer)
        keys = col("key")[u].astype(np.int64)
        need = np.flatnonzero((keys < 0) & (coll | p2p))
        keys[keys < 0] = 0
        if len(need):
            keys[need] = self._ordinal_keys(need, coll, col("pg")[u], src, dst, col("tag")[u])
        lane_code = col("lane")[u]
        names, first_at, inv = np.unique(lane_code, return_index=True, return_inverse=True)
        by_first = np.argsort(first_at)
        local = np.empty(len(names), dtype=np.int64)
        local[by_first] = np.arange(len(names))
        lanes = local[inv.reshape(-1)]
        me = s = np.zeros(0, dtype=np.int64)
        if len(owner):
            me = owner if pos is None else pos[owner]
            s = dep_idx if pos is None else pos[dep_idx]
            by_lane = np.argsort(lanes, kind="stable")
            prev = np.full(n, -1, dtype=np.int64)
            same = lanes[by_lane[1:]] == lanes[by_lane[:-1]]
            prev[by_lane[1:][same]] = by_lane[:-1][same]
            keep = s != prev[me]
            me, s = me[keep], s[keep]
            o = np.lexsort((s, me))
            me, s = me[o], s[o]
        rows = RankRows(u, lanes, names[by_first], col("lane_kind")[u[first_at[by_first]]],
                        np.where(coll, members, -1), np.where(p2p, peer, -1), keys, s, me)
        if self.symmetry is None or self.symmetry.keep(r, rows):
            self._store(r, rows)

    def _store(self, r: int, rows: RankRows) -> None:
        """Append rank ``r``'s rows to the columns of the graph."""
        n = len(rows.uids)
        coll = rows.members >= 0
        group = np.full(n, -1, dtype=np.int32)
        if coll.any():
            mc = rows.members[coll]
            first_seen, first_at = np.unique(mc, return_index=True)
            if len(self.gid) < len(self.t.member_list):
                self.gid = np.concatenate([self.gid, np.full(len(self.t.member_list) - len(self.gid),
                                                             -1, dtype=np.int64)])
            for c in first_seen[np.argsort(first_at)].tolist():
                if self.gid[c] < 0:
                    self.gid[c] = len(self.groups)
                    self.groups.append(self.t.member_list[c])
            group[coll] = self.gid[mc]
        base_lane = len(self.lane_rank)
        self.lane_rank += [r] * len(rows.lane_names)
        self.lane_name += rows.lane_names.tolist()
        self.lane_kind += rows.lane_kinds.tolist()
        if len(rows.src):
            pos_type = np.int32 if self.n + n < 2**31 else np.int64
            self.src.append((rows.src + self.n).astype(pos_type))
            self.dst.append((rows.dst + self.n).astype(pos_type))
        self.ranks.append(r)
        self.counts.append(n)
        self.uids.append(rows.uids)
        self.lane_ids.append((rows.lanes + base_lane).astype(np.int32))
        self.group_ids.append(group)
        self.peers.append(rows.peers.astype(np.int32))
        self.keys.append(rows.keys.astype(np.int32))
        self.n += n

    def _ordinal_keys(self, need: np.ndarray, coll: np.ndarray, pg: np.ndarray, src: np.ndarray,
                      dst: np.ndarray, tag: np.ndarray) -> list[int]:
        """Match keys of comm tasks without one: the n-th collective on a communicator
        (``coll|<pg>|<n>``), the n-th transfer of (src, dst, tag) (``p2p|...|<n>``)."""
        vocab = self.t.vocab["key"]
        pgs = self.t.strings("pg")
        seen: dict[tuple[Any, ...], int] = {}
        out = []
        for i in need.tolist():
            if coll[i]:
                ident: tuple[Any, ...] = ("coll", pgs[pg[i]])
            else:
                ident = ("p2p", int(src[i]), int(dst[i]), int(tag[i]))
            k = seen.get(ident, 0)
            seen[ident] = k + 1
            text = "|".join(str(x) for x in ident) + f"|{k}"
            out.append(vocab.setdefault(text, len(vocab)))
        return out

    def _raise(self, i: int, r: int, path: Path, u: np.ndarray, err: np.ndarray,
               not_member: np.ndarray, wrong_end: np.ndarray, src: np.ndarray, dst: np.ndarray,
               peer: np.ndarray) -> None:
        where = f"node {int(self.t.column('node_id')[u[i]])}"
        if err[i] >= 0:
            raise InputError(self.t.errors[err[i]], path, where)
        if not_member[i]:
            pg = self.t.strings("pg")[self.t.column("pg")[u[i]]]
            raise InputError(f"rank {r} is not a member of communicator group {pg!r}", path, where)
        if wrong_end[i]:
            send = self.t.column("type")[u[i]] == pb.COMM_SEND_NODE
            raise InputError(f"{'send' if send else 'receive'} of rank {r} names "
                             f"{'comm_src' if send else 'comm_dst'} "
                             f"{int(src[i] if send else dst[i])}", path, where)
        raise InputError(f"peer rank {int(peer[i])} has no ET file", path, where)

    # ------------------------------------------------------------------ the graph

    def graph(self, meta: Mapping[str, Any]) -> TaskGraph:
        """The task graph of every rank added (string columns as Categoricals, small
        integer columns in the smallest dtype that holds them, as the builder stores them)."""
        t = self.t
        uids = _cat(self.uids, np.int32)
        n = len(uids)
        data: dict[str, Any] = {
            "task_id": np.arange(n, dtype=np.int64),
            "rank": np.repeat(np.array(self.ranks, dtype=np.int32), self.counts),
            "lane": _cat(self.lane_ids, np.int32),
        }
        # a code's first task is a task of the first row (uid) that has it: the first
        # appearance of the rows orders every column's categories
        first_rows = pd.unique(uids)
        for c in _STR_COLS:
            data[c] = _categorical(t.column(c), t.strings(c), uids, first_rows)
        if any(t.strings("algorithm")):  # tasks that name their algorithm (userbuffers chunks)
            data["algorithm"] = _categorical(t.column("algorithm"), t.strings("algorithm"), uids,
                                             first_rows)
        keys = _cat(self.keys, np.int32)
        data["match_key"] = _categorical(keys, t.strings("key"), None, keys)
        del keys
        data["dur_ns"] = _small(t.column("dur_ns"), np.int32)[uids]
        gap = t.column("gap_ns")
        data["gap_ns"] = gap[uids] if gap.any() else np.broadcast_to(np.int64(0), n)
        data["layer"] = _small(t.column("layer"), np.int16, np.int32)[uids]
        data["flops"] = t.column("flops")[uids]
        data["bytes"] = t.column("bytes")[uids]
        data["msg_bytes"] = _small(t.column("msg_bytes"), np.int32)[uids]
        data["group"] = _small(_cat(self.group_ids, np.int32), np.int16, np.int32)
        data["peer"] = _small(_cat(self.peers, np.int32), np.int16, np.int32)
        del uids
        tasks = _frame(data, TASK_COLUMNS)
        pos_type = np.int32 if n < 2**31 else np.int64
        src = _cat(self.src, pos_type)
        dst = _cat(self.dst, pos_type)
        edges = _frame({"src": src, "dst": dst,
                        "kind": categorical(np.zeros(len(src), dtype=np.int8), ["data"])},
                       EDGE_COLUMNS)
        lane_names, lane_kinds = t.strings("lane"), t.strings("lane_kind")
        lanes = make_lanes({"rank": self.lane_rank, "name": [lane_names[c] for c in self.lane_name],
                            "kind": [lane_kinds[c] for c in self.lane_kind]})
        return TaskGraph(tasks, edges, lanes, tuple(self.groups), dict(meta))

    @staticmethod
    def check(graph: TaskGraph) -> None:
        """What :meth:`TaskGraph.validate` checks, by construction or with array operations:
        ids, edge ends and lanes are right by construction; the graph is acyclic when every
        edge runs forward in task order (lane order does), or when every rank's own graph is
        (:func:`_ranks_acyclic`). Otherwise (a cycle, a comm task without a match key) the
        full validation decides and raises."""
        src = graph.edges["src"].to_numpy()
        dst = graph.edges["dst"].to_numpy()
        kind = graph.tasks["kind"]
        comm = kind.isin(COMM_KINDS).to_numpy()
        no_key = comm & (graph.tasks["match_key"] == "").to_numpy()
        if no_key.any() or (np.any(src >= dst) and not _ranks_acyclic(graph, src, dst)):
            graph.validate()


def _ranks_acyclic(graph: TaskGraph, src: np.ndarray, dst: np.ndarray) -> bool:
    """True when no rank's tasks form a cycle, each distinct rank graph checked once.

    An ET has no edge between ranks, and the ranks of one workload repeat a few programs:
    ranks with the same number of tasks, the same edges relative to their first task and the
    same lane partition have the same graph. False (the caller's full validation decides)
    when a rank's graph has a cycle, the ranks' tasks are not contiguous, or an edge or a
    lane leaves its rank."""
    rank = graph.tasks["rank"].to_numpy()
    lane = graph.tasks["lane"].to_numpy()
    n = len(rank)
    first = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])
    end = np.r_[first[1:], n]
    if len(np.unique(rank[first])) != len(first):
        return False
    if np.any(graph.lanes["rank"].to_numpy()[lane] != rank):  # a lane shared by ranks
        return False
    seg = np.searchsorted(first, src, side="right") - 1
    if np.any(dst < first[seg]) or np.any(dst >= end[seg]):
        return False
    by_seg = np.argsort(seg, kind="stable")
    bounds = np.searchsorted(seg[by_seg], np.arange(len(first) + 1))
    seen: set[bytes] = set()
    for i, (a, b) in enumerate(zip(first.tolist(), end.tolist(), strict=True)):
        e = by_seg[bounds[i] : bounds[i + 1]]
        ls = src[e].astype(np.int64) - a
        ld = dst[e].astype(np.int64) - a
        o = np.lexsort((ld, ls))
        ls, ld = ls[o], ld[o]
        lanes = _dense(lane[a:b])
        key = hashlib.blake2b(b"".join((np.int64(b - a).tobytes(), ls.tobytes(), ld.tobytes(),
                                         lanes.tobytes()))).digest()
        if key in seen:
            continue
        seen.add(key)
        if order_of(b - a, lanes, ls, ld) is None:
            return False
    return True


def _dense(values: np.ndarray) -> np.ndarray:
    """``np.unique(values, return_inverse=True)[1]`` (int64): each value's rank among the
    distinct values; without sorting when the values are a run of consecutive integers
    (a rank's lane ids), else by sorting."""
    if not len(values):
        return np.zeros(0, dtype=np.int64)
    lo = int(values.min())
    shifted = values.astype(np.int64) - lo
    if int(shifted.max()) < 2 * len(values) and np.bincount(shifted).all():
        return shifted
    return np.unique(values, return_inverse=True)[1].astype(np.int64).reshape(-1)


def _cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    out = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
    parts.clear()
    return out.astype(dtype, copy=False)


def _small(a: np.ndarray, *dtypes: Any) -> np.ndarray:
    """``a`` in the first of ``dtypes`` that holds all its values (else unchanged)."""
    if not len(a):
        return a.astype(dtypes[0])
    lo, hi = int(a.min()), int(a.max())
    for dt in dtypes:
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return a.astype(dt)
    return a


def _categorical(codes: np.ndarray, values: list[str], rows: np.ndarray | None,
                 first: np.ndarray) -> pd.Series:
    """The Categorical of ``codes[rows]`` (``codes`` itself when ``rows`` is None), with
    categories in order of first appearance (as ``pd.factorize`` of the strings would
    number them) and without the values no task uses; ``first``: the distinct ``rows`` in
    order of first appearance (or ``codes`` when ``rows`` is None)."""
    used = pd.unique(codes[first] if rows is not None else first)
    remap = np.zeros(len(values), dtype=code_dtype(len(used)))
    remap[used] = np.arange(len(used))
    out = remap[codes] if rows is None else remap[codes][rows]
    return categorical(out, [values[c] for c in used.tolist()])


def _frame(cols: dict[str, Any], columns: Mapping[str, Any]) -> pd.DataFrame:
    order = list(columns) + [c for c in cols if c not in columns]
    return pd.DataFrame({c: cols[c] if isinstance(cols[c], pd.Series)
                         else pd.Series(cols[c], dtype=cols[c].dtype, copy=False) for c in order},
                        copy=False)


# --------------------------------------------------------------------------- errors, order


def _duplicate(ids: np.ndarray, path: Path) -> None:
    seen: set[int] = set()
    for x in ids.tolist():
        if x in seen:
            raise InputError("duplicate node id", path, f"node {x}")
        seen.add(x)


def _missing(f: ScannedFile, i: int, ids: np.ndarray, path: Path) -> None:
    """Raise for node ``i`` (file order), which depends on a node the file does not have;
    names the first missing id as the set of its dependencies iterates."""
    body, _ = f.node_body(i)
    nd = pb.Node()
    nd.ParseFromString(body)
    known = set(ids.tolist())
    ds = set(nd.data_deps) | set(nd.ctrl_deps)
    missing = [d for d in ds if d not in known]
    raise InputError(f"depends on missing node {missing[0]}", path, f"node {nd.id}")


def _heap_order(ids: np.ndarray, owner: np.ndarray, dep_idx: np.ndarray, path: Path) -> np.ndarray:
    """Positions in a topological order, the smallest node id first among the ready ones."""
    n = len(ids)
    id_list = ids.tolist()
    indeg = np.bincount(owner, minlength=n).tolist()
    by_dep = np.argsort(dep_idx, kind="stable")
    ptr = np.searchsorted(dep_idx[by_dep], np.arange(n + 1)).tolist()
    succ = owner[by_dep].tolist()
    heap = [(id_list[v], v) for v in range(n) if indeg[v] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, v = heapq.heappop(heap)
        out.append(v)
        for w in succ[ptr[v] : ptr[v + 1]]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, (id_list[w], w))
    if len(out) != n:
        stuck = min(id_list[v] for v in range(n) if indeg[v] > 0)
        raise InputError("the dependencies form a cycle", path, f"node {stuck}")
    return np.array(out, dtype=np.int64)
