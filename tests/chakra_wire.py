"""A minimal protobuf wire-format reader and writer for Chakra ET files, written from the
public et_def.proto field numbers, independent of tracesim's schema module: the tests decode
tracesim's exported files with it and write "foreign" ET files (without tracesim's
attributes) for the import tests."""

from __future__ import annotations

import struct

# ---------------------------------------------------------------- independent wire format


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return out, pos


def fields(buf: bytes) -> list[tuple[int, int, object]]:
    """(field number, wire type, value) of a message; value: int or bytes."""
    out = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = _varint(buf, pos)
        elif wt == 1:
            v = buf[pos : pos + 8]
            pos += 8
        elif wt == 2:
            n, pos = _varint(buf, pos)
            v = buf[pos : pos + n]
            pos += n
        elif wt == 5:
            v = buf[pos : pos + 4]
            pos += 4
        else:
            raise AssertionError(f"unexpected wire type {wt}")
        out.append((num, wt, v))
    return out


def messages(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        n, pos = _varint(data, pos)
        out.append(data[pos : pos + n])
        pos += n
    assert pos == len(data)
    return out


def _repeated_varints(entries: list[tuple[int, int, object]], num: int) -> list[int]:
    vals: list[int] = []
    for n, wt, v in entries:
        if n != num:
            continue
        if wt == 2:  # packed
            p = 0
            while p < len(v):
                x, p = _varint(v, p)
                vals.append(x)
        else:
            vals.append(v)
    return vals


def _signed64(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def decode_node(buf: bytes) -> dict:
    """Node: 1 id, 2 name, 3 type, 4 ctrl_deps, 5 data_deps, 7 duration_micros, 10 attr."""
    f = fields(buf)
    node = {"id": 0, "name": "", "type": 0, "duration_micros": 0, "attrs": {}}
    for num, _, v in f:
        if num == 1:
            node["id"] = v
        elif num == 2:
            node["name"] = v.decode()
        elif num == 3:
            node["type"] = v
        elif num == 7:
            node["duration_micros"] = v
        elif num == 10:
            name, value = None, None
            for an, _, av in fields(v):
                if an == 1:
                    name = av.decode()
                elif an in (7, 9, 13):  # int32_val, int64_val, uint64_val
                    value = _signed64(av)
                elif an == 27:  # bool_val
                    value = bool(av)
                elif an == 29:  # string_val
                    value = av.decode()
                elif an == 3:  # double_val
                    value = struct.unpack("<d", av)[0]
                elif an == 28:  # bool_list
                    value = [bool(x) for x in _repeated_varints(fields(av), 1)]
            node["attrs"][name] = value
    node["ctrl_deps"] = _repeated_varints(f, 4)
    node["data_deps"] = _repeated_varints(f, 5)
    return node


# ---------------------------------------------------------------- independent encoder


def _enc_varint(x: int) -> bytes:
    out = bytearray()
    while True:
        b, x = x & 0x7F, x >> 7
        out.append(b | (0x80 if x else 0))
        if not x:
            return bytes(out)


def _key(num: int, wt: int) -> bytes:
    return _enc_varint(num << 3 | wt)


def _ld(num: int, payload: bytes) -> bytes:
    return _key(num, 2) + _enc_varint(len(payload)) + payload


def attr_int(name: str, num: int, value: int) -> bytes:
    return _ld(10, _ld(1, name.encode()) + _key(num, 0) + _enc_varint(value))


def attr_str(name: str, value: str) -> bytes:
    return _ld(10, _ld(1, name.encode()) + _ld(29, value.encode()))


def attr_bool(name: str, value: bool) -> bytes:
    return _ld(10, _ld(1, name.encode()) + _key(27, 0) + _enc_varint(int(value)))


def attr_double(name: str, value: float) -> bytes:
    return _ld(10, _ld(1, name.encode()) + _key(3, 1) + struct.pack("<d", value))


def encode_node(nid: int, name: str, ntype: int, dur_us: int, deps: list[int], attrs: bytes,
                ctrl: tuple[int, ...] = ()) -> bytes:
    body = _key(1, 0) + _enc_varint(nid) + _ld(2, name.encode()) + _key(3, 0) + _enc_varint(ntype)
    if ctrl:
        body += _ld(4, b"".join(_enc_varint(d) for d in ctrl))
    if deps:
        body += _ld(5, b"".join(_enc_varint(d) for d in deps))
    body += _key(7, 0) + _enc_varint(dur_us) + attrs
    return _enc_varint(len(body)) + body


def encode_meta() -> bytes:
    body = _ld(1, b"0.0.4")
    return _enc_varint(len(body)) + body
