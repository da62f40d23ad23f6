"""Blackwell's block-scaled GEMM rates over its FP8 rate (the ``mxfp8`` GEMM level of the
Blackwell profiles and the ``nvfp4`` level of the Blackwell Ultra ones).

    python -m benchmarks.kernels.gemm_precision

One kernel-level table sets both (data/gemm_precision.csv, source TE-GEMM-PROFILING):
Transformer Engine's GEMM profiler on a B300, the GEMMs of one layer (four linears, forward,
data and weight gradients) at 15,872 tokens, pre-quantized (the GEMM kernels alone, as
Transformer Engine calls cuBLAS) in BF16, FP8 with current scaling, MXFP8 and NVFP4. Only
ratios between its columns are taken: the profiles' FP8 and BF16 levels come from the MAMF
tables, and this table's clock conditions (100 back-to-back iterations of each GEMM) are not
those of a MAMF sweep.

* MXFP8 over FP8 (:func:`mxfp8_over_fp8`): the summed FP8 time over the summed MXFP8 time.
  Every Blackwell profile's ``mxfp8`` plateau, size curve and ceiling are its FP8 ones times
  it (measured on B300; B200, GB200 and GB300 derived: the same cuBLAS block-scaled kernels
  on the same tensor-core generation).
* NVFP4 over FP8 on Blackwell Ultra (:func:`nvfp4_over_fp8`): the summed FP8 time over the
  summed NVFP4 time. The B200 NVFP4 rows (source TORCHAO-NVFP4) set the other Blackwell
  profiles' NVFP4 as fractions of the FP4 peak; Blackwell Ultra's FP4 peak is 1.4-1.7x
  B200's, and at B200's fractions of it the B300 profile ran this table's NVFP4 GEMMs 1.38x
  faster than it measured relative to FP8. So ``b300`` and ``gb300`` take FP8's large-shape
  rate times this ratio (:mod:`benchmarks.kernels.datasheet`).

* Block-scaled quantization over a per-tensor cast (:func:`quantize_rate`): the table's
  autocast rows time the same GEMMs as ``te.Linear`` forwards that quantize their input and
  weight every call. Autocast less pre-quantized is each recipe's quantization time; over the
  bytes tracesim counts per quantized element (``tracesim.template.fp8.CAST_BYTES_PER_ELEM``:
  current scaling 6, MXFP8 4.0625, NVFP4 5.125, on the same elements) it is each recipe's
  effective rate, and MXFP8's and NVFP4's over current scaling's are the Blackwell profiles'
  ``quantize`` rates (current scaling's casts run at the memory-bound rate of the
  ``elementwise`` class; B300 measured, the other Blackwell GPUs derived). NVFP4's includes
  the random Hadamard transform of its weight-gradient operands.

* Hopper's block-scaled FP8 over its per-tensor FP8 (:func:`block_over_fp8`): the same
  profiler on an H200 NVL (Hopper) times Transformer Engine's blockwise recipe
  (``Float8BlockScaling``: 1x128 activation and gradient blocks, 128x128 weight blocks, FP32
  scales; cuBLAS's block-scaled kernels, split accumulation) in autocast only (Hopper's
  cuBLAS has no pre-quantized path for it). Its GEMM time is the autocast time less its
  quantization, which is taken at current scaling's rate per byte (autocast less
  pre-quantized, over 6 bytes per element) on its 4.0625 bytes per element; over current
  scaling's pre-quantized GEMM time it gives the rate the ``h200`` profile's ``mxfp8`` level
  (block-scaled FP8) is its FP8 level times (``h100`` derived: the same GH100 die and
  kernels). The table's FP8 GEMMs run with fast accumulation (every call is a forward), the
  blockwise ones with split accumulation, which the profiles' FP8 level already is (the MAMF
  rows), so the ratio prices Hopper's blockwise GEMMs by up to the fast / split difference
  slow (docs/devices.md). Held out in the same table: delayed scaling's autocast time from
  current scaling's GEMMs and its 4 bytes per element (:func:`delayed_check`).
"""

from __future__ import annotations

import functools

from benchmarks.kernels import kernel_fit as kf

#: the profiles whose NVFP4 level follows :func:`nvfp4_over_fp8` (Blackwell Ultra)
ULTRA = ("b300", "gb300")
#: NVIDIA Hopper profiles: block-scaled FP8 (the ``mxfp8`` level) at :func:`block_over_fp8`
#: times FP8's (``h200`` measured, ``h100`` derived)
HOPPER = ("h100", "h200")
#: the table's precision columns (``<column>_ms``)
_COLUMNS = ("bf16", "fp8_current", "fp8_delayed", "fp8_block", "mxfp8", "nvfp4")


@functools.cache
def _sums(mode: str = "pre-quantized", profile: str = "b300") -> dict[str, float]:
    """Per-precision time of one GPU summed over the passes of one mode (ms), for the
    columns it has; read once, read-only."""
    out: dict[str, float] = {}
    for r in kf.rows("gemm_precision"):
        if r["mode"] != mode or r["profile"] != profile:
            continue
        for col in _COLUMNS:
            if r[f"{col}_ms"]:
                out[col] = out.get(col, 0.0) + float(r[f"{col}_ms"])
    return out


def _cast_bytes(recipe: str) -> float:
    from tracesim.template.fp8 import CAST_BYTES_PER_ELEM

    return float(CAST_BYTES_PER_ELEM[recipe])


def _hopper_quant_ms_per_byte() -> float:
    """Current scaling's quantization time on the H200 NVL per byte per element (ms)."""
    auto, pre = _sums("autocast", "h200"), _sums("pre-quantized", "h200")
    return (auto["fp8_current"] - pre["fp8_current"]) / _cast_bytes("current")


