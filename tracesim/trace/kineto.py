"""Reading Kineto (torch.profiler) Chrome traces into the canonical op table.

Handles plain and gzipped JSON, both argument styles (lists, or strings in older traces),
CUDA and HIP runtime names, ``ProfilerStep#N`` boundaries, ``cuda_sync`` events, and
communication ops (``record_param_comms``, ``nccl:*``, ``gloo:*``, ``c10d::*``, NCCL kernels,
joined to their host-side metadata by :mod:`tracesim.trace.commjoin`). On HIP traces a GPU's
``pid`` is its HSA agent index (CPU agents counted first): ``device`` is the GPU's ordinal
among the GPUs the trace used instead.
"""

from __future__ import annotations

import ast
import gzip
import json
import re
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracesim.errors import InputError
from tracesim.trace import comms
from tracesim.trace.commjoin import COMM_COLUMNS, Enclosing, fill_comm, flow_starts
from tracesim.trace.schema import conform, empty_table
from tracesim.trace.traceinfo import rehome_lone_steps, trace_field, whole_trace_step

_CAT_MAP = {
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "annotation",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "cuda_sync": "sync",
    "gpu_user_annotation": "gpu_annotation",
    # PyTorch 1.8-1.9 (Kineto's first format): Operator, Runtime, Kernel, Memcpy, Memset
    "runtime": "runtime",
    "memcpy": "memcpy",
    "memset": "memset",
}
_GPU_CATS = {"kernel", "memcpy", "memset", "sync", "gpu_annotation"}
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_MODULE_PREFIX = "nn.Module: "
#: float-microsecond timestamps are good to ~0.25 us near 1e15; overlaps below this are noise
_NEST_TOL_NS = 500
#: trace files this large (bytes on disk, gzipped or not) are read by the streaming parser
STREAM_MIN_BYTES = 64 << 20
#: |ts| and dur above this many microseconds do not fit int64 nanoseconds
_MAX_US = 2**62 / 1000.0
_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|blocks|h|layer|block|decoder\.layers)\.(\d+)(?:\.|$)")


def load_trace_json(path: str | Path) -> dict[str, Any]:
    """Load a Kineto trace file (``.json`` or ``.json.gz``) as a dict.

    Raises InputError naming the file for a missing file, a truncated or corrupt gzip
    stream, invalid JSON, or JSON that is not a Chrome trace. Files of ``STREAM_MIN_BYTES``
    or more are parsed event by event (tracesim.trace.stream), keeping only the events the
    op table reads (the others become an empty placeholder, so indices do not move).
    """
    p = Path(path)
    if p.is_file() and p.stat().st_size >= STREAM_MIN_BYTES:
        from tracesim.trace.stream import load_trace_streaming

        return load_trace_streaming(p, keep=_op_event)
    data = load_json_file(path)
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        from tracesim.trace.stream import not_trace_message

        raise InputError(not_trace_message(data if isinstance(data, dict) else {}), path, "traceEvents")
    return data


def _op_event(ev: Any) -> bool:
    """Whether op_table_from_events reads this event (a complete event of a known cat)."""
    return isinstance(ev, dict) and ev.get("ph") == "X" and str(ev.get("cat", "")).lower() in _CAT_MAP


def load_json_file(path: str | Path, expected: str = "a trace file (.json or .json.gz)") -> Any:
    """Load a JSON file, plain or gzipped; InputError for missing, truncated or bad files.

    ``expected`` names what the file should be, for the message when ``path`` is a directory.
    """
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", path)
    if path.is_dir():
        raise InputError(f"is a directory, expected {expected}", path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
        if head == b"\x1f\x8b":
            with gzip.open(path, "rb") as fh:
                raw = fh.read()
        else:
            raw = path.read_bytes()
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise InputError(f"truncated or corrupt gzip data ({exc})", path) from None
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", path) from None
    try:
        data = json.loads(raw)
    except UnicodeDecodeError:
        raise InputError("not a JSON text file", path) from None
    except RecursionError:
        raise InputError("JSON nested too deeply", path) from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"invalid JSON ({exc.msg}); the file may be truncated", path, f"line {exc.lineno}"
        ) from None
    return data


