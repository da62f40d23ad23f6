"""Print the calibration table of docs/network.md: nccl-tests busbw, measured vs simulated.

Usage: .venv/bin/python benchmarks/network/network_calibration.py [path/to/nccl_busbw.csv]

Default reference file: ../shared/reference/nccl_busbw.csv beside the checkout. Every row is
simulated at 8 GiB on the shipped cluster specs (benchmarks.network.calibration); the error is
against the published value (0 inside a published range).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.network.calibration import compare  # noqa: E402


def main() -> None:
    default = Path(__file__).resolve().parents[3] / "shared" / "reference" / "nccl_busbw.csv"
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reference", nargs="?", type=Path, default=default,
                    help="nccl-tests bus bandwidth CSV (default: ../shared/reference/nccl_busbw.csv)")
    ref = ap.parse_args().reference
    rows = compare(ref)
    print("| reference system / collective | measured busbw (GB/s) | simulated case | simulated busbw (GB/s) | error |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.system} / {r.collective} | {r.reference} | {r.case.label} "
              f"(`{r.case.cluster}`) | {r.simulated_GBps:.1f} | {r.error * 100:+.1f}% |")
    worst = max(abs(r.error) for r in rows)
    mean = sum(abs(r.error) for r in rows) / len(rows)
    print(f"\n{len(rows)} cases, mean |error| {mean * 100:.1f}%, max |error| {worst * 100:.1f}%")


if __name__ == "__main__":
    main()
