#!/usr/bin/env python3
"""Self-replay accuracy table (markdown) for traces and bundles.

Usage: .venv/bin/python benchmarks/traces/accuracy_selfreplay.py [PATH ...]
(default: every public trace with ProfilerStep events in ../shared/traces/public).
Prints one row per rank and step: measured, predicted, error, and for bundles the
unprofiled comparison. The numbers in docs/accuracy.md come from this script.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tracesim.errors import InputError
from tracesim.report.steps import self_replay
from tracesim.trace.sources import load_source

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ROOT.parent / "shared" / "traces" / "public"


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="*", type=Path, help="traces or bundles (default: the "
                    "single-file traces of ../shared/traces/public)")
    paths = ap.parse_args(argv).traces or sorted(
        p for p in PUBLIC.glob("*.json.gz") if ".et." not in p.name
    )
    print("| source | rank | step | measured ms | predicted ms | error | GPU start MAE us |"
          " unprofiled measured ms | unprofiled predicted ms | unprofiled error |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for p in paths:
        try:
            results = self_replay(load_source(p))
        except InputError as exc:
            print(f"| {p.name} | | | | | cannot replay: {exc.message} | | | | |")
            continue
        for r in results:
            mae = f"{r.gpu_start_mae_us:.1f}" if r.gpu_start_mae_us is not None else ""
            un = ("", "", "")
            if r.rel_error_unprofiled is not None:
                un = (f"{r.measured_unprofiled_s * 1e3:.2f}", f"{r.predicted_unprofiled_s * 1e3:.2f}",
                      f"{r.rel_error_unprofiled * 100:+.2f}%")
            print(f"| {p.name} | {r.rank} | {r.step} | {r.measured_s * 1e3:.3f} | "
                  f"{r.predicted_s * 1e3:.3f} | {r.rel_error * 100:+.3f}% | {mae} | {un[0]} | {un[1]} | {un[2]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
