"""The Chakra execution-trace schema, built at import time with the protobuf runtime.

Chakra ET files (MLCommons, the format ASTRA-sim replays) are a stream of length-delimited
protobuf messages: a varint byte length, then a ``GlobalMetadata`` message; then the same for
each ``Node``. The message and enum layout below was written from the public
``schema/protobuf/et_def.proto`` (package ``ChakraProtoMsg``); field numbers and wire types
are what matter on disk, so the messages are declared here field by field with
``google.protobuf.descriptor_pb2`` (no ``protoc`` needed) in a private descriptor pool, so
they never clash with a ``chakra`` package the user may also have imported.

Only what tracesim reads or writes is declared: ``AttributeProto`` (all 30 value kinds of
its ``value`` oneof), the list messages, ``GlobalMetadata``, ``IOInfo`` and ``Node`` (fields
1-10; ``storage`` (11) is left undeclared and survives a read / write as an unknown field).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto

#: Node.type values (enum NodeType)
NODE_TYPES: dict[str, int] = {
    "INVALID_NODE": 0,
    "METADATA_NODE": 1,
    "MEM_LOAD_NODE": 2,
    "MEM_STORE_NODE": 3,
    "COMP_NODE": 4,
    "COMM_SEND_NODE": 5,
    "COMM_RECV_NODE": 6,
    "COMM_COLL_NODE": 7,
    "STORAGE_NODE": 8,
    "BATCH_NODE": 9,
    "CHECKPOINT_NODE": 10,
}
COMP_NODE = NODE_TYPES["COMP_NODE"]
COMM_SEND_NODE = NODE_TYPES["COMM_SEND_NODE"]
COMM_RECV_NODE = NODE_TYPES["COMM_RECV_NODE"]
COMM_COLL_NODE = NODE_TYPES["COMM_COLL_NODE"]
METADATA_NODE = NODE_TYPES["METADATA_NODE"]

#: the ``comm_type`` attribute (enum CollectiveCommType)
COLLECTIVE_TYPES: dict[str, int] = {
    "ALL_REDUCE": 0,
    "REDUCE": 1,
    "ALL_GATHER": 2,
    "GATHER": 3,
    "SCATTER": 4,
    "BROADCAST": 5,
    "ALL_TO_ALL": 6,
    "REDUCE_SCATTER": 7,
    "REDUCE_SCATTER_BLOCK": 8,
    "BARRIER": 9,
}

#: AttributeProto's oneof ``value``: field name -> (number, scalar type or list message)
_SCALARS = [
    ("double", _F.TYPE_DOUBLE), ("float", _F.TYPE_FLOAT), ("int32", _F.TYPE_INT32),
    ("int64", _F.TYPE_INT64), ("uint32", _F.TYPE_UINT32), ("uint64", _F.TYPE_UINT64),
    ("sint32", _F.TYPE_SINT32), ("sint64", _F.TYPE_SINT64), ("fixed32", _F.TYPE_FIXED32),
    ("fixed64", _F.TYPE_FIXED64), ("sfixed32", _F.TYPE_SFIXED32), ("sfixed64", _F.TYPE_SFIXED64),
    ("bool", _F.TYPE_BOOL), ("string", _F.TYPE_STRING), ("bytes", _F.TYPE_BYTES),
]
_PACKAGE = "ChakraProtoMsg"


def _list_name(kind: str) -> str:
    return kind.capitalize() + "List"


def _field(msg: Any, name: str, number: int, ftype: int, *, label: int = _F.LABEL_OPTIONAL,
           type_name: str = "", oneof: int | None = None) -> None:
    f = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = f".{_PACKAGE}.{type_name}"
    if oneof is not None:
        f.oneof_index = oneof


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(
        name="tracesim/chakra_et_def.proto", package=_PACKAGE, syntax="proto3"
    )
    attr = fd.message_type.add(name="AttributeProto")
    _field(attr, "name", 1, _F.TYPE_STRING)
    _field(attr, "doc_string", 2, _F.TYPE_STRING)
    attr.oneof_decl.add(name="value")
    for i, (kind, ftype) in enumerate(_SCALARS):
        _field(attr, f"{kind}_val", 3 + 2 * i, ftype, oneof=0)
        _field(attr, f"{kind}_list", 4 + 2 * i, _F.TYPE_MESSAGE, type_name=_list_name(kind), oneof=0)
    for kind, ftype in _SCALARS:
        lst = fd.message_type.add(name=_list_name(kind))
        _field(lst, "values", 1, ftype, label=_F.LABEL_REPEATED)
    meta = fd.message_type.add(name="GlobalMetadata")
    _field(meta, "version", 1, _F.TYPE_STRING)
    _field(meta, "attr", 2, _F.TYPE_MESSAGE, label=_F.LABEL_REPEATED, type_name="AttributeProto")
    io = fd.message_type.add(name="IOInfo")
    for n, name in enumerate(("values", "shapes", "types"), start=1):
        _field(io, name, n, _F.TYPE_STRING)
    node = fd.message_type.add(name="Node")
    _field(node, "id", 1, _F.TYPE_UINT64)
    _field(node, "name", 2, _F.TYPE_STRING)
    f = node.field.add(name="type", number=3, type=_F.TYPE_ENUM, label=_F.LABEL_OPTIONAL)
    f.type_name = f".{_PACKAGE}.NodeType"
    _field(node, "ctrl_deps", 4, _F.TYPE_UINT64, label=_F.LABEL_REPEATED)
    _field(node, "data_deps", 5, _F.TYPE_UINT64, label=_F.LABEL_REPEATED)
    _field(node, "start_time_micros", 6, _F.TYPE_UINT64)
    _field(node, "duration_micros", 7, _F.TYPE_UINT64)
    _field(node, "inputs", 8, _F.TYPE_MESSAGE, type_name="IOInfo")
    _field(node, "outputs", 9, _F.TYPE_MESSAGE, type_name="IOInfo")
    _field(node, "attr", 10, _F.TYPE_MESSAGE, label=_F.LABEL_REPEATED, type_name="AttributeProto")
    for enum_name, values in (("NodeType", NODE_TYPES), ("CollectiveCommType", COLLECTIVE_TYPES)):
        e = fd.enum_type.add(name=enum_name)
        for k, v in values.items():
            e.value.add(name=k, number=v)
    return fd


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file_descriptor())


def _cls(name: str) -> Any:
    desc = _POOL.FindMessageTypeByName(f"{_PACKAGE}.{name}")
    get = getattr(message_factory, "GetMessageClass", None)  # protobuf >= 4.21
    if get is not None:
        return get(desc)
    return message_factory.MessageFactory(_POOL).GetPrototype(desc)  # pragma: no cover


Node = _cls("Node")
GlobalMetadata = _cls("GlobalMetadata")
AttributeProto = _cls("AttributeProto")
BoolList = _cls("BoolList")


# ------------------------------------------------------------------ length-delimited stream


def encode_varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative integer."""
    if value < 0:
        raise ValueError("varint of a negative number")
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def delimited(message: Any) -> bytes:
    """One message as it sits in an ET file: varint length, then the serialized bytes."""
    return delimited_bytes(message.SerializeToString(deterministic=True))


