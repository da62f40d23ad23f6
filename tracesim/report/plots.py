"""PNG plots of replay results (matplotlib, Agg canvas; no pyplot global state).

* :func:`breakdown_figure`: stacked bars of where the iteration goes, per rank (or the mean);
* :func:`gantt_figure`: a per-rank Gantt chart of one iteration, lanes coloured by class;
* :func:`links_figure`: link utilisation over time as a heat map;
* :func:`compare_figure`: several results side by side.

Each returns a :class:`matplotlib.figure.Figure` (Jupyter displays it); :func:`save` writes
a PNG. matplotlib is an optional dependency (``pip install tracesim[plot]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracesim.fileio import atomic_path
from tracesim.graph.taskgraph import COMM_KINDS, TaskGraph

#: breakdown parts in plotting order and their colours
PARTS = ("compute", "tp", "cp", "ep", "pp", "dp", "host", "bubble", "idle")
COLOURS = {
    "compute": "#4C72B0", "tp": "#DD8452", "cp": "#8172B3", "ep": "#937860", "pp": "#C44E52",
    "dp": "#55A868", "host": "#DA8BC3", "bubble": "#CCB974", "idle": "#BBBBBB", "other": "#64B5CD",
    # compute op classes (Gantt)
    "gemm": "#4C72B0", "attention": "#2A4D8F", "elementwise": "#7FA7D9", "norm": "#9DB9E0",
    "softmax": "#5E81B5", "reduction": "#6C8EBF", "embedding": "#3B5F9A",
    "optimizer": "#1B3A6B", "memcpy": "#A0A0A0",
}


def _figure(w: float, h: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def save(fig: Any, path: str | Path) -> Path:
    """Write ``fig`` as a PNG (atomically) and return the path."""
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight")
    return path


def breakdown_parts(bd: Mapping[str, Any]) -> dict[str, float]:
    """A breakdown dict (``compute_s``, ``exposed_comm_s``, ``host_s``, ``bubble_s``,
    ``idle_s``) as seconds per part of :data:`PARTS` (+ ``other``)."""
    ex = bd.get("exposed_comm_s") or {}
    out = {"compute": float(bd.get("compute_s") or 0.0)}
    for k in ("tp", "cp", "ep", "pp", "dp"):
        out[k] = float(ex.get(k) or 0.0)
    out["other"] = float(sum(v for k, v in ex.items() if k not in out) or 0.0)
    out["host"] = float(bd.get("host_s") or 0.0)
    out["bubble"] = float(bd.get("bubble_s") or 0.0)
    out["idle"] = float(bd.get("idle_s") or 0.0)
    return out


def _stacked(ax: Any, labels: Sequence[str], rows: Sequence[Mapping[str, float]], unit: float,
             unit_name: str) -> None:
    y = np.arange(len(labels))
    left = np.zeros(len(labels))
    for part in (*PARTS[:-2], "other", *PARTS[-2:]):
        vals = np.array([r.get(part, 0.0) for r in rows]) / unit
        if not vals.any():
            continue
        ax.barh(y, vals, left=left, color=COLOURS[part],
                label=part if part in ("compute", "bubble", "idle", "other") else f"exposed {part}")
        left += vals
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit_name})")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=5, fontsize=8, frameon=False)


def _unit(seconds: float) -> tuple[float, str]:
    if seconds >= 1:
        return 1.0, "s"
    if seconds >= 1e-3:
        return 1e-3, "ms"
    return 1e-6, "us"


def breakdown_figure(res: Mapping[str, Any], per_rank: Mapping[Any, Mapping[str, Any]] | None = None,
                     max_bars: int = 32) -> Any:
    """Stacked bars: compute, exposed communication per kind, bubble, idle.

    One bar per rank from ``per_rank`` (at most ``max_bars``, the lowest ranks), else one
    bar for ``res['breakdown']`` (the mean over ranks)."""
    if per_rank:
        keys = sorted(per_rank, key=lambda k: int(k))[:max_bars]
        labels = [f"rank {k}" for k in keys]
        rows = [breakdown_parts(per_rank[k]) for k in keys]
    else:
        labels = ["mean over ranks"]
        rows = [breakdown_parts(res.get("breakdown") or {})]
    total = max(sum(r.values()) for r in rows) or 1.0
    unit, uname = _unit(total)
    fig = _figure(8, 1.2 + 0.32 * len(rows))
    ax = fig.add_subplot(1, 1, 1)
    _stacked(ax, labels, rows, unit, uname)
    it = res.get("iteration_time_s")
    if it:
        ax.axvline(float(it) / unit, color="black", lw=0.8, ls="--")
    ax.set_title(_title(res), fontsize=10)
    return fig


def _title(res: Mapping[str, Any]) -> str:
    model = res.get("model")
    mname = model.get("name") if isinstance(model, Mapping) else model
    par = res.get("parallel") or {}
    lay = " ".join(f"{k}{par[k]}" for k in ("tp", "pp", "dp", "cp", "ep")
                   if isinstance(par, Mapping) and par.get(k, 1) not in (None, 1))
    return f"{mname or 'workload'} on {res.get('cluster', '?')} {lay}".strip()


def _task_category(graph: TaskGraph) -> np.ndarray:
    t = graph.tasks
    comm = np.isin(t["kind"].to_numpy(), COMM_KINDS)
    gk = t["group_kind"].astype(str).to_numpy()
    cat = t["op_class"].astype(str).to_numpy().astype(object)
    cat[comm] = np.where(np.isin(gk[comm], ("tp", "cp", "ep", "pp", "dp")), gk[comm], "other")
    return cat


def gantt_figure(graph: TaskGraph, start_ns: np.ndarray, end_ns: np.ndarray, *,
                 ranks: Sequence[int] | None = None, max_ranks: int = 4,
                 title: str = "") -> Any:
    """Gantt chart of one iteration: one row per lane of each shown rank (default: the
    lowest ``max_ranks`` simulated ranks), bars coloured by op class / communication kind."""
    t = graph.tasks
    lanes = graph.lanes
    all_ranks = sorted(int(r) for r in np.unique(t["rank"].to_numpy()))
    ranks = list(ranks) if ranks is not None else all_ranks[:max_ranks]
    lane_rank = lanes["rank"].to_numpy()
    rows = [int(ln) for r in ranks for ln in np.flatnonzero(lane_rank == r)]
    row_of = {ln: i for i, ln in enumerate(rows)}
    cat = _task_category(graph)
    lane = t["lane"].to_numpy()
    sel = np.flatnonzero(np.isin(lane, rows) & (end_ns > start_ns))
    span = max(int(end_ns.max()) if len(end_ns) else 1, 1)
    unit, uname = _unit(span * 1e-9)
    scale = 1e-9 / unit
    fig = _figure(11, 1.0 + 0.28 * max(len(rows), 1))
    ax = fig.add_subplot(1, 1, 1)
    df = pd.DataFrame({"row": [row_of[int(x)] for x in lane[sel]], "cat": cat[sel],
                       "s": start_ns[sel] * scale, "d": (end_ns[sel] - start_ns[sel]) * scale})
    seen = []
    for (row, c), g in df.groupby(["row", "cat"], sort=True):
        ax.broken_barh(list(zip(g["s"], g["d"], strict=True)), (row - 0.4, 0.8),
                       color=COLOURS.get(str(c), COLOURS["other"]), linewidth=0)
        if c not in seen:
            seen.append(c)
    names = lanes["name"].astype(str).to_numpy()
    ax.set_yticks(range(len(rows)), [f"r{lane_rank[ln]} {names[ln]}" for ln in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, span * scale)
    ax.set_xlabel(f"time ({uname})")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=COLOURS.get(str(c), COLOURS["other"]), label=str(c))
                       for c in sorted(seen, key=str)],
              loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=8, fontsize=7, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    return fig


def links_figure(links: pd.DataFrame, top: int = 48, title: str = "") -> Any:
    """Heat map of link utilisation (``links.parquet``): the ``top`` busiest links by
    bytes, over the iteration's time bins."""
    fig = _figure(10, 1.5 + 0.18 * min(top, max(links["link"].nunique(), 1)))
    ax = fig.add_subplot(1, 1, 1)
    if links.empty:
        ax.text(0.5, 0.5, "no link traffic recorded\n(estimate network: no flows simulated)",
                ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    busiest = links.groupby("name")["bytes"].sum().sort_values(ascending=False).index[:top]
    pv = links[links["name"].isin(busiest)].pivot_table(index="name", columns="bin",
                                                        values="utilisation", aggfunc="sum")
    pv = pv.reindex(sorted(pv.index, key=_natural))
    t1 = float(links["t1_ns"].max())
    unit, uname = _unit(t1 * 1e-9)
    im = ax.imshow(pv.to_numpy(), aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0,
                   extent=(0, t1 * 1e-9 / unit, len(pv) - 0.5, -0.5), interpolation="nearest")
    ax.set_yticks(range(len(pv)), list(pv.index), fontsize=6)
    ax.set_xlabel(f"time ({uname})")
    fig.colorbar(im, ax=ax, label="utilisation")
    if title:
        ax.set_title(title, fontsize=10)
    return fig


def _natural(s: str) -> tuple:
    import re

    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s))


