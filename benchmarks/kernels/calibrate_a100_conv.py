#!/usr/bin/env python3
"""Calibrate the A100 TF32 implicit-GEMM convolution plateau on the AlexNet trace, and show
why the recommendation-model GEMM curve does not describe those kernels.

1. AlexNet (``a100_alexnet_cuda_sync.json.gz``, the calibration trace): per TF32 3x3
   convolution (cuDNN ``sm80_xmma_fprop_implicit_gemm``), e_max = flops_eff / (peak *
   (t_kernel - launch - t_ramp)); the median is
   ``benchmarks.kernels.conv_tf32.A100_TF32_CONV_FROM_TRACE["e_max"]``.
2. ``sampled_128rank_r0`` (the GEMM curve's calibration trace): its TF32 GEMMs with aligned
   loads (the ones the GEMM curve is fitted on), split by regime from their shapes and launch
   grids (never their durations): at least two full waves of tiles, no split-K and k >= 512
   ("steady state"), against the rest. Efficiency = flops_eff / (peak * (t - launch)), and
   the e_max it implies on the curve's shape, flops_eff / (peak * (t - launch - t_ramp)).

The ResNet-50 A100 trace (the test) is not read. Usage:
``.venv/bin/python benchmarks/kernels/calibrate_a100_conv.py [TRACE_DIR]``
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.kernels import conv_tf32  # noqa: E402
from benchmarks.kernels.gemm_shape import _assign, gemm_passes, kernel_tile  # noqa: E402
from benchmarks.kernels.kernel_ablation import calibrate_on_alexnet  # noqa: E402
from benchmarks.kernels.kernel_eval import evaluate, trace_groups  # noqa: E402
from tracesim.hardware.device import get_device  # noqa: E402


def regime(row: pd.Series, sm_count: int) -> str:
    """Regime of a single-pass GEMM from its shape, tile and launch grid."""
    passes = gemm_passes(row["name"], row["shapes"], row["flops"], row["kernel_names"])
    if len(passes) != 1:
        return "other"
    p, ks = passes[0], _assign(passes, row["kernel_names"])[0]
    tile = kernel_tile(ks[0]) if ks else None
    ctas = dict(zip(row["kernel_names"], row["kernel_ctas"], strict=True)).get(ks[0], 0) if ks else 0
    if tile is None or ctas <= 0:
        return "other"
    tiles = p.batch * min(math.ceil(p.m / tile[0]) * math.ceil(p.n / tile[1]),
                          math.ceil(p.m / tile[1]) * math.ceil(p.n / tile[0]))
    split = max(1, round(ctas / tiles))
    if split > 1:
        return "split-K"
    if p.k < 512:
        return "k < 512"
    if ctas < 2 * sm_count:
        return "under two waves"
    return "steady state (>= 2 waves, k >= 512, no split-K)"


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="?", type=Path, default=ROOT.parent / "shared" / "traces" / "public",
                    help="folder of the public traces (default: ../shared/traces/public)")
    root = ap.parse_args().traces
    cal = conv_tf32.A100_TF32_CONV_FROM_TRACE
    fit = calibrate_on_alexnet(root / cal["trace"], cal["device"])
    print(f"== TF32 implicit-GEMM convolution plateau, {cal['trace']} on {cal['device']}")
    print(conv_tf32.summary(fit))
    print(f"shipped: e_max {cal['e_max']} ({cal['min']}..{cal['max']}, n {cal['n']})")

    dev = get_device("a100")
    rows = evaluate(trace_groups(root / "sampled_128rank_r0.json.gz"), dev, ("gemm",))
    rows = rows[(rows["math_dtype"] == "tf32") & (rows["min_alignment"] != 1)
                & (rows["flops_eff"] > 1e9)].copy()
    busy = rows["kernel_ns"].to_numpy(float) * 1e-9 - dev.launch_overhead_us * 1e-6
    rows["eff"] = rows["flops_eff"] / (dev.peak_flops("tf32") * busy)
    rows["e_max"] = rows["flops_eff"] / (dev.peak_flops("tf32") * (busy - conv_tf32.CONV_T_RAMP_US * 1e-6))
    rows["regime"] = [regime(r, dev.sm_count) for _, r in rows.iterrows()]
    table = rows.groupby("regime").agg(
        n=("eff", "size"), gflop_eff=("flops_eff", lambda s: float(np.median(s)) / 1e9),
        eff_median=("eff", "median"), eff_p10=("eff", lambda s: s.quantile(0.1)),
        eff_p90=("eff", lambda s: s.quantile(0.9)), e_max_median=("e_max", "median")).reset_index()
    print("\n== sampled_128rank_r0: aligned TF32 GEMMs over 1 GFLOP (effective), by regime")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"all: n {len(rows)}, median {rows['eff'].median():.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
