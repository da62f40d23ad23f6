"""The shipped GPU profiles: datasheet figures plus kernel-level efficiencies, each with its source.

``python -m benchmarks.kernels.datasheet`` regenerates ``tracesim/hardware/devices/<gpu>.yaml``
for the GPUs of :data:`SPECS` (``v100`` and ``mi250`` are kept as shipped, not generated, but
take the memory-bound classes' curves as every GPU does: :func:`kept_profile`).
Peaks, bandwidth, memory and SM counts are datasheet figures (:data:`SPECS`, in
:mod:`benchmarks.kernels.datasheet_specs`, sources named
per field); every efficiency is calibrated on public kernel-level data
(``benchmarks/kernels/data``, fits in :mod:`benchmarks.kernels.kernel_fit`) or, where a
device has none, derived from the nearest device that has, as :data:`DERIVED` says. Each
generated profile carries a ``calibration`` block naming, for every number, the dataset, file
and what was fitted (docs/devices.md).

Curves of the size path (ops without a shape) are ``eff(s) = E s / (s + peak E t_ramp)``
sampled every half decade (compute) and ``eff(b) = E_mem b / (b + bandwidth t_ramp)``
(memory, the streaming curve); the shape path uses the profile's ``shape_model``. The
memory-bound classes that the kernels of recorded steps calibrate (copies, normalisation,
reductions: ``data/memory_classes.csv`` from :mod:`benchmarks.kernels.memory_in_steps`) get
the streaming curve times their factor.
"""

from __future__ import annotations

import copy
import functools
import math
from pathlib import Path
from typing import Any

from benchmarks.kernels import kernel_fit as kf
from benchmarks.kernels.attention_blackwell import cudnn_blackwell, scaled_plateau
from benchmarks.kernels.conv_tf32 import A100_TF32_CONV_FROM_TRACE
from benchmarks.kernels.datasheet_specs import DERIVED, MAMF_ROWS, MEMORY_ROWS, PLATEAU_FROM, SPECS
from benchmarks.kernels.flash2 import flash2_params
from benchmarks.kernels.gemm_precision import (
    HOPPER,
    ULTRA,
    block_over_fp8,
    block_source,
    mxfp8_over_fp8,
    nvfp4_over_fp8,
    quantize_rate,
    quantize_source,
)
from benchmarks.kernels.gemm_precision import source as precision_source
from benchmarks.kernels.memory_in_steps import (
    KEPT,
    kept_profile,
    memory_classes,
    memory_classes_source,
)
from benchmarks.kernels.scan import calibration_device, scan_fraction
from benchmarks.kernels.sizes import FLOP_SIZES
from benchmarks.kernels.sustained import fleet, sustained_clock
from benchmarks.kernels.sweep_fit import SQUARE_ROWS, square_fit, sweep_fit
from tracesim.hardware.calibrate import saturating_curve

#: dtypes whose GEMMs are capped at the MAMF (the shape model's ``ceiling``): the measured
#: BF16 and FP8 rows, and MXFP8 at FP8's (times the Blackwell MX ratio, as its plateau); NVFP4
#: from its own rows (nvfp4_fit; Blackwell Ultra's from FP8's, ultra_nvfp4_factor)
CEILING_DTYPES = ("default", "fp8", "mxfp8")
#: NVFP4 GEMM rows (data/gemm.csv, source TORCHAO-NVFP4): the device they were measured on;
#: the Blackwell GPUs without rows of their own take its fractions of the FP4 peak (derived)
NVFP4_DEVICE = ("b200", "B200-SXM")
#: fixed time per kernel (us): the shortest kernels of the public A100 traces last 2-3 us
LAUNCH_OVERHEAD_US = kf.LAUNCH_US
#: FP32 SIMT GEMM plateau: cuBLAS SGEMM 7000x1760x1760 reaches 9.9 of ~11 TFLOP/s
#: (openai-gemm / DeepBench table); no other FP32 GEMM data (MI300X included)
FP32_GEMM = {"e": 0.85, "t_ramp_us": 8.0}
#: memory curve ramp (us): small copies of the public A100 traces; kept from the earlier profiles
MEMORY_T_RAMP_US = 1.0
SPREAD = {"gemm": 0.25, "attention": 0.3, "default": 0.3}
#: the FlashAttention-2 paper (arXiv:2307.08691): forward reaches up to 73% of the A100 peak;
#: taken as head dim 128 at 16k keys, non-causal (the paper's best configuration)
FA2_A100_MAX = 0.73
_ASSUMED_MAX_SHAPE = (1.0 * 16, 16384.0, 16384.0, 128.0)  # batch x heads, seq, keys, head dim