def _arg_list(value: Any) -> list:
    """Kineto args are lists in new traces and Python-literal strings in older ones."""
    if value is None:
        return []
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return [value]
        return parsed if isinstance(parsed, list) else [parsed]
    return [value]


def _int(value: Any, default: int = -1) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value if abs(value) < 2**62 else default  # must fit an int64 column
    if isinstance(value, float) and value == value and abs(value) < 2**62:
        return int(value)
    if isinstance(value, str):
        try:
            v = int(value, 0)
        except ValueError:
            return default
        return v if abs(v) < 2**62 else default
    return default


def _rank_of(data: Mapping[str, Any], default: int) -> int:
    info = trace_field(data, "distributedInfo")
    if isinstance(info, Mapping):
        r = _int(info.get("rank"), default)
        return r if r >= 0 else default
    return default


def read_kineto(path: str | Path, rank: int | None = None) -> pd.DataFrame:
    """Read a Kineto trace into the canonical op table (see tracesim.trace.schema).

    Args:
        path: ``.json`` or ``.json.gz`` Chrome trace written by torch.profiler.
        rank: the rank to record; default: ``distributedInfo.rank`` or 0.
    """
    data = load_trace_json(path)
    return op_table_from_events(data, path, rank)


#: the columns read from each event, in the order of the loop's lists
_ROW_KEYS = ("event_id", "name", "cat", "lane", "device", "ts_ns", "dur_ns", "correlation",
             "external_id", "stream", "sync_kind", "wait_stream", "wait_record_corr", "seq_nr",
             "fwd_tid", "rf_id", "_dims", "_types", "_args")
_BIG = 2**62  # an int column value must fit an int64
_OBJECT_KEYS = ("name", "cat", "lane", "device", "sync_kind", "_dims", "_types", "_args")