def delimited_bytes(body: bytes) -> bytes:
    """A serialized message with its varint length prefix."""
    return encode_varint(len(body)) + body


def iter_delimited(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(byte offset, message bytes) of every length-delimited message in ``data``.

    Raises ValueError when a length runs past the end of the data (a truncated file).
    """
    pos = 0
    n = len(data)
    while pos < n:
        start = pos
        length, pos = read_length_prefix(data, pos)
        if pos + length > n:
            raise ValueError(f"message at byte {start} claims {length} bytes, file ends first")
        yield start, data[pos : pos + length]
        pos += length


def attr_value(attr: Any) -> Any:
    """The Python value held by an ``AttributeProto`` (a list for the ``*_list`` kinds)."""
    which = attr.WhichOneof("value")
    if which is None:
        return None
    value = getattr(attr, which)
    if which.endswith("_list"):
        return list(value.values)
    return value


#: tracesim collective name -> Chakra CollectiveCommType
COMM_TYPES = {
    "all_reduce": COLLECTIVE_TYPES["ALL_REDUCE"],
    "reduce": COLLECTIVE_TYPES["REDUCE"],
    "all_gather": COLLECTIVE_TYPES["ALL_GATHER"],
    "gather": COLLECTIVE_TYPES["GATHER"],
    "scatter": COLLECTIVE_TYPES["SCATTER"],
    "broadcast": COLLECTIVE_TYPES["BROADCAST"],
    "all_to_all": COLLECTIVE_TYPES["ALL_TO_ALL"],
    "reduce_scatter": COLLECTIVE_TYPES["REDUCE_SCATTER"],
    "barrier": COLLECTIVE_TYPES["BARRIER"],
}
COMM_NAMES = {v: k for k, v in COMM_TYPES.items()}
COMM_NAMES[COLLECTIVE_TYPES["REDUCE_SCATTER_BLOCK"]] = "reduce_scatter"


def read_length_prefix(data: bytes | bytearray, pos: int) -> tuple[int, int]:
    """(value, position after it) of the varint length prefix at ``pos``; ValueError when
    the data ends inside it or it runs past 64 bits."""
    start, n = pos, len(data)
    length = shift = 0
    while True:
        if pos >= n:
            raise ValueError(f"truncated length prefix at byte {start}")
        b = data[pos]
        pos += 1
        length |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return length, pos
        if shift > 63:
            raise ValueError(f"malformed length prefix at byte {start}")