#: A100 TF32 GEMM curve of the size path, calibrated on sampled_128rank_r0 (recommendation-model
#: GEMMs) with kernel_eval.fit_from_trace(min_alignment=4) under the study's shape model (sizes
#: in effective FLOPs); tested on the ResNet-50 traces (docs/devices.md).
A100_TF32_FROM_TRACE: dict[str, Any] = {
    "trace": "sampled_128rank_r0.json.gz",
    "min_alignment": 4,
    "points": [[1.53e8, 0.0657], [9.177e8, 0.3753], [2.831e9, 0.466], [7.474e9, 0.466]],
    "spread": 0.311,
}

_FLOP_SIZES = FLOP_SIZES  # 1e5 .. 1e14, every half decade
_BYTE_SIZES = [float(f"{10.0 ** (e / 2):.4g}") for e in range(6, 23)]    # 1e3 .. 1e11
_UNIT_SIZES = [float(f"{10.0 ** (e / 2):.4g}") for e in range(10, 29)]


def _peak(spec: dict[str, Any], dtype: str) -> float:
    p = spec["peak_tflops"]
    return float(p.get(dtype) or p.get("fp8" if dtype == "mxfp8" else "bf16") or p["bf16"])


def typical_q(name: str) -> tuple[float, str]:
    """(``q``, its source) of a GPU: the typical large-shape rate over the best-of-sweep MAMF
    rate (:func:`benchmarks.kernels.kernel_fit.typical_ratios`) of the device its BF16 plateau
    comes from, else the mean of the measured ones (derived). Used for every dtype."""
    qs = kf.FITTED["gemm_typical_q"]
    dev = MAMF_ROWS[name]["default"]
    if dev in qs:
        return float(qs[dev]), (f"{qs[dev]}: ordinary cuBLAS shapes of {dev} with m, n, k >= "
                                f"{kf.TYPICAL_MIN_DIM} over its MAMF (data/gemm.csv, source PYPTX)")
    return float(qs["derived"]), (f"{qs['derived']}: no ordinary-shape data for {dev}: the geometric "
                                  "mean of B200's and H100's (derived)")


def gemm_ceilings(name: str) -> dict[str, float]:
    """The shape model's ``ceiling`` per dtype (:data:`CEILING_DTYPES`): ``q`` (:func:`typical_q`)
    times the compute-part rate (fraction of peak, launch overhead taken out) of the device's
    MAMF row: ordinary large shapes run at the typical level, not at the best shape of a
    sweep; a dtype without a row of its own takes the one its plateau is derived from (FP8
    without a row: BF16's; MXFP8: FP8's)."""
    spec = SPECS[name]
    rows = MAMF_ROWS[name]
    q = typical_q(name)[0]
    out: dict[str, float] = {}
    for dt in CEILING_DTYPES:
        if dt != "default" and dt not in spec["peak_tflops"]:
            continue
        if dt in SQUARE_ROWS.get(name, {}):
            out[dt] = square_fit(name, dt)[2]
            continue
        src = dt if dt in rows else ("fp8" if dt in ("mxfp8", "nvfp4") and "fp8" in rows else "default")
        row = kf.mamf_row(rows[src], "bf16" if src == "default" else src)
        t = kf.measured_s(row) - LAUNCH_OVERHEAD_US * 1e-6
        flops = 2.0 * float(row["batch"]) * float(row["m"]) * float(row["n"]) * float(row["k"])
        out[dt] = round(q * flops / t / (_peak(spec, "bf16" if src == "default" else src) * 1e12), 4)
    if "mxfp8" in spec["peak_tflops"]:  # Blackwell's MX units: FP8's level times the measured ratio
        out["mxfp8"] = round(out["mxfp8"] * mxfp8_over_fp8(), 4)
    elif "fp8" in out:  # block-scaled FP8 without MX units: FP8's (Hopper: the measured ratio)
        out["mxfp8"] = round(out["fp8"] * (block_over_fp8() if name in HOPPER else 1.0), 4)
    if "nvfp4" in spec["peak_tflops"]:
        out["nvfp4"] = round(nvfp4_fit(name)[2] * ultra_nvfp4_factor(name, out["fp8"]), 4)
    return out


