"""A GEMM beside an all-gather on one H100 node: how much longer the overlapped pair takes
than its longer part, against the replay's interference (SMs taken, memory time).

    python -m benchmarks.kernels.overlap_contention

Data (data/overlap.csv, source PT-AG-MATMUL): an 8192^3 FP16 matmul and a 64 MiB-per-rank
all-gather (512 MiB gathered) on 8 H100, one after the other, overlapped with NCCL's kernels
on SMs, and overlapped on copy engines. The replay's parts: the matmul from the ``h100``
profile at its kernel benchmarks' rate (a 200-iteration benchmark), the all-gather from the
network model on ``h100x8`` (NCCL's ring over NVLink). Overlapped, the GEMM loses the SMs the
transfer holds (16 for NCCL's kernels, 1 for a copy-engine transfer's flag) for the time they
overlap, and, with the memory contention of :mod:`tracesim.build.overlap`, the memory time of
the bytes the transfer moves through each GPU (7/8 of 512 MiB sent and as much received, at
3.35 TB/s). Nothing is fitted: the contention factor is 1 (the bytes' own memory time).
"""

from __future__ import annotations

import functools

from benchmarks.kernels import kernel_fit as kf
from tracesim.build.overlap import CONTENTION, NCCL_SMS, Overlaps
from tracesim.catalog import load_cluster
from tracesim.hardware.costmodel import op_time_ns
from tracesim.hardware.device import get_device
from tracesim.network.model import collective_time_ns

#: SMs each kind of overlapped transfer holds (NCCL's kernels; a copy-engine transfer's flag)
SMS = {"overlap-sm": NCCL_SMS, "overlap-copy-engine": 1}


@functools.cache
def measured() -> dict[str, float]:
    """The data's times (ms) by mode."""
    return {r["mode"]: float(r["ms"]) for r in kf.rows("overlap")}


@functools.cache
def parts() -> tuple[float, float, int]:
    """(GEMM ms, all-gather ms, gathered bytes) as the replay times them alone."""
    r = kf.rows("overlap")[0]
    m, n, k = (int(r[c]) for c in ("gemm_m", "gemm_n", "gemm_k"))
    dev = get_device("h100").burst()
    gemm = op_time_ns(dev, "gemm", 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n), r["dtype"],
                      shape=(1, m, n, k)) / 1e6
    gpus = int(r["gpus"])
    gathered = int(r["all_gather_mib_per_rank"]) * gpus << 20
    ag = collective_time_ns(load_cluster("h100x8"), "all_gather", gpus, gathered) / 1e6
    return gemm, ag, gathered


def modelled(mode: str, contention: bool = True) -> float:
    """The replay's time (ms) of ``mode``: sequential, or overlapped (module docstring)."""
    gemm, ag, nbytes = parts()
    if mode == "sequential":
        return gemm + ag
    dev = get_device("h100")
    ov = Overlaps(tp=int(kf.rows("overlap")[0]["gpus"]), interference=True,
                  sm_count=dev.sm_count, hbm_Bps=dev.hbm_GBps * 1e9 if contention else 0.0)
    slowed = ov.slowed(gemm * 1e6, SMS[mode], ag * 1e6) / 1e6
    return max(slowed + ov.contention_ns("all_gather", nbytes, gemm * 1e6) / 1e6, ag)


def main() -> None:
    gemm, ag, _ = parts()
    print(f"alone: GEMM {gemm:.3f} ms, all-gather {ag:.3f} ms (contention factor {CONTENTION})")
    for mode, ms in measured().items():
        line = f"{mode:>20}: measured {ms:.2f} ms, replay {modelled(mode):.3f} ({modelled(mode) / ms - 1:+.1%})"
        if mode != "sequential":
            line += f", SMs only {modelled(mode, False):.3f} ({modelled(mode, False) / ms - 1:+.1%})"
        print(line)


if __name__ == "__main__":
    main()
