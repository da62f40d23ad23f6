"""Several replay results side by side: one table, one chart, a winner and a ratio per metric.

:func:`compare_table` takes result dicts (``replay --json`` objects, ``result.json`` files)
and returns one row per metric with one column per run, the ``winner`` (the best run: lowest
for times and memory, highest for throughput, TFLOP/s and MFU; none when two runs share the
best value) and ``ratio``: how many times
better the winner is than the runner-up (``>= 1``; for 'lower is better' metrics the
runner-up's value over the winner's, else the winner's over the runner-up's). A metric
missing from any run, or whose runner-up is 0, has no ratio.

Runs that process different numbers of tokens per iteration (another global batch, sequence
length or data-parallel size at the default batch) are not ranked on their per-iteration
seconds: a run of half the tokens "wins" iteration time while it trains slower. Their table
gets a ``tokens per iteration`` row, the time rows keep their values with no winner or
ratio, and :func:`work_note` says why; tokens/s, TFLOP/s and MFU rank them.

A run whose layout does not fit in its GPUs' memory (the result's ``memory.fits`` false)
keeps its values but is never the winner nor the runner-up: it could not run.
:func:`memory_note` names such runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from tracesim.errors import InputError

#: (key, label, better) in table order; keys are result keys or breakdown parts
METRICS: tuple[tuple[str, str, str], ...] = (
    ("iteration_time_s", "iteration time (s)", "lower"),
    ("tokens_per_s", "tokens/s", "higher"),
    ("tflops_per_gpu", "TFLOP/s per GPU", "higher"),
    ("mfu", "MFU", "higher"),
    ("memory_gib_per_gpu", "memory per GPU (GiB)", "lower"),
    ("compute_s", "compute (s)", "lower"),
    ("exposed_tp_s", "exposed tp comm (s)", "lower"),
    ("exposed_cp_s", "exposed cp comm (s)", "lower"),
    ("exposed_ep_s", "exposed ep comm (s)", "lower"),
    ("exposed_pp_s", "exposed pp comm (s)", "lower"),
    ("exposed_dp_s", "exposed dp comm (s)", "lower"),
    ("host_s", "host-bound (s)", "lower"),
    ("bubble_s", "pipeline bubble (s)", "lower"),
    ("idle_s", "idle (s)", "lower"),
)


#: rows in seconds per iteration: not ranked across runs of different work per iteration
PER_ITERATION = frozenset(k for k, label, _ in METRICS if label.endswith("(s)"))


def tokens_per_iteration(res: Mapping[str, Any]) -> float | None:
    """Tokens one iteration processes (tokens/s x iteration time), None when unknown."""
    tps, it = res.get("tokens_per_s"), res.get("iteration_time_s")
    if not isinstance(tps, (int, float)) or not isinstance(it, (int, float)) or tps <= 0:
        return None
    return float(tps) * float(it)


def _same_work(tokens: Sequence[float | None]) -> bool:
    known = [t for t in tokens if t is not None]
    return len(known) < 2 or max(known) <= min(known) * (1 + 1e-6)


def work_note(df: pd.DataFrame, labels: Sequence[str]) -> str | None:
    """Why the time rows of :func:`compare_table` have no winner, or None when they do."""
    rows = df[df["key"] == "tokens_per_iteration"]
    if rows.empty:
        return None
    row = rows.iloc[0]
    toks = " vs ".join(_fmt("tokens_per_iteration", row[lb]) for lb in labels)
    return (f"the runs process different tokens per iteration ({toks}): times are per "
            "iteration and not ranked; tokens/s, TFLOP/s and MFU compare them")


def fits_memory(res: Mapping[str, Any]) -> bool:
    """False when the result says its layout does not fit in GPU memory (unknown: True)."""
    mem = res.get("memory")
    return not (isinstance(mem, Mapping) and mem.get("fits") is False)


def memory_note(results: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> str | None:
    """The runs that do not fit in GPU memory (not ranked), or None."""
    over = []
    for res, lb in zip(results, labels, strict=True):
        if not fits_memory(res):
            mem = res.get("memory") or {}
            need, cap = mem.get("total"), mem.get("capacity")
            size = (f" ({float(need):.1f} GiB per GPU of {float(cap):.0f})"
                    if isinstance(need, (int, float)) and isinstance(cap, (int, float)) else "")
            over.append(f"{lb}{size}")
    if not over:
        return None
    return (f"does not fit in GPU memory, not ranked: {'; '.join(over)}")


def _metric_fields(res: Mapping[str, Any]) -> list[tuple[str, str, Any]]:
    """(key, field path, value) of every metric of :data:`METRICS` in one result dict."""
    bd = res.get("breakdown") or {}
    ex = bd.get("exposed_comm_s") or {}
    out = []
    for key, _, _ in METRICS:
        if key.startswith("exposed_"):
            kind = key[len("exposed_"):-2]
            out.append((key, f"breakdown.exposed_comm_s.{kind}", ex.get(kind)))
        elif key in ("compute_s", "host_s", "bubble_s", "idle_s"):
            out.append((key, f"breakdown.{key}", bd.get(key)))
        else:
            out.append((key, key, res.get(key)))
    return out


def check_metrics(res: Mapping[str, Any], source: Any) -> None:
    """Raise :class:`InputError` naming ``source`` (a result file, or "run N") and the field
    when a metric :func:`flat_metrics` reads is neither absent, null nor a finite number (an
    edited or foreign result.json), or the breakdown is not a mapping of them."""
    bd = res.get("breakdown")
    for part, where in ((bd, "breakdown"),
                        (bd.get("exposed_comm_s") if isinstance(bd, Mapping) else None,
                         "breakdown.exposed_comm_s")):
        if part is not None and not isinstance(part, Mapping):
            raise InputError(f"expected a mapping, got {part!r}", source, where)
    for _, where, v in _metric_fields(res):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not math.isfinite(v)):
            raise InputError(f"expected a finite number or null, got {v!r}", source, where)


def flat_metrics(res: Mapping[str, Any]) -> dict[str, float | None]:
    """The metrics of :data:`METRICS` from one result dict (None when absent)."""
    return {key: None if v is None else float(v) for key, _, v in _metric_fields(res)}


def compare_table(results: Sequence[Mapping[str, Any]], labels: Sequence[str],
                  keep_zero: bool = False) -> pd.DataFrame:
    """One row per metric: ``metric``, ``better``, one column per label, ``winner``, ``ratio``.

    Breakdown rows that are zero in every run are left out unless ``keep_zero``."""
    if len(results) != len(labels):
        raise ValueError("one label per result")
    vals = [flat_metrics(r) for r in results]
    tokens = [tokens_per_iteration(r) for r in results]
    same = _same_work(tokens)
    fits = [fits_memory(r) for r in results]
    rows = []
    for key, name, better in METRICS:
        col = [v[key] for v in vals]
        if key not in ("iteration_time_s",) and all(not c for c in col) and not keep_zero:
            continue
        row: dict[str, Any] = {"metric": name, "key": key, "better": better}
        row.update(dict(zip(labels, col, strict=True)))
        winner, ratio = (_winner(col, better, fits) if same or key not in PER_ITERATION
                         else (None, None))
        row["winner"] = labels[winner] if winner is not None else None
        row["ratio"] = ratio
        rows.append(row)
        if key == "iteration_time_s" and not same:
            rows.append({"metric": "tokens per iteration", "key": "tokens_per_iteration",
                         "better": "none", **dict(zip(labels, tokens, strict=True)),
                         "winner": None, "ratio": None})
    return pd.DataFrame(rows)


def _winner(col: Sequence[float | None], better: str,
            ranked: Sequence[bool] | None = None) -> tuple[int | None, float | None]:
    """The best of ``col`` and its ratio to the runner-up, over the runs ``ranked`` says
    (default all; a value of a run left out is not read)."""
    keep = [i for i in range(len(col)) if ranked is None or ranked[i]]
    if not keep or any(col[i] is None for i in keep):
        return None, None
    vals = {i: float(col[i]) for i in keep}  # type: ignore[arg-type]
    order = sorted(keep, key=lambda i: (vals[i] if better == "lower" else -vals[i], i))
    w = order[0]
    if len(order) == 1:  # one run alone, or the only one ranked: nothing to win against
        return (w, 1.0) if len(col) == 1 else (None, None)
    r = order[1]
    if better == "lower":
        ratio = vals[r] / vals[w] if vals[w] > 0 else None
    else:
        ratio = vals[w] / vals[r] if vals[r] > 0 else None
    if vals[r] == vals[w]:  # the best value shared: no single winner
        return None, (1.0 if vals[w] != 0 else None)
    return w, ratio


def default_labels(results: Sequence[Mapping[str, Any]], fallback: Sequence[str]) -> list[str]:
    """Short labels: what differs between the runs (model, cluster, layout, batch), else
    ``fallback`` (spec strings or paths)."""
    def parts(r: Mapping[str, Any]) -> dict[str, str]:
        model = r.get("model")
        raw = r.get("parallel")
        par: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        d = {"model": str(model.get("name") if isinstance(model, Mapping) else model),
             "cluster": str(r.get("cluster")), "device": str(r.get("device"))}
        for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero", "recompute",
                  "schedule", "sp", "fsdp"):
            if k in par:
                d[k] = str(par[k])
        net = (r.get("replay") or {}).get("network") if isinstance(r.get("replay"), Mapping) else None
        if net:
            d["network"] = str(net)
        return d

    ps = [parts(r) for r in results]
    keys = [k for k in ps[0] if any(p.get(k) != ps[0].get(k) for p in ps)] if ps else []
    if "cluster" in keys and "network" in keys:  # another cluster's network: the cluster says it
        keys.remove("network")
    short = {"micro_batch": "mb", "cluster": "", "model": "", "device": "", "network": "network "}
    labels = []
    for p in ps:
        bits = []
        for k in keys:
            pre, v = short.get(k, k), p.get(k)
            if v in ("True", "False"):  # a switch: its name, or "no-" and its name
                bits.append(k if v == "True" else f"no-{k}")
            else:
                bits.append(f"{pre}{v}" if pre else str(v))
        labels.append(" ".join(bits))
    if not keys or len(set(labels)) != len(labels):
        return list(fallback)
    return labels


def format_table(df: pd.DataFrame, labels: Sequence[str]) -> str:
    """Plain-text table of :func:`compare_table`."""
    head = ["metric", *labels, "winner", "ratio"]
    body = []
    for _, row in df.iterrows():
        body.append([row["metric"], *(_fmt(row["key"], row[lb]) for lb in labels),
                     row["winner"] if isinstance(row["winner"], str) else "-",
                     "-" if row["ratio"] is None or pd.isna(row["ratio"]) else f"{row['ratio']:.3f}x"])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=True)]
    lines = ["  ".join(str(h).ljust(w) if i == 0 else str(h).rjust(w)
                       for i, (h, w) in enumerate(zip(head, widths, strict=True)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in body:
        lines.append("  ".join(str(x).ljust(w) if i == 0 else str(x).rjust(w)
                               for i, (x, w) in enumerate(zip(r, widths, strict=True))))
    return "\n".join(lines)


def _fmt(key: str, v: Any) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "n/a"
    v = float(v)
    if key == "mfu":
        return f"{v:.1%}"
    if key in ("tokens_per_s", "tokens_per_iteration"):
        return f"{v:,.0f}"
    if key in ("tflops_per_gpu", "memory_gib_per_gpu"):
        return f"{v:.1f}"
    if v == 0:
        return "0"
    return f"{v:.4g}"
