"""Where each published row's replayed iteration goes, beside its error: a check of whether
the error follows the schedule (bubble), the exposed communication or the compute.

    .venv/bin/python benchmarks/published/breakdown.py TABLE [TABLE ...] [--only TEXT] [--json]

Every row is replayed whole (all its micro-batches, not the sampled extrapolation of
``tracesim validate published``: the same iteration time to a few parts in a million, slower
on rows with many micro-batches) with the per-rank breakdown, and printed with its signed
error (+: predicted faster than published) and the shares of the iteration that the mean
rank spends computing, in the pipeline bubble and in exposed TP / DP / PP / CP / EP
communication. The last lines give, over the dense rows (no MoE model), Pearson's correlation
of the signed error with each share that reaches 0.5% on some row.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from tracesim.catalog import load_model
from tracesim.errors import InputError
from tracesim.options import ReplayOptions
from tracesim.pipeline.published import metric_of, predicted_metric, published_value, table_rows
from tracesim.pipeline.run import predict

KINDS = ("tp", "dp", "pp", "cp", "ep")
#: a share that never reaches this on any row has no correlation worth printing
MIN_SHARE = 0.005


def row_breakdown(p: Path, k: int, fmt: str, row: dict[str, str], opts: dict[str, Any],
                  label: str) -> dict[str, Any]:
    """One row replayed whole: its error and the shares of its iteration."""
    res = predict(None, ReplayOptions.from_mapping(opts, p, f"row {k + 2}"))
    it = res.iteration_time_s
    published = published_value(row, metric_of(fmt), p, k)
    bd = res.breakdown
    ex = bd.get("exposed_comm_s") or {}
    return {"row": label, "moe": load_model(opts["model"]).is_moe, "error": predicted_metric(fmt, row, opts, it) / published - 1.0,
            "iteration_s": it, "compute": bd["compute_s"] / it, "bubble": bd["bubble_s"] / it,
            "host": bd["host_s"] / it, **{kind: float(ex.get(kind, 0.0)) / it for kind in KINDS}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tables", nargs="+")
    ap.add_argument("--only", default=None, help="rows whose label contains TEXT")
    ap.add_argument("--json", action="store_true", help="one JSON list on stdout")
    args = ap.parse_args()
    only = (lambda lb: args.only in lb) if args.only else None
    rows = []
    try:
        for p, k, fmt, row, opts, label, _ in table_rows(args.tables, only, skip_unmodelled=True):
            rows.append(row_breakdown(p, k, fmt, row, opts, label))
            if not args.json:
                r = rows[-1]
                print(f"{label[:62]:<62} {100 * r['error']:+6.1f}%  compute {100 * r['compute']:5.1f}%  "
                      f"bubble {100 * r['bubble']:5.1f}%  "
                      + "  ".join(f"{kind} {100 * r[kind]:4.1f}%" for kind in KINDS), flush=True)
    except InputError as exc:
        print(f"breakdown: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    dense = [r for r in rows if not r["moe"]]
    if len(dense) > 2:
        err = np.array([r["error"] for r in dense])
        print(f"\n{len(dense)} dense rows: mean signed error {100 * err.mean():+.1f}%; "
              "correlation of the signed error with each share:")
        for key in ("compute", "bubble", *KINDS):
            x = np.array([r[key] for r in dense])
            if x.max() < MIN_SHARE:
                print(f"  {key:<8}   n/a  (every share under {100 * MIN_SHARE:.1f}%)")
                continue
            r_xy = float(np.corrcoef(x, err)[0, 1])
            print(f"  {key:<8} {r_xy:+.2f}  (share {100 * x.min():.1f}% .. {100 * x.max():.1f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
