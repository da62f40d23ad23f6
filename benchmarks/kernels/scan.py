"""The Mamba-2 chunked scan's rate (the ``scan`` op class of the GPU profiles).

    python -m benchmarks.kernels.scan

The scan's matmul FLOPs per token (tracesim.template.mamba_ops): ``heads P (4 N + Q) + 2 Q N G``.
Calibrated on the one kernel-level table found (data/scan.csv, source VLLM-27299: the
state-spaces/mamba Triton forward on an H100, 4k-256k tokens): the rate is the geometric
mean of the calibrated rows' TFLOP/s, and its fraction of the H100's BF16 dense peak is the
profile's ``scan`` efficiency. Other GPUs take the same fraction of their own BF16 peak
(derived: the same Triton kernels, no measurement of them there). Rows of short sequences,
whose time is the five kernels' Python launches, are printed and not used.
"""

from __future__ import annotations

import math

from benchmarks.kernels import kernel_fit as kf

#: the profile the table was measured on, and its BF16 dense peak (TFLOP/s)
CALIBRATION_DEVICE = ("h100", 989.4)


def flops_per_token(row: dict[str, str]) -> float:
    """The scan's forward matmul FLOPs per token of one table row (module docstring)."""
    h, p, n = int(row["heads"]), int(row["head_dim"]), int(row["d_state"])
    g, q = int(row["groups"]), int(row["chunk"])
    return h * p * (4 * n + q) + 2 * q * n * g


def tflops(row: dict[str, str]) -> float:
    """The row's achieved TFLOP/s."""
    return float(row["tokens_per_s"]) * flops_per_token(row) / 1e12


def scan_fraction() -> tuple[float, str]:
    """(efficiency, source text): the calibrated rows' geometric-mean rate over the peak."""
    rows = [r for r in kf.rows("scan") if r["role"] == "calibrated"]
    rate = math.exp(sum(math.log(tflops(r)) for r in rows) / len(rows))
    name, peak = CALIBRATION_DEVICE
    e = round(rate / peak, 4)
    lo, hi = min(int(r["seq_len"]) for r in rows), max(int(r["seq_len"]) for r in rows)
    return e, (f"state-spaces/mamba SSD forward (mamba_chunk_scan_combined, five Triton "
               f"kernels) on {name}: {rate:.1f} TFLOP/s geometric mean over {len(rows)} rows "
               f"({lo}-{hi} tokens, 128 heads, P 64, N 128, G 1, Q 256) of its matmul FLOPs, "
               f"/ {peak} BF16 peak = {e} (data/scan.csv, source VLLM-27299)")


def main() -> None:
    for r in kf.rows("scan"):
        print(f"{r['seq_len']:>7} tokens  {tflops(r):6.1f} TFLOP/s  {r['role']}")
    e, text = scan_fraction()
    print(f"scan efficiency {e}: {text}")


if __name__ == "__main__":
    main()
