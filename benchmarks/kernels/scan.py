"""The Mamba-2 chunked scan's rate (the ``scan`` op class of the GPU profiles).

    python -m benchmarks.kernels.scan

The scan's matmul FLOPs per token (tracesim.template.mamba_ops): ``heads P (4 N + Q) + 2 Q N G``.
Calibrated per GPU family on the kernel-level tables found (data/scan.csv), each the
state-spaces/mamba Triton forward (``mamba_chunk_scan_combined``'s five kernels): the rate is
the geometric mean of a table's calibrated rows' TFLOP/s, and its fraction of that GPU's BF16
dense peak is the profile's ``scan`` efficiency.

* Hopper (``h100``; ``h200`` and the GPUs without a table take the same fraction of their
  own BF16 peak, derived): source VLLM-27299, an H100 at 4k-256k tokens. Its rows of short
  sequences, whose time is the five kernels' Python launches, are not used.
* Blackwell (``b200``; ``gb200``, ``b300``, ``gb300`` the same fraction of their own BF16
  peak, derived: the same kernels on the same SM generation): source FLASHINFER-2709, a B200
  under CUDA graphs. Used: the rows with at least the H100 table's parallelism (128
  sequence-heads: batch x heads) and sequences of at least 4 chunks (the state passing
  between chunks that training's 4k-8k token sequences run); the others are printed and not
  used. The Triton kernels run there at about the H100's rate, not at Blackwell's tensor-core
  peak.
"""

from __future__ import annotations

import math

from benchmarks.kernels import kernel_fit as kf

#: the profiles the tables were measured on, and their BF16 dense peaks (TFLOP/s)
CALIBRATION_DEVICES = {"h100": 989.4, "b200": 2250.0}
#: profiles that take another profile's fraction of peak (the rest take the h100's)
FAMILY = {"gb200": "b200", "b300": "b200", "gb300": "b200"}


def flops_per_token(row: dict[str, str]) -> float:
    """The scan's forward matmul FLOPs per token of one table row (module docstring)."""
    h, p, n = int(row["heads"]), int(row["head_dim"]), int(row["d_state"])
    g, q = int(row["groups"]), int(row["chunk"])
    return h * p * (4 * n + q) + 2 * q * n * g


def tflops(row: dict[str, str]) -> float:
    """The row's achieved TFLOP/s."""
    return float(row["tokens_per_s"]) * flops_per_token(row) / 1e12


def tokens(row: dict[str, str]) -> int:
    """The tokens of one timed call: batch x sequence length."""
    return int(row["batch"]) * int(row["seq_len"])


def calibration_device(name: str) -> str:
    """The profile whose table sets profile ``name``'s scan efficiency."""
    return name if name in CALIBRATION_DEVICES else FAMILY.get(name, "h100")


def scan_fraction(name: str = "h100") -> tuple[float, str]:
    """(efficiency, source text) of profile ``name``'s calibration table: the calibrated rows'
    geometric-mean rate over the measured GPU's BF16 peak."""
    cal = calibration_device(name)
    rows = [r for r in kf.rows("scan") if r["role"] == "calibrated" and r["profile"] == cal]
    rate = math.exp(sum(math.log(tflops(r)) for r in rows) / len(rows))
    peak = CALIBRATION_DEVICES[cal]
    e = round(rate / peak, 4)
    lo, hi = min(tokens(r) for r in rows), max(tokens(r) for r in rows)
    r0 = rows[0]
    shape = (f"{r0['heads']} heads, P {r0['head_dim']}, N {r0['d_state']}, G {r0['groups']}, "
             f"Q {r0['chunk']}")
    batches = sorted({int(r["batch"]) for r in rows})
    batch = f"batch {batches[0]}" if len(batches) == 1 else f"batch {batches[0]}-{batches[-1]}"
    return e, (f"state-spaces/mamba SSD forward (mamba_chunk_scan_combined, five Triton "
               f"kernels) on {cal}: {rate:.1f} TFLOP/s geometric mean over {len(rows)} rows "
               f"({lo}-{hi} tokens, {batch}, {shape}) of its matmul FLOPs, / {peak} BF16 peak = "
               f"{e} (data/scan.csv, source {r0['source']})")


def main() -> None:
    for r in kf.rows("scan"):
        print(f"{r['profile']:>5} batch {r['batch']:>4} x {r['seq_len']:>6} tokens  "
              f"{tflops(r):6.1f} TFLOP/s  {r['role']}")
    for name in CALIBRATION_DEVICES:
        e, text = scan_fraction(name)
        print(f"{name} scan efficiency {e}: {text}")


if __name__ == "__main__":
    main()
