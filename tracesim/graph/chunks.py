"""Communication tasks that stand for several operations, one task per operation again.

The builder writes the communication chunks of a Transformer Engine overlapped GEMM that
run back to back as one task with a ``chunks`` column (:mod:`tracesim.build.overlap`): the
task stands for ``chunks`` operations of ``msg_bytes / chunks`` each, one after another on
its lane, and the network model runs it so. Formats without that notion (Chakra execution
traces, AICB workloads) get one node per operation: :func:`expand_chunks`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracesim.graph.taskgraph import TaskGraph, column_codes


def expand_chunks(graph: TaskGraph) -> TaskGraph:
    """``graph`` with every task of ``chunks`` k > 1 split into k consecutive tasks on its
    lane, each of ``msg_bytes / k`` and ``dur_ns / k`` (the match key of piece ``i > 0``
    suffixed ``#i``, equal on every member); edges into the task enter its first piece,
    edges out of it leave its last. A graph without such tasks is returned as it is."""
    t = graph.tasks
    if "chunks" not in t or not len(t) or int(t["chunks"].max()) <= 1:
        return graph
    k = np.maximum(t["chunks"].to_numpy().astype(np.int64), 1)
    n = len(t)
    rep = np.repeat(np.arange(n), k)
    first = np.zeros(n, dtype=np.int64)
    np.cumsum(k[:-1], out=first[1:])
    last = first + k - 1
    piece = np.arange(len(rep)) - first[rep]
    out = t.iloc[rep].reset_index(drop=True)
    kk = k[rep]
    out["msg_bytes"] = (t["msg_bytes"].to_numpy().astype(np.int64)[rep] // kk).astype(
        t["msg_bytes"].dtype)
    out["dur_ns"] = (t["dur_ns"].to_numpy().astype(np.int64)[rep] // kk).astype(t["dur_ns"].dtype)
    out["chunks"] = np.ones(len(rep), dtype=t["chunks"].dtype)
    codes, names = column_codes(t["match_key"])
    keys = np.array(names + [""], dtype=object)[codes[rep]]
    sfx = np.where(piece > 0, np.char.add("#", piece.astype(str)), "").astype(object)
    out["match_key"] = pd.Series(keys + sfx, dtype=object)
    out["task_id"] = np.arange(len(rep), dtype=np.int64)
    e = graph.edges.copy()
    e["src"] = last[e["src"].to_numpy()]
    e["dst"] = first[e["dst"].to_numpy()]
    return graph.replace(tasks=out, edges=e)
