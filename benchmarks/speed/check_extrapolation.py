"""Every published row whose iteration time ``tracesim validate published`` extrapolates
from two micro-batch samples (tracesim/pipeline/published.py, ``steady_iteration_s``),
replayed whole as well: prints both times and their relative difference.

    .venv/bin/python benchmarks/speed/check_extrapolation.py [TABLE ...] [--only TEXT]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tracesim.options import ReplayOptions
from tracesim.pipeline.published import steady_iteration_s, table_rows
from tracesim.pipeline.run import predict

REF = Path(__file__).resolve().parents[3] / "shared" / "reference"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tables", nargs="*", default=[str(REF / "megatron_bridge_25_11.csv"),
                                                  str(REF / "megatron_sc21_table1.csv")])
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    worst = 0.0
    for p, k, _, _, opts, label, _ in table_rows(args.tables, lambda lb: args.only in lb):
        try:
            got, warns = steady_iteration_s(opts, p, f"row {k + 2}")
        except Exception as exc:  # a layout tracesim cannot express
            print(f"{label}: not replayed ({exc})")
            continue
        if not warns or "extrapolated" not in warns[-1]:
            continue
        full = predict(None, ReplayOptions.from_mapping(opts, p, f"row {k + 2}")).iteration_time_s
        rel = got / full - 1.0
        worst = max(worst, abs(rel))
        print(f"{label:45s} full {full:.9f} s  extrapolated {got:.9f} s  {rel:+.1e}  ({warns[-1][:60]})")
    print(f"largest relative difference: {worst:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
