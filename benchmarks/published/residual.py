"""Where the published step time exceeds the replayed one, per step or per micro-batch: a
reading of `tracesim validate published --json` output, not an input to any model.

    .venv/bin/tracesim validate published TABLE [TABLE ...] --jobs 2 --json > rows.json
    .venv/bin/python benchmarks/published/residual.py rows.json [--min-rows 2] [--json]

Each row's published step time follows from its replayed iteration and its signed error
(both metrics, tokens/s and TFLOP/s per GPU, are inversely proportional to the step time):
``published_s = predicted_s * predicted / published``. Its residual is ``published_s -
predicted_s`` (positive: the run spent time the replay does not have). Rows that differ only
in GPU count (same table, cluster, model, dtype, FP8 recipe, stack, TP / PP / CP / EP,
virtual stages and micro-batch size) form a group; a group's rows differ in the
micro-batches a pipeline rank runs per step, ``m = global_batch / (dp * micro_batch)``. A
group with at least two distinct ``m`` is fitted by least squares as

    residual_s = a + b * m

``a`` is the part that does not grow with the micro-batches (per step: the optimizer, the
gradient and parameter synchronisation, a pipeline's fill and drain, host pauses between
iterations), ``b`` the part that grows with them (per micro-batch: compute or communication
inside each micro-batch); ``b_share`` is ``b`` over the replayed time per micro-batch
(``predicted_s / m``), the fraction by which the replay's micro-batch is short. A group with
one ``m`` gives its mean residual only. Printed per group: the rows, the fit, and the
largest deviation of a row from it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

#: the options that, with the table, make two rows the same run at another scale
GROUP_KEYS = ("cluster", "model", "dtype", "fp8_recipe", "stack", "tp", "pp", "cp", "ep", "vpp",
              "micro_batch", "seq_len", "recompute", "cuda_graphs")


def row_residual(row: dict[str, Any]) -> dict[str, Any] | None:
    """One replayed row's published and predicted step times and micro-batches per step, or
    None for a row that was not replayed."""
    if row.get("error") or not row.get("iteration_time_s") or not row.get("published"):
        return None
    o = row["options"]
    pred = float(row["iteration_time_s"])
    pub = pred * float(row["predicted"]) / float(row["published"])
    dp = int(o.get("dp") or 1)
    mbs = int(o.get("micro_batch") or 1)
    gbs = int(o.get("global_batch") or dp * mbs)
    m = gbs / (dp * mbs)
    return {"table": Path(row["table"]).name, "row": row["row"], "m": m, "published_s": pub,
            "predicted_s": pred, "residual_s": pub - pred,
            "key": (Path(row["table"]).name,) + tuple(str(o.get(k)) for k in GROUP_KEYS)}


def fit_group(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Least-squares ``residual = a + b * m`` over a group's rows (module docstring)."""
    m = np.array([r["m"] for r in rows], dtype=float)
    res = np.array([r["residual_s"] for r in rows], dtype=float)
    out: dict[str, Any] = {"rows": len(rows), "m": sorted({float(x) for x in m}),
                           "mean_residual_s": float(res.mean())}
    if len(set(m.tolist())) < 2:
        return out
    b, a = np.polyfit(m, res, 1)
    per_mb = np.mean([r["predicted_s"] / r["m"] for r in rows])
    out.update(a_s=float(a), b_s=float(b), b_share=float(b / per_mb),
               max_dev_s=float(np.max(np.abs(res - (a + b * m)))))
    return out


def groups(rows: list[dict[str, Any]]) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """The replayed rows grouped (module docstring), each with its fit, in table order."""
    by_key: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_key[r["key"]].append(r)
    return [(g, fit_group(g)) for g in by_key.values()]


def _ms(x: float) -> str:
    return f"{x * 1e3:,.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json_files", nargs="+", help="`tracesim validate published --json` output")
    ap.add_argument("--min-rows", type=int, default=2, help="print groups of at least N rows")
    ap.add_argument("--json", action="store_true", help="one JSON list of groups on stdout")
    args = ap.parse_args(argv)
    rows = []
    for f in args.json_files:
        try:
            data = json.loads(Path(f).read_text())
            rows += [r for r in map(row_residual, data["rows"]) if r is not None]
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"error: {f}: not `tracesim validate published --json` output "
                  f"(rows: {type(e).__name__}: {e})", file=sys.stderr)
            return 2
    found = [(g, fit) for g, fit in groups(rows) if len(g) >= args.min_rows]
    if args.json:
        json.dump([{**fit, "table": g[0]["table"], "labels": [r["row"] for r in g]}
                   for g, fit in found], sys.stdout, indent=1)
        print()
        return 0
    for g, fit in found:
        print(f"{g[0]['table']}: {g[0]['row']} and {len(g) - 1} more at other scales")
        for r in sorted(g, key=lambda r: -r["m"]):
            print(f"  m {r['m']:6.0f}  published {_ms(r['published_s']):>10} ms  predicted "
                  f"{_ms(r['predicted_s']):>10} ms  residual {_ms(r['residual_s']):>9} ms  {r['row']}")
        if "a_s" in fit:
            print(f"  fit: {_ms(fit['a_s'])} ms per step + {_ms(fit['b_s'])} ms per micro-batch "
                  f"({100 * fit['b_share']:+.1f}% of the replayed micro-batch); largest row "
                  f"deviation {_ms(fit['max_dev_s'])} ms")
        else:
            print(f"  one micro-batch count: mean residual {_ms(fit['mean_residual_s'])} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
