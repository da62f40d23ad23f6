"""Reading and writing task graphs (a workload directory).

Layout: ``tasks.parquet``, ``edges.parquet``, ``lanes.parquet`` and ``graph.yaml`` (format
version, groups, meta). Parquet files carry ``tracesim.graph_version`` in their metadata.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tracesim.errors import InputError
from tracesim.fileio import atomic_path, output_dir, read_yaml, write_yaml
from tracesim.graph.taskgraph import (
    EDGE_COLUMNS,
    GRAPH_FORMAT_VERSION,
    LANE_COLUMNS,
    TASK_COLUMNS,
    TaskGraph,
)


def _write_parquet(df: pd.DataFrame, path: Path) -> None:
    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[b"tracesim.graph_version"] = str(GRAPH_FORMAT_VERSION).encode()
    table = table.replace_schema_metadata(meta)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def save_graph(graph: TaskGraph, directory: str | Path) -> None:
    d = output_dir(directory)
    _write_parquet(graph.tasks, d / "tasks.parquet")
    _write_parquet(graph.edges, d / "edges.parquet")
    _write_parquet(graph.lanes, d / "lanes.parquet")
    write_yaml(
        d / "graph.yaml",
        {
            "format": "tracesim-graph",
            "version": GRAPH_FORMAT_VERSION,
            "groups": [list(g) for g in graph.groups],
            "meta": dict(graph.meta),
        },
    )


def load_graph(directory: str | Path) -> TaskGraph:
    d = Path(directory)
    head = read_yaml(d / "graph.yaml")
    if not isinstance(head, dict) or head.get("format") != "tracesim-graph":
        raise InputError("not a tracesim task graph (format key missing)", d / "graph.yaml")
    if head.get("version") != GRAPH_FORMAT_VERSION:
        raise InputError(
            f"graph format version {head.get('version')!r}, expected {GRAPH_FORMAT_VERSION}",
            d / "graph.yaml",
            "version",
        )
    frames = {}
    for name, cols in (("tasks", TASK_COLUMNS), ("edges", EDGE_COLUMNS), ("lanes", LANE_COLUMNS)):
        path = d / f"{name}.parquet"
        try:
            df = pq.read_table(path).to_pandas()
        except FileNotFoundError:
            raise InputError("file not found", path) from None
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(f"not a readable Parquet file ({exc})", path) from None
        missing = [c for c in cols if c not in df]
        if missing:
            raise InputError(f"missing columns {missing}", path)
        frames[name] = df
    groups = tuple(tuple(int(r) for r in g) for g in head.get("groups") or [])
    return TaskGraph(
        frames["tasks"], frames["edges"], frames["lanes"], groups, head.get("meta") or {}
    )
