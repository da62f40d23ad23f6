"""Writing Chakra ET files rank by rank (the encoder behind :mod:`tracesim.interop.chakra`).

The workload arrives as task graphs that each hold whole ranks: one graph of every rank, or
the builder's ranks a few at a time (:meth:`tracesim.build.builder.StagePrograms.rank_graphs`),
so that no more than one such graph is held. :class:`ChakraWriter` reads them twice:

1. :meth:`ChakraWriter.scan`: which ranks run each collective's match key (its communicator
   group, numbered as the groups first appear), the point-to-point match keys (one tag per
   key, in sorted order), the ranks and their task counts;
2. :meth:`ChakraWriter.write`: each rank's file, written and dropped.

A node's bytes are its rank's own parts -- the communicator (``pg_name``), a transfer's
``comm_src`` / ``comm_dst`` / ``comm_tag`` and the ``tracesim.match_key`` -- and the rest
(name, type, duration, dependencies, lane, sizes, ...). The rest is encoded once per
distinct rank program (ranks with the same tasks, durations, dependencies and lanes, relative
to their first task, share it: a fingerprint of those columns finds it); a rank's own parts
are encoded where they differ from those of the previous rank with the same program. The
bytes are those of the protobuf messages of each node (field order, attribute order and
values as :func:`tracesim.interop.chakra.export_chakra` documents).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracesim.errors import InputError
from tracesim.fileio import atomic_path, output_dir, write_json
from tracesim.graph.taskgraph import TaskGraph, column_codes
from tracesim.interop import chakra_schema as pb
from tracesim.interop.chakra_schema import COMM_TYPES

ET_VERSION = "0.0.4"
KIND_TYPES = {"cpu": pb.COMP_NODE, "gpu": pb.COMP_NODE, "coll": pb.COMM_COLL_NODE,
              "send": pb.COMM_SEND_NODE, "recv": pb.COMM_RECV_NODE}
P = "tracesim."  # prefix of the attributes only tracesim reads
_ATTR_FIELD = b"\x52"  # Node.attr: field 10, length-delimited
#: string columns of the task table that enter a node's bytes
_STR = ("kind", "name", "op_class", "phase", "step", "group_kind", "collective", "algorithm")
#: distinct rank programs whose encoded nodes are kept
_PROGRAMS_KEPT = 8


def attr_entry(name: str, kind: str, value: Any) -> bytes:
    """One ``Node.attr`` entry as it sits in a serialized node (tag, length, message)."""
    a = pb.AttributeProto(name=name)
    if kind == "bool_list":
        a.bool_list.values.extend(bool(v) for v in value)
    else:
        setattr(a, kind, value)
    body = a.SerializeToString(deterministic=True)
    return _ATTR_FIELD + pb.encode_varint(len(body)) + body


def lane_pred(graph: TaskGraph) -> np.ndarray:
    """Previous task on the same lane (-1 for the first task of a lane)."""
    lanes = graph.tasks["lane"].to_numpy()
    ids = np.arange(len(lanes))
    order = np.lexsort((ids, lanes))
    pred = np.full(len(lanes), -1, dtype=np.int64)
    same = lanes[order][1:] == lanes[order][:-1]
    pred[order[1:][same]] = order[:-1][same]
    return pred


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of integers, by sorting."""
    out = np.sort(values)
    return out[np.r_[True, out[1:] != out[:-1]]] if len(out) else out