def ultra_nvfp4_factor(name: str, fp8_ceiling: float) -> float:
    """What Blackwell Ultra's NVFP4 plateau, size curve and ceiling are B200's fractions of the
    FP4 peak times (1 on the other GPUs): its NVFP4 large-shape rate is its FP8 one times the
    NVFP4 / FP8 rate measured on B300 (:mod:`benchmarks.kernels.gemm_precision`)."""
    if name not in ULTRA:
        return 1.0
    spec = SPECS[name]
    rate = fp8_ceiling * _peak(spec, "fp8") * nvfp4_over_fp8()
    return rate / (nvfp4_fit(name)[2] * _peak(spec, "nvfp4"))


@functools.cache
def nvfp4_fit(name: str) -> tuple[float, float, float, str]:
    """(plateau, size-curve E, ceiling, source) of a Blackwell GPU's NVFP4 GEMMs, from the
    square NVFP4 ``torch._scaled_mm`` rows measured on :data:`NVFP4_DEVICE`: the plateau
    solved at its fastest row (the shared GEMM model, as a MAMF row's); the ceiling the
    geometric mean over the rows with every dimension >= :data:`kf.TYPICAL_MIN_DIM` of their
    compute-part rate (launch overhead out) over the FP4 peak: the typical large-shape level
    measured directly, no ``q``; E the same rows' geometric-mean TFLOP/s over the peak. A GPU
    without rows takes these fractions of its own FP4 peak."""
    base, dev = NVFP4_DEVICE
    rows = kf.gemm_rows(source="TORCHAO-NVFP4", device=dev)
    bspec = SPECS[base]
    peak = float(bspec["peak_tflops"]["nvfp4"])
    fit = sweep_fit(rows, peak, bspec["sm_count"], LAUNCH_OVERHEAD_US)
    plateau, curve, ceiling, best = fit.plateau, fit.curve, fit.ceiling, fit.best
    text = (f"NVFP4 torch._scaled_mm (cuBLASLt) on {dev}, square 1024-8192 (data/gemm.csv, "
            f"source TORCHAO-NVFP4): plateau solved at its best row {best['m']}^3 = "
            f"{best['tflops']} TFLOP/s; ceiling {ceiling} and size-curve E {curve}: the "
            f"geometric mean of the {fit.n_big} rows >= {kf.TYPICAL_MIN_DIM}^3 over the FP4 peak "
            f"{peak:g}")
    if name != base:
        text += f"; {name} has no NVFP4 row: {base}'s fractions of the FP4 peak (derived)"
    return plateau, curve, ceiling, text


