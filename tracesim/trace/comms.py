"""Recognising communication ops in traces and reading their sizes, groups and peers.

Sources, best first (``docs/formats.md``; the research notes name the PyTorch versions):

* ``record_param_comms`` with NCCL metadata (PyTorch >= 2.2): ``Collective name``, ``In / Out
  msg nelems`` (elements), ``dtype``, ``Group size``, ``Process Group Name`` / ``ID``,
  ``Process Group Ranks`` (truncated after 30 ranks), ``Global rank start / stride``,
  ``Rank`` (root of broadcast / reduce, peer of send / recv, as a group rank), ``Dst Rank`` /
  ``Src Rank`` (the peer's global rank), ``Seq`` (per-group sequence number);
* older ``record_param_comms`` with only ``Concrete Inputs``: ``[tensors, seq, pg id, rank,
  '', in_split, out_split, group size]`` (the collective's name comes from the ops around it);
* the named ops around a launch (``nccl:<op>`` annotations, ``c10d::<op>_`` calls, and the
  ``gloo:<op>`` ops that gloo runs on its own threads): the collective and the tensor sizes;
* the NCCL / RCCL kernel name: the collective and, for reductions, the element type
  (``ncclKernel_AllReduce_RING_LL_Sum_float``, ``ncclDevKernel_AllGather_RING_LL``,
  ``ncclDevKernel_AllReduce_Sum_f16_RING_LL``); RCCL's ``ncclDevKernel_Generic`` tells
  nothing.

Sizes follow nccl-tests: the per-rank buffer in bytes; all_gather: the gathered output;
reduce_scatter: the input that is scattered; all_to_all: the send buffer.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

_DTYPE_BYTES = {
    "float": 4, "float32": 4, "Float": 4, "double": 8, "Double": 8, "float64": 8,
    "c10::BFloat16": 2, "BFloat16": 2, "bfloat16": 2, "c10::Half": 2, "Half": 2, "float16": 2,
    "int": 4, "Int": 4, "int32": 4, "long int": 8, "Long": 8, "int64": 8,
    "unsigned char": 1, "Byte": 1, "uint8": 1, "signed char": 1, "Char": 1, "int8": 1,
    "bool": 1, "Bool": 1, "c10::Float8_e4m3fn": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1,
}
_COLLECTIVES = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather",
    "_reduce_scatter_base": "reduce_scatter", "reduce_scatter": "reduce_scatter",
    "reducescatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "alltoall": "all_to_all", "all_to_all": "all_to_all", "alltoall_base": "all_to_all",
    "all_to_allv": "all_to_all", "alltoallv": "all_to_all", "all_to_all_single": "all_to_all",
    "all_gather_base": "all_gather", "reduce_scatter_base": "reduce_scatter",
    "allgather_base": "all_gather", "reducescatter_base": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "barrier": "barrier",
    "send": "send", "recv": "recv", "recv_anysource": "recv", "gather": "gather",
    "scatter": "scatter", "allreduce_coalesced": "all_reduce", "sendrecv": "send",
}
#: NCCL kernel collective names (the name's first word) -> collective
_KERNEL_COLLS = {
    "allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "send", "send": "send",
    "recv": "recv", "alltoall": "all_to_all", "generic": "",
}
#: element types in NCCL kernel names (C names up to 2.18, short names since 2.19) -> c10 names
_KERNEL_DTYPES = {
    "float": "Float", "f32": "Float", "half": "Half", "f16": "Half", "__nv_bfloat16": "BFloat16",
    "bf16": "BFloat16", "double": "Double", "f64": "Double", "int8_t": "Char", "i8": "Char",
    "uint8_t": "Byte", "u8": "Byte", "int32_t": "Int", "i32": "Int", "uint32_t": "UInt32",
    "u32": "UInt32", "int64_t": "Long", "i64": "Long", "uint64_t": "UInt64", "u64": "UInt64",
    "f8e4m3": "Float8_e4m3fn", "f8e5m2": "Float8_e5m2",
}
_REDUCTIONS = ("all_reduce", "reduce_scatter", "reduce")
_KERNEL_RE = re.compile(r"nccl(?:Symk)?(?:Dev)?Kernel(?:Debug)?_([A-Za-z]+)", re.IGNORECASE)
_KERNEL_NEW_RE = re.compile(
    r"^nccl(?:Symk)?DevKernel(?:Debug)?_(?P<coll>[A-Za-z]+?)(?:_(?P<unroll>\d+))?"
    r"(?:_(?:Sum|Prod|MinMax|PreMulSum|SumPostDiv)_(?P<ty>[a-z0-9]+))?"
    r"(?:_(?:TREE|RING|COLLNET_DIRECT|COLLNET_CHAIN|NVLS|NVLS_TREE|PAT)_(?:LL|LL128|SIMPLE))?(?:\(|$)")
_KERNEL_OLD_RE = re.compile(
    r"^ncclKernel_(?P<coll>[A-Za-z]+)_[A-Z_]+?_(?:LL|LL128|SIMPLE)_[A-Za-z]+_(?P<ty>\w+?)(?:\(|$)")
_ARROW_RE = re.compile(r"(\d+)\s*(->|<-)\s*(\d+)")
_MAX_RANKS = 1 << 20


@dataclass(frozen=True)
class CommInfo:
    """What one trace event says about a communication operation ("" / -1 / 0: not said).

    ``full``: the event is a ``record_param_comms`` with the collective's own metadata.
    ``big_bytes``: bytes of the largest tensor argument (all_gather / reduce_scatter sizes
    when only the ops around the launch are known). ``group_size``: the process group's size
    where the ranks themselves are not recorded. ``group_source``: ``recorded`` (the ranks
    are in the trace) or ``size`` (only the size is).
    """

    collective: str
    msg_bytes: int
    group_ranks: str  # JSON list or ""
    peer: int
    dtype: str
    pg: str = ""
    seq: int = -1
    group_size: int = 0
    group_source: str = ""
    full: bool = False
    big_bytes: int = 0
    desc: str = ""


@dataclass(frozen=True)
class DistInfo:
    """A trace's ``distributedInfo``: own rank, world size, process groups by name."""

    rank: int = -1
    world: int = 0
    groups: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    descs: Mapping[str, str] = field(default_factory=dict)


