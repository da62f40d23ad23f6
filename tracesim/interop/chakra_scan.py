"""Splitting Chakra ET files into messages, in bulk.

An ET file is a stream of length-delimited messages (a varint byte length, then the
message): one ``GlobalMetadata``, then one ``Node`` per task. :func:`scan_file` (through a
:class:`Scanner`) reads a file, parses its GlobalMetadata and gives each node the row id
(uid) of its message in a :class:`~tracesim.interop.chakra_decode.NodeTable`, where a
message seen before costs a dictionary lookup.

A file as long as one scanned before is compared with it byte by byte (8 bytes at a time):
when no length prefix differs, the two files have the same message boundaries, so only the
messages that differ are looked at, and a message that differs from its counterpart in the
other file only inside a communicator name or a match key is derived from that
counterpart's row (:meth:`NodeTable.patch`) instead of being parsed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tracesim.errors import InputError
from tracesim.interop import chakra_schema as pb
from tracesim.interop.chakra_decode import NodeTable


@dataclass
class ScannedFile:
    """One ET file split into messages: the GlobalMetadata, and the uid of every node."""

    data: bytes | bytearray
    meta: Any
    uids: np.ndarray  # int32, one per node, file order
    starts: np.ndarray  # int64: byte offset of every message's length prefix (meta first)
    bodies: np.ndarray  # int64: byte offset of every message's body

    def node_body(self, i: int) -> tuple[bytes, int]:
        """The bytes and the byte offset of node ``i`` (file order)."""
        return _body(self.data, self.starts, self.bodies, i + 1), int(self.starts[i + 1])


def _body(data: bytes | bytearray, starts: np.ndarray, bodies: np.ndarray, k: int) -> bytes:
    end = int(starts[k + 1]) if k + 1 < len(starts) else len(data)
    return bytes(data[int(bodies[k]) : end])


def _parse_meta(body: bytes, path: Path) -> Any:
    meta = pb.GlobalMetadata()
    try:
        meta.ParseFromString(body)
    except Exception as exc:  # protobuf DecodeError
        raise InputError(f"not a Chakra ET message ({exc})", path, "byte 0") from None
    return meta


def _scan_all(data: bytes, table: NodeTable, path: Path) -> ScannedFile:
    """Every message of ``data`` in order, as the length-delimited stream is read."""
    n = len(data)
    if not n:
        raise InputError("empty ET file (no GlobalMetadata)", path)
    ln, body = pb.read_length_prefix(data, 0)
    pos = body + ln
    if pos > n:
        raise ValueError(f"message at byte 0 claims {ln} bytes, file ends first")
    meta = _parse_meta(data[body:pos], path)
    starts: list[int] = [0]
    bodies: list[int] = [body]
    uids: list[int] = []
    get, add = table.cache.get, table.add
    s_app, b_app, u_app = starts.append, bodies.append, uids.append
    while pos < n:
        b = data[pos]
        if b < 0x80:
            ln, body = b, pos + 1
        elif pos + 1 < n and data[pos + 1] < 0x80:
            ln, body = (b & 0x7F) | (data[pos + 1] << 7), pos + 2
        else:
            ln, body = pb.read_length_prefix(data, pos)
        end = body + ln
        if end > n:
            raise ValueError(f"message at byte {pos} claims {ln} bytes, file ends first")
        s_app(pos)
        b_app(body)
        m = data[body:end]
        u = get(m)
        u_app(add(m, path, pos) if u is None else u)
        pos = end
    return ScannedFile(data, meta, np.array(uids, dtype=np.int32),
                       np.array(starts, dtype=np.int64), np.array(bodies, dtype=np.int64))


class Scanner:
    """Splits ET files into messages, reusing the boundaries of the last file of the same
    length when no length prefix differs (then only the differing messages are looked up).

    Files are read into buffers reused from one file of a length to the next (a fresh
    buffer per file costs more in page faults than the read itself)."""

    #: bytes of files kept for comparison (each also keeps a spare buffer of its size)
    TEMPLATE_BYTES = 64 << 20

    def __init__(self, table: NodeTable):
        self.table = table
        #: file length -> (the last file of that length, its buffer, a spare buffer)
        self.templates: dict[int, tuple[ScannedFile, bytearray, bytearray | None]] = {}

    def scan(self, path: Path) -> ScannedFile:
        """Read and split one file (InputError naming it on unreadable or bad messages)."""
        try:
            with open(path, "rb", buffering=0) as fh:
                size = os.fstat(fh.fileno()).st_size
                tpl = self.templates.pop(size, None)
                buf = (tpl[2] if tpl is not None else None) or bytearray(size)
                got = fh.readinto(buf) if size else 0
                rest = fh.read()
        except OSError as exc:
            raise InputError(f"cannot read ({exc.strerror})", path) from None
        if got != size or rest:  # the file changed size while it was read
            return self._scan_all(bytes(buf[:got]) + rest, path)
        out = self._patch(buf, tpl[0], tpl[1], path) if tpl is not None else None
        if out is None:
            out = self._scan_all(bytes(buf), path)
            out.data = buf
        total = 2 * size
        for length in reversed(list(self.templates)):  # newest first
            total += 2 * length
            if total > self.TEMPLATE_BYTES:
                del self.templates[length]
        if 2 * size <= self.TEMPLATE_BYTES:
            self.templates[size] = (out, buf, tpl[1] if tpl is not None else None)
        return out

    def _scan_all(self, data: bytes, path: Path) -> ScannedFile:
        try:
            return _scan_all(data, self.table, path)
        except ValueError as exc:
            raise InputError(f"truncated ET file: {exc}", path) from None

    def _patch(self, buf: bytearray, tpl: ScannedFile, tbuf: bytearray,
               path: Path) -> ScannedFile | None:
        diff = _diff(np.frombuffer(buf, dtype=np.uint8), np.frombuffer(tbuf, dtype=np.uint8))
        if not len(diff):
            return ScannedFile(buf, tpl.meta, tpl.uids, tpl.starts, tpl.bodies)
        msg = np.searchsorted(tpl.starts, diff, side="right") - 1
        if np.any(diff < tpl.bodies[msg]):
            return None  # a length prefix differs: the boundaries may differ
        changed = np.unique(msg).tolist()
        meta = tpl.meta
        if changed[0] == 0:
            meta = _parse_meta(_body(buf, tpl.starts, tpl.bodies, 0), path)
        table = self.table
        get, patch = table.cache.get, table.patch
        # the changed node messages (not the GlobalMetadata) as Python ints: where each body
        # begins and ends, the row of its counterpart, and its differing bytes (positions
        # relative to its body, ``rel[first:cut]``)
        ks = np.asarray(changed[1:] if changed[0] == 0 else changed, dtype=np.int64)
        if not len(ks):
            return ScannedFile(buf, meta, tpl.uids, tpl.starts, tpl.bodies)
        begin = tpl.bodies[ks]
        end = tpl.starts[np.minimum(ks + 1, len(tpl.starts) - 1)]
        end[ks + 1 >= len(tpl.starts)] = len(buf)
        rel = (diff - tpl.bodies[msg]).tolist()
        first = np.searchsorted(msg, ks, side="left").tolist()
        cut = np.searchsorted(msg, ks, side="right").tolist()
        found = []
        with memoryview(buf) as view:
            for k, b, e, u0, lo, hi in zip(ks.tolist(), begin.tolist(), end.tolist(),
                                           tpl.uids[ks - 1].tolist(), first, cut, strict=True):
                m = view[b:e].tobytes()
                u = get(m)
                if u is None:
                    u = patch(u0, tbuf, b, m, rel[lo:hi])
                    if u is None:
                        u = table.add(m, path, int(tpl.starts[k]))
                found.append(u)
        uids = tpl.uids.copy()
        uids[ks - 1] = found
        return ScannedFile(buf, meta, uids, tpl.starts, tpl.bodies)


def _diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Positions where two byte arrays of one length differ (compared 8 bytes at a time)."""
    n8 = len(a) // 8 * 8
    words = np.flatnonzero(a[:n8].view(np.uint64) != b[:n8].view(np.uint64))
    pos = (words[:, None] * 8 + np.arange(8)).ravel()
    pos = pos[a[pos] != b[pos]]
    tail = np.flatnonzero(a[n8:] != b[n8:]) + n8
    return np.concatenate([pos, tail]) if len(tail) else pos