def gemm_plateaus(name: str) -> tuple[dict[str, float], dict[str, float], dict[str, str]]:
    """(shape-model plateau per dtype, size-curve E per dtype, source per dtype) of a GPU."""
    spec, shared = SPECS[name], kf.FITTED["gemm_shared"]
    plateau: dict[str, float] = {}
    curve: dict[str, float] = {}
    src: dict[str, str] = {}
    for dt, dev in MAMF_ROWS[name].items():
        csv_dt = "bf16" if dt == "default" else dt
        row = kf.mamf_row(dev, csv_dt)
        peak = _peak(spec, csv_dt)
        plateau[dt] = kf.solve_plateau(shared, peak, spec["sm_count"], row)
        curve[dt] = round(typical_q(name)[0] * float(row["tflops"]) / peak, 4)
        own = dev.replace("-SXM", "").lower() == name
        src[dt] = (f"MAMF row {dev} {csv_dt} {row['m']}x{row['n']}x{row['k']} = {row['tflops']} "
                   f"TFLOP/s (benchmarks/kernels/data/gemm.csv, source MLE-MAMF)"
                   + ("" if own else f"; {name} has no row of its own: derived from {dev} "
                      "at the datasheet peak ratio (same fraction of peak)"))
        base = PLATEAU_FROM.get(name, {}).get(dt)
        if base is not None:
            bspec, brow = SPECS[base], kf.mamf_row(MAMF_ROWS[base][dt], csv_dt)
            bpeak = _peak(bspec, csv_dt)
            solved = plateau[dt]
            plateau[dt] = round(kf.solve_plateau(shared, bpeak, bspec["sm_count"], brow)
                                * (float(row["tflops"]) / peak) / (float(brow["tflops"]) / bpeak), 4)
            src[dt] += (f": the shared model needs {solved} of peak for it (k {row['k']}); "
                        f"{base}'s plateau from its MAMF row {brow['m']}x{brow['n']}x{brow['k']} = "
                        f"{brow['tflops']} TFLOP/s times the two MAMF fractions of peak (derived)")
    for dt in SQUARE_ROWS.get(name, {}):
        plateau[dt], curve[dt], _, src[dt] = square_fit(name, dt)
    if "fp8" in spec["peak_tflops"] and "fp8" not in plateau:
        plateau["fp8"], curve["fp8"] = plateau["default"], curve["default"]
        src["fp8"] = "no FP8 GEMM data: the BF16 fraction of peak assumed (derived)"
    if "mxfp8" in spec["peak_tflops"]:  # Blackwell's MX units: FP8's times the measured ratio
        r = mxfp8_over_fp8()
        plateau["mxfp8"], curve["mxfp8"] = round(plateau["fp8"] * r, 4), round(curve["fp8"] * r, 4)
        src["mxfp8"] = (f"FP8's plateau x {r}: {precision_source('mxfp8')}"
                        + ("" if name == "b300" else " (derived: the same kernels)"))
    elif "fp8" in plateau and name in HOPPER:  # Hopper: cuBLAS's 1x128 / 128x128 block-scaled FP8
        r = block_over_fp8()
        plateau["mxfp8"], curve["mxfp8"] = round(plateau["fp8"] * r, 4), round(curve["fp8"] * r, 4)
        src["mxfp8"] = (f"block-scaled FP8 (Transformer Engine's blockwise recipe), FP8's plateau x {r}: "
                        f"{block_source()}" + ("" if name == "h200" else " (derived: the same die and kernels)"))
    elif "fp8" in plateau:  # no MX units and no block-scaled data: FP8's
        plateau["mxfp8"], curve["mxfp8"] = plateau["fp8"], curve["fp8"]
        src["mxfp8"] = "no block-scaled FP8 GEMM data: FP8's plateau (derived)"
    if "nvfp4" in spec["peak_tflops"]:
        plateau["nvfp4"], curve["nvfp4"], _, src["nvfp4"] = nvfp4_fit(name)
        f = ultra_nvfp4_factor(name, gemm_ceilings(name)["fp8"])
        if f != 1.0:
            plateau["nvfp4"] = round(min(plateau["nvfp4"] * f, 1.0), 4)
            curve["nvfp4"] = round(curve["nvfp4"] * f, 4)
            src["nvfp4"] += (f"; Blackwell Ultra: those x {f:.4f}, its FP8 large-shape rate x "
                             f"{nvfp4_over_fp8()} ({precision_source('nvfp4')})")
    a100_tf32 = float(A100_TF32_CONV_FROM_TRACE["e_max"])
    a100_bf16 = kf.solve_plateau(shared, 312.0, 108, kf.mamf_row("A100-SXM", "bf16"))
    plateau["tf32"] = round(min(a100_tf32, a100_tf32 * plateau["default"] / a100_bf16), 4)
    curve["tf32"] = round(curve["default"] * plateau["tf32"] / plateau["default"], 4)
    src["tf32"] = (f"A100: {a100_tf32} = median steady-state TF32 implicit-GEMM e_max of the "
                   "AlexNet A100 trace (benchmarks/kernels/conv_tf32.py)"
                   + ("" if name.startswith("a100") else "; this GPU: its BF16 plateau x the "
                      "A100 TF32 / BF16 ratio (derived, no TF32 data)"))
    plateau["fp32"], curve["fp32"] = FP32_GEMM["e"], FP32_GEMM["e"]
    src["fp32"] = "cuBLAS SGEMM 7000x1760x1760: 9.9 of ~11 TFLOP/s (DeepBench), all GPUs"
    return plateau, curve, src


