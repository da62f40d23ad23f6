"""``SWEEP_DIR/results.parquet``: one row per point, rewritten atomically after each batch.

The file is always a complete Parquet table: it is written to a temporary file beside it
and renamed (:func:`tracesim.fileio.atomic_path`), so Ctrl-C or a crash leaves the previous
batch's table. Rows of earlier runs whose key is not in the current space are kept (they
are still valid results) after the current space's rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracesim.errors import InputError
from tracesim.fileio import atomic_path
from tracesim.sweep.space import SETTING_KEYS
from tracesim.sweep.task import META_COLUMNS

RESULTS_NAME = "results.parquet"
#: cost columns, added when the space gives prices (USD)
COST_COLUMNS = ("price_per_gpu_hour_usd", "cost_per_hour_usd", "tokens_per_usd")


def results_path(sweep_dir: str | Path) -> Path:
    return Path(sweep_dir) / RESULTS_NAME


def read_results(sweep_dir: str | Path) -> pd.DataFrame | None:
    """The stored table, or None when there is none yet; an unreadable file is InputError."""
    path = results_path(sweep_dir)
    if not path.exists():
        return None
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise InputError(f"cannot read the results table ({type(exc).__name__}: {exc}); move it "
                         "away to start over", path) from None


def done_keys(table: pd.DataFrame | None, retry_failed: bool = False) -> set[str]:
    """Keys of the stored rows that a rerun skips (all, or all but ``failed`` ones)."""
    if table is None or table.empty or "key" not in table:
        return set()
    keep = table if not retry_failed else table[table["status"] != "failed"]
    return set(keep["key"].astype(str))


def add_costs(df: pd.DataFrame, prices: Mapping[str, float]) -> pd.DataFrame:
    """Add :data:`COST_COLUMNS` from ``prices`` (USD per GPU-hour by ``device``):
    cost per hour = price x the layout's GPUs; tokens per USD = tokens/s x 3600 / cost."""
    if not prices or "device" not in df:
        return df
    df = df.copy()
    price = df["device"].map(lambda d: prices.get(d) if isinstance(d, str) else None)
    df["price_per_gpu_hour_usd"] = pd.to_numeric(price, errors="coerce")
    df["cost_per_hour_usd"] = df["price_per_gpu_hour_usd"] * pd.to_numeric(df["gpus"], errors="coerce")
    df["tokens_per_usd"] = pd.to_numeric(df["tokens_per_s"], errors="coerce") * 3600.0 / df["cost_per_hour_usd"]
    return df


def build_table(rows: Mapping[str, Mapping[str, Any]], order: Iterable[str],
                previous: pd.DataFrame | None, prices: Mapping[str, float]) -> pd.DataFrame:
    """One table from the rows by key: the keys of ``order`` (the space) first, in that
    order, then previous rows of other keys. ``rows`` override ``previous``."""
    order = list(order)
    in_space = set(order)
    prev_rows: dict[str, dict[str, Any]] = {}
    extra: list[dict[str, Any]] = []
    if previous is not None and not previous.empty:
        for rec in previous.to_dict("records"):
            k = str(rec.get("key"))
            if k in in_space:
                prev_rows[k] = rec
            elif k not in rows:
                extra.append(rec)
    records: list[Mapping[str, Any]] = []
    for k in order:
        if k in rows:
            records.append(rows[k])
        elif k in prev_rows:
            records.append(prev_rows[k])
    records += extra
    records += [r for k, r in rows.items() if k not in in_space]
    df = _typed(pd.DataFrame.from_records(records), records)
    return add_costs(df[_column_order(df.columns)], prices)


def _column_order(columns: Iterable[str]) -> list[str]:
    cols = list(columns)
    first = [c for c in (*META_COLUMNS, *SETTING_KEYS) if c in cols]
    return first + [c for c in cols if c not in first]


def _is_null(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and v != v)


def _typed(df: pd.DataFrame, records: list[Mapping[str, Any]]) -> pd.DataFrame:
    """Integer columns with gaps (a setting only some points have, metrics of failed
    points) as nullable ``Int64``, boolean ones as ``boolean``, rather than float / object."""
    for col in df.columns:
        kinds = set()
        for r in records:
            v = r.get(col)
            if not _is_null(v):
                kinds.add(bool if isinstance(v, (bool, np.bool_)) else
                          int if isinstance(v, (int, np.integer)) else type(v))
        if kinds == {int}:
            df[col] = df[col].astype("Int64")
        elif kinds == {bool}:
            df[col] = df[col].astype("boolean")
    return df


def _arrow_safe(df: pd.DataFrame) -> pd.DataFrame:
    """Object columns holding more than one Python type (an axis with ints and names) are
    written as text so Parquet accepts them; None / NaN stay null."""
    df = df.copy()
    for col in df.columns:
        if df[col].dtype != object:
            continue
        kinds = {type(v) for v in df[col] if not _is_null(v)}
        if len(kinds) > 1 and not kinds <= {int, float}:
            df[col] = df[col].map(lambda v: None if _is_null(v) else str(v))
    return df


def write_results(df: pd.DataFrame, sweep_dir: str | Path) -> Path:
    """Write the table to ``SWEEP_DIR/results.parquet`` atomically (temp file + rename)."""
    path = results_path(sweep_dir)
    with atomic_path(path) as tmp:
        _arrow_safe(df).to_parquet(tmp, index=False)
    return path
