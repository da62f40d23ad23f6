"""The canonical op table: one row per traced event (DESIGN.md, "Canonical op table").

Every trace format is converted once into this table; everything downstream reads only it.
Stored as Parquet with ``tracesim.schema_version`` in the file metadata.

Columns (times are integer nanoseconds):

rank, step (``ProfilerStep#N`` or ""), event_id (index of the event in its source file),
name, cat (cpu_op | runtime | kernel | memcpy | memset | comm | sync | annotation),
lane (``cpu:<tid>`` for host threads, ``stream:<id>`` for GPU streams), device
(``cpu`` or the GPU index), ts_ns, dur_ns, correlation (runtime call <-> GPU op, -1 if
none), external_id (-1 if none), parent_id (event_id of the innermost enclosing host event
on the same thread, -1 if none), scope (module path from ``nn.Module: <path>``
annotations), phase (fwd | bwd | opt | other), layer (transformer block index, -1),
op_class, flops, bytes, shapes (JSON of the input dims, "" if not recorded), dtype, and for
communication collective, group_ranks (JSON list, "" if unknown), msg_bytes, peer, and
(schema 2) pg (process group name), comm_seq (per-group sequence number, -1), group_source
(how group_ranks is known: recorded | pg_config | size | world | ""), group_kind (the
parallel dimension the group's description names: tp | dp | pp | cp | ep | ""), comm_meta
(where a comm op's metadata came from: full | kernel_name | none | "").

Extra columns kept for dependency extraction: stream (GPU stream, -1 for host events),
sync_kind (cuda_sync kind), wait_stream and wait_record_corr (which event/stream a sync
waits on, -1 if unknown), seq_nr and fwd_tid (autograd sequence number / forward thread),
rf_id (record function id, joins the execution trace).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tracesim.errors import InputError
from tracesim.fileio import atomic_path

SCHEMA_VERSION = 2
#: older versions that are read (their missing columns take the empty values)
_READS = (1, 2)

CATS = ("cpu_op", "runtime", "kernel", "memcpy", "memset", "comm", "sync", "annotation")
PHASES = ("fwd", "bwd", "opt", "other")

COLUMNS: dict[str, object] = {
    "rank": np.int32,
    "step": object,
    "event_id": np.int64,
    "name": object,
    "cat": object,
    "lane": object,
    "device": object,
    "ts_ns": np.int64,
    "dur_ns": np.int64,
    "correlation": np.int64,
    "external_id": np.int64,
    "parent_id": np.int64,
    "scope": object,
    "phase": object,
    "layer": np.int32,
    "op_class": object,
    "flops": np.float64,
    "bytes": np.float64,
    "shapes": object,
    "dtype": object,
    "collective": object,
    "group_ranks": object,
    "msg_bytes": np.int64,
    "peer": np.int32,
    "pg": object,
    "comm_seq": np.int64,
    "group_source": object,
    "group_kind": object,
    "comm_meta": object,
    "stream": np.int64,
    "sync_kind": object,
    "wait_stream": np.int64,
    "wait_record_corr": np.int64,
    "seq_nr": np.int64,
    "fwd_tid": np.int64,
    "rf_id": np.int64,
}


def empty_table() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in COLUMNS.items()})


def conform(df: pd.DataFrame) -> pd.DataFrame:
    """Return ``df`` with exactly the schema's columns (in order) and dtypes."""
    return pd.DataFrame({c: df[c].astype(t) for c, t in COLUMNS.items()})


def write_op_table(df: pd.DataFrame, path: str | Path, meta: dict[str, str] | None = None) -> None:
    """Write an op table as Parquet (atomically) with the schema version in its metadata."""
    table = pa.Table.from_pandas(conform(df), preserve_index=False)
    md = dict(table.schema.metadata or {})
    md[b"tracesim.schema_version"] = str(SCHEMA_VERSION).encode()
    for k, v in (meta or {}).items():
        md[f"tracesim.{k}".encode()] = str(v).encode()
    table = table.replace_schema_metadata(md)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read_op_table(path: str | Path) -> pd.DataFrame:
    """Read an op table written by :func:`write_op_table`, checking the schema version."""
    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise InputError("file not found", path) from None
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"not a readable Parquet file ({exc})", path) from None
    version = (table.schema.metadata or {}).get(b"tracesim.schema_version")
    if version is None:
        raise InputError("not a tracesim op table (no tracesim.schema_version)", path)
    if int(version) not in _READS:
        raise InputError(f"op table schema {int(version)}, expected {SCHEMA_VERSION}", path)
    df = table.to_pandas()
    for col, empty in _ADDED.items():
        if col not in df:
            df[col] = empty
    return df


#: columns added by schema 2, with the value a version-1 table gets
_ADDED = {"pg": "", "comm_seq": -1, "group_source": "", "group_kind": "", "comm_meta": ""}