def attention_params(name: str) -> tuple[dict[str, Any], str]:
    """The attention shape model (plateau per dtype and head dim, kv_half per dtype) and its
    source text."""
    fit = kf.FITTED["attention"]
    fa3, fa3_8 = fit["fa3_bf16"], fit["fa3_fp8"]
    family = {"a100-40gb": "a100", "h200": "h100", "gb200": "b200", "gb300": "b200",
              "b300": "b200"}.get(name, name)
    if family == "h100":
        # Transformer Engine runs cuDNN's fused attention on Hopper: it drops FlashAttention
        # when cuDNN's arbitrary-seqlen backend is available (and FA3 in FP8)
        cu, cu8 = fit["cudnn_h100_bf16"], fit["cudnn_h100_fp8"]
        un = fit["cudnn_h100_bf16_unmasked"]
        return ({"plateau": {"default": cu["plateau"], "fp8": cu8["plateau"]},
                 "kv_half": {"default": cu["kv_half"], "fp8": cu8["kv_half"]},
                 "unmasked": {"plateau": {"default": un["plateau"],
                                          "fp8": [list(p) for p in cu8["plateau"]]},
                              "kv_half": {"default": un["kv_half"], "fp8": cu8["kv_half"]}}},
                "cuDNN fused attention (what Transformer Engine runs on Hopper: get_attention_"
                "backend gives FusedAttention preference over FlashAttention on sm90+), the "
                "FlashAttention-3 paper's cuDNN rows, H100 SXM5 forward, BF16 causal (mean key "
                "length s / 2, training's regime), BF16 unmasked (`unmasked`: the non-causal "
                "rows) and FP8 non-causal for every mask (its causal rows cover head "
                "dim 64 at 512-1k only): plateau per head dim and kv_half fitted (benchmarks/"
                "kernels/kernel_fit.py, data/attention.csv, source FA3; the paper's cuDNN of "
                "mid-2024)" + (
                    "; H200: H100's (same SMs and clocks, compute-bound)" if name == "h200" else ""))
    if family == "a100":
        fa2 = fit["fa2_bf16"]
        e128 = dict(fa2["plateau"])[128.0]
        f = FA2_A100_MAX / (e128 * _unit_eff({"kv_half": fa2["kv_half"], "plateau": [[128.0, 1.0]]},
                                             _ASSUMED_MAX_SHAPE))
        return ({"plateau": {"default": scaled_plateau(fa2["plateau"], f)},
                 "kv_half": {"default": fa2["kv_half"]}},
                f"FlashAttention-2: head-dim ratios and kv_half fitted on FA2's H100 rows (FA3 paper, "
                f"data/attention.csv), scaled to the FA2 paper's A100 maximum {FA2_A100_MAX} of "
                "peak at head dim 128 (arXiv:2307.08691, forward); derived, no A100 per-length data")
    if family == "b200":
        return cudnn_blackwell(name, fa3, fa3_8)
    if family in ("mi300x", "mi325x", "mi355x"):
        spec, label = SPECS[name], MAMF_ROWS[name]["default"]
        h = kf.solve_plateau(kf.FITTED["gemm_shared"], 989.4, 132, kf.mamf_row("H100-SXM", "bf16"))
        m = kf.solve_plateau(kf.FITTED["gemm_shared"], _peak(spec, "bf16"), spec["sm_count"],
                             kf.mamf_row(label, "bf16"))
        return ({"plateau": {"default": scaled_plateau(fa3["plateau"], m / h), "fp8": scaled_plateau(fa3_8["plateau"], m / h)},
                 "kv_half": {"default": fa3["kv_half"], "fp8": fa3_8["kv_half"]}},
                f"no {label} attention data ("
                + ("published numbers are figures only" if name in ("mi300x", "mi325x") else
                   "its AITER rows in data/attention.csv, source HIPKITTENS, are held out, not fitted")
                + f"): H100 FA3 x ({label} / H100 GEMM plateau = {m / h:.3f}) (derived)")
    raise KeyError(name)


