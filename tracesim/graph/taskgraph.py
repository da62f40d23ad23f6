"""The task graph: columnar tasks, edges, lanes and communication groups.

A :class:`TaskGraph` is what the engine replays. It is produced by the extractor (from a
recorded trace), by the builder (from a model spec and a parallel layout) and by the interop
importers. Everything is stored in columns (pandas DataFrames backed by numpy arrays), never
one Python object per task.

Tasks (``tasks``, one row per task, row position == ``task_id``):

============  =======  ==============================================================
column        dtype    meaning
============  =======  ==============================================================
task_id       int64    0..n-1, equal to the row position
rank          int32    global rank the task runs on
lane          int32    index into ``lanes``; a lane runs its tasks one at a time in
                       ascending ``task_id`` order (program order is implicit)
kind          str      ``cpu`` | ``gpu`` | ``coll`` | ``send`` | ``recv``
name          str      op or kernel name
dur_ns        int64    duration in ns (recorded or predicted); for comm tasks the
                       recorded duration, used when the replay has no network model
gap_ns        int64    lane-local delay before the task may start, counted from the end
                       of the previous task on the lane (untraced CPU work between ops)
op_class      str      gemm | attention | elementwise | ... | comm | other
flops         float64  floating-point operations (0 if unknown)
bytes         float64  bytes moved to/from memory (0 if unknown)
step          str      step the task belongs to (``ProfilerStep#4``), "" if none
phase         str      fwd | bwd | opt | other
layer         int32    transformer layer index, -1 if none
collective    str      all_reduce | all_gather | reduce_scatter | all_to_all | broadcast |
                       reduce | send | recv | barrier | "" (not comm)
group         int32    index into ``groups`` (the member ranks), -1 if none
group_kind    str      tp | dp | pp | cp | ep | "" : which parallel dimension
msg_bytes     int64    message size in bytes (collective: per-rank buffer size as
                       nccl-tests counts it; send/recv: bytes transferred)
peer          int32    the other rank of a send/recv, -1 otherwise
match_key     str      tasks with equal ``match_key`` on different ranks are one collective
                       (or one send/recv pair); "" if not comm
============  =======  ==============================================================

Optional task columns a producer may add (kept as extra columns): ``algorithm`` (str, the
collective algorithm a comm task asks the network model for, ``""`` = the model's choice;
the builder writes ``userbuffers`` on Transformer Engine's userbuffers chunks, which do not
go through NCCL), ``chunks`` (int, a comm task that stands for ``chunks`` operations of
``msg_bytes / chunks`` each, run back to back on its lane, each paying its own latency;
absent or 1: one operation; the builder writes it for the merged transfer chunks of a
Transformer Engine overlapped GEMM, :mod:`tracesim.build.overlap`; :mod:`tracesim.graph.chunks`
splits such tasks again) and ``sym_group`` (a representative's full group, symmetric replays).

Edges (``edges``): ``src``, ``dst`` (task ids, int64; int32 in builder graphs) and ``kind`` (str): ``launch``
(runtime call -> kernel), ``sync`` (GPU work -> the CPU call that waits on it), ``event``
(cudaEventRecord -> cudaStreamWaitEvent target), ``thread`` (cross-thread), ``data``
(execution-trace data dependency), ``dep`` (builder dependency). Program order within a lane
is implicit and not stored.

Lanes (``lanes``): ``lane`` (int32, row position), ``rank`` (int32), ``name`` (str, e.g.
``cpu:1234``, ``stream:7``, ``compute``, ``comm:tp``) and ``kind`` (``cpu`` | ``gpu``).

Groups (``groups``): a list of tuples of global ranks; ``group`` columns index into it.

Storage: a ``str`` column may be held as plain strings (object or pandas ``str`` dtype) or as
a pandas ``Categorical`` (small integer codes plus a vocabulary; the builder stores every
string column of its graphs this way, ``layer``, ``group`` and ``peer`` as int16,
``dur_ns``, ``msg_bytes`` and its edges' task ids as int32 while the values fit, and its ``gap_ns``, all zero, as one
read-only zero-stride array). Values, comparisons (``==``, ``isin``, ``.str``) and Parquet
files are the same either way; code that reads a string column of a possibly large graph
should use :func:`column_codes` rather than ``to_numpy()``, which makes one Python object
per row of a categorical column.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

TASK_KINDS = ("cpu", "gpu", "coll", "send", "recv")
EDGE_KINDS = ("launch", "sync", "event", "thread", "data", "dep")
COMM_KINDS = ("coll", "send", "recv")

TASK_COLUMNS: dict[str, Any] = {
    "task_id": np.int64,
    "rank": np.int32,
    "lane": np.int32,
    "kind": object,
    "name": object,
    "dur_ns": np.int64,
    "gap_ns": np.int64,
    "op_class": object,
    "flops": np.float64,
    "bytes": np.float64,
    "step": object,
    "phase": object,
    "layer": np.int32,
    "collective": object,
    "group": np.int32,
    "group_kind": object,
    "msg_bytes": np.int64,
    "peer": np.int32,
    "match_key": object,
}
TASK_DEFAULTS: dict[str, Any] = {
    "dur_ns": 0,
    "gap_ns": 0,
    "op_class": "other",
    "flops": 0.0,
    "bytes": 0.0,
    "step": "",
    "phase": "other",
    "layer": -1,
    "collective": "",
    "group": -1,
    "group_kind": "",
    "msg_bytes": 0,
    "peer": -1,
    "match_key": "",
}
EDGE_COLUMNS = {"src": np.int64, "dst": np.int64, "kind": object}
LANE_COLUMNS = {"lane": np.int32, "rank": np.int32, "name": object, "kind": object}

GRAPH_FORMAT_VERSION = 1


def make_tasks(rows: Mapping[str, Any] | pd.DataFrame) -> pd.DataFrame:
    """Build a task table from columns, filling defaults and fixing dtypes.

    ``rows`` must hold at least ``rank``, ``lane``, ``kind`` and ``name``; ``task_id`` is
    assigned as the row position.
    """
    df = pd.DataFrame(rows).reset_index(drop=True)
    n = len(df)
    for col in ("rank", "lane", "kind", "name"):
        if col not in df:
            raise ValueError(f"task table needs column {col!r}")
    for col, default in TASK_DEFAULTS.items():
        if col not in df:
            df[col] = [default] * n if isinstance(default, str) else default
        elif df[col].isna().any():
            df[col] = df[col].where(df[col].notna(), default)
    df["task_id"] = np.arange(n, dtype=np.int64)
    out = pd.DataFrame({c: df[c].astype(t) for c, t in TASK_COLUMNS.items()})
    extra = [c for c in df.columns if c not in TASK_COLUMNS]
    for c in extra:
        out[c] = df[c].to_numpy()
    return out


def make_edges(src: Any, dst: Any, kind: Any) -> pd.DataFrame:
    """Build an edge table; ``kind`` may be one string for all edges."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if isinstance(kind, str):
        kind = [kind] * len(src)
    return pd.DataFrame({"src": src, "dst": dst, "kind": pd.Series(kind, dtype=object)})