def block_over_fp8() -> float:
    """Hopper's block-scaled FP8 GEMM rate over its per-tensor FP8 rate (module docstring)."""
    auto, pre = _sums("autocast", "h200"), _sums("pre-quantized", "h200")
    gemm = auto["fp8_block"] - _hopper_quant_ms_per_byte() * _cast_bytes("blockwise")
    return round(pre["fp8_current"] / gemm, 4)


def delayed_check() -> tuple[float, float]:
    """(predicted, measured) autocast time (ms per layer) of delayed scaling on the H200 NVL:
    current scaling's GEMMs plus delayed scaling's 4 bytes per element at current scaling's
    quantization rate (held out: nothing is set from it)."""
    auto, pre = _sums("autocast", "h200"), _sums("pre-quantized", "h200")
    pred = pre["fp8_current"] + _hopper_quant_ms_per_byte() * _cast_bytes("delayed")
    return round(pred, 3), round(auto["fp8_delayed"], 3)


def block_source() -> str:
    """The text a Hopper profile's calibration entry cites for its block-scaled level."""
    auto, pre = _sums("autocast", "h200"), _sums("pre-quantized", "h200")
    return ("Transformer Engine's GEMM profiler on H200 NVL (data/gemm_precision.csv, source "
            "TE-GEMM-PROFILING): one layer's 12 GEMMs at 15,872 tokens, FP8 current scaling "
            f"pre-quantized {pre['fp8_current']:.3f} ms, blockwise (Float8BlockScaling) autocast "
            f"{auto['fp8_block']:.3f} ms less its quantization at current scaling's rate per byte "
            f"(4.0625 of 6 bytes of {auto['fp8_current'] - pre['fp8_current']:.3f} ms): "
            f"block-scaled FP8 at {block_over_fp8()} x FP8's rate")


def mxfp8_over_fp8() -> float:
    """MXFP8 GEMM rate over FP8 current scaling's, pre-quantized (module docstring)."""
    s = _sums()
    return round(s["fp8_current"] / s["mxfp8"], 4)


def nvfp4_over_fp8() -> float:
    """NVFP4 GEMM rate over FP8 current scaling's on Blackwell Ultra, pre-quantized."""
    s = _sums()
    return round(s["fp8_current"] / s["nvfp4"], 4)


def _quant_times() -> dict[str, float]:
    """Quantization time per layer (ms): autocast less pre-quantized, per FP8 recipe."""
    auto, pre = _sums("autocast"), _sums()
    return {k: auto[k] - pre[k] for k in ("fp8_current", "mxfp8", "nvfp4")}


def quantize_rate(recipe: str) -> float:
    """``recipe``'s quantization rate over FP8 current scaling's (module docstring)."""
    from tracesim.template.fp8 import CAST_BYTES_PER_ELEM

    t = {k: v for k, v in _quant_times().items() if k in ("fp8_current", recipe)}
    per = {k: float(CAST_BYTES_PER_ELEM["current" if k == "fp8_current" else k]) for k in t}
    return round((per[recipe] / t[recipe]) / (per["fp8_current"] / t["fp8_current"]), 4)


def quantize_source() -> str:
    """The text a Blackwell profile's calibration entry cites for ``quantize``."""
    dt = _quant_times()
    return ("Transformer Engine's GEMM profiler on B300 (data/gemm_precision.csv, source "
            "TE-GEMM-PROFILING): autocast less pre-quantized per layer, the quantization time, "
            f"FP8 current scaling {dt['fp8_current']:.3f} ms, MXFP8 {dt['mxfp8']:.3f}, NVFP4 "
            f"{dt['nvfp4']:.3f}; over tracesim's bytes per element (6, 4.0625, 5.125): MXFP8 "
            f"{quantize_rate('mxfp8')} and NVFP4 {quantize_rate('nvfp4')} of current scaling's "
            "rate")


def source(what: str) -> str:
    """The text a profile's calibration entry cites for ``what`` (``mxfp8`` or ``nvfp4``)."""
    s = _sums()
    col, r = ("mxfp8", mxfp8_over_fp8()) if what == "mxfp8" else ("nvfp4", nvfp4_over_fp8())
    return (f"Transformer Engine's GEMM profiler on B300 (data/gemm_precision.csv, source "
            f"TE-GEMM-PROFILING): one layer's 12 GEMMs at 15,872 tokens pre-quantized, FP8 "
            f"current scaling {s['fp8_current']:.3f} ms, {col.upper()} {s[col]:.3f} ms: "
            f"{col.upper()} at {r} x FP8's rate")


def main() -> None:
    for mode in ("pre-quantized", "autocast"):
        s = _sums(mode)
        print(f"{mode:>13}: " + "  ".join(f"{k} {v:.3f} ms" for k, v in s.items()))
    print(f"MXFP8 / FP8 rate {mxfp8_over_fp8()}; NVFP4 / FP8 rate {nvfp4_over_fp8()}")
    print(f"quantization over current scaling's: MXFP8 {quantize_rate('mxfp8')}, "
          f"NVFP4 {quantize_rate('nvfp4')}")
    for mode in ("pre-quantized", "autocast"):
        s = _sums(mode, "h200")
        print(f"H200 NVL {mode:>13}: " + "  ".join(f"{k} {v:.3f} ms" for k, v in s.items()))
    pred, meas = delayed_check()
    print(f"Hopper block-scaled FP8 / FP8 rate {block_over_fp8()}; held out: delayed scaling "
          f"autocast {pred} ms predicted, {meas} measured ({pred / meas - 1:+.1%})")


if __name__ == "__main__":
    main()