def _unit_eff(fit: dict[str, Any], shape: tuple[float, ...]) -> float:
    import numpy as np

    from tracesim.hardware.shapemodel import AttentionShapeModel

    m = AttentionShapeModel({"default": tuple((float(d), float(e)) for d, e in fit["plateau"])},
                            {"default": float(fit["kv_half"])})
    return float(m.efficiency("default", 1, np.array([shape]))[0]) / float(
        np.interp(np.log2(shape[3]), np.log2([p[0] for p in fit["plateau"]]),
                  [p[1] for p in fit["plateau"]]))


def memory_fraction(name: str) -> tuple[float, str]:
    """E_mem of a GPU: its achieved FluidX3D bandwidth over the profile's ``hbm_GBps``, or,
    without a row of its own, the nearest device's achieved fraction of its datasheet."""
    dev = MEMORY_ROWS[name]
    row = next(r for r in kf.rows("membw") if r["device"] == dev
               and r["benchmark"].startswith("FluidX3D LBM FP32/FP32"))
    own = name not in DERIVED or "memory_fraction" not in DERIVED[name]
    if own:
        frac = float(row["achieved_GBps"]) / SPECS[name]["hbm_GBps"]
        how = f"{row['achieved_GBps']} GB/s achieved / {SPECS[name]['hbm_GBps']:g} GB/s"
    else:
        frac = kf.memory_fraction(dev)
        how = (f"{name} has no row: {dev}'s {row['achieved_GBps']} / {row['spec_GBps']} GB/s "
               "(its fraction of its datasheet bandwidth, derived)")
    return round(frac, 4), (f"FluidX3D LBM FP32/FP32 (streaming, bandwidth-bound) on {dev}: "
                            f"{how} (data/membw.csv, source FLUIDX3D)")


def _attention_unit_curve(att: dict[str, Any], dtype: str, peak: float) -> list[list[float]]:
    """Efficiency per (batch, head) unit of 4 L^2 d FLOPs at head dim 128 (size path)."""
    import numpy as np

    pts = att["plateau"].get(dtype) or att["plateau"]["default"]
    e = float(np.interp(7.0, np.log2([p[0] for p in pts]), [p[1] for p in pts]))
    half = float(att["kv_half"].get(dtype, att["kv_half"]["default"]))
    out = []
    for u in _UNIT_SIZES:
        seq = math.sqrt(u / (4 * 128.0))
        out.append([u, round(max(e * seq / (seq + half), 1e-4), 4)])
    return out