def op_table_from_events(data: Mapping[str, Any], path: str | Path, rank: int | None = None,
                         whole_window: bool = False) -> pd.DataFrame:
    events = data["traceEvents"]
    rank = _rank_of(data, 0) if rank is None else rank
    cols: dict[str, list[Any]] = {k: [] for k in _ROW_KEYS}
    (c_event, c_name, c_cat, c_lane, c_device, c_ts, c_dur, c_corr, c_ext, c_stream, c_sync,
     c_wait_stream, c_wait_corr, c_seq, c_fwd, c_rf, c_dims, c_types, c_args) = (
        cols[k] for k in _ROW_KEYS)
    cat_of: dict[Any, str | None] = {}
    cpu_lane: dict[Any, str] = {}
    for idx, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        raw_cat = ev.get("cat", "")
        if isinstance(raw_cat, str):
            cat = cat_of.get(raw_cat, "?")
            if cat == "?":
                cat = cat_of[raw_cat] = _CAT_MAP.get(raw_cat.lower())
        else:
            cat = _CAT_MAP.get(str(raw_cat).lower())
        if cat is None:
            continue
        name = ev.get("name")
        ts = ev.get("ts")
        dur = ev.get("dur", 0)
        if not isinstance(name, str) or isinstance(ts, bool) or not isinstance(ts, (int, float)):
            raise InputError(
                "event without a string 'name' and numeric 'ts'", path, f"traceEvents[{idx}]"
            )
        if isinstance(dur, bool) or not isinstance(dur, (int, float)) or dur != dur or dur < 0:
            raise InputError(f"bad 'dur' {dur!r}", path, f"traceEvents[{idx}]")
        if not (abs(ts) < _MAX_US and dur < _MAX_US):  # also NaN / inf: ns must fit in int64
            raise InputError(f"'ts' {ts!r} or 'dur' {dur!r} out of range (microseconds)", path,
                             f"traceEvents[{idx}]")
        args = ev.get("args") or {}
        if not isinstance(args, dict):
            args = {}
        get = args.get
        if cat in _GPU_CATS:
            stream = _int(get("stream"), _int(ev.get("tid")))
            c_lane.append(f"stream:{stream}")
            c_device.append(str(_int(get("device", ev.get("pid")), 0)))
        else:
            stream = -1
            tid = ev.get("tid")
            lane = cpu_lane.get(tid) if isinstance(tid, (int, str)) else f"cpu:{tid}"
            if lane is None:
                lane = cpu_lane[tid] = f"cpu:{tid}"
            c_lane.append(lane)
            c_device.append("cpu")
        c_event.append(idx)
        c_name.append(name)
        c_cat.append(cat)
        c_ts.append(int(round(float(ts) * 1000.0)))
        c_dur.append(int(round(float(dur) * 1000.0)))
        c_stream.append(stream)
        c_sync.append(str(get("cuda_sync_kind", "")) if cat == "sync" else "")
        if args:
            for key, col in ((("correlation", c_corr), ("External id", c_ext),
                              ("wait_on_stream", c_wait_stream),
                              ("wait_on_cuda_event_record_corr_id", c_wait_corr),
                              ("Sequence number", c_seq), ("Fwd thread id", c_fwd),
                              ("Record function id", c_rf))):
                v = get(key)
                col.append(-1 if v is None else v if type(v) is int and -_BIG < v < _BIG
                           else _int(v))
            c_dims.append(get("Input Dims"))
            c_types.append(get("Input type"))
        else:
            for c in (c_corr, c_ext, c_wait_stream, c_wait_corr, c_seq, c_fwd, c_rf):
                c.append(-1)
            c_dims.append(None)
            c_types.append(None)
        c_args.append(args)
    if not c_event:
        return empty_table()
    if whole_window:  # no ProfilerStep#N: one step over the trace (tracesim.trace.traceinfo)
        rehome_lone_steps(cols, _GPU_CATS, _STEP_RE.match)
        whole = whole_trace_step(cols, _GPU_CATS, _STEP_RE.match, len(events))
    df = pd.DataFrame({k: (np.array(v, dtype=object) if k in _OBJECT_KEYS else np.array(v))
                       for k, v in cols.items()})
    df["rank"] = rank
    if _is_hip(data, df):
        gpu = df["device"].to_numpy() != "cpu"
        ids = sorted({int(d) for d in df.loc[gpu, "device"]})
        df.loc[gpu, "device"] = df.loc[gpu, "device"].map({str(d): str(k) for k, d in enumerate(ids)})
    dist = comms.dist_info(data)
    df = conform(_annotate(df, path, dist, rank, flow_starts(events)))
    df.attrs["whole_trace_step"] = whole_window and whole
    return df


def _is_hip(data: Mapping[str, Any], df: pd.DataFrame) -> bool:
    if "roctracer_version" in data or "hip_runtime_version" in data:
        return True
    rt = df.loc[df["cat"] == "runtime", "name"]
    return bool(len(rt)) and bool(rt.str.startswith("hip").any())


