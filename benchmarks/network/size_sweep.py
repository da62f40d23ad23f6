"""Measured nccl-tests sweeps (1 KiB to 8 GiB) against the simulated collective, size by size.

Usage: .venv/bin/python benchmarks/network/size_sweep.py [path/to/nccl_sweeps.csv]

The reference calibration (``benchmarks/network/calibration.py``) fits the large-message end
only; these sweeps are held out: nothing in the cluster specs or the network model was set
from them. Data: ``benchmarks/network/data/nccl_sweeps.csv`` (sources in
``benchmarks/kernels/data/SOURCES.md``, key AZ-ABG). Prints one row per size (measured and
simulated time and busbw, the simulated time over the measured) and the ratio per size band.
"""

from __future__ import annotations

import csv
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tracesim.catalog import load_cluster  # noqa: E402
from tracesim.network.ctas import bus_factor  # noqa: E402
from tracesim.network.model import collective_time_ns  # noqa: E402
from tracesim.specs.cluster import ClusterSpec  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "nccl_sweeps.csv"

#: size bands of the summary: (label, lowest size, highest size) in bytes
BANDS = (("1-64 KiB (latency)", 1 << 10, 64 << 10), ("128 KiB-512 KiB", 128 << 10, 512 << 10),
         ("1-32 MiB", 1 << 20, 32 << 20), ("64-512 MiB", 64 << 20, 512 << 20),
         ("1-8 GiB", 1 << 30, 8 << 30))


@dataclass(frozen=True)
class Point:
    """One measured size and its simulation (times in microseconds)."""

    system: str
    cluster: str
    ranks: int
    collective: str
    algo: str
    size_label: str
    size_bytes: int
    measured_busbw: float
    simulated_busbw: float

    @property
    def factor(self) -> float:
        return bus_factor(self.collective, self.ranks)

    @property
    def measured_us(self) -> float:
        return self.size_bytes / (self.measured_busbw / self.factor) / 1e3

    @property
    def simulated_us(self) -> float:
        return self.size_bytes / (self.simulated_busbw / self.factor) / 1e3

    @property
    def time_ratio(self) -> float:
        """Simulated over measured time (< 1: the model is faster than the measurement)."""
        return self.simulated_us / self.measured_us


def sweep(path: str | Path = DATA) -> list[Point]:
    """Every row of the sweep file, simulated on its cluster spec with its algorithm."""
    out = []
    clusters: dict[str, ClusterSpec] = {}  # one spec read per cluster, not per size
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            ranks = tuple(range(int(row["ranks"])))
            size = int(row["size_bytes"])
            if row["cluster"] not in clusters:
                clusters[row["cluster"]] = load_cluster(row["cluster"])
            t_ns = collective_time_ns(clusters[row["cluster"]], row["collective"], ranks, size,
                                      row["algo"] or None)
            sim = size / t_ns * bus_factor(row["collective"], len(ranks))
            out.append(Point(row["system"], row["cluster"], len(ranks), row["collective"], row["algo"],
                             row["size_label"], size, float(row["busbw_GBps"]), sim))
    return out


def band_ratios(points: list[Point]) -> dict[tuple[str, str], tuple[float, float]]:
    """(system, band) -> (lowest, highest) simulated / measured time in the band."""
    out = {}
    for p_sys in dict.fromkeys(p.system for p in points):
        for label, lo, hi in BANDS:
            r = [p.time_ratio for p in points if p.system == p_sys and lo <= p.size_bytes <= hi]
            if r:
                out[(p_sys, label)] = (min(r), max(r))
    return out


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweeps", nargs="?", type=Path, default=DATA,
                    help="nccl-tests sweep CSV (default: benchmarks/network/data/nccl_sweeps.csv)")
    points = sweep(ap.parse_args().sweeps)
    print("| system | collective (algorithm) | size | measured us | simulated us | measured busbw | "
          "simulated busbw | simulated / measured time |")
    print("|---|---|---|---|---|---|---|---|")
    for p in points:
        print(f"| {p.system} | {p.collective} ({p.algo}) | {p.size_label} | {p.measured_us:,.1f} | "
              f"{p.simulated_us:,.1f} | {p.measured_busbw:.2f} | {p.simulated_busbw:.2f} | "
              f"{p.time_ratio:.2f} |")
    print("\n| system | sizes | simulated / measured time (lowest - highest) |")
    print("|---|---|---|")
    for (p_sys, label), (lo, hi) in band_ratios(points).items():
        print(f"| {p_sys} | {label} | {lo:.2f} - {hi:.2f} |")


if __name__ == "__main__":
    main()
