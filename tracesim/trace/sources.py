"""Resolving what the user points a command at: a bundle, a workload, a trace, an op table
or a folder of trace files recorded elsewhere (:mod:`tracesim.trace.folders`)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from tracesim.errors import InputError

SOURCE_KINDS = ("bundle", "workload", "trace", "optable", "folder")


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


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (it is turned back on after).

    Reading a trace makes millions of small objects that live on (the events, the op
    table); each full collection walks all of them, so a job of many ranks would take
    superlinear time (about 40% of the load of 128 ranks). Reference counting still frees
    everything that is dropped."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


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
        from tracesim.trace.folders import has_trace_files

        if has_trace_files(p):
            return "folder"
        raise InputError("directory holds no trace files (.json, .json.gz) and is neither a "
                         "bundle (meta.yaml) nor a workload (graph.yaml)", p)
    name = p.name.lower()
    if name.endswith(".parquet"):
        return "optable"
    if name.endswith((".json", ".json.gz", ".gz")):
        return "trace"
    raise InputError("unknown input: expected a bundle or workload directory, a .json[.gz] trace or a .parquet op table", p)


def load_source(path: str | Path) -> Source:
    """Load a bundle, trace, op table or trace folder into one op table (rank column set per
    file; a bundle's ``clock_shift_ns`` and a folder's clock alignment applied to ``ts_ns``)."""
    from tracesim.trace.et import read_et
    from tracesim.trace.kineto import load_trace_json, op_table_from_events
    from tracesim.trace.schema import read_op_table
    from tracesim.trace.traceinfo import trace_device

    p = Path(path)
    kind = source_kind(p)
    if kind == "bundle":
        from tracesim.trace.bundle import load_bundle

        b = load_bundle(p)
        tables = []
        ets = {}
        device = str(b.meta.get("device", ""))
        shifts = _clock_shifts(b.meta, b.meta_path)
        for r in b.ranks:
            data = load_trace_json(b.trace_path(r))
            table = op_table_from_events(data, b.trace_path(r), rank=r)
            if shifts.get(r):
                table = table.assign(ts_ns=table["ts_ns"] + shifts[r])
            tables.append(table)
            device = device or trace_device(data)
            et_path = b.et_path(r)
            if et_path is not None and Path(et_path).exists():
                ets[r] = read_et(et_path)
        return Source(p, kind, pd.concat(tables, ignore_index=True), dict(b.meta), device, ets)
    if kind == "trace":
        data = load_trace_json(p)
        table = op_table_from_events(data, p, whole_window=True)
        meta = {"whole_trace_step": True} if table.attrs.get("whole_trace_step") else {}
        ets = {}
        sibling = _et_sibling(p)
        if sibling is not None:
            ets[int(table["rank"].iat[0]) if len(table) else 0] = read_et(sibling)
        return Source(p, kind, table, meta, trace_device(data), ets)
    if kind == "optable":
        return Source(p, kind, read_op_table(p), {}, "")
    if kind == "folder":
        from tracesim.trace.folders import read_folder

        found = read_folder(p, tables=True)
        ets = {r.rank: read_et(r.et) for r in found.ranks if r.et is not None}
        table = pd.concat([found.tables[r.rank] for r in found.ranks], ignore_index=True)
        return Source(p, kind, table, found.meta(), found.device, ets)
    raise InputError("a workload directory holds a task graph, not a recorded trace; "
                     "give the bundle or trace it was extracted from", p)


def _clock_shifts(meta: dict[str, Any], file: Path) -> dict[int, int]:
    """A bundle's ``clock_shift_ns`` (rank -> ns added to its times; ``tracesim import``)."""
    value = meta.get("clock_shift_ns")
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
            isinstance(k, int) and isinstance(v, int) and not isinstance(v, bool) for k, v in value.items()):
        raise InputError("expected a mapping of rank to integer nanoseconds", file, "clock_shift_ns")
    return {int(k): int(v) for k, v in value.items()}


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