def make_lanes(rows: Mapping[str, Any] | pd.DataFrame) -> pd.DataFrame:
    df = pd.DataFrame(rows).reset_index(drop=True)
    df["lane"] = np.arange(len(df), dtype=np.int32)
    return pd.DataFrame({c: df[c].astype(t) for c, t in LANE_COLUMNS.items()})


def column_codes(col: pd.Series, names: bool = True) -> tuple[np.ndarray, list[str]]:
    """Integer codes (one per row) and the strings they stand for (``[]`` unless ``names``),
    of a string column held as strings or as a Categorical (then without one Python object
    per row: the codes are the column's own)."""
    arr = col.array
    if isinstance(arr, pd.Categorical):
        # ``Categorical.codes`` is a read-only view (``.cat.codes`` would copy)
        return arr.codes, [str(x) for x in arr.categories] if names else []
    codes, uniq = pd.factorize(col.to_numpy())
    return codes, [str(x) for x in uniq] if names else []


def code_dtype(n_values: int) -> type[np.signedinteger]:
    """The smallest signed integer type that holds codes 0..n_values-1 (and -1)."""
    for t in (np.int8, np.int16, np.int32):
        if n_values <= np.iinfo(t).max:
            return t
    return np.int64


def categorical(codes: np.ndarray, values: list[str]) -> pd.Series:
    """A Categorical column over ``codes`` (indices into ``values``, unique strings; kept as
    one Arrow string array, not one Python object each)."""
    codes = np.asarray(codes, dtype=code_dtype(len(values)))
    dtype = pd.CategoricalDtype(pd.Index(values, dtype="str"))
    return pd.Series(pd.Categorical.from_codes(codes, dtype=dtype, validate=False), copy=False)


