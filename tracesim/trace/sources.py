"""Resolving what the user points a command at: a bundle, a workload, a trace or an op table."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from tracesim.errors import InputError

SOURCE_KINDS = ("bundle", "workload", "trace", "optable")


@dataclass(frozen=True)
class Source:
    """A recorded run: its op table (all ranks) and what is known about it."""

    path: Path
    kind: str
    op_table: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    device: str = ""
    #: rank -> execution-trace table (tracesim.trace.et.read_et), where one was recorded
    et_tables: dict[int, pd.DataFrame] = field(default_factory=dict)


def source_kind(path: str | Path) -> str:
    """Classify ``path`` (InputError if it is none of the known kinds)."""
    p = Path(path)
    if not p.exists():
        raise InputError("file not found", p)
    if p.is_dir():
        if (p / "meta.yaml").exists():
            return "bundle"
        if (p / "graph.yaml").exists():
            return "workload"
        raise InputError("directory is neither a bundle (meta.yaml) nor a workload (graph.yaml)", p)
    name = p.name.lower()
    if name.endswith(".parquet"):
        return "optable"
    if name.endswith((".json", ".json.gz", ".gz")):
        return "trace"
    raise InputError("unknown input: expected a bundle or workload directory, a .json[.gz] trace or a .parquet op table", p)


def load_source(path: str | Path) -> Source:
    """Load a bundle, trace or op table into one op table (rank column set per file)."""
    from tracesim.trace.et import read_et
    from tracesim.trace.kineto import load_trace_json, op_table_from_events, trace_device
    from tracesim.trace.schema import read_op_table

    p = Path(path)
    kind = source_kind(p)
    if kind == "bundle":
        from tracesim.trace.bundle import load_bundle

        b = load_bundle(p)
        tables = []
        ets = {}
        device = str(b.meta.get("device", ""))
        for r in b.ranks:
            data = load_trace_json(b.trace_path(r))
            tables.append(op_table_from_events(data, b.trace_path(r), rank=r))
            device = device or trace_device(data)
            et_path = b.et_path(r)
            if et_path is not None and Path(et_path).exists():
                ets[r] = read_et(et_path)
        return Source(p, kind, pd.concat(tables, ignore_index=True), dict(b.meta), device, ets)
    if kind == "trace":
        data = load_trace_json(p)
        table = op_table_from_events(data, p)
        ets = {}
        sibling = _et_sibling(p)
        if sibling is not None:
            ets[int(table["rank"].iat[0]) if len(table) else 0] = read_et(sibling)
        return Source(p, kind, table, {}, trace_device(data), ets)
    if kind == "optable":
        return Source(p, kind, read_op_table(p), {}, "")
    raise InputError("a workload directory holds a task graph, not a recorded trace; "
                     "give the bundle or trace it was extracted from", p)


def _et_sibling(trace: Path) -> Path | None:
    """``X.trace.json[.gz]`` recorded together with ``X.et.json[.gz]``."""
    name = trace.name
    for suffix in (".trace.json.gz", ".trace.json"):
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            for et_suffix in (".et.json.gz", ".et.json"):
                cand = trace.with_name(stem + et_suffix)
                if cand.exists():
                    return cand
    return None
