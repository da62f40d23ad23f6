"""Simulated nccl-tests bus bandwidth next to the published figures of ``nccl_busbw.csv``.

Each row of the reference file (``../shared/reference/nccl_busbw.csv``) is matched to one or
more simulated cases on the shipped cluster specs, with the efficiencies set once in those
specs. Used by ``benchmarks/network/network_calibration.py`` (the table in docs/network.md) and by the
tests, so the documented numbers and the asserted ones come from the same code.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from tracesim.catalog import load_cluster
from tracesim.network.model import collective_time_ns
from tracesim.specs.cluster import ClusterSpec

#: message size used for "large" (8 GiB, nccl-tests' usual largest -e 8G)
LARGE_BYTES = 8 << 30


@dataclass(frozen=True)
class Case:
    """One simulated nccl-tests run: cluster, collective, ranks, optional algorithm."""

    cluster: str
    collective: str
    ranks: tuple[int, ...]
    algo: str | None = None
    label: str = ""


def _a100_3x4nic() -> ClusterSpec:
    """The 3-node A100 system of nccl-tests issue 119: 8 GPUs and 4 x 200G NICs per node."""
    base = load_cluster("a100-selene").with_inter_node(nics_per_node=4)
    return base.replace(name="a100-3node-4nic", nodes=3)


_SPECIAL = {"a100-3node-4nic": _a100_3x4nic}

#: reference row (system prefix, collective prefix) -> simulated cases
CASES: dict[tuple[str, str], tuple[Case, ...]] = {
    ("H100 8-GPU NVLink", "all_reduce NVLS"): (
        Case("h100x8", "all_reduce", tuple(range(8)), "nvls", "8 x H100, all_reduce, nvls"),
    ),
    ("H100 NVLink (one node)", "all_gather"): (
        Case("h100x8", "all_gather", tuple(range(8)), None, "8 x H100, all_gather"),
        Case("h100x8", "reduce_scatter", tuple(range(8)), None, "8 x H100, reduce_scatter"),
        Case("h100x8", "all_reduce", tuple(range(8)), "ring", "8 x H100, all_reduce, ring"),
    ),
    ("H100 8-GPU (one node)", "all_reduce"): (
        Case("h100x8", "all_reduce", tuple(range(8)), None, "8 x H100, all_reduce (auto)"),
    ),
    ("H200 8-GPU", "all_reduce"): (
        Case("h200x8", "all_reduce", tuple(range(8)), None, "8 x H200, all_reduce (auto)"),
    ),
    ("A100-SXM 8-GPU", "all_reduce"): (
        Case("a100-selene", "all_reduce", tuple(range(8)), None, "8 x A100, all_reduce (auto)"),
    ),
    ("ConnectX-7 NDR 400", "per NIC"): (
        Case("h100x128", "all_reduce", (0, 8), None, "2 nodes x 1 GPU, 400G NIC, all_reduce"),
    ),
    ("HDR 200", "per NIC"): (
        Case("a100-selene", "all_reduce", (0, 8), None, "2 nodes x 1 GPU, 200G NIC, all_reduce"),
    ),
    ("A100 3 nodes x 4 x 200G", "all_reduce"): (
        Case("a100-3node-4nic", "all_reduce", tuple(range(24)), None,
             "3 nodes x 8 A100, 4 x 200G NICs, all_reduce"),
    ),
}


def cluster_for(case: Case) -> ClusterSpec:
    """The cluster spec a case runs on (shipped specs, or the documented variant)."""
    return _SPECIAL[case.cluster]() if case.cluster in _SPECIAL else load_cluster(case.cluster)


def busbw_GBps(case: Case, msg_bytes: int = LARGE_BYTES) -> float:
    """Simulated nccl-tests busbw (GB/s) of a case at ``msg_bytes``."""
    from tracesim.network.ctas import bus_factor

    t_ns = collective_time_ns(cluster_for(case), case.collective, case.ranks, msg_bytes, case.algo)
    return msg_bytes / t_ns * bus_factor(case.collective, len(case.ranks))


def parse_busbw(text: str) -> tuple[float, float]:
    """A reference busbw cell as a (low, high) range: "~480" -> (480, 480), "46-48" -> (46, 48)."""
    m = re.match(r"\s*~?\s*(\d+(?:\.\d+)?)(?:\s*-\s*(\d+(?:\.\d+)?))?", text)
    if not m:
        raise ValueError(f"cannot read a bandwidth from {text!r}")
    lo = float(m.group(1))
    hi = float(m.group(2)) if m.group(2) else lo
    return lo, hi


def rel_error(value: float, lo: float, hi: float) -> float:
    """Signed relative error of ``value`` against the range [lo, hi] (0 inside it)."""
    if value < lo:
        return (value - lo) / lo
    if value > hi:
        return (value - hi) / hi
    return 0.0


@dataclass(frozen=True)
class Comparison:
    system: str
    collective: str
    reference: str
    source: str
    case: Case
    simulated_GBps: float
    error: float


def compare(reference_csv: str | Path) -> list[Comparison]:
    """Every reference row against its simulated case(s); raises if a row has no case."""
    out = []
    with open(reference_csv, newline="") as fh:
        for row in csv.DictReader(fh):
            key = next(
                (k for k in CASES if row["system"].startswith(k[0]) and row["collective"].startswith(k[1])),
                None,
            )
            if key is None:
                raise KeyError(f"no simulated case for reference row {row['system']!r} / {row['collective']!r}")
            lo, hi = parse_busbw(row["busbw_GBps"])
            for case in CASES[key]:
                sim = busbw_GBps(case)
                out.append(
                    Comparison(row["system"], row["collective"], row["busbw_GBps"], row["source"],
                               case, sim, rel_error(sim, lo, hi))
                )
    return out