def _annotate(df: pd.DataFrame, path: str | Path, dist: comms.DistInfo | None = None,
              rank: int = 0, flows: Mapping[int, tuple[str, int]] | None = None) -> pd.DataFrame:
    """Fill parent_id, step, scope, phase, layer, op features and comm fields."""
    from tracesim.ops.classify import classify, op_cost

    n = len(df)
    parent = np.full(n, -1, dtype=np.int64)
    step = np.array([""] * n, dtype=object)
    scope = np.array([""] * n, dtype=object)
    phase = np.array(["other"] * n, dtype=object)
    event_id = df["event_id"].to_numpy()
    names = df["name"].to_numpy()
    cats = df["cat"].to_numpy()
    ts = df["ts_ns"].to_numpy()
    end = ts + df["dur_ns"].to_numpy()
    lanes = df["lane"].to_numpy()

    # step windows from ProfilerStep#N annotations
    step_rows = [i for i in range(n) if cats[i] in ("annotation", "cpu_op") and _STEP_RE.match(names[i])]
    windows = sorted((ts[i], end[i], names[i]) for i in step_rows)

    host = np.flatnonzero(~np.isin(cats, list(_GPU_CATS)))
    # nesting per host thread
    for lane in pd.unique(lanes[host]):
        idx = host[lanes[host] == lane]
        order = idx[np.lexsort((event_id[idx], -end[idx], ts[idx]))]
        stack: list[int] = []
        for i in order:
            while stack and (
                (end[stack[-1]] <= ts[i] and not (end[stack[-1]] == ts[i] == end[i]))
                or end[i] > end[stack[-1]] + _NEST_TOL_NS
            ):
                stack.pop()
            if stack:
                p = stack[-1]
                parent[i] = event_id[p]
                scope[i] = scope[p]
                phase[i] = phase[p]
            nm = names[i]
            if nm.startswith(_MODULE_PREFIX):
                scope[i] = nm[len(_MODULE_PREFIX):]
            ph = _phase_of(nm)
            if ph and (phase[i] == "other" or ph in ("bwd", "opt")):
                phase[i] = ph
            elif phase[i] == "other" and nm.startswith(_MODULE_PREFIX):
                phase[i] = "fwd"
            stack.append(i)
    if windows:
        starts = np.array([w[0] for w in windows])
        ends = np.array([w[1] for w in windows])
        wnames = np.array([w[2] for w in windows], dtype=object)
        k = np.searchsorted(starts, ts[host], side="right") - 1
        ok = (k >= 0) & (ts[host] < ends[np.clip(k, 0, None)])
        step[host[ok]] = wnames[k[ok]]

    # backward ops inherit module scope through the autograd sequence number
    seq = df["seq_nr"].to_numpy()
    fwd_scope: dict[int, str] = {}
    for i in host:
        if seq[i] >= 0 and phase[i] != "bwd" and scope[i] and seq[i] not in fwd_scope:
            fwd_scope[seq[i]] = scope[i]
    for i in host:
        if phase[i] == "bwd" and not scope[i] and seq[i] in fwd_scope:
            scope[i] = fwd_scope[seq[i]]

    # op features for host ops
    op_class = np.array(["other"] * n, dtype=object)
    flops = np.zeros(n)
    nbytes = np.zeros(n)
    shapes = np.array([""] * n, dtype=object)
    dtype = np.array([""] * n, dtype=object)
    cc: dict[str, np.ndarray] = {c: np.array([""] * n, dtype=object) for c in COMM_COLUMNS}
    cc["msg_bytes"] = np.zeros(n, dtype=np.int64)
    cc["peer"] = np.full(n, -1, dtype=np.int32)
    cc["comm_seq"] = np.full(n, -1, dtype=np.int64)
    cc["dtype"] = dtype
    collective = cc["collective"]
    infos: dict[int, comms.CommInfo] = {}  # host events that describe a comm operation
    chains: dict[int, list[comms.CommInfo]] = {}  # comm kernel -> the events around its launch
    dims_col = df["_dims"].to_numpy()
    types_col = df["_types"].to_numpy()
    args_col = df["_args"].to_numpy()
    for i in range(n):
        c = cats[i]
        if c in ("gpu_annotation", "sync"):
            continue
        dims = _arg_list(dims_col[i])
        types = [str(t) for t in _arg_list(types_col[i])]
        if dims:
            shapes[i] = _compact_json(dims)
        info = comms.comm_info(names[i], args_col[i], dims, types) if c != "kernel" else None
        if info is not None:
            infos[i] = info
        if info is not None and info.collective:
            op_class[i] = "comm"
            collective[i] = info.collective
            dtype[i] = info.dtype
            if c in ("cpu_op", "annotation"):
                cats[i] = "comm"
            continue
        if c in ("cpu_op", "annotation"):
            # "Concrete Inputs" (strides, is_causal) are not passed: the layer template
            # re-costs ops from dims and types alone and must get the same numbers
            cost = op_cost(names[i], dims, types)
            op_class[i], flops[i], nbytes[i], dtype[i] = cost.op_class, cost.flops, cost.bytes, cost.dtype
        elif c == "kernel":
            op_class[i] = classify(names[i], "kernel")
        elif c in ("memcpy", "memset"):
            op_class[i] = "memcpy"
            nbytes[i] = float(_int(args_col[i].get("bytes"), 0)) if isinstance(args_col[i], dict) else 0.0

    df = df.assign(cat=cats)
    # GPU ops inherit from their launching runtime call (through correlation) and the
    # innermost op above it that has features (the launching aten op).
    corr = df["correlation"].to_numpy()
    pos_of_event = {int(e): k for k, e in enumerate(event_id)}
    runtime_by_corr: dict[int, int] = {}
    for i in host:
        if cats[i] == "runtime" and corr[i] >= 0:
            runtime_by_corr[int(corr[i])] = int(i)
    enclosing = Enclosing(lanes, ts, end, host, parent, pos_of_event)
    for i in np.flatnonzero(np.isin(cats, ["kernel", "memcpy", "memset", "sync"])).tolist():
        r = runtime_by_corr.get(int(corr[i]))
        if r is None:
            site = (flows or {}).get(int(corr[i])) if corr[i] >= 0 else None
            if cats[i] == "kernel" and op_class[i] == "comm":
                # no launch call traced (RCCL): the events around the flow's launch site
                at = enclosing.at(*site) if site is not None else -1
                chains[i] = _comm_chain(at, infos, parent, pos_of_event) if at >= 0 else []
            continue
        step[i], scope[i], phase[i] = step[r], scope[r], phase[r]
        if cats[i] != "kernel":
            continue
        # walk up to the launching op: the comm events around the launch, or the op with
        # FLOPs and bytes that launched a compute kernel
        chain = _comm_chain(pos_of_event.get(int(parent[r]), -1), infos, parent, pos_of_event)
        if any(x.collective for x in chain):
            op_class[i] = "comm"
        if op_class[i] == "comm":
            chains[i] = chain
            continue
        p = parent[r]
        hops = 0
        while p >= 0 and hops < 64:
            k = pos_of_event[int(p)]
            if cats[k] == "cpu_op" and (flops[k] > 0 or nbytes[k] > 0):
                # the kernel's own name decides its class; the op's FLOPs and bytes are
                # taken only when they describe the same kind of work
                if op_class[i] in ("other", op_class[k]):
                    op_class[i] = op_class[k] if op_class[i] == "other" else op_class[i]
                    flops[i], nbytes[i], shapes[i], dtype[i] = flops[k], nbytes[k], shapes[k], dtype[k]
                break
            p = parent[k]
            hops += 1
    fill_comm(cc, infos, chains, names, dist or comms.DistInfo(), rank)

    layer = np.full(n, -1, dtype=np.int32)
    for i in range(n):
        if scope[i]:
            m = _LAYER_RE.search(scope[i])
            if m:
                layer[i] = int(m.group(1))
    df = df.drop(columns=["_dims", "_types", "_args"])
    return df.assign(
        parent_id=parent, step=step, scope=scope, phase=phase, layer=layer,
        op_class=op_class, flops=flops, bytes=nbytes, shapes=shapes, **cc,
    )


