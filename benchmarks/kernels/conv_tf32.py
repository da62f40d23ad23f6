"""TF32 efficiency of tensor-core implicit-GEMM convolution kernels, calibrated on AlexNet.

cuDNN runs most TF32 convolutions on A100 as implicit GEMMs (``sm80_xmma_fprop_implicit_gemm``,
CUTLASS ``ImplicitGemmConvolution`` / ``cutlass_tensorop_s1688fprop_optimized_tf32``): NHWC
activations and KRSC filters, both operands contiguous along the reduction (k = C*R*S), 128-bit
loads, several waves of large (128 x 128) tiles with a long k loop. In that steady state the
tensor cores run near their plateau. The A100 TF32 GEMM curve of the device profile
(:data:`benchmarks.kernels.datasheet.A100_TF32_FROM_TRACE`) was calibrated on a recommendation
model's cuBLAS GEMMs instead, most of them single-wave split-K or short-k GEMMs whose per-tile
prologue / epilogue is not amortised (median 0.47 of the peak; the few of its GEMMs with
several full waves and k >= 512 reach 0.64-0.76, docs/devices.md). Its plateau does not
describe these kernels, so they get a curve of their own, of the same shape as the shipped
GEMM curves (``eff(s) = e_max * s / (s + peak * e_max * t_ramp)``: the roofline plus a fixed
ramp per kernel), with ``e_max`` measured on an independent trace:

* calibration: ``a100_alexnet_cuda_sync.json.gz`` (torchvision AlexNet, batch 128, forward
  only, A100-PG509-200, TF32). Its three 3x3 convolutions run on
  ``sm80_xmma_fprop_implicit_gemm_indexed_tf32..._tilesize128x128x16`` (two passes, 6
  samples). Each sample's ``e_max = flops_eff / (peak * (t_kernel - launch - t_ramp))`` from the
  implicit-GEMM kernel's own duration, ``flops_eff`` being the FLOPs over the useful fraction of
  the shape model (tile padding, wave fill from the launch grid, L2 tile cap); ``e_max`` is
  their median (:func:`fit_conv_tf32`, :func:`benchmarks.kernels.kernel_ablation.calibrate_on_alexnet`): 0.822 (0.782-0.851).
* test: the ResNet-50 A100 trace (``a100_2rank_nccl``), never used to fit anything.

The layer shapes are rebuilt from the torchvision AlexNet layer list
(:func:`benchmarks.kernels.conv_shapes.annotate_alexnet`; the trace was recorded without
shapes; its weight uploads, 92,928 to 150,994,944 bytes, match that list) with the batch
(128) read off the first ReLU kernel's launch grid.

Scope: the curve is applied by :func:`benchmarks.kernels.kernel_eval.evaluate` to the share of
an op's work that such kernels run (:attr:`benchmarks.kernels.gemm_shape.Quantization.
conv_fraction`), for the TF32 math dtype on the profiles in :data:`CONV_TF32_E_MAX` (the
A100 chip: ``a100`` and ``a100-40gb`` differ only in memory). The replay cost model sees no
kernel names and keeps the GEMM curve. Forward kernels calibrate it; data- and
weight-gradient kernels of the same families use it too (same mainloop, untested there
except through the ResNet-50 test).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.kernels.gemm_shape import is_implicit_gemm_conv
from benchmarks.kernels.sizes import FLOP_SIZES
from tracesim.hardware.calibrate import saturating_curve
from tracesim.hardware.device import DeviceProfile, get_device, parse_profile

#: ramp time per kernel (us) of the curve: the 8 us of the GEMM curves this study was made with
CONV_T_RAMP_US: float = 8.0

#: the calibration (rerun: ``benchmarks/kernels/calibrate_a100_conv.py``, which prints every sample;
#: checked by tests/test_kernel_eval.py): trace, device profile, ramp, the median e_max over
#: the ``n`` samples and their range
A100_TF32_CONV_FROM_TRACE: dict[str, Any] = {
    "trace": "a100_alexnet_cuda_sync.json.gz",
    "device": "a100-40gb",
    "t_ramp_us": CONV_T_RAMP_US,
    "e_max": 0.822,
    "n": 6,
    "min": 0.782,
    "max": 0.851,
}

#: profile name -> e_max of the TF32 implicit-GEMM convolution curve (same chip, same value)
CONV_TF32_E_MAX: dict[str, float] = {
    "a100": A100_TF32_CONV_FROM_TRACE["e_max"],
    "a100-40gb": A100_TF32_CONV_FROM_TRACE["e_max"],
}


def conv_tf32_curve(e_max: float, peak_flops: float,
                    t_ramp_us: float = CONV_T_RAMP_US) -> list[list[float]]:
    """[FLOPs, efficiency] points of the implicit-GEMM convolution curve (peak in FLOP/s)."""
    return saturating_curve(e_max, peak_flops * e_max * t_ramp_us * 1e-6, FLOP_SIZES)


def conv_tf32_profile(device: DeviceProfile | str, e_max: float | None = None) -> DeviceProfile | None:
    """``device`` with its GEMM TF32 compute curve replaced by the implicit-GEMM convolution
    curve (``e_max`` given, or :data:`CONV_TF32_E_MAX` for the device); None when the device
    has no such calibration or no TF32 peak."""
    dev = get_device(device) if not isinstance(device, DeviceProfile) else device
    e = e_max if e_max is not None else CONV_TF32_E_MAX.get(dev.name)
    if not e or "tf32" not in dev.peak_tflops:
        return None
    return _with_curve(dev, round(float(e), 4))


def _with_curve(dev: DeviceProfile, e_max: float) -> DeviceProfile:
    raw: dict[str, Any] = json.loads(json.dumps(dict(dev.raw)))
    raw["efficiency"]["gemm"]["compute"]["tf32"] = conv_tf32_curve(e_max, dev.peak_flops("tf32"))
    return parse_profile(raw, None, f"device {dev.name} (implicit-GEMM conv tf32)")


# --------------------------------------------------------------------------- calibration


def fit_conv_tf32(rows: pd.DataFrame, device: DeviceProfile | str,
                  t_ramp_us: float = CONV_T_RAMP_US) -> dict[str, Any]:
    """Fit ``e_max`` of the TF32 implicit-GEMM convolution curve on evaluated rows.

    ``rows`` come from :func:`benchmarks.kernels.kernel_eval.evaluate` (with ``kernel_durs``,
    ``conv_fraction`` and ``flops_eff``). Samples: TF32 ops whose whole work runs on
    implicit-GEMM convolution kernels and whose memory time (bytes at the memory curve) is
    under half the kernels' time. Per sample ``e = flops_eff / (peak * (t - n * launch -
    t_ramp))`` with ``t`` the summed duration of its ``n`` implicit-GEMM kernels; the fit is
    the median. Returns e_max, n, the sample table and the samples' min / max.
    """
    dev = get_device(device) if not isinstance(device, DeviceProfile) else device
    peak = dev.peak_flops("tf32")
    launch = dev.launch_overhead_us * 1e-6
    mem = dev.class_efficiency("gemm").memory
    samples = []
    for _, r in rows.iterrows():
        if r["math_dtype"] != "tf32" or r.get("conv_fraction", 0.0) < 0.999:
            continue
        durs = [d for k, d in zip(r["kernel_names"], r["kernel_durs"], strict=True)
                if is_implicit_gemm_conv(k)]
        t = sum(durs) * 1e-9
        busy = t - len(durs) * launch - t_ramp_us * 1e-6
        t_mem = r["bytes"] / (dev.hbm_GBps * 1e9 * mem.at(r["bytes"]))
        if not durs or busy <= 0 or t_mem > 0.5 * t:
            continue
        samples.append({"op": r["name"], "shapes": r["shapes"], "flops": float(r["flops"]),
                        "useful": float(r["flops"] / r["flops_eff"]), "kernel_us": round(t * 1e6, 1),
                        "e_max": float(r["flops_eff"] / (peak * busy))})
    e = [s["e_max"] for s in samples]
    return {"e_max": round(float(np.median(e)), 3) if e else float("nan"), "n": len(e),
            "min": round(min(e), 3) if e else float("nan"),
            "max": round(max(e), 3) if e else float("nan"),
            "t_ramp_us": t_ramp_us, "samples": samples}


def summary(fit: Mapping[str, Any]) -> str:
    """One line per sample of a :func:`fit_conv_tf32` result, then the fit."""
    lines = [f"{s['op']} {s['shapes'][:40]} flops {s['flops'] / 1e9:.2f} G useful {s['useful']:.3f} "
             f"kernel {s['kernel_us']:.1f} us -> e_max {s['e_max']:.3f}" for s in fit["samples"]]
    lines.append(f"e_max = {fit['e_max']} (median of {fit['n']}, {fit['min']}..{fit['max']}, "
                 f"t_ramp {fit['t_ramp_us']} us)")
    return "\n".join(lines)
