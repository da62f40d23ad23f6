"""What a sweep reports: the ranked table, the Pareto front and its PNG.

All functions take the results table (``results.parquet`` as a DataFrame) and use only
rows with ``status == "ok"``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from tracesim.sweep.space import SETTING_KEYS

#: metrics a ranking may sort by (descending, but the iteration time ascending)
RANK_METRICS = ("tokens_per_s", "tokens_per_s_per_gpu", "tokens_per_usd", "mfu",
                "iteration_time_s")
_SHOWN_METRICS = ("tokens_per_s", "tokens_per_s_per_gpu", "gpus", "iteration_time_s", "mfu",
                  "memory_gib_per_gpu", "cost_per_hour_usd", "tokens_per_usd")


def ok_rows(table: pd.DataFrame, keys: Iterable[str] | None = None) -> pd.DataFrame:
    """Rows with status ok (and, if given, a key in ``keys``)."""
    if table is None or table.empty or "status" not in table:
        return pd.DataFrame()
    df = table[table["status"] == "ok"]
    if keys is not None:
        df = df[df["key"].isin(set(keys))]
    return df


def varying_settings(table: pd.DataFrame) -> list[str]:
    """The setting columns that take more than one value in ``table`` (table order)."""
    cols = [c for c in SETTING_KEYS if c in table.columns]
    return [c for c in cols if table[c].astype(str).nunique(dropna=False) > 1]


def point_label(row: pd.Series, columns: Sequence[str]) -> str:
    """A short label such as ``tp=2 pp=1 dp=4``."""
    parts = []
    for c in columns:
        v = row.get(c)
        if v is None or (isinstance(v, float) and v != v):
            continue
        parts.append(f"{c}={v:g}" if isinstance(v, float) else f"{c}={v}")
    return " ".join(parts)


def ranked(table: pd.DataFrame, by: str = "tokens_per_s", top: int = 10,
           keys: Iterable[str] | None = None) -> pd.DataFrame:
    """The ``top`` ok points by ``by`` (descending, ``iteration_time_s`` ascending; ties by
    fewer GPUs, then key), with a ``rank`` column, the settings that vary, and the main
    metrics."""
    if by not in RANK_METRICS:
        raise ValueError(f"rank by one of {', '.join(RANK_METRICS)}, not {by!r}")
    df = ok_rows(table, keys)
    if df.empty or by not in df.columns:
        return pd.DataFrame()
    df = df[pd.to_numeric(df[by], errors="coerce").notna()]
    df = df.sort_values([by, "gpus", "key"], ascending=[by == "iteration_time_s", True, True],
                        kind="mergesort")
    settings = varying_settings(ok_rows(table, keys)) or [c for c in ("tp", "pp", "dp") if c in df]
    cols = settings + [m for m in _SHOWN_METRICS if m in df.columns and m not in settings]
    out = df[cols].head(top).reset_index(drop=True)
    out.insert(0, "rank", range(1, len(out) + 1))
    return out


def format_table(df: pd.DataFrame) -> str:
    """Plain-text rendering of a ranked table (numbers with sensible precision)."""
    if df.empty:
        return "(no successful points)"
    fmt = {
        "tokens_per_s": "{:,.0f}".format, "tokens_per_s_per_gpu": "{:,.0f}".format,
        "iteration_time_s": "{:.4g}".format, "mfu": "{:.1%}".format,
        "memory_gib_per_gpu": "{:.1f}".format, "cost_per_hour_usd": "{:,.2f}".format,
        "tokens_per_usd": "{:,.0f}".format,
    }
    shown = df.copy()
    for c, f in fmt.items():
        if c in shown:
            shown[c] = shown[c].map(lambda v, f=f: "n/a" if pd.isna(v) else f(v))
    return shown.to_string(index=False)


def has_metric(table: pd.DataFrame, column: str, keys: Iterable[str] | None = None) -> bool:
    """Whether some ok point has a number in ``column`` (a recording replayed without its
    token count has no tokens/s)."""
    df = ok_rows(table, keys)
    return column in df and bool(pd.to_numeric(df[column], errors="coerce").notna().any())


def pareto_front(table: pd.DataFrame, x: str = "gpus", y: str = "tokens_per_s",
                 keys: Iterable[str] | None = None) -> pd.DataFrame:
    """The ok points no other point beats: for each, every point with ``x`` at most its
    ``x`` has lower ``y``. Sorted by ``x`` ascending (``y`` then rises strictly)."""
    df = ok_rows(table, keys)
    if df.empty or x not in df or y not in df:
        return pd.DataFrame()
    df = df[pd.to_numeric(df[x], errors="coerce").notna() & pd.to_numeric(df[y], errors="coerce").notna()]
    df = df.sort_values([x, y, "key"], ascending=[True, False, True], kind="mergesort")
    keep, best = [], float("-inf")
    for idx, val in zip(df.index, df[y].astype(float), strict=True):
        if val > best:
            keep.append(idx)
            best = val
    return df.loc[keep]


def pareto_axes(table: pd.DataFrame) -> tuple[str, str]:
    """``(x, y)`` for the Pareto plot: cost per hour when prices gave one, else GPUs."""
    if "cost_per_hour_usd" in table and pd.to_numeric(table["cost_per_hour_usd"], errors="coerce").notna().any():
        return "cost_per_hour_usd", "tokens_per_s"
    return "gpus", "tokens_per_s"


_AXIS_LABELS = {"gpus": "GPUs", "cost_per_hour_usd": "cost (USD per hour)",
                "tokens_per_s": "throughput (tokens/s)"}


def plot_pareto(table: pd.DataFrame, path: str | Path, keys: Iterable[str] | None = None,
                title: str = "") -> Path | None:
    """Write the Pareto-front PNG (all ok points grey, the front joined and labelled).
    Returns the path, or None when there is no ok point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(keys) if keys is not None else None
    df = ok_rows(table, keys)
    if df.empty:
        return None
    x, y = pareto_axes(df)
    front = pareto_front(df, x, y)
    if front.empty:  # no point has a throughput to plot
        return None
    labels = varying_settings(df)
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    ax.scatter(df[x].astype(float), df[y].astype(float), s=18, color="0.7", label="points")
    ax.plot(front[x].astype(float), front[y].astype(float), "o-", color="tab:blue",
            label="Pareto front")
    for _, row in front.iterrows():
        ax.annotate(point_label(row, labels), (float(row[x]), float(row[y])), fontsize=7,
                    textcoords="offset points", xytext=(4, 4))
    if x == "gpus" and df[x].astype(float).max() / max(df[x].astype(float).min(), 1) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(_AXIS_LABELS.get(x, x))
    ax.set_ylabel(_AXIS_LABELS.get(y, y))
    ax.set_title(title or f"Pareto front: {len(front)} of {len(df)} points")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    path = Path(path)
    from tracesim.fileio import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
    return path