def _compact_json(value: list) -> str:
    """``json.dumps(value, separators=(",", ":"))``; for lists of numbers (input dims, the
    common case) the same text from ``repr``, several times faster."""
    text = repr(value).replace(" ", "")
    if any(c in text for c in "'\"NTFIn"):  # strings, None, True / False, inf / nan
        return json.dumps(value, separators=(",", ":"))
    return text


def _comm_chain(k: int, infos: Mapping[int, comms.CommInfo], parent: np.ndarray,
                pos_of_event: Mapping[int, int]) -> list[comms.CommInfo]:
    """The comm events enclosing a launch (from row ``k`` upwards, innermost first), up to
    the first other event above one that names a collective."""
    out: list[comms.CommInfo] = []
    hops = 0
    while k >= 0 and hops < 64:
        info = infos.get(k)
        if info is None:
            if any(x.collective for x in out):
                break
        else:
            out.append(info)
        p = int(parent[k])
        k = pos_of_event.get(p, -1) if p >= 0 else -1
        hops += 1
    return out


def _phase_of(name: str) -> str:
    if "Backward" in name or name.startswith("autograd::engine::evaluate_function") or name == "## backward ##":
        return "bwd"
    if name.startswith("Optimizer.") or name == "## optimizer ##" or name.startswith("optimizer."):
        return "opt"
    if name in ("## forward ##", "DistributedDataParallel.forward"):
        return "fwd"
    return ""
