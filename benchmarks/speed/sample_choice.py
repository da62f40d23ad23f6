"""Why ``validate published`` extrapolates from ``2 pp`` and ``3 pp`` micro-batches (one
replay of ``3 pp`` where the stages run periodically), not from ``pp`` and ``2 pp``: every
published row it extrapolates, replayed at ``pp``, ``2 pp`` and ``3 pp`` micro-batches per
pipeline; prints the iteration time extrapolated from each pair, their relative difference
and each sample's wall time (a ``2 pp`` sample would be cheaper than ``3 pp``).

With ``pp`` micro-batches an interleaved schedule is all warm-up on the first rank
(Megatron's ``(pp - 1) * 2 + (vp - 1) * pp`` warm-up chunk passes are at least its
``pp * vp``), so that sample lies on the steady line only when the stages are alike.

    .venv/bin/python benchmarks/speed/sample_choice.py [TABLE ...] [--only TEXT]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tracesim.options import ReplayOptions
from tracesim.pipeline.published import table_rows
from tracesim.pipeline.run import predict
from tracesim.pipeline.steady import SAMPLE_FACTOR

REF = Path(__file__).resolve().parents[3] / "shared" / "reference"
HERE = Path(__file__).resolve().parents[1] / "published"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tables", nargs="*", default=[
        str(REF / "megatron_sc21_table1.csv"), str(REF / "megatron_bridge_25_11.csv"),
        str(HERE / "megatron_bridge_26_02.csv"), str(HERE / "megatron_core_h100_weak_scaling.csv")])
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    worst = 0.0
    for p, k, _, _, opts, label, _ in table_rows(args.tables, lambda lb: args.only in lb):
        pp = int(opts.get("pp", 1))
        per = int(opts["micro_batch"]) * int(opts["dp"])
        m = int(opts["global_batch"]) // per
        if pp == 1 or m <= SAMPLE_FACTOR * 3 * pp or int(opts["global_batch"]) % per:
            continue
        it, wall = {}, {}
        for mb in (pp, 2 * pp, 3 * pp):
            t0 = time.perf_counter()
            o = ReplayOptions.from_mapping({**opts, "global_batch": mb * per}, p, f"row {k + 2}")
            it[mb] = predict(None, o, breakdown=False).iteration_time_s
            wall[mb] = time.perf_counter() - t0
        used = it[2 * pp] + (m - 2 * pp) * (it[3 * pp] - it[2 * pp]) / pp
        cheap = it[pp] + (m - pp) * (it[2 * pp] - it[pp]) / pp
        rel = cheap / used - 1.0
        worst = max(worst, abs(rel))
        print(f"{label:60s} m {m:4d}  (2pp, 3pp) {used:9.4f} s  (pp, 2pp) {cheap:9.4f} s  {rel:+.2%}  "
              f"wall s {wall[pp]:.1f} / {wall[2 * pp]:.1f} / {wall[3 * pp]:.1f}", flush=True)
    print(f"largest difference of the (pp, 2pp) extrapolation: {worst:.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