def profile(name: str) -> dict[str, Any]:
    """The profile mapping of a generated GPU."""
    spec = SPECS[name]
    peaks = spec["peak_tflops"]
    shared = kf.FITTED["gemm_shared"]
    ramp = kf.FITTED["gemm_curve_t_ramp_us"]
    plateau, curve_e, gsrc = gemm_plateaus(name)
    att, asrc = attention_params(name)
    fa2 = name.startswith("a100")
    if "backward" not in att:
        att["backward"] = kf.FITTED["attention"]["fa2_bwd_ratio" if fa2 else "fa3_bwd_ratio"]
        asrc += (f"; backward: {'FlashAttention-2' if fa2 else 'FlashAttention-3'}'s backward / "
                 "forward rate per head dim (64, 128) and length on H100, non-causal (FA3 paper's "
                 "backward and forward charts, data/attention.csv, sources FA3-BWD and FA3)"
                 + ("; cuDNN's kernels at FA3's ratios (no cuDNN backward rows, derived)"
                    if name in ("h100", "h200") else "; the same ratios on this GPU (derived)"))
    mem_e, msrc = memory_fraction(name)
    memory = saturating_curve(mem_e, spec["hbm_GBps"] * 1e9 * MEMORY_T_RAMP_US * 1e-6, _BYTE_SIZES)
    compute: dict[str, Any] = {}
    for key in ("default", "fp8", "mxfp8", "nvfp4", "tf32", "fp32"):
        if key not in curve_e:
            continue
        peak = _peak(spec, "bf16" if key == "default" else key) * 1e12
        t = FP32_GEMM["t_ramp_us"] if key == "fp32" else ramp
        compute[key] = saturating_curve(curve_e[key], peak * curve_e[key] * t * 1e-6, _FLOP_SIZES)
    if name.startswith("a100"):
        compute["tf32"] = [list(p) for p in A100_TF32_FROM_TRACE["points"]]
    att_curves = {k: _attention_unit_curve(att, k, _peak(spec, "bf16" if k == "default" else k))
                  for k in att["plateau"]}
    scan_e, scan_src = scan_fraction(name)
    if name != calibration_device(name):
        scan_src = (f"{scan_src}; this GPU: the same fraction of its BF16 peak (derived: the "
                    "same Triton kernels, not measured here)")
    eff: dict[str, Any] = {
        "default": {"compute": [[1.0, 1.0]], "memory": copy.deepcopy(memory), "spread": SPREAD["default"]},
        "gemm": {"compute": compute, "memory": copy.deepcopy(memory), "spread": SPREAD["gemm"]},
        "attention": {"compute_size": "unit", "compute": att_curves, "memory": copy.deepcopy(memory),
                      "spread": SPREAD["attention"]},
        "scan": {"compute": {"default": [[1.0, scan_e]]}, "memory": copy.deepcopy(memory),
                 "spread": SPREAD["default"]},
    }
    eff.update(memory_classes(eff["default"]))
    gemm_model = {"plateau": {k: plateau[k] for k in ("default", "fp8", "mxfp8", "nvfp4", "tf32", "fp32")
                              if k in plateau},
                  "tiles": [list(t) for t in kf.TILES], **shared,
                  "ceiling": gemm_ceilings(name)}
    out: dict[str, Any] = {
        "name": name, "kind": "gpu", "source": spec["source"], "aliases": spec["aliases"],
        "patterns": spec["patterns"], "peak_tflops": peaks, "hbm_GBps": spec["hbm_GBps"],
        "hbm_GiB": spec["hbm_GiB"], "launch_overhead_us": LAUNCH_OVERHEAD_US,
        "sm_count": spec["sm_count"], **({"l2_GBps": spec["l2_GBps"]} if "l2_GBps" in spec else {}),
        "efficiency": eff,
        "shape_model": {"gemm": gemm_model, "attention": {
            "plateau": att["plateau"], "kv_half": att["kv_half"], "backward": att["backward"],
            **{k: att[k] for k in ("backward_fp8", "unmasked", "cudnn", "cudnn_versions") if k in att}}},
    }
    fa2, fa2_src = flash2_params(name, att)
    if fa2 is not None:
        out["shape_model"]["attention"]["flash2"] = fa2
    ceil = gemm_model["ceiling"]
    ratio, ratio_src = sustained_clock(name, {dt: ceil[key] * _peak(spec, dt) for dt, key in
                                              (("bf16", "default"), ("fp8", "fp8")) if key in ceil})
    out["sustained_clock"] = ratio
    spread, spread_src = fleet(name)
    if spread is not None:
        out["sustained_fleet"] = spread
    out["calibration"] = _calibration(name, spec, plateau, curve_e, gsrc, asrc, mem_e, msrc)
    out["calibration"].update(sustained_clock=ratio_src, sustained_fleet=spread_src)
    out["calibration"]["efficiency.scan"] = scan_src
    if "mxfp8" in spec["peak_tflops"]:  # Blackwell: block-scaled quantization kernels
        out["quantize"] = {r: quantize_rate(r) for r in ("mxfp8", "nvfp4")}
        out["calibration"]["quantize"] = quantize_source() + ("" if name == "b300" else
                                                              " (derived: the same kernels)")
    if fa2 is not None:
        out["calibration"]["shape_model.attention.flash2"] = fa2_src
    return out