def compare_figure(labels: Sequence[str], results: Sequence[Mapping[str, Any]]) -> Any:
    """Side by side: the breakdown of each result (stacked bars), tokens/s and MFU."""
    rows = [breakdown_parts(r.get("breakdown") or {}) for r in results]
    total = max([sum(r.values()) for r in rows] + [float(r.get("iteration_time_s") or 0) for r in results]) or 1.0
    unit, uname = _unit(total)
    fig = _figure(13, 1.8 + 0.4 * len(results))
    gs = fig.add_gridspec(1, 3, width_ratios=(2.2, 1, 1), wspace=0.08)
    ax = fig.add_subplot(gs[0])
    _stacked(ax, labels, rows, unit, uname)
    ax.set_title("iteration time breakdown", fontsize=10)
    y = np.arange(len(results))
    for k, (key, name, fmt) in enumerate((("tokens_per_s", "tokens/s", "{:,.0f}"),
                                          ("mfu", "MFU", "{:.1%}"))):
        a = fig.add_subplot(gs[k + 1], sharey=ax)
        vals = np.array([float(r.get(key) or 0.0) for r in results])
        best = int(np.argmax(vals)) if len(vals) else -1
        a.barh(y, vals, color=["#55A868" if i == best else "#999999" for i in range(len(vals))])
        for i, v in enumerate(vals):
            a.text(v, i, " " + fmt.format(v), va="center", fontsize=7)
        a.set_title(name, fontsize=10)
        a.tick_params(labelleft=False)
        a.set_xlim(0, (vals.max() or 1.0) * 1.35)
    return fig


def png_bytes(fig: Any) -> bytes:
    """``fig`` as PNG bytes (for ``IPython.display.Image`` in notebooks)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()
