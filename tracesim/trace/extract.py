"""Op table -> task graph (the extractor).

For every rank of the op table:

* **host lanes** (one per CPU thread): the leaf events (cpu ops, annotations, runtime calls
  and comm ops that contain no other event) in time order; the time between two leaves is
  kept as the second one's ``gap_ns`` (untraced CPU work: Python, dispatch);
* **GPU lanes** (one per stream): kernels, memcpys and memsets in time order;
* **step markers**: zero-length tasks at the start and end of every ``ProfilerStep#N`` on
  the thread that recorded it, so a replay can read each step's simulated duration;
* **edges**: ``launch`` (runtime call -> the GPU op with its correlation id), ``sync``
  (GPU work -> the CPU call that blocks on it: device / stream / event synchronisation, and
  copies whose call returned only after the copy ended), ``event`` (cudaEventRecord ->
  cudaStreamWaitEvent, from ``cuda_sync`` events when the trace has them, otherwise
  inferred from timing: a GPU op that started late, right after an op on another stream of
  the same device ended, waited for it).

A blocking runtime call is split into a launch part and a wait part; the wait part's own
duration is only the time the call still took after the GPU work it waited for had ended,
so that waiting comes out of the simulation instead of being replayed from the recording.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracesim.errors import InputError
from tracesim.graph.taskgraph import TaskGraph, make_edges, make_lanes, make_tasks
from tracesim.trace.overhead import rank_overheads
from tracesim.trace.rankgraph import _HOST_CATS, ExtractOptions, Part, RankExtractor
from tracesim.trace.sources import Source


def extract(
    op_table: pd.DataFrame,
    options: ExtractOptions | None = None,
    et_tables: Mapping[int, pd.DataFrame] | None = None,
) -> TaskGraph:
    """Build the task graph of every rank in ``op_table`` (ranks are replayed together).

    ``et_tables`` (rank -> :func:`tracesim.trace.et.read_et` table) adds the execution
    trace's data dependencies between host ops on different threads.
    """
    options = options or ExtractOptions()
    if op_table.empty:
        raise InputError("the trace has no events to replay", "trace")
    parts = []
    t0 = None
    if options.joint_ranks:
        host = op_table["cat"].isin(_HOST_CATS + ("annotation",))
        t0 = int(op_table.loc[host, "ts_ns"].min())
    for rank in sorted(op_table["rank"].unique()):
        ex = RankExtractor(op_table[op_table["rank"] == rank], int(rank), options, t0)
        parts.append(ex.build((et_tables or {}).get(int(rank))))
    graph = _concat(parts)
    if options.joint_ranks and len(parts) > 1:
        graph = _match_collectives(graph)
    return graph


def _match_collectives(graph: TaskGraph) -> TaskGraph:
    """Turn the executing comm tasks of every rank into matched collectives.

    The k-th executing collective of each type on each rank are one collective (a
    data-parallel recording has one process group, so program order matches them).
    Executing comm tasks are GPU communication kernels and the ``gloo:*`` ops that gloo runs
    on its own threads.
    """
    t = graph.tasks.copy()
    name = t["name"].to_numpy()
    is_exec = ((t["kind"].to_numpy() == "gpu") & (t["op_class"].to_numpy() == "comm")) | (
        np.char.startswith(name.astype(str), "gloo:")
    )
    ranks = tuple(graph.ranks)
    idx = np.flatnonzero(is_exec)
    if not len(idx):
        return graph
    coll = t["collective"].to_numpy()
    rec = t["rec_start"].to_numpy() if "rec_start" in t else t["task_id"].to_numpy()
    keys = np.array([""] * len(t), dtype=object)
    counters: dict[tuple[int, str], int] = {}
    for i in sorted(idx.tolist(), key=lambda i: (int(t["rank"].iat[i]), int(rec[i]), i)):
        k = (int(t["rank"].iat[i]), str(coll[i]))
        n = counters.get(k, 0)
        counters[k] = n + 1
        keys[i] = f"{coll[i]}#{n}"
    # only keys present on every rank become collectives
    present: dict[str, int] = {}
    for i in idx.tolist():
        present[keys[i]] = present.get(keys[i], 0) + 1
    ok = np.array([present.get(keys[i], 0) == len(ranks) for i in range(len(t))]) & is_exec
    t.loc[ok, "kind"] = "coll"
    t.loc[ok, "match_key"] = keys[ok]
    t.loc[ok, "group"] = 0
    t.loc[ok, "group_kind"] = "dp"
    return graph.replace(tasks=t, groups=(ranks,))


def _concat(parts: Sequence[Part]) -> TaskGraph:
    tasks, esrc, edst, ekind, lanes = [], [], [], [], []
    t_off = 0
    l_off = 0
    for p in parts:
        t = p.tasks.copy()
        t["lane"] = t["lane"] + l_off
        tasks.append(t)
        esrc.append(p.edges[0] + t_off)
        edst.append(p.edges[1] + t_off)
        ekind.extend(p.edges[2])
        lanes.append(p.lanes)
        t_off += len(t)
        l_off += len(p.lanes)
    tt = make_tasks(pd.concat(tasks, ignore_index=True))
    lt = make_lanes(pd.concat(lanes, ignore_index=True))
    et = make_edges(np.concatenate(esrc), np.concatenate(edst), ekind)
    return TaskGraph(tt, et, lt, (), {"source": "extract"})


def extract_options(source: Source, overhead: tuple[float, float] | float = 0.0) -> ExtractOptions:
    """How to extract a source: ranks of a bundle (one host, one clock) replay jointly.

    ``overhead`` is the profiler cost per traced op and per annotation, in ns (a single
    number applies to both); see :func:`tracesim.trace.overhead.profiler_overhead`. When it
    is not zero and the bundle has a calibration per rank (``per_rank[].profiler_overhead``),
    each rank gets its own (the ranks of a job measured theirs at the same time).
    """
    joint = source.kind == "bundle" and source.op_table["rank"].nunique() > 1
    op_ns, an_ns = overhead if isinstance(overhead, tuple) else (overhead, overhead)
    per_rank = rank_overheads(source.meta) if (op_ns or an_ns) else ()
    return ExtractOptions(profiler_overhead_ns=op_ns, annotation_overhead_ns=an_ns,
                          rank_overhead_ns=per_rank, joint_ranks=joint)


def extract_source(source: Source, overhead: tuple[float, float] | float = 0.0) -> TaskGraph:
    """The task graph of a loaded source (:func:`extract` with :func:`extract_options`)."""
    return extract(source.op_table, extract_options(source, overhead), source.et_tables)


#: what a workload directory written by :func:`extract_to_directory` holds
WORKLOAD_FILES = ("ops.parquet", "tasks.parquet", "edges.parquet", "lanes.parquet", "graph.yaml")


def extract_to_directory(source: str | Path, out: str | Path) -> dict[str, Any]:
    """Write the op table (``ops.parquet``) and task graph of ``source`` into the workload
    directory ``out``: whole or not at all (a temporary directory renamed into place); a
    directory there that is not a workload is never overwritten. Returns the counts."""
    from tracesim.graph.io import save_graph
    from tracesim.trace.schema import write_op_table
    from tracesim.trace.sources import load_source

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(p.name not in WORKLOAD_FILES for p in out.iterdir())):
        raise InputError("exists and is not a workload directory; refusing to overwrite it", out)
    src = load_source(source)
    graph = extract_source(src)
    graph.validate()
    graph = graph.replace(meta={**graph.meta, "source": str(source), "device": src.device,
                                "bundle_meta": src.meta or {}})
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write_op_table(src.op_table, tmp / "ops.parquet", {"source": str(source)})
        save_graph(graph, tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"out": str(out), "events": len(src.op_table), "tasks": graph.n_tasks,
            "edges": len(graph.edges), "lanes": len(graph.lanes), "ranks": len(graph.ranks)}