class _Chunk:
    """One graph's tasks in rank order (stable), with what every node's bytes need."""

    def __init__(self, graph: TaskGraph, vocab: dict[str, dict[str, int]]):
        t = graph.tasks
        rank = t["rank"].to_numpy().astype(np.int64)
        self.perm = np.argsort(rank, kind="stable")
        n = len(rank)
        self.rank = rank[self.perm]
        bounds = np.flatnonzero(np.r_[True, self.rank[1:] != self.rank[:-1]]) if n else np.zeros(0, int)
        self.starts = bounds.tolist() + [n]
        self.ranks = self.rank[bounds].tolist()
        inv = np.empty(n, dtype=np.int64)
        inv[self.perm] = np.arange(n)
        start_of = np.repeat(bounds, np.diff(np.r_[bounds, n])) if n else np.zeros(0, np.int64)
        local = inv - start_of[inv]  # a task's position in its rank (by row)
        src = graph.edges["src"].to_numpy().astype(np.int64)
        dst = graph.edges["dst"].to_numpy().astype(np.int64)
        cross = np.flatnonzero(rank[src] != rank[dst])
        if len(cross):
            e = int(cross[0])
            raise InputError(f"edge {int(src[e])} -> {int(dst[e])} joins ranks {rank[src[e]]} and "
                             f"{rank[dst[e]]}; an ET file holds one rank", "graph", "edges")
        lp = lane_pred(graph)
        has_lp = lp >= 0
        self.lane_pred = np.where(has_lp, local[np.maximum(lp, 0)], -1)[self.perm]
        # dependencies: explicit predecessors and the lane predecessor, sorted, no repeats
        width = int(local.max()) + 1 if n else 1
        owner = np.r_[inv[dst], inv[has_lp]]
        dep = np.r_[local[src], local[lp[has_lp]]]
        packed = _sorted_unique(owner * width + dep)
        self.dep_owner, self.dep = np.divmod(packed, width)
        self.dep_ptr = np.searchsorted(self.dep_owner, np.arange(n + 1))
        # per task (rank order): global string ids, lanes' names and kinds, numbers
        self.strings: dict[str, list[str]] = {}
        self.codes: dict[str, np.ndarray] = {}
        cols = []
        for c in (*_STR, "match_key"):
            codes, names = column_codes(t[c] if c in t else pd.Series([""] * len(t), dtype=object))
            names = [*names, "nan"]  # code -1: a missing value, as str() prints it
            self.strings[c] = names
            self.codes[c] = np.asarray(codes, dtype=np.int64)[self.perm]
            if c == "match_key":
                self.key = self.codes[c]
                self.key_set = np.array([x != "" for x in names], dtype=bool)[self.key]
            else:
                voc = vocab.setdefault(c, {})
                ids = np.array([voc.setdefault(x, len(voc)) for x in names], dtype=np.int64)
                cols.append(ids[self.codes[c]])
        lanes = t["lane"].to_numpy().astype(np.int64)[self.perm]
        self.lane_names = graph.lanes["name"].to_numpy().astype(str)
        self.lane_kinds = graph.lanes["kind"].to_numpy().astype(str)
        for c, names_ in (("lane", self.lane_names), ("lane_kind", self.lane_kinds)):
            voc = vocab.setdefault(c, {})
            ids = np.array([voc.setdefault(s, len(voc)) for s in names_.tolist()] or [0], dtype=np.int64)
            cols.append(ids[lanes] if len(names_) else np.zeros(n, dtype=np.int64))
        self.lane = lanes
        self.num = {c: t[c].to_numpy()[self.perm] for c in
                    ("dur_ns", "gap_ns", "flops", "bytes", "layer", "msg_bytes", "peer")}
        for c in ("dur_ns", "gap_ns", "layer", "msg_bytes"):
            cols.append(self.num[c].astype(np.int64))
        for c in ("flops", "bytes"):
            cols.append(self.num[c].astype(np.float64).view(np.int64))
        cols += [self.key_set.astype(np.int64), self.lane_pred]
        self.static = cols

    def fingerprint(self, a: int, b: int) -> bytes:
        """What the rank-independent bytes of the tasks ``a:b`` (rank order) depend on."""
        d0, d1 = int(self.dep_ptr[a]), int(self.dep_ptr[b])
        h = hashlib.blake2b(np.int64(b - a).tobytes())
        for col in self.static:
            h.update(col[a:b].tobytes())
        h.update((self.dep_owner[d0:d1] - a).tobytes())
        h.update(self.dep[d0:d1].tobytes())
        return h.digest()


class _Program:
    """The encoded rank-independent parts of one rank program's nodes, and the last rank's
    own parts (to encode only what the next rank of the program changes)."""

    def __init__(self, pieces: list[bytes], slots: np.ndarray, before: list[bytes],
                 mid: list[bytes]):
        self.pieces = pieces  # the rank's nodes as delimited messages (slot nodes: the last rank's)
        self.slots = slots  # positions of the nodes with rank-specific parts
        self.before = before  # per slot node: header + attributes before its rank's own
        self.mid = mid  # per slot node: attributes between its rank's own and the match key
        self.last: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None