def dist_info(data: Mapping[str, Any]) -> DistInfo:
    """Read ``distributedInfo`` (a dict, or its repr in older traces); empty if absent."""
    info = data.get("distributedInfo")
    if isinstance(info, str):
        try:
            info = ast.literal_eval(info)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            info = None
    if not isinstance(info, Mapping):
        return DistInfo()
    world = _int0(info.get("world_size"))
    groups: dict[str, tuple[int, ...]] = {}
    descs: dict[str, str] = {}
    cfg = info.get("pg_config")
    if isinstance(cfg, list):
        for g in cfg:
            if not isinstance(g, Mapping):
                continue
            name = str(g.get("pg_name", ""))
            ranks = _rank_list(g.get("ranks"))
            size = _int0(g.get("pg_size"))
            if not ranks and 0 < size <= _MAX_RANKS:
                ranks = tuple(range(size))  # the whole world is recorded as []
            if name and ranks:
                groups[name] = ranks
                descs[name] = str(g.get("pg_desc", ""))
    rank = _int0(info.get("rank"), -1)
    return DistInfo(rank, world if 0 < world <= _MAX_RANKS else 0, groups, descs)


#: collectives recognised inside longer op names (``multimem_all_reduce_``), longest first
_INNER = ("reduce_scatter", "reducescatter", "all_gather", "allgather", "all_reduce",
          "allreduce", "all_to_all", "alltoall", "broadcast")
