"""Bulk decoding of Chakra ET files: every distinct node message is decoded once.

The per-rank files of one workload repeat themselves: the same operators in the same order
on every rank, so most node messages (their id, dependencies and attributes) are
byte-identical from rank to rank, and the rest differ in a few values (a communicator name,
a match key). :class:`NodeTable` keys the decoded node by its message bytes: a message seen
before costs a dictionary lookup, a new one is parsed with the protobuf runtime (exactly as
:func:`tracesim.interop.chakra_import.read_et` parses it) and turned into one row of
per-message columns (numpy arrays, strings as codes into vocabularies). :func:`scan_file`
splits a file into messages; a file as long as one scanned before is compared with it
byte by byte, and only the messages that differ are looked up (when no length prefix
differs, the two files have the same message boundaries).

What a node becomes does not depend on its rank, except for the checks and defaults that
name the rank (membership of its communicator, a send's ``comm_src``); those are applied
per rank in :mod:`tracesim.interop.chakra_import`. A node whose attributes cannot become a
task (an unknown ``comm_type``, a communicator missing from the group JSON, an attribute
that is not a number) gets an error message instead, raised when a rank reaches it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tracesim.errors import InputError
from tracesim.interop import chakra_schema as pb
from tracesim.interop.chakra_schema import COMM_NAMES

#: string columns of a node row, each coded into its own vocabulary
STR_FIELDS = ("name", "kind", "op_class", "phase", "step", "group_kind", "collective", "lane",
              "lane_kind", "key", "pg", "algorithm")
#: numeric columns of a node row and their dtypes
NUM_FIELDS: dict[str, Any] = {
    "node_id": np.uint64, "type": np.int64, "dur_ns": np.int64, "gap_ns": np.int64,
    "layer": np.int64, "msg_bytes": np.int64, "flops": np.float64, "bytes": np.float64,
    "has_lane": np.bool_, "err": np.int32, "members": np.int32, "src": np.int64,
    "src_has": np.bool_, "dst": np.int64, "dst_has": np.bool_, "tag": np.int64,
    "dep_ptr": np.int64, "dep_len": np.int64, "lane_default": np.bool_,
}
_FIELDS = tuple(NUM_FIELDS) + STR_FIELDS
_AT = {f: i for i, f in enumerate(_FIELDS)}
_ERR, _TYPE, _PG, _MEMBERS, _LANE, _LANE_DEFAULT, _KEY = (
    _AT[f] for f in ("err", "type", "pg", "members", "lane", "lane_default", "key"))
_I64 = (-(2**63), 2**63 - 1)
_I32 = (-(2**31), 2**31 - 1)
#: distinct message bytes kept for lookups; beyond this the cache starts afresh (the decoded
#: rows stay), so files whose nodes never repeat cost memory once, not twice
CACHE_BYTES = 64 << 20


class _Bad(Exception):
    """A node that cannot become a task; the message is raised per rank (InputError)."""


def _num(a: Mapping[str, Any], key: str, default: Any, conv: Any, bounds: tuple[int, int] | None
         = _I64) -> Any:
    v = a.get(key, default)
    try:
        x = conv(v)
    except (TypeError, ValueError, OverflowError):
        raise _Bad(f"attribute {key} is not a number ({v!r})") from None
    if bounds is not None and not bounds[0] <= x <= bounds[1]:
        raise _Bad(f"attribute {key} is out of range ({v!r})")
    return x


def _members(pg: str, groups_by_pg: Mapping[str, tuple[int, ...]],
             all_ranks: tuple[int, ...]) -> tuple[int, ...]:
    """The ranks of communicator ``pg`` ("" and "0": all ranks)."""
    if pg in ("", "0"):
        return all_ranks
    if pg in groups_by_pg:
        return groups_by_pg[pg]
    raise _Bad(f"communicator group {pg!r} is not in the communicator-group JSON")


def node_row(nd: Any, plain: bool, groups_by_pg: Mapping[str, tuple[int, ...]],
             all_ranks: tuple[int, ...], member_code: Any) -> dict[str, Any]:
    """The task-table values of one parsed node that do not depend on its rank.

    Mirrors what the importer has always read (see :mod:`tracesim.interop.chakra_import`);
    on a node that cannot become a task, ``err`` holds the message and the other values
    may be placeholders.
    """
    a = {x.name: pb.attr_value(x) for x in nd.attr
         if not (plain and x.name.startswith("tracesim."))}
    typ = int(nd.type)
    row: dict[str, Any] = {
        "node_id": int(nd.id), "type": typ, "name": nd.name, "err": None, "members": None,
        "has_lane": not plain and any(x.name == "tracesim.lane" for x in nd.attr),
        "src": -1, "src_has": False, "dst": -1, "dst_has": False, "tag": 0, "pg": "",
        "collective": "", "key": None, "dur_ns": 0, "gap_ns": 0, "layer": -1, "msg_bytes": 0,
        "flops": 0.0, "bytes": 0.0, "lane_default": False,
    }
    try:
        dur = a.get("tracesim.dur_ns")
        if dur is not None:
            row["dur_ns"] = _num(a, "tracesim.dur_ns", None, int)
        else:
            row["dur_ns"] = _num({"duration_micros": int(nd.duration_micros) * 1000},
                                 "duration_micros", None, int)
        row["gap_ns"] = _num(a, "tracesim.gap_ns", 0, int)
        row["op_class"] = str(a.get("tracesim.op_class", "other"))
        row["phase"] = str(a.get("tracesim.phase", "other"))
        row["step"] = str(a.get("tracesim.step", ""))
        row["layer"] = _num(a, "tracesim.layer", -1, int, _I32)
        row["group_kind"] = str(a.get("tracesim.group_kind", ""))
        row["algorithm"] = str(a.get("tracesim.algorithm", ""))  # a task's own algorithm
        for col, own, plain_name in (("flops", "tracesim.flops", "num_ops"),
                                     ("bytes", "tracesim.bytes", "tensor_size")):
            if own in a:
                row[col] = _num(a, own, None, float, None)
            else:
                row[col] = _num(a, plain_name, 0, lambda v: float(v or 0), None)
        row["msg_bytes"] = _num(a, "tracesim.msg_bytes", 0, int)
        key = a.get("tracesim.match_key")
        if typ == pb.COMM_COLL_NODE:
            ctype = _num(a, "comm_type", -1, lambda v: int(v or 0)) if "comm_type" in a else -1
            if ctype not in COMM_NAMES:
                raise _Bad(f"collective without a known comm_type ({a.get('comm_type')!r})")
            pg = str(a.get("pg_name", "") or "")
            members = _members(pg, groups_by_pg, all_ranks)
            row.update(kind="coll", pg=pg, members=member_code(members),
                       collective=str(a.get("tracesim.collective") or COMM_NAMES[ctype]),
                       msg_bytes=_num(a, "comm_size", 0, lambda v: int(v or 0)),
                       op_class=str(a.get("tracesim.op_class", "comm")), lane=f"comm:pg{pg or 0}")
        elif typ in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
            send = typ == pb.COMM_SEND_NODE
            for end in ("src", "dst"):
                if f"comm_{end}" in a:
                    row[end] = _num(a, f"comm_{end}", None, int)
                    row[f"{end}_has"] = True
            if key is None:
                row["tag"] = _num(a, "comm_tag", 0, lambda v: int(v or 0))
            row.update(kind="send" if send else "recv", collective="send" if send else "recv",
                       msg_bytes=_num(a, "comm_size", 0, lambda v: int(v or 0)),
                       op_class=str(a.get("tracesim.op_class", "comm")),
                       lane="send" if send else "recv")
        else:
            cpu = bool(a.get("is_cpu_op", False)) if typ == pb.COMP_NODE else False
            row["kind"] = str(a.get("tracesim.kind") or ("cpu" if cpu else "gpu"))
            row["lane"] = {pb.COMP_NODE: "cpu" if cpu else "compute"}.get(typ, "other")
        row["lane_default"] = not a.get("tracesim.lane")
        row["lane"] = str(a.get("tracesim.lane") or row["lane"])
        row["lane_kind"] = str(a.get("tracesim.lane_kind")
                               or ("cpu" if row["kind"] == "cpu" else "gpu"))
        row["key"] = None if key is None else str(key or "")
    except _Bad as exc:
        row["err"] = str(exc)
    return row


class NodeTable:
    """The distinct node messages of an import: a cache from message bytes to a row id
    (``uid``) and the rows' columns (:data:`NUM_FIELDS` as arrays, :data:`STR_FIELDS` as
    codes into ``vocab``)."""

    def __init__(self, plain: bool, groups_by_pg: Mapping[str, tuple[int, ...]],
                 all_ranks: tuple[int, ...]):
        self.plain = plain
        self.groups_by_pg = groups_by_pg
        self.all_ranks = all_ranks
        self.cache: dict[bytes, int] = {}
        self._cache_bytes = 0
        self.vocab: dict[str, dict[str, int]] = {f: {} for f in STR_FIELDS}
        self.vocab["key"][""] = 0  # "" first: the match key of a task that is not comm
        self.errors: list[str] = []
        self.member_list: list[tuple[int, ...]] = []
        self._member_index: dict[tuple[int, ...], int] = {}
        self._pending: list[tuple[Any, ...]] = []
        self._deps: list[int] = []
        self._n_deps = 0
        self.n = 0  # rows in the arrays
        self.cols: dict[str, np.ndarray] = {f: np.empty(0, dtype=NUM_FIELDS.get(f, np.int32))
                                            for f in _FIELDS}
        self._dep_buf = np.empty(0, dtype=np.uint64)
        #: uid -> (where its patchable strings are in its message, its row), for the rows
        #: of recent messages (:meth:`patch`)
        self._similar: dict[int, tuple[dict[str, tuple[int, int]] | None, tuple[Any, ...]]] = {}
        #: communicator name -> (its code, its members' code), and -> its default lane's code
        self._pg_codes: dict[str, tuple[int, int]] = {}
        self._pg_lanes: dict[str, int] = {}

    @property
    def dep_flat(self) -> np.ndarray:
        """The dependencies (node ids) of every row: ``dep_len`` of them from ``dep_ptr``."""
        return self._dep_buf[: self._n_deps - len(self._deps)]

    def member_code(self, members: tuple[int, ...]) -> int:
        code = self._member_index.get(members)
        if code is None:
            code = self._member_index[members] = len(self.member_list)
            self.member_list.append(members)
        return code

    def add(self, body: bytes, path: Path, offset: int) -> int:
        """The uid of a node message not in the cache (parsed and decoded here)."""
        nd = pb.Node()
        try:
            nd.ParseFromString(body)
        except Exception as exc:  # protobuf DecodeError
            raise InputError(f"not a Chakra ET message ({exc})", path, f"byte {offset}") from None
        row = node_row(nd, self.plain, self.groups_by_pg, self.all_ranks, self.member_code)
        deps = sorted(set(nd.data_deps) | set(nd.ctrl_deps))
        row["dep_ptr"] = self._n_deps
        row["dep_len"] = len(deps)
        self._deps.extend(deps)
        self._n_deps += len(deps)
        row["err"] = self._error(row["err"])
        row["members"] = -1 if row["members"] is None else row["members"]
        for f in STR_FIELDS:
            v = row.get(f)
            row[f] = -1 if f == "key" and v is None else self._code(f, "" if v is None else str(v))
        return self._insert(tuple(row[f] for f in _FIELDS), body)

    def _code(self, field: str, value: str) -> int:
        voc = self.vocab[field]
        return voc.setdefault(value, len(voc))

    def _error(self, message: str | None) -> int:
        if message is None:
            return -1
        self.errors.append(message)
        return len(self.errors) - 1

    def _insert(self, row: tuple[Any, ...], body: bytes) -> int:
        uid = self.n + len(self._pending)
        self._pending.append(row)
        if self._cache_bytes > CACHE_BYTES:
            self.cache.clear()
            self._cache_bytes = 0
        self.cache[body] = uid
        self._cache_bytes += len(body) + 100
        return uid

    def _row(self, uid: int) -> tuple[Any, ...]:
        if uid >= self.n:
            return self._pending[uid - self.n]
        return tuple(self.cols[f][uid].item() for f in _FIELDS)

    def patch(self, uid: int, like: bytes | bytearray, at: int, body: bytes,
              diff: list[int]) -> int | None:
        """The uid of ``body``, a node message that differs from the message of row ``uid``
        (``like[at : at + len(body)]``) at the byte positions ``diff`` (ascending, relative to
        the message), derived from that row when the only differences are inside the values
        of its ``pg_name`` and ``tracesim.match_key`` attributes (plain strings, each named
        once); None when it has to be parsed (:meth:`add`)."""
        known = self._similar.get(uid)
        if known is None:
            if len(self._similar) > 1 << 16:
                self._similar.clear()
            known = self._similar[uid] = (_patchable(bytes(like[at : at + len(body)])),
                                          self._row(uid))
        spans, base = known
        if not spans or base[_AT["err"]] >= 0:
            return None
        new: dict[str, str] = {}
        inside = 0  # ``diff`` is ascending: count the positions inside each value by bisection
        for name, (lo, hi) in spans.items():
            k = bisect_left(diff, hi) - bisect_left(diff, lo)
            if k:
                inside += k
                try:
                    new[name] = body[lo:hi].decode("utf-8")
                except UnicodeDecodeError:
                    return None
        if inside != len(diff):
            return None  # bytes outside the two values differ
        row = list(base)
        if "pg_name" in new:
            if row[_TYPE] != pb.COMM_COLL_NODE:
                return None
            pg = new["pg_name"]
            known_pg = self._pg_codes.get(pg)  # (pg code, members code) of a known group
            if known_pg is not None:
                row[_PG], row[_MEMBERS] = known_pg
            else:
                row[_PG] = self._code("pg", pg)
                try:
                    row[_MEMBERS] = self.member_code(_members(pg, self.groups_by_pg,
                                                              self.all_ranks))
                    self._pg_codes[pg] = (row[_PG], row[_MEMBERS])
                except _Bad as exc:
                    row[_ERR] = self._error(str(exc))
            if row[_LANE_DEFAULT]:
                lane = self._pg_lanes.get(pg)
                if lane is None:
                    lane = self._pg_lanes[pg] = self._code("lane", f"comm:pg{pg or 0}")
                row[_LANE] = lane
        if "tracesim.match_key" in new and not self.plain:
            voc = self.vocab["key"]
            row[_KEY] = voc.setdefault(new["tracesim.match_key"], len(voc))
        out_row = tuple(row)
        out = self._insert(out_row, body)
        self._similar[out] = (spans, out_row)
        return out

    def flush(self) -> None:
        """Move the rows added since the last flush into the column arrays."""
        if self._deps:
            old = self._n_deps - len(self._deps)
            if self._n_deps > len(self._dep_buf):
                grown = np.empty(max(self._n_deps, 2 * len(self._dep_buf)), dtype=np.uint64)
                grown[:old] = self._dep_buf[:old]
                self._dep_buf = grown
            self._dep_buf[old : self._n_deps] = np.array(self._deps, dtype=np.uint64)
            self._deps.clear()
        if not self._pending:
            return
        k = len(self._pending)
        need = self.n + k
        cap = len(self.cols["node_id"])
        if need > cap:
            cap = max(need, 2 * cap, 1024)
            for f, arr in self.cols.items():
                grown = np.empty(cap, dtype=arr.dtype)
                grown[: self.n] = arr[: self.n]
                self.cols[f] = grown
        for f, vals in zip(_FIELDS, zip(*self._pending, strict=True), strict=True):
            self.cols[f][self.n : need] = np.array(vals, dtype=self.cols[f].dtype)
        self.n = need
        self._pending.clear()

    def release(self) -> None:
        """Drop what only reading needs (the message cache); the rows stay."""
        self.flush()
        self.cache.clear()
        self._similar.clear()

    def column(self, field: str) -> np.ndarray:
        return self.cols[field][: self.n]

    def strings(self, field: str) -> list[str]:
        """The vocabulary of a string column, by code."""
        return list(self.vocab[field])


# --------------------------------------------------------------------------- wire format

#: the attributes :meth:`NodeTable.patch` can derive a row for
_PATCHABLE = ("pg_name", "tracesim.match_key")


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = buf[pos]  # IndexError past the end
        pos += 1
        out |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return out, pos
        if shift > 63:
            raise IndexError("varint too long")


def _fields(buf: bytes, base: int = 0) -> list[tuple[int, int, int, int]]:
    """(field number, wire type, start, end) of each field of a message (``start``/``end``:
    the value, or the payload of a length-delimited field, offset by ``base``);
    IndexError / ValueError on anything but wire types 0, 1, 2 and 5."""
    out = []
    pos, n = 0, len(buf)
    while pos < n:
        key, pos = _uvarint(buf, pos)
        wt = key & 7
        start = pos
        if wt == 0:
            _, pos = _uvarint(buf, pos)
        elif wt == 1:
            pos += 8
        elif wt == 5:
            pos += 4
        elif wt == 2:
            ln, start = _uvarint(buf, pos)
            pos = start + ln
        else:
            raise ValueError("group")
        if pos > n:
            raise IndexError("past the end")
        out.append((key >> 3, wt, start + base, pos + base))
    return out


def _patchable(body: bytes) -> dict[str, tuple[int, int]] | None:
    """Byte ranges (in ``body``, a Node message the protobuf runtime accepted) of the
    values of its ``pg_name`` / ``tracesim.match_key`` attributes, where such an attribute
    is named once and holds exactly a name and a ``string_val``; None when there are none
    (or the message is in a shape not worth reading here)."""
    try:
        names: dict[str, int] = {}
        spans: dict[str, tuple[int, int]] = {}
        for num, wt, lo, hi in _fields(body):
            if num != 10 or wt != 2:
                continue
            inner = _fields(body[lo:hi], lo)
            named = [(a, b) for f, w, a, b in inner if f == 1 and w == 2]
            if not named:
                return None  # an attribute named "" by default: not worth the care
            name = body[named[-1][0] : named[-1][1]].decode("utf-8")
            names[name] = names.get(name, 0) + 1
            if name in _PATCHABLE and [(f, w) for f, w, _, _ in inner] == [(1, 2), (29, 2)]:
                spans[name] = (inner[1][2], inner[1][3])
    except (IndexError, ValueError):
        return None
    out = {k: v for k, v in spans.items() if names[k] == 1}
    return out or None
