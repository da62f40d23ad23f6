"""Op table -> task graph (the extractor).

For every rank of the op table:

* **host lanes** (one per CPU thread): the leaf events (cpu ops, annotations, runtime calls
  and comm ops that contain no other event) in time order; the time between two leaves is
  kept as the second one's ``gap_ns`` (untraced CPU work: Python, dispatch); on a rank
  recorded on a CPU also the longest stretch of each compute op's own time, where ops run
  inside it (its arithmetic, :mod:`tracesim.trace.cpulanes`);
* **GPU lanes** (one per stream): kernels, memcpys and memsets in time order;
* **step markers**: zero-length tasks at the start and end of every ``ProfilerStep#N`` on
  the thread that recorded it, so a replay can read each step's simulated duration;
* **edges**: ``launch`` (runtime call -> the GPU op with its correlation id), ``sync``
  (GPU work -> the CPU call that blocks on it: device / stream / event synchronisation, and
  copies whose call returned only after the copy ended or that ran during most of their
  call, pageable memory being staged while the copy runs), ``event`` (cudaEventRecord ->
  cudaStreamWaitEvent, from ``cuda_sync`` events when the trace has them, otherwise
  inferred from timing: a GPU op that started late, right after an op on another stream of
  the same device ended, waited for it).

A blocking runtime call is split into a launch part and a wait part; the wait part's own
duration is only the time the call still took after the GPU work it waited for had ended,
so that waiting comes out of the simulation instead of being replayed from the recording.
A CUDA / HIP graph launch (``cudaGraphLaunch``: every kernel of the graph has its
correlation id) is a launch part until the graph's first kernel started and a ``(submit)``
part; it waits for nothing. Every inferred dependency agrees with the recording (a sync call
waits only for work that ended before it returned; of several streams, a stream sync of
unknown stream waits for the one whose work ended last), so a graph of a real trace has no
cycle; where one remains, the replay falls back to the recorded order
(``meta["on_stall"] = "fallback"``, :mod:`tracesim.engine.stall`).

Communication tasks carry their metadata (collective, size, dtype, group, peer: see
:mod:`tracesim.trace.matching`); ``graph.groups`` holds every process group's member ranks,
``meta["comm_metadata"]`` summarises how complete the metadata is.
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
from tracesim.trace.matching import comm_groups, match_collectives
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
    """Matched collectives and send / recv pairs across ranks
    (:func:`tracesim.trace.matching.match_collectives`)."""
    return match_collectives(graph)


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
    tt, groups, comm_meta = comm_groups(make_tasks(pd.concat(tasks, ignore_index=True)))
    lt = make_lanes(pd.concat(lanes, ignore_index=True))
    et = make_edges(np.concatenate(esrc), np.concatenate(edst), ekind)
    # a recording replays in the recorded order where a dependency cannot be resolved
    meta = {"source": "extract", "on_stall": "fallback", "comm_metadata": comm_meta}
    return TaskGraph(tt, et, lt, groups, meta)


def extract_options(source: Source, overhead: tuple[float, float] | float = 0.0) -> ExtractOptions:
    """How to extract a source: the ranks of a bundle or a trace folder replay jointly (one
    clock: recorded on one host, or aligned by :func:`tracesim.trace.folders.clock_shifts`,
    whose shifts a folder source and an imported bundle apply when loaded).

    ``overhead`` is the profiler cost per traced op and per annotation, in ns (a single
    number applies to both); see :func:`tracesim.trace.overhead.profiler_overhead`. When it
    is not zero and the bundle has a calibration per rank (``per_rank[].profiler_overhead``),
    each rank gets its own (the ranks of a job measured theirs at the same time).
    """
    joint = source.kind in ("bundle", "folder") and source.op_table["rank"].nunique() > 1
    op_ns, an_ns = overhead if isinstance(overhead, tuple) else (overhead, overhead)
    per_rank = rank_overheads(source.meta) if (op_ns or an_ns) else ()
    return ExtractOptions(profiler_overhead_ns=op_ns, annotation_overhead_ns=an_ns,
                          rank_overhead_ns=per_rank, joint_ranks=joint)


def extract_source(source: Source, overhead: tuple[float, float] | float = 0.0) -> TaskGraph:
    """The task graph of a loaded source (:func:`extract` with :func:`extract_options`); a
    problem :func:`extract` finds in the trace is reported against the source's file."""
    try:
        return extract(source.op_table, extract_options(source, overhead), source.et_tables)
    except InputError as e:
        if e.file != "trace":
            raise
        raise InputError(e.message, source.path, e.where) from None


#: what a workload directory written by :func:`extract_to_directory` holds
WORKLOAD_FILES = ("ops.parquet", "tasks.parquet", "edges.parquet", "lanes.parquet", "graph.yaml")


def extract_to_directory(source: str | Path, out: str | Path) -> dict[str, Any]:
    """Write the op table (``ops.parquet``) and task graph of ``source`` into the workload
    directory ``out``: whole or not at all (a temporary directory renamed into place); a
    directory there that is not a workload is never overwritten. Returns the counts."""
    from tracesim.fileio import output_dir
    from tracesim.graph.io import save_graph
    from tracesim.trace.overhead import profiler_overhead
    from tracesim.trace.schema import write_op_table
    from tracesim.trace.sources import load_source

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(p.name not in WORKLOAD_FILES for p in out.iterdir())):
        raise InputError("exists and is not a workload directory; refusing to overwrite it", out)
    src = load_source(source)
    # the profiler's cost taken out where the bundle measured it, as a replay of the source
    # does (tracesim.pipeline.recorded): the workload predicts what the source predicts
    overhead = profiler_overhead(src.meta) or (0.0, 0.0)
    graph = extract_source(src, overhead)
    graph.validate()
    if not graph.tasks["step"].astype(str).str.len().any():  # as replay and self-replay say
        raise InputError("the trace has no ProfilerStep#N annotations, so it has no steps to "
                         "replay (record with torch.profiler and call prof.step())", src.path)
    graph = graph.replace(meta={**graph.meta, "source": str(source), "device": src.device,
                                "bundle_meta": src.meta or {},
                                "profiler_overhead_removed_ns": {"per_op": overhead[0],
                                                                 "per_annotation": overhead[1]}})
    output_dir(out.parent)
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
