"""Recognising communication ops in traces and reading their sizes and groups."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

_DTYPE_BYTES = {
    "float": 4, "float32": 4, "Float": 4, "double": 8, "Double": 8, "float64": 8,
    "c10::BFloat16": 2, "BFloat16": 2, "bfloat16": 2, "c10::Half": 2, "Half": 2, "float16": 2,
    "int": 4, "Int": 4, "int32": 4, "long int": 8, "Long": 8, "int64": 8,
    "unsigned char": 1, "Byte": 1, "uint8": 1, "signed char": 1, "Char": 1, "int8": 1,
    "bool": 1, "Bool": 1, "c10::Float8_e4m3fn": 1, "Float8_e4m3fn": 1,
}
_COLLECTIVES = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "all_gather_into_tensor": "all_gather",
    "_reduce_scatter_base": "reduce_scatter", "reduce_scatter": "reduce_scatter",
    "reducescatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "alltoall": "all_to_all", "all_to_all": "all_to_all", "alltoall_base": "all_to_all",
    "all_to_allv": "all_to_all", "alltoallv": "all_to_all",
    "all_gather_base": "all_gather", "reduce_scatter_base": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "barrier": "barrier",
    "send": "send", "recv": "recv", "recv_anysource": "recv", "gather": "gather",
    "scatter": "scatter", "allreduce_coalesced": "all_reduce", "sendrecv": "send",
}
_KERNEL_RE = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)


@dataclass(frozen=True)
class CommInfo:
    collective: str
    msg_bytes: int
    group_ranks: str  # JSON list or ""
    peer: int
    dtype: str


def _norm_collective(raw: str) -> str:
    key = raw.strip().lower()
    key = key.split("::")[-1].strip("_")
    return _COLLECTIVES.get(key, key)


def collective_from_kernel(name: str) -> str:
    m = _KERNEL_RE.search(name)
    if not m:
        return "other"
    k = m.group(1).lower()
    return {
        "allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
        "all_gather_base": "all_gather", "reduce_scatter_base": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "send", "sendrecvall": "all_to_all",
    }.get(k, k)


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
    """Return collective, size and group for a host-side comm event, or None if not comm."""
    if not isinstance(args, dict):
        args = {}
    if name == "record_param_comms":
        coll = _norm_collective(str(args.get("Collective name", "other")))
        if coll in ("wait", "wait_tensor") or "Collective name" not in args:
            return None
        dtype = str(args.get("dtype", ""))
        eb = _elem_bytes(dtype)
        n_in = _int0(args.get("In msg nelems"))
        n_out = _int0(args.get("Out msg nelems"))
        if coll == "all_gather":
            nbytes = n_out * eb
        elif coll in ("reduce_scatter",):
            nbytes = n_in * eb
        else:
            nbytes = max(n_in, n_out) * eb
        ranks = args.get("Process Group Ranks", "")
        if isinstance(ranks, str) and ranks.startswith("["):
            try:
                ranks = json.dumps(ast.literal_eval(ranks))
            except (ValueError, SyntaxError):
                ranks = ""
        elif isinstance(ranks, list):
            ranks = json.dumps(ranks)
        else:
            ranks = ""
        peer = _int0(args.get("Peer rank", -1), -1) if coll in ("send", "recv") else -1
        return CommInfo(coll, nbytes, ranks, peer, dtype)
    lowered = name.lower()
    for prefix in ("nccl:", "gloo:", "c10d::", "mpi:", "ucc:"):
        if lowered.startswith(prefix):
            coll = _norm_collective(name[len(prefix):])
            if coll in ("wait", "wait_tensor", "work"):
                return None
            dtype = types[0] if types else ""
            nbytes = _numel(dims[0] if len(dims) == 1 else dims) * _elem_bytes(dtype) if dims else 0
            return CommInfo(coll, nbytes, "", -1, dtype)
    return None


def _int0(value: Any, default: int = 0) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
