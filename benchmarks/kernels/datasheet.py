"""The shipped GPU profiles: datasheet figures plus documented efficiency parameters.

``python -m benchmarks.kernels.datasheet`` regenerates ``tracesim/hardware/devices/<gpu>.yaml``
from :data:`SPECS` and :data:`EFFICIENCY`; the parameters and their sources are explained in
docs/devices.md. Curves are ``eff(s) = e_max * s / (s + s_half)`` sampled every half decade:
for compute ``s_half = peak * e_max * t_ramp`` (a fixed ramp time per kernel on top of the
roofline), for memory ``s_half = bandwidth * t_ramp``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tracesim.hardware.calibrate import saturating_curve

#: datasheet figures (dense, per device as torch sees it); devices.csv unless noted.
#: ``sm_count``: streaming multiprocessors (AMD: compute units per GCD) of the product's
#: datasheet / architecture whitepaper; ``l2_GBps``: L2 read bandwidth from the whitepapers'
#: bytes per clock at boost clock (V100: 2048 B/clk x 1530 MHz; A100: 5120 B/clk x 1410 MHz,
#: NVIDIA A100 Tensor Core GPU Architecture whitepaper), absent where no such figure is published
SPECS: dict[str, dict[str, Any]] = {
    "v100": dict(
        peak_tflops={"fp32": 15.7, "fp16": 125.0}, hbm_GBps=900.0, hbm_GiB=32, sm_count=80,
        l2_GBps=3133.0,
        aliases=["V100-SXM2-32GB", "Tesla V100-SXM2-32GB", "V100-SXM2-16GB", "V100"],
        patterns=["v100"],
        source="NVIDIA V100 datasheet (reference/devices.csv): fp16 tensor core 125, fp32 15.7 "
               "TFLOP/s, 0.9 TB/s; no bf16 or tf32 (bf16 runs at the fp32 rate)"),
    "a100": dict(
        peak_tflops={"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, hbm_GBps=2039.0,
        hbm_GiB=80, sm_count=108, l2_GBps=7219.0, aliases=["A100-SXM4-80GB", "A100-SXM-80GB", "A100 80GB", "A100",
                             "A100-PG509-210"],
        patterns=["a100"],
        source="NVIDIA A100 datasheet (reference/devices.csv), SXM4 80GB"),
    "a100-40gb": dict(
        peak_tflops={"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, hbm_GBps=1555.0,
        hbm_GiB=40, sm_count=108, l2_GBps=7219.0, aliases=["A100-SXM4-40GB", "A100-PCIE-40GB", "A100-PG509-200"],
        patterns=["a100.*40g", "a100-pg509-200"],
        source="NVIDIA A100 datasheet, 40GB variant: 1,555 GB/s (the A100-PG509-200 boards of "
               "the public traces report 39.4 GiB)"),
    "h100": dict(
        peak_tflops={"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1979.0},
        hbm_GBps=3350.0, hbm_GiB=80, sm_count=132, aliases=["H100-SXM5-80GB", "H100 80GB HBM3", "H100"],
        patterns=["h100"], source="NVIDIA H100 SXM5 datasheet (reference/devices.csv)"),
    "h200": dict(
        peak_tflops={"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1979.0},
        hbm_GBps=4800.0, hbm_GiB=141, sm_count=132, aliases=["H200-SXM-141GB", "H200"], patterns=["h200"],
        source="NVIDIA H200 SXM datasheet (reference/devices.csv)"),
    "b200": dict(
        peak_tflops={"fp32": 75.0, "tf32": 1100.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0},
        hbm_GBps=7700.0, hbm_GiB=180, sm_count=148, aliases=["B200-HGX", "B200"], patterns=["b200"],
        source="NVIDIA B200 (HGX) datasheet (reference/devices.csv); early spec 192 GB / 8 TB/s"),
    "mi250": dict(
        peak_tflops={"fp32": 45.25, "bf16": 181.0, "fp16": 181.0}, hbm_GBps=1638.4, hbm_GiB=64,
        sm_count=104,
        aliases=["MI250", "AMD Instinct MI250", "MI250-GCD"], patterns=[r"mi250(?!x)"],
        source="AMD Instinct MI250 datasheet, per GCD (torch sees each of the two GCDs as one "
               "device): fp32 matrix 45.25 (vector 22.6), fp16/bf16 181 TFLOP/s, 1.64 TB/s, 64 GB"),
}

#: bf16/fp16 GEMM plateau calibrated on ONE published measurement: row 1 of Megatron-LM
#: SC'21 Table 1 (GPT 1.7B, 32 A100, pure data parallelism, 137 TFLOP/s per GPU), the row
#: that isolates compute (no tensor or pipeline parallelism). Found by bisection with
#: benchmarks/kernels/calibrate_a100_gemm.py; rows 2-10 of that table are the held-out test
#: (tests/test_megatron_sc21.py, docs/accuracy.md). It replaces the 0.80 prior for every GPU's
#: tensor-core GEMMs (the only sustained-load bf16 figure we have), so cross-GPU ratios stay
#: the datasheet peak ratios.
GEMM_E_MAX_FROM_MEGATRON = 0.673

#: efficiency parameters: per class, e_max per math dtype, ramp time, spread (docs/devices.md)
EFFICIENCY: dict[str, dict[str, Any]] = {
    "gemm": dict(e_max={"default": GEMM_E_MAX_FROM_MEGATRON, "fp32": 0.85, "tf32": 0.60}, t_ramp_us=8.0, spread=0.25),
    "attention": dict(e_max={"default": 0.55}, t_ramp_us=10.0, spread=0.3),
    "memory": dict(e_max=0.80, t_ramp_us=1.0),
    "hopper_attention": dict(e_max={"default": 0.40}),
}

#: fixed time per kernel (us): the shortest kernels of the public A100 traces last 2-3 us
LAUNCH_OVERHEAD_US = 2.5

#: A100 TF32 GEMM curve calibrated on sampled_128rank_r0 (recommendation-model GEMMs) with
#: kernel_eval.fit_from_trace(min_alignment=4) under the shape model: sizes are effective
#: FLOPs (FLOPs over the useful fraction of the issued tile work from the kernels' launch
#: grids, tile padding and the L2 tile cap, gemm_shape.op_quantization); GEMMs whose kernels
#: use scalar loads (align1, 142 of 377) are left out. Tested on other traces (ResNet-50),
#: never on this one. Earlier curve, roofline on raw FLOPs, all GEMMs: 0.30 at 1.7 GFLOP,
#: 0.32 at 6.7 GFLOP, 0.41 at 69 GFLOP.
A100_TF32_FROM_TRACE: dict[str, Any] = {
    "trace": "sampled_128rank_r0.json.gz",
    "min_alignment": 4,
    "points": [[1.53e8, 0.0657], [9.177e8, 0.3753], [2.831e9, 0.466], [7.474e9, 0.466]],
    "spread": 0.311,
}


_FLOP_SIZES = [float(f"{10.0 ** (e / 2):.4g}") for e in range(10, 29)]   # 1e5 .. 1e14
_BYTE_SIZES = [float(f"{10.0 ** (e / 2):.4g}") for e in range(6, 23)]    # 1e3 .. 1e11


def _compute(peaks: dict[str, float], e_max: dict[str, float], t_ramp_us: float,
             keys: tuple[str, ...]) -> dict[str, list[list[float]]]:
    out = {}
    for key in keys:
        dt = "bf16" if key == "default" else key
        peak = peaks.get(dt) or peaks.get("fp16") or peaks["fp32"]
        e = e_max.get(key, e_max["default"])
        out[key] = saturating_curve(e, peak * 1e12 * e * t_ramp_us * 1e-6, _FLOP_SIZES)
    return out


def profile(name: str) -> dict[str, Any]:
    """The profile mapping of a shipped GPU."""
    spec = SPECS[name]
    peaks = spec["peak_tflops"]
    bw = spec["hbm_GBps"] * 1e9
    mem = EFFICIENCY["memory"]
    memory = saturating_curve(mem["e_max"], bw * mem["t_ramp_us"] * 1e-6, _BYTE_SIZES)
    g = EFFICIENCY["gemm"]
    gemm_keys = tuple(k for k in ("default", "fp32", "tf32") if k == "default" or k in peaks)
    a = dict(EFFICIENCY["attention"])
    if name in ("h100", "h200", "b200"):
        a["e_max"] = EFFICIENCY["hopper_attention"]["e_max"]
    flat = [[1.0, 1.0]]
    compute = _compute(peaks, g["e_max"], g["t_ramp_us"], gemm_keys)
    if name in ("a100", "a100-40gb"):
        compute["tf32"] = [list(p) for p in A100_TF32_FROM_TRACE["points"]]
    eff: dict[str, Any] = {
        "default": {"compute": flat, "memory": copy.deepcopy(memory), "spread": 0.3},
        "gemm": {"compute": compute, "memory": copy.deepcopy(memory), "spread": g["spread"]},
        "attention": {"compute": _compute(peaks, a["e_max"], a["t_ramp_us"], ("default",))["default"],
                      "memory": copy.deepcopy(memory), "spread": a["spread"]},
    }
    return {
        "name": name, "kind": "gpu", "source": spec["source"], "aliases": spec["aliases"],
        "patterns": spec["patterns"], "peak_tflops": peaks, "hbm_GBps": spec["hbm_GBps"],
        "hbm_GiB": spec["hbm_GiB"], "launch_overhead_us": LAUNCH_OVERHEAD_US, "efficiency": eff,
        **{k: spec[k] for k in ("sm_count", "l2_GBps") if k in spec},
    }


def write_all(directory: str | Path | None = None) -> list[Path]:
    """Write every shipped GPU profile; returns the paths."""
    from tracesim.fileio import write_yaml
    from tracesim.hardware.device import DEVICES_DIR

    d = Path(directory) if directory is not None else DEVICES_DIR
    paths = []
    for name in SPECS:
        p = d / f"{name}.yaml"
        write_yaml(p, profile(name))
        paths.append(p)
    return paths


if __name__ == "__main__":
    import argparse

    _ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _ap.add_argument("--directory", type=Path, help="where to write the profiles (default: "
                     "the package's device directory)")
    for _p in write_all(_ap.parse_args().directory):
        print(_p)