#: namespaces whose ops are collectives only when their name says which one
_OTHER_PREFIXES = ("_c10d_functional::", "c10d_functional::", "symm_mem::", "vllm::")
#: element type names of ``Input type`` -> the c10 names ``record_param_comms`` uses
_C10_DTYPES = {
    "float": "Float", "double": "Double", "c10::half": "Half", "half": "Half",
    "c10::bfloat16": "BFloat16", "int": "Int", "long int": "Long", "long": "Long",
    "unsigned char": "Byte", "signed char": "Char", "bool": "Bool", "short int": "Short",
    "c10::float8_e4m3fn": "Float8_e4m3fn", "c10::float8_e5m2": "Float8_e5m2",
}
_COMM_PREFIXES = ("nccl:", "gloo:", "c10d::", "mpi:", "ucc:") + _OTHER_PREFIXES


def _norm_collective(raw: str) -> str:
    key = raw.strip().lower()
    key = key.split("::")[-1].strip("_").split(" ")[0]
    if key in _COLLECTIVES:
        return _COLLECTIVES[key]
    inner = next((c for c in _INNER if c in key), None)
    return _COLLECTIVES[inner] if inner is not None else key


def c10_dtype(name: str) -> str:
    """A dtype as ``record_param_comms`` spells it (``Float``, ``BFloat16``, ...)."""
    return _C10_DTYPES.get(name.strip().lower(), name)


def collective_from_kernel(name: str) -> str:
    """The collective an NCCL / RCCL kernel runs, from its name ("" if it does not say)."""
    m = _KERNEL_RE.search(name)
    if not m:
        return "other"
    k = m.group(1).lower()
    return _KERNEL_COLLS.get(k, k)


def kernel_comm(name: str) -> tuple[str, str]:
    """(collective, dtype) from an NCCL / RCCL kernel name; ("", "") if it says nothing.
    The dtype is given for reductions only (other kernels are typed by bytes)."""
    m = _KERNEL_NEW_RE.match(name) or _KERNEL_OLD_RE.match(name)
    if m is None:
        coll = collective_from_kernel(name)
        return ("" if coll == "other" else coll), ""
    coll = _KERNEL_COLLS.get(m.group("coll").lower(), m.group("coll").lower())
    ty = m.group("ty") or ""
    return coll, (_KERNEL_DTYPES.get(ty, "") if coll in _REDUCTIONS else "")


def _numel(dims: Any) -> int:
    if isinstance(dims, list) and dims and all(isinstance(d, int) for d in dims):
        n = 1
        for d in dims:
            n *= max(d, 0)
        return n
    if isinstance(dims, list):
        return sum(_numel(d) for d in dims if isinstance(d, list))
    return 0


def _elem_bytes(dtype: str) -> int:
    return _DTYPE_BYTES.get(dtype, 4)


