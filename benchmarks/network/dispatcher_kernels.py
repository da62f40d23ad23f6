"""The MoE dispatch kernels' published benchmarks next to the deduplicated all-to-all.

    .venv/bin/python benchmarks/network/dispatcher_kernels.py

Rows (GB/s as each benchmark counts them; the model's time from
``tracesim.network.collectives.dedup`` on a shipped cluster spec, or an H800 variant of the
H100 specs with 200 GB/s NVLink per direction):

* HybridEP on GB200, one NVL72 domain, 8-36 ranks, 32 SMs, "Kernel Only" (deepseek-ai/DeepEP
  branch hybrid-ep, ``docs/README_Hybrid-EP.md``): received tokens' bytes, the own rank's
  included; 4096 tokens x 7168 BF16, top 8 of 8 experts per rank. Calibrates the NVLink
  efficiency (0.70).
* HybridEP across nodes of 8 H100 (400 Gb/s NICs), 16-64 ranks, 8 and 16 SMs, "Kernel Only":
  "IB" bytes, a token once per node it reaches, its own node included
  (``count_rdma_send_from_routing_map``). Calibrates the NIC efficiency (0.81).
* DeepEP on H800 (deepseek-ai/DeepEP ``docs/legacy.md``): intranode 8 ranks and internode
  16-64 ranks, DeepSeek-V3 routing (256 experts, top 8 from 4 of 8 groups), FP8 dispatch,
  counted the same ways. Not used to set anything: the check.

The tests (``tests/test_network_dedup.py``) assert these rows from the same code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from tracesim.catalog import load_cluster
from tracesim.network.collectives.dedup import algorithm_name, kept_share
from tracesim.network.model import collective_time_ns
from tracesim.specs.cluster import ClusterSpec, cluster_from_dict

TOKENS, HIDDEN, TOP_K = 4096, 7168, 8
BF16_ROW = HIDDEN * 2
FP8_ROW = HIDDEN * (1 + 4 / 128)  # FP8 values and a 4-byte scale per 128


@dataclass(frozen=True)
class Row:
    """One published measurement: the kernel, where it ran, what it counts, its role."""

    source: str
    system: str  # "gb200", "h100" or "h800"
    ranks: int
    counted: str  # "received" (rank bytes) or "nodes" (a token once per node)
    row_bytes: float
    experts: int
    groups: int
    group_topk: int
    measured: tuple[float, ...]  # GB/s: dispatch, combine (and per SM count)
    role: str  # "calibration" or "check"


ROWS = (
    *(Row("HybridEP, 32 SMs, kernel", "gb200", n, "received", BF16_ROW, 8 * n, 0, 0, m, "calibration")
      for n, m in ((8, (764.03, 737.13)), (16, (706.95, 666.26)), (24, (665.97, 639.80)),
                   (32, (642.23, 605.15)), (36, (632.31, 596.99)))),
    *(Row("HybridEP, 8 / 16 SMs, kernel", "h100", n, "nodes", BF16_ROW, 8 * n, 0, 0, m, "calibration")
      for n, m in ((16, (76.80, 71.71, 68.00, 62.95)), (32, (54.50, 57.69, 56.40, 57.46)),
                   (64, (50.55, 49.97, 51.03, 49.77)))),
    Row("DeepEP intranode", "h800", 8, "received", FP8_ROW, 256, 8, 4, (153, 158), "check"),
    *(Row("DeepEP internode", "h800", n, "nodes", FP8_ROW, 256, 8, 4, m, "check")
      for n, m in ((16, (43, 43)), (32, (58, 57)), (64, (51, 50)))),
)


def cluster(system: str) -> ClusterSpec:
    """The spec a row runs on: GB200 NVL72, 16 x 8 H100, or that with H800 NVLink."""
    if system == "gb200":
        return load_cluster("gb200-nvl72")
    if system == "h100":
        return load_cluster("h100x128")
    spec = yaml.safe_load((Path(__file__).parents[2] / "topologies" / "h100x128.yaml").read_text())
    spec["intra_node"]["bandwidth_GBps"] = 200
    return cluster_from_dict(spec, "h800x128.yaml")


def modelled(row: Row) -> float:
    """The model's GB/s for ``row``, counted as its benchmark counts."""
    c = cluster(row.system)
    t = collective_time_ns(c, "all_to_all", row.ranks, int(TOKENS * TOP_K * row.row_bytes),
                           algorithm_name(row.experts, TOP_K, row.groups, row.group_topk)) / 1e9
    groups, topk = max(row.groups, 1), max(row.group_topk, 1)
    parts = row.ranks if row.counted == "received" else row.ranks // c.gpus_per_node
    copies = TOP_K * kept_share(row.experts, TOP_K, parts, groups, topk)
    return TOKENS * copies * row.row_bytes / t / 1e9


def main() -> None:
    print(f"{'kernel':30s} {'system':6s} {'ranks':>5s}  {'role':11s} {'model':>7s}  measured (error)")
    for row in ROWS:
        m = modelled(row)
        errs = ", ".join(f"{v:g} ({m / v - 1:+.0%})" for v in row.measured)
        print(f"{row.source:30s} {row.system:6s} {row.ranks:5d}  {row.role:11s} {m:7.1f}  {errs}")


if __name__ == "__main__":
    main()