def _calibration(name: str, spec: dict[str, Any], plateau: dict[str, float], curve_e: dict[str, float],
                 gsrc: dict[str, str], asrc: str, mem_e: float, msrc: str) -> dict[str, Any]:
    shared = kf.FITTED["gemm_shared"]
    return {
        "datasheet": dict(spec["sources"]),
        "shape_model.gemm.plateau": {k: f"{plateau[k]}: {gsrc[k]}" for k in plateau},
        "shape_model.gemm (tiles, k_overhead, split_k_min, fixed_us, wave_overhead_us)": (
            f"{shared}: fitted once for every GPU on the OpenXLA sm_100 BF16 matmul table, k in "
            f"{list(kf.CALIBRATION_K)} (41 shapes; data/gemm.csv, source XLA100), the table's own "
            "level fitted alongside, no shipped plateau above 1 (benchmarks/kernels/kernel_fit.py); "
            "tiles: CUTLASS / cuBLAS tensor-core tile shapes, not fitted"),
        "shape_model.gemm.ceiling": (
            "the typical large-shape level: q = " + typical_q(name)[1] + ", times the best rate "
            "torch.matmul / torch._scaled_mm (cuBLAS / cuBLASLt, the library Transformer Engine "
            "calls) reached in the brute-force MAMF shape sweep, per dtype (data/gemm.csv, source "
            "MLE-MAMF; " + "; ".join(f"{k}: {gsrc[k]}" for k in CEILING_DTYPES if k in gsrc)
            + "), the launch overhead taken out of the MAMF time. The MAMF is the best of many "
            "shapes; the ordinary large shapes of a step run q of it. Without a cap the plateau, "
            "solved at the MAMF shape, extrapolates above the MAMF for longer k (GB200 FP8 at "
            "16384 x 28672 x 4096: 0.85 of peak against the MAMF's 0.72)"),
        "efficiency.gemm.compute (size path)": (
            f"E = q x MAMF / peak per dtype ({ {k: curve_e[k] for k in curve_e} }), t_ramp "
            f"{kf.FITTED['gemm_curve_t_ramp_us']} us fitted by FLOPs alone on the same 41 shapes"
            + ("; tf32: A100_TF32_FROM_TRACE (sampled_128rank_r0 trace)" if name.startswith("a100")
               else "") + f"; fp32: ramp {FP32_GEMM['t_ramp_us']} us"),
        "shape_model.attention, efficiency.attention": (
            f"{asrc}; size path: the same model at head dim 128 per (batch, head) unit of 4 L^2 d FLOPs"),
        "efficiency memory curves": (f"E_mem {mem_e}: {msrc}; ramp {MEMORY_T_RAMP_US} us "
                                     "(small copies of the public A100 traces)"),
        "efficiency memory classes": memory_classes_source(),
        "launch_overhead_us": f"{LAUNCH_OVERHEAD_US}: the shortest kernels of the public A100 traces last 2-3 us",
        "spread": f"{SPREAD}: band half-widths, kept from the earlier profiles",
    }


def write_all(directory: str | Path | None = None) -> list[Path]:
    """Write every generated GPU profile; returns the paths."""
    from tracesim.fileio import write_yaml
    from tracesim.hardware.device import DEVICES_DIR

    d = Path(directory) if directory is not None else DEVICES_DIR
    paths = []
    for name in (*SPECS, *KEPT):
        p = d / f"{name}.yaml"
        write_yaml(p, profile(name) if name in SPECS else kept_profile(name))
        paths.append(p)
    return paths


if __name__ == "__main__":
    import argparse

    _ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _ap.add_argument("--directory", type=Path, help="where to write the profiles (default: "
                     "the package's device directory)")
    for _p in write_all(_ap.parse_args().directory):
        print(_p)