class ChakraWriter:
    """Writes ``<prefix>.<rank>.et`` files from graphs of whole ranks (module docstring)."""

    def __init__(self, prefix: str | Path, meta: Mapping[str, Any], *, involved_dims: int = 4):
        self.prefix = Path(prefix)
        self.meta_json = json.dumps(dict(meta), default=str, sort_keys=True)
        self.involved = attr_entry("involved_dim", "bool_list", [True] * involved_dims)
        self.members: dict[str, tuple[int, tuple[int, ...]]] = {}  # coll key -> (first rank, ranks)
        self._tuples: dict[tuple[int, ...], tuple[int, ...]] = {}
        self.p2p: set[str] = set()
        self.counts: dict[int, int] = {}
        self.comm_groups: dict[str, list[int]] = {}
        self.pg: dict[str, str] = {}
        self.tags: dict[str, int] = {}
        self._programs: OrderedDict[bytes, _Program] = OrderedDict()
        self._vocab: dict[str, dict[str, int]] = {}
        self._attrs: dict[tuple[str, Any], bytes] = {}
        self._chunk_id = 0

    # ------------------------------------------------------------------ pass 1

    def scan(self, graph: TaskGraph) -> None:
        """Note the ranks and task counts, who runs each collective's match key and the
        point-to-point keys of ``graph``'s ranks."""
        t = graph.tasks
        rank = t["rank"].to_numpy().astype(np.int64)
        rs, cnt = np.unique(rank, return_counts=True)
        for r, c in zip(rs.tolist(), cnt.tolist(), strict=True):
            if r in self.counts:
                raise InputError(f"rank {r} is in more than one part of the workload", "graph")
            self.counts[r] = c
        kcodes, knames = column_codes(t["kind"])
        mcodes, mnames = column_codes(t["match_key"])
        mnames = [*mnames, "nan"]
        mcodes = np.asarray(mcodes, dtype=np.int64)

        def rows(kind: str) -> np.ndarray:
            return np.asarray(kcodes == knames.index(kind)) if kind in knames else np.zeros(len(t), bool)

        coll = np.flatnonzero(rows("coll"))
        if len(coll):
            codes, rk = mcodes[coll], rank[coll]
            uniq, first = np.unique(codes, return_index=True)
            width = int(rk.max()) + 1
            packed = _sorted_unique(codes * width + rk)
            pairs = np.stack(np.divmod(packed, width), axis=1)
            bounds = np.searchsorted(pairs[:, 0], uniq).tolist() + [len(pairs)]
            seg = dict(zip(uniq.tolist(), range(len(uniq)), strict=True))
            for k in np.argsort(first, kind="stable").tolist():
                code = int(uniq[k])
                key = mnames[code]
                ranks = pairs[bounds[seg[code]] : bounds[seg[code] + 1], 1].tolist()
                hit = self.members.get(key)
                if hit is not None:
                    ranks = sorted(set(hit[1]) | set(ranks))
                members = tuple(ranks)
                members = self._tuples.setdefault(members, members)  # one object per group
                self.members[key] = (int(rk[first[k]]) if hit is None else hit[0], members)
        p2p = np.flatnonzero(rows("send") | rows("recv"))
        self.p2p.update(mnames[c] for c in np.unique(mcodes[p2p]).tolist())

    def groups(self) -> dict[str, list[int]]:
        """After every graph was scanned: the communicator groups (id -> ranks) and each
        collective key's group id, point-to-point keys' tags."""
        group_ids: dict[tuple[int, ...], str] = {}
        for key in sorted(self.members, key=lambda k: self.members[k][0]):
            ranks = self.members[key][1]
            if ranks not in group_ids:
                gid = str(len(group_ids) + 1)
                group_ids[ranks] = gid
                self.comm_groups[gid] = list(ranks)
            self.pg[key] = group_ids[ranks]
        self.members.clear()
        self._tuples.clear()
        self.tags = {k: i + 1 for i, k in enumerate(sorted(self.p2p))}
        self.p2p.clear()
        return self.comm_groups

    # ------------------------------------------------------------------ pass 2

    def write(self, graph: TaskGraph) -> list[Path]:
        """Write the files of ``graph``'s ranks (after :meth:`groups`)."""
        ch = _Chunk(graph, self._vocab)
        self._chunk_id += 1
        world = len(self.counts)
        out = []
        for i, r in enumerate(ch.ranks):
            a, b = ch.starts[i], ch.starts[i + 1]
            fp = ch.fingerprint(a, b)
            prog = self._programs.get(fp)
            if prog is None:
                prog = self._programs[fp] = self._program(ch, a, b)
                if len(self._programs) > _PROGRAMS_KEPT:
                    self._programs.popitem(last=False)
            else:
                self._programs.move_to_end(fp)
            self._fill(prog, ch, r, a)
            gm = pb.GlobalMetadata(version=ET_VERSION)
            for name, kind, value in (("schema", "string_val", "tracesim"), (P + "rank", "int64_val", r),
                                      (P + "world", "int64_val", world),
                                      (P + "meta_json", "string_val", self.meta_json)):
                a_ = gm.attr.add(name=name)
                setattr(a_, kind, value)
            path = Path(f"{self.prefix}.{r}.et")
            with atomic_path(path) as tmp:
                tmp.write_bytes(pb.delimited(gm) + b"".join(prog.pieces))
            out.append(path)
        return out

    def _program(self, ch: _Chunk, a: int, b: int) -> _Program:
        """Encode the nodes of tasks ``a:b`` (rank order) but their rank's own parts."""
        pieces: list[bytes] = []
        slots, before, mid = [], [], []
        s = {c: [ch.strings[c][x] for x in ch.codes[c][a:b].tolist()] for c in _STR}
        num = {c: v[a:b].tolist() for c, v in ch.num.items()}
        keyed = ch.key_set[a:b].tolist()
        lane = ch.lane[a:b].tolist()
        lp = ch.lane_pred[a:b].tolist()
        d0 = int(ch.dep_ptr[a])
        ptr = (ch.dep_ptr[a : b + 1] - d0).tolist()
        deps = ch.dep[d0 : int(ch.dep_ptr[b])].tolist()
        for i in range(b - a):
            kind = s["kind"][i]
            dur = int(num["dur_ns"][i])
            node = pb.Node(id=i, name=s["name"][i], type=KIND_TYPES[kind],
                           duration_micros=(dur + 500) // 1000)
            node.data_deps.extend(deps[ptr[i] : ptr[i + 1]])
            if lp[i] >= 0:
                node.ctrl_deps.append(lp[i])
            head = [node.SerializeToString(deterministic=True), self._attr("is_cpu_op", "bool_val", kind == "cpu")]
            flops, nbytes, msg = float(num["flops"][i]), float(num["bytes"][i]), int(num["msg_bytes"][i])
            rest: list[bytes] = []
            if kind in ("cpu", "gpu"):
                head.append(attr_entry("num_ops", "int64_val", int(round(flops))))
                head.append(attr_entry("tensor_size", "uint64_val", int(round(nbytes))))
                if msg:
                    head.append(self._attr(P + "msg_bytes", "int64_val", msg))
            elif kind == "coll":
                coll = s["collective"][i]
                if coll not in COMM_TYPES:
                    raise InputError(f"collective {coll!r} has no Chakra comm_type", "graph",
                                     f"task {int(ch.perm[a + i])}")
                head.append(self._attr("comm_type", "int64_val", COMM_TYPES[coll]))
                head.append(self._attr("comm_size", "int64_val", msg))
                rest.append(self.involved)
            else:
                rest.append(self._attr("comm_size", "int64_val", msg))
            gap = int(num["gap_ns"][i])
            rest.append(self._attr(P + "dur_ns", "int64_val", dur))
            if gap:
                rest.append(self._attr(P + "gap_ns", "int64_val", gap))
            rest.append(self._attr(P + "lane", "string_val", str(ch.lane_names[lane[i]])))
            rest.append(self._attr(P + "lane_kind", "string_val", str(ch.lane_kinds[lane[i]])))
            rest.append(self._attr(P + "kind", "string_val", kind))
            for key in ("op_class", "phase", "step", "group_kind", "collective", "algorithm"):
                if s[key][i] and not (key == "algorithm" and s[key][i] == "nan"):  # none given
                    rest.append(self._attr(P + key, "string_val", s[key][i]))
            if int(num["layer"][i]) != -1:
                rest.append(self._attr(P + "layer", "int64_val", int(num["layer"][i])))
            if flops:
                rest.append(attr_entry(P + "flops", "double_val", flops))
            if nbytes:
                rest.append(attr_entry(P + "bytes", "double_val", nbytes))
            if kind in ("coll", "send", "recv") or keyed[i]:
                slots.append(i)
                before.append(b"".join(head))
                mid.append(b"".join(rest))
                pieces.append(b"")
            else:
                pieces.append(pb.delimited_bytes(b"".join(head + rest)))
        return _Program(pieces, np.array(slots, dtype=np.int64), before, mid)

    def _fill(self, prog: _Program, ch: _Chunk, r: int, a: int) -> None:
        """Put rank ``r``'s own parts into the program's slot nodes (only where they differ
        from the previous rank's)."""
        at = prog.slots + a
        key = ch.key[at]
        kinds = ch.strings["kind"]
        kcode = ch.codes["kind"][at]
        send = np.array([kinds[k] == "send" for k in range(len(kinds))], dtype=bool)[kcode]
        recv = np.array([kinds[k] == "recv" for k in range(len(kinds))], dtype=bool)[kcode]
        peer = ch.num["peer"][at].astype(np.int64)
        src = np.where(send, r, np.where(recv, peer, 0))
        dst = np.where(send, peer, np.where(recv, r, 0))
        last = prog.last
        if last is not None and last[0] == self._chunk_id:
            todo = np.flatnonzero((key != last[1]) | (src != last[2]) | (dst != last[3]))
        else:
            todo = np.arange(len(at))
        prog.last = (self._chunk_id, key, src, dst)
        names = ch.strings["match_key"]
        coll = np.array([kinds[k] == "coll" for k in range(len(kinds))], dtype=bool)[kcode]
        for j in todo.tolist():
            m = names[key[j]]
            if coll[j]:
                own = self._attr("pg_name", "string_val", self.pg[m])
            elif send[j] or recv[j]:
                own = (self._attr("comm_src", "int32_val", int(src[j]))
                       + self._attr("comm_dst", "int32_val", int(dst[j]))
                       + self._attr("comm_tag", "int32_val", self.tags[m]))
            else:
                own = b""
            body = prog.before[j] + own + prog.mid[j]
            if m:
                body += attr_entry(P + "match_key", "string_val", m)
            prog.pieces[int(prog.slots[j])] = pb.delimited_bytes(body)

    def _attr(self, name: str, kind: str, value: Any) -> bytes:
        """:func:`attr_entry`, remembered (for the attributes with few distinct values)."""
        key = (name, value)
        hit = self._attrs.get(key)
        if hit is None:
            hit = self._attrs[key] = attr_entry(name, kind, value)
        return hit


def write_ranks(parts: Iterable[TaskGraph], again: Iterable[TaskGraph], prefix: str | Path,
                meta: Mapping[str, Any], *, involved_dims: int = 4
                ) -> tuple[list[Path], Path, dict[str, list[int]], dict[int, int]]:
    """Write the ET files of the ranks in ``parts`` (graphs of whole ranks), reading them
    again from ``again`` (the same graphs, in the same order) to write; returns the files,
    the communicator-group JSON, its groups and the task count per rank."""
    prefix = Path(prefix)
    w = ChakraWriter(prefix, meta, involved_dims=involved_dims)
    for g in parts:
        w.scan(g)
    groups = w.groups()
    output_dir(prefix.parent)
    files: list[Path] = []
    for g in again:
        files += w.write(g)
    cg = Path(f"{prefix}.json")
    write_json(cg, groups)
    return files, cg, groups, dict(sorted(w.counts.items()))