@dataclass(frozen=True)
class TaskGraph:
    """Per-rank task DAGs of one workload (all ranks in one set of tables)."""

    tasks: pd.DataFrame
    edges: pd.DataFrame
    lanes: pd.DataFrame
    groups: tuple[tuple[int, ...], ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def n_tasks(self) -> int:
        return len(self.tasks)

    @property
    def ranks(self) -> list[int]:
        return sorted(int(r) for r in np.unique(self.tasks["rank"].to_numpy()))

    def replace(self, **changes: Any) -> TaskGraph:
        return dataclasses.replace(self, **changes)

    def validate(self) -> None:
        """Check structural invariants; raises ValueError naming the first violation.

        Invariants: task ids are row positions; edges reference existing tasks; no
        self-loops; every task's lane exists and belongs to the task's rank; comm tasks have
        a match key; the graph (edges plus implicit lane order) is acyclic.
        """
        t = self.tasks
        n = len(t)
        if not np.array_equal(t["task_id"].to_numpy(), np.arange(n)):
            raise ValueError("task_id must equal the row position")
        src = self.edges["src"].to_numpy()
        dst = self.edges["dst"].to_numpy()
        if len(src) and (src.min() < 0 or dst.min() < 0 or src.max() >= n or dst.max() >= n):
            raise ValueError("edge references a missing task")
        if np.any(src == dst):
            raise ValueError("self-loop edge")
        lanes = t["lane"].to_numpy()
        if n and (lanes.min() < 0 or lanes.max() >= len(self.lanes)):
            raise ValueError("task on a missing lane")
        lane_rank = self.lanes["rank"].to_numpy()[lanes]
        if not np.array_equal(lane_rank, t["rank"].to_numpy()):
            raise ValueError("task rank differs from its lane's rank")
        comm = t["kind"].isin(COMM_KINDS).to_numpy()
        if np.any(t["match_key"].to_numpy()[comm] == ""):
            raise ValueError("communication task without match_key")
        order = topological_order(self)
        if order is None:
            raise ValueError("the graph has a cycle")


def lane_order_edges(graph: TaskGraph) -> tuple[np.ndarray, np.ndarray]:
    """The implicit program-order edges (consecutive tasks on each lane)."""
    lanes = graph.tasks["lane"].to_numpy()
    ids = np.arange(len(lanes), dtype=np.int64)
    order = np.lexsort((ids, lanes))
    same = lanes[order][1:] == lanes[order][:-1]
    return order[:-1][same], order[1:][same]


def topological_order(graph: TaskGraph) -> np.ndarray | None:
    """A topological order of all tasks (explicit plus lane-order edges), or None on a cycle."""
    return order_of(graph.n_tasks, graph.tasks["lane"].to_numpy(),
                    graph.edges["src"].to_numpy(), graph.edges["dst"].to_numpy())


def order_of(n: int, lanes: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray | None:
    """:func:`topological_order` of ``n`` tasks given as arrays: each task's lane, and the
    explicit edges ``src`` -> ``dst`` (task positions); None on a cycle."""
    ids = np.arange(n, dtype=np.int64)
    order = np.lexsort((ids, lanes))
    same = lanes[order][1:] == lanes[order][:-1]
    src = np.concatenate([src, order[:-1][same]])
    dst = np.concatenate([dst, order[1:][same]])
    indeg = np.bincount(dst, minlength=n)
    order_idx = np.argsort(src, kind="stable")
    s_sorted = src[order_idx]
    d_sorted = dst[order_idx]
    starts = np.searchsorted(s_sorted, np.arange(n + 1))
    stack = list(np.flatnonzero(indeg == 0)[::-1])
    out = np.empty(n, dtype=np.int64)
    k = 0
    while stack:
        v = stack.pop()
        out[k] = v
        k += 1
        for w in d_sorted[starts[v] : starts[v + 1]]:
            indeg[w] -= 1
            if indeg[w] == 0:
                stack.append(w)
    return out if k == n else None