def comm_info(name: str, args: Any, dims: list, types: list[str]) -> CommInfo | None:
    """What a host-side event says about a communication operation, or None if not comm.

    A ``record_param_comms`` without ``Collective name`` gives only its group and sequence
    (collective ""); its ``wait`` records are not operations (None).
    """
    if not isinstance(args, dict):
        args = {}
    if name == "record_param_comms":
        if "Collective name" not in args:
            return _concrete_inputs(args, types)
        coll = _norm_collective(str(args.get("Collective name", "other")))
        if coll in ("wait", "wait_tensor"):
            return None
        dtype = str(args.get("dtype", ""))
        eb = _elem_bytes(dtype)
        n_in = _int0(args.get("In msg nelems"))
        n_out = _int0(args.get("Out msg nelems"))
        if coll == "all_gather":
            nbytes = n_out * eb
        elif coll in ("reduce_scatter", "all_to_all"):
            nbytes = n_in * eb
        else:
            nbytes = max(n_in, n_out) * eb
        ranks = _rank_list(args.get("Process Group Ranks", ""))
        size = _int0(args.get("Group size"))
        start = _int0(args.get("Global rank start"), -1)
        stride = _int0(args.get("Global rank stride"))
        if len(ranks) < size <= _MAX_RANKS and start >= 0 and stride > 0:
            ranks = tuple(start + stride * k for k in range(size))  # the list is truncated
        source = "recorded" if ranks and len(ranks) >= size else ("size" if size > 0 else "")
        pg = str(args.get("Process Group Name", args.get("Process Group ID", "")))
        peer = -1
        if coll in ("send", "recv"):
            peer = _int0(args.get("Dst Rank" if coll == "send" else "Src Rank",
                                  args.get("Peer rank", -1)), -1)
            if peer < 0:
                gr = _int0(args.get("Rank"), -1)  # the peer's rank in the group
                peer = ranks[gr] if ranks and 0 <= gr < len(ranks) and source == "recorded" else gr
        return CommInfo(coll, nbytes, json.dumps(list(ranks)) if source == "recorded" else "",
                        peer, dtype, pg, _int0(args.get("Seq"), -1), size, source, True,
                        nbytes, str(args.get("Process Group Description", "")))
    lowered = name.lower()
    if not lowered.startswith(_COMM_PREFIXES):
        return None
    for prefix in _COMM_PREFIXES:
        if lowered.startswith(prefix):
            coll = _norm_collective(name[len(prefix):])
            if coll in ("wait", "wait_tensor", "work", "coalesced"):
                return None
            if prefix in _OTHER_PREFIXES and coll not in _COLLECTIVES.values():
                return None
            tensors = _tensor_args(dims, types)
            dtype = c10_dtype(next((t for t, _ in tensors if t), types[0] if types else ""))
            sizes = [n * _elem_bytes(t or dtype) for t, n in tensors]
            if not sizes:
                nbytes = 0
            elif coll in ("all_gather", "reduce_scatter"):
                nbytes = max(sizes)
            elif coll == "all_to_all" and prefix == "c10d::" and len(sizes) > 1:
                nbytes = sizes[1]  # alltoall_base_(output, input, ...): the send buffer
            else:
                nbytes = sizes[0]
            peer = -1
            m = _ARROW_RE.search(name)
            if m and coll in ("send", "recv"):  # nccl:send 0->1, nccl:recv 0<-1
                peer = int(m.group(3))
            return CommInfo(coll, nbytes, "", peer, dtype, big_bytes=max(sizes, default=0))
    return None


def _tensor_args(dims: list, types: list[str]) -> list[tuple[str, int]]:
    """(dtype, elements) of each tensor (or tensor list) argument."""
    out = []
    for k, d in enumerate(dims):
        n = _numel(d) if isinstance(d, list) else 0
        if n > 0:
            t = types[k] if k < len(types) else ""
            out.append(("" if t in ("TensorList", "Scalar", "") else t, n))
    return out


def _concrete_inputs(args: Mapping[str, Any], types: Sequence[str]) -> CommInfo | None:
    """An older ``record_param_comms``: ``Concrete Inputs`` = [tensors, seq, pg id, rank, '',
    in_split, out_split, group size]; a record without the tensor slot is a ``wait``."""
    ci = args.get("Concrete Inputs")
    if not isinstance(ci, list) or len(ci) != 8 or (types and types[0] in ("Scalar", "")):
        return None
    seq, size = _int0(ci[1], -1), _int0(ci[7])
    if size <= 0 or size > _MAX_RANKS:
        return None
    return CommInfo("", 0, "", -1, "", "", seq, size, "size")


def combine(infos: Sequence[CommInfo], kernel: str = "") -> tuple[CommInfo, str]:
    """One operation's metadata from the events around its launch (innermost first) and its
    kernel's name; returns it with where it came from: ``full`` (the events around the
    launch name the collective), ``kernel_name`` (only the kernel name does) or ``none``."""
    rpc = next((x for x in infos if x.full), None)
    named = [x for x in infos if x.collective]
    k_coll, k_dtype = kernel_comm(kernel) if kernel else ("", "")
    if rpc is not None:
        base = rpc
    elif named:
        coll = named[0].collective
        nbytes = next((x.msg_bytes for x in named if x.msg_bytes > 0), 0)
        if coll in ("all_gather", "reduce_scatter"):
            nbytes = max(x.big_bytes for x in named)
        base = replace(named[0], msg_bytes=nbytes,
                       peer=next((x.peer for x in named if x.peer >= 0), -1),
                       dtype=next((x.dtype for x in named if x.dtype), ""))
    else:
        base = CommInfo(k_coll, 0, "", -1, k_dtype)
    grp = next((x for x in infos if x.group_source == "recorded"), None) or next(
        (x for x in infos if x.group_source), None)
    if grp is not None and not base.group_source:
        base = replace(base, group_ranks=grp.group_ranks, group_size=grp.group_size,
                       group_source=grp.group_source, pg=base.pg or grp.pg)
    if base.seq < 0:
        base = replace(base, seq=next((x.seq for x in infos if x.seq >= 0), -1))
    if not base.dtype and k_dtype:
        base = replace(base, dtype=k_dtype)
    return base, comm_level(base, host=rpc is not None or bool(named))


def comm_level(info: CommInfo, host: bool = True) -> str:
    """How complete an operation's metadata is: ``full`` (the host events name the collective
    and its size), ``collective_only`` (they name the collective, not its size),
    ``kernel_name`` (only the kernel name says what it is), ``none``."""
    if host and info.collective:
        return "full" if info.msg_bytes > 0 else "collective_only"
    return "kernel_name" if info.collective else "none"


def resolve_group(info: CommInfo, dist: DistInfo, rank: int) -> tuple[str, str]:
    """(group ranks as JSON, source) of an operation: recorded ranks; the process group
    named in ``distributedInfo.pg_config``; ``size``: a plausible group of the recorded size
    (the whole world if it is the world's size, else the block of that many consecutive
    ranks that holds ``rank``); ``pg_config``: the only process group of the job; ``world``:
    every rank of the recorded world; ("", "") if nothing is known."""
    if info.group_source == "recorded" and info.group_ranks:
        return info.group_ranks, "recorded"
    if info.pg and info.pg in dist.groups:
        return json.dumps(list(dist.groups[info.pg])), "recorded"
    size = info.group_size
    if size > 1 and info.group_source == "size":
        if size == dist.world or rank < 0:
            return json.dumps(list(range(size))), "size"
        lo = (rank // size) * size
        return json.dumps(list(range(lo, lo + size))), "size"
    if len(dist.groups) == 1:
        return json.dumps(list(next(iter(dist.groups.values())))), "pg_config"
    if dist.world > 1:
        return json.dumps(list(range(dist.world))), "world"
    return "", ""


#: ``Process Group Description`` words -> the parallel dimension (group_kind)
_DESC_KINDS = (("tensor", "tp"), ("pipeline", "pp"), ("expert", "ep"), ("context", "cp"),
               ("data", "dp"), ("tp", "tp"), ("pp", "pp"), ("ep", "ep"), ("cp", "cp"),
               ("dp", "dp"))


def group_kind_of(desc: str) -> str:
    """The parallel dimension a process group description names ("" if none): DeviceMesh
    ``mesh_tp`` / ``mesh_dp_shard``, Megatron ``TENSOR_MODEL_PARALLEL_GROUP``, ..."""
    words = re.split(r"[^a-z]+", desc.lower())
    for key, kind in _DESC_KINDS:
        if any(w == key or (len(key) > 2 and w.startswith(key)) for w in words):
            return kind
    return ""


def _rank_list(value: Any) -> tuple[int, ...]:
    if isinstance(value, str) and value.startswith("["):
        try:
            value = ast.literal_eval(value.replace("...", ""))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return ()
    if isinstance(value, (list, tuple)) and len(value) <= _MAX_RANKS and all(
            isinstance(x, int) and not isinstance(x, bool) and 0 <= x < _MAX_RANKS for x in value):
        return tuple(int(x) for x in value)
    return ()


def _int0(value: Any, default: int = 0) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value if abs(value) < 2**62 else default
    try:
        v = int(value)
    except (TypeError, ValueError, OverflowError):
        return default
    return v if abs(v) < 2**62 else default
