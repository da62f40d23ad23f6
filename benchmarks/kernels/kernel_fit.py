"""Fit the kernel-class efficiencies of the shipped GPU profiles on public kernel-level data.

Data: ``benchmarks/kernels/data/{gemm,attention,membw}.csv`` (sources in ``data/SOURCES.md``).
Nothing here reads an end-to-end (training-step) table. What is fitted on what:

* **GEMM, shared shape parameters** (``k_overhead``, ``split_k_min``, ``fixed_us``,
  ``wave_overhead_us`` of :class:`tracesim.hardware.shapemodel.GemmShapeModel`): grid search
  minimising the mean |log(predicted / measured)| over the *calibration subset* of the
  OpenXLA ``sm_100`` BF16 table (:func:`gemm_split`: k in {256, 1024, 4096}, 41 shapes),
  with the table's own plateau fitted alongside and no shipped plateau above 1.
* **GEMM plateau per device and dtype**: the mainloop efficiency at which the shape model
  reproduces the device's MAMF row (best-shape ``torch.matmul``, ml-engineering), given the
  shared parameters (bisection).
* **GEMM typical large-shape level** (the shape model's ``ceiling``): MAMF is the best shape
  of a brute-force sweep, the maximum of many shapes; the large GEMMs of a training step are
  ordinary shapes. Per device, ``q`` = the geometric mean rate of ordinary cuBLAS shapes with
  every dimension at least :data:`TYPICAL_MIN_DIM` (pyptx's reference timings, B200 measured,
  H100 derived) over the device's MAMF rate (:func:`typical_ratios`); devices and dtypes
  without such rows take the geometric mean of the two (derived). The ceiling is ``q`` times
  the MAMF rate, and the size curve's level ``E`` likewise.
* **GEMM size curve** (used where no shape is known): ``eff = E s / (s + peak E t_ramp)``
  with ``E`` = MAMF / peak and ``t_ramp`` fitted on the same calibration subset by FLOPs alone
  (with the table's level).
* **Attention**: per dtype, ``kv_half`` and the plateau at head dims 64 / 128 / 256 fitted on
  the FlashAttention-3 paper's H100 *non-causal* forward rows; FlashAttention-2 on H100 the
  same way (the shape of the A100 curve, see :func:`attention_fits`); cuDNN on H100 (what
  Transformer Engine runs on Hopper) from the paper's cuDNN rows, BF16 on its *causal* rows
  (mean key length s / 2) and, apart, on its non-causal rows (the profiles' ``unmasked``
  curve), FP8 on its non-causal ones (they serve every mask: its causal rows cover head dim
  64 at 512-1k tokens only).
* **Attention backward**: the backward kernel's rate over the forward's, per head dim (64,
  128) and length, read off FlashAttention-3's H100 non-causal backward and forward rows
  (:func:`backward_ratios`; measured ratios, nothing fitted).
* **cuDNN attention on Blackwell** (the fused attention Transformer Engine runs): ``kv_half``
  and the head-dim-128 plateau fitted on cuDNN 9.17's GB200 causal forward rows (the PyTorch
  nv25.11 container's library; NeMo 25.11 itself ships 9.13.1; mean key length s / 2), the backward / forward ratio per mean
  key length read off the same rows (:func:`cudnn_attention`); GB300 over GB200 per pass
  from the two devices measured with one cuDNN (9.22) on the same day (:func:`device_ratio`).
  FP8 (Transformer Engine's FP8 attention) the same way on cuDNN 9.17's GB200 FP8 rows (the
  frontend's FP8 benchmark, the same container), with its own backward / forward ratios.
* **Memory**: achieved / datasheet bandwidth of FluidX3D (FP32/FP32) per device.

Everything not listed (held-out GEMM shapes and devices, each attention fit's other masking
and longer rows, other cuDNN versions, in-step attention) is test data:
``benchmarks/kernels/kernel_accuracy.py`` and ``tests/test_kernel_calibration.py``.

``python -m benchmarks.kernels.kernel_fit`` reruns the fits and prints them next to
:data:`FITTED`, the values the shipped profiles use (``--check`` exits 1 when they differ).
"""

from __future__ import annotations

import csv
import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np

from tracesim.hardware.shapemodel import AttentionShapeModel, GemmShapeModel

DATA = Path(__file__).resolve().parent / "data"

#: candidate output tiles (tm, tn), the first at full rate: CUTLASS / cuBLAS tensor-core tile
#: shapes of Ampere to Blackwell (128x256 and 256x128 per SM, down to 64x64); not fitted
TILES: tuple[tuple[int, int], ...] = ((128, 256), (256, 128), (128, 128), (64, 128), (128, 64),
                                      (64, 64))
#: fixed time per kernel added by the cost model to every op (us), kept from the profiles
LAUNCH_US = 2.5
#: k values of the sm_100 BF16 table used for calibration; the other k are held out
CALIBRATION_K = (256, 1024, 4096)
#: the smallest m, n and k of the ordinary large shapes that set the typical level
TYPICAL_MIN_DIM = 4096
#: MAMF device (data/gemm.csv) of each device with ordinary-shape (PYPTX) rows
TYPICAL_DEVICES = {"B200": "B200-SXM", "H100-SXM5": "H100-SXM"}

#: the last fit's results (rerun: ``python -m benchmarks.kernels.kernel_fit --check``)
FITTED: dict[str, Any] = {
    "gemm_shared": {"k_overhead": 320.0, "split_k_min": 1536.0, "fixed_us": 2.0,
                    "wave_overhead_us": 0.0},
    "gemm_curve_t_ramp_us": 3.5,
    "gemm_typical_q": {"B200-SXM": 0.9225, "H100-SXM": 0.9251, "derived": 0.9238},
    "attention": {
        "fa3_bf16": {"kv_half": 256.0, "plateau": [[64.0, 0.5261], [128.0, 0.7141], [256.0, 0.805]]},
        "fa3_fp8": {"kv_half": 728.0, "plateau": [[64.0, 0.3334], [256.0, 0.6409]]},
        "fa2_bf16": {"kv_half": 80.0, "plateau": [[64.0, 0.3412], [128.0, 0.3876], [256.0, 0.3427]]},
        "cudnn_h100_bf16": {"kv_half": 192.0, "plateau": [[64.0, 0.413], [128.0, 0.5839], [256.0, 0.5525]]},
        "cudnn_h100_bf16_unmasked": {"kv_half": 128.0, "plateau": [[64.0, 0.4366], [128.0, 0.6528], [256.0, 0.6238]]},
        "cudnn_h100_fp8": {"kv_half": 320.0, "plateau": [[64.0, 0.2541], [256.0, 0.6012]]},
        "fa3_bwd_ratio": [
            [64.0, [[512.0, 0.8168], [1024.0, 0.926], [2048.0, 0.9174], [4096.0, 0.9517],
                    [8192.0, 0.9516], [16384.0, 0.9537]]],
            [128.0, [[512.0, 0.6767], [1024.0, 0.7504], [2048.0, 0.8016], [4096.0, 0.8495],
                     [8192.0, 0.8653], [16384.0, 0.8657]]]],

        "fa2_bwd_ratio": [
            [64.0, [[512.0, 0.7021], [1024.0, 0.7778], [2048.0, 0.8302], [4096.0, 0.8692], [8192.0, 0.8913], [16384.0, 0.8981]]],
            [128.0, [[512.0, 0.6926], [1024.0, 0.7429], [2048.0, 0.8039], [4096.0, 0.8424], [8192.0, 0.8595], [16384.0, 0.8703]]]],
        "cudnn_gb200": {"kv_half": 744.0, "plateau_d128": 0.7381, "bwd_ratio_d128": [
            [256.0, 0.8064], [512.0, 0.719], [1024.0, 0.6127], [2048.0, 0.7605], [4096.0, 0.7645],
            [8192.0, 0.7818], [16384.0, 0.8019]]},
        "cudnn_gb200_fp8": {"kv_half": 816.0, "plateau_d128": 0.4597, "bwd_ratio_d128": [
            [256.0, 0.6404], [512.0, 0.6287], [1024.0, 0.5068], [2048.0, 0.6542], [4096.0, 0.6668],
            [8192.0, 0.6754], [16384.0, 0.6728]]},
        "cudnn_gb300_over_gb200": {"fwd": 1.1923, "bwd": 1.1203},
        # cuDNN 9.10 (CUDNN-FE-2506-FP8, B200) and 9.13 (CUDNN-FE-2509-FP8), lengths 1k-32k
        # (CUDNN_913_MIN_SEQ), per device's peak
        "cudnn910_b200": {"kv_half": 1528.0, "plateau_d128": 0.7221, "bwd_ratio_d128": [
            [512.0, 0.9519], [1024.0, 0.7458], [2048.0, 0.8044], [4096.0, 0.7912], [8192.0, 0.8326],
            [16384.0, 0.8191]]},
        "cudnn910_b200_fp8": {"kv_half": 1888.0, "plateau_d128": 0.4277, "bwd_ratio_d128": [
            [512.0, 0.9043], [1024.0, 0.821], [2048.0, 0.8319], [4096.0, 0.8863], [8192.0, 0.9199],
            [16384.0, 0.9454]]},
        "cudnn913_b200": {"kv_half": 880.0, "plateau_d128": 0.7286, "bwd_ratio_d128": [
            [512.0, 0.6716], [1024.0, 0.6006], [2048.0, 0.7299], [4096.0, 0.7187], [8192.0, 0.7807],
            [16384.0, 0.7792]]},
        "cudnn913_b200_fp8": {"kv_half": 1200.0, "plateau_d128": 0.4322, "bwd_ratio_d128": [
            [512.0, 0.7299], [1024.0, 0.5707], [2048.0, 0.7901], [4096.0, 0.8353], [8192.0, 0.8683],
            [16384.0, 0.8882]]},
        "cudnn913_gb300": {"kv_half": 1280.0, "plateau_d128": 0.8515, "bwd_ratio_d128": [
            [512.0, 0.743], [1024.0, 0.5446], [2048.0, 0.6518], [4096.0, 0.6704], [8192.0, 0.7031],
            [16384.0, 0.7168]]},
        "cudnn913_gb300_fp8": {"kv_half": 2008.0, "plateau_d128": 0.566, "bwd_ratio_d128": [
            [512.0, 0.8663], [1024.0, 0.5565], [2048.0, 0.6902], [4096.0, 0.73], [8192.0, 0.7703],
            [16384.0, 0.7995]]},
    },
}


def rows(name: str) -> list[dict[str, str]]:
    """Rows of ``data/<name>.csv``."""
    with open(DATA / f"{name}.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def gemm_rows(**where: str) -> list[dict[str, str]]:
    """GEMM rows whose columns equal ``where`` (``source="XLA100", dtype="bf16"``)."""
    return [r for r in rows("gemm") if all(r[k] == v for k, v in where.items())]


def gemm_split() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(calibration, held-out) rows of the OpenXLA sm_100 BF16 table."""
    table = gemm_rows(source="XLA100", dtype="bf16")
    cal = [r for r in table if int(r["k"]) in CALIBRATION_K]
    return cal, [r for r in table if int(r["k"]) not in CALIBRATION_K]


def shape_of(r: dict[str, str]) -> np.ndarray:
    return np.array([[float(r["batch"]), float(r["m"]), float(r["n"]), float(r["k"])]])


def measured_s(r: dict[str, str]) -> float:
    """Kernel time of a GEMM row from its TFLOP/s."""
    return 2.0 * float(r["batch"]) * float(r["m"]) * float(r["n"]) * float(r["k"]) / (
        float(r["tflops"]) * 1e12)


def _model(params: dict[str, float], e: float, dtype: str = "default") -> GemmShapeModel:
    return GemmShapeModel(plateau={"default": e, dtype: e}, tiles=TILES, **params)


def gemm_time_s(params: dict[str, float], e: float, peak_tflops: float, sm: int,
                shapes: np.ndarray) -> np.ndarray:
    """Modelled kernel time (launch included) of ``shapes`` (n x 4) at plateau ``e``."""
    return _model(params, e).time_s(peak_tflops * 1e12, "default", sm, shapes) + LAUNCH_US * 1e-6


def solve_plateau(params: dict[str, float], peak_tflops: float, sm: int, r: dict[str, str]) -> float:
    """The plateau at which the model reproduces row ``r`` (bisection; monotone in e)."""
    want, sh = measured_s(r), shape_of(r)
    lo, hi = 0.05, 1.5
    for _ in range(40):
        mid = (lo + hi) / 2
        if gemm_time_s(params, mid, peak_tflops, sm, sh)[0] > want:
            lo = mid
        else:
            hi = mid
    return round((lo + hi) / 2, 4)


def mamf_row(device: str, dtype: str) -> dict[str, str]:
    """The MAMF row (best-shape matmul, ml-engineering) of a device's own data."""
    hit = [r for r in gemm_rows(source="MLE-MAMF", dtype=dtype) if r["device"] == device]
    if len(hit) != 1:
        raise KeyError(f"no single MAMF row for {device} {dtype}")
    return hit[0]


def typical_ratios() -> dict[str, float]:
    """``q`` per MAMF device with ordinary large-shape rows (source PYPTX, BF16, every
    dimension >= :data:`TYPICAL_MIN_DIM`): their geometric-mean TFLOP/s over the device's
    MAMF TFLOP/s; ``"derived"``: the geometric mean of those ``q`` (module docstring)."""
    out: dict[str, float] = {}
    for dev, mamf in TYPICAL_DEVICES.items():
        sel = [float(r["tflops"]) for r in gemm_rows(source="PYPTX", device=dev, dtype="bf16")
               if min(int(r["m"]), int(r["n"]), int(r["k"])) >= TYPICAL_MIN_DIM]
        if sel:
            gm = float(np.exp(np.mean(np.log(sel))))
            out[mamf] = round(gm / float(mamf_row(mamf, "bf16")["tflops"]), 4)
    out["derived"] = round(float(np.exp(np.mean(np.log(list(out.values()))))), 4)
    return out


def log_errors(pred_s: np.ndarray, meas_s: np.ndarray) -> np.ndarray:
    return np.abs(np.log(np.asarray(pred_s) / np.asarray(meas_s)))


#: MAMF rows the shipped profiles solve their plateaus from (device, dtype, peak TFLOP/s, SMs):
#: a candidate whose plateau for any of them exceeds 1 (a mainloop faster than the peak) is
#: rejected by :func:`fit_gemm_shared`
PLATEAU_ROWS = (("A100-SXM", "bf16", 312.0, 108), ("H100-SXM", "bf16", 989.4, 132),
                ("H100-SXM", "fp8", 1979.0, 132), ("H200-SXM", "fp8", 1979.0, 132),
                ("B200-SXM", "bf16", 2250.0, 148), ("B200-SXM", "fp8", 4500.0, 148),
                ("GB200", "bf16", 2500.0, 148), ("GB200", "fp8", 5000.0, 148),
                ("MI300X", "bf16", 1307.4, 304))


def fit_level(params: dict[str, float], shapes: np.ndarray, meas: np.ndarray,
              peak_tflops: float, sm: int) -> tuple[float, float]:
    """(mean |log error|, plateau) minimising the error over the plateau (golden section)."""
    def err(e: float) -> float:
        return float(log_errors(gemm_time_s(params, e, peak_tflops, sm, shapes), meas).mean())

    lo, hi = 0.3, 1.5
    g = (math.sqrt(5) - 1) / 2
    for _ in range(30):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if err(a) < err(b):
            hi = b
        else:
            lo = a
    e = round((lo + hi) / 2, 4)
    return err(e), e


def fit_gemm_shared(peak_tflops: float = 2250.0, sm: int = 148) -> dict[str, float]:
    """Grid search of the shared GEMM parameters on :func:`gemm_split`'s calibration rows.

    The table's own plateau (its SKU and library are unstated; its 4096^3 runs at 63% of the
    B200 peak where the B200 MAMF is 78%) is fitted with each candidate, so the parameters
    describe how efficiency depends on the shape, not the level. Candidates that would put a
    shipped profile's plateau above 1 (:data:`PLATEAU_ROWS`) are rejected."""
    cal, _ = gemm_split()
    shapes = np.concatenate([shape_of(r) for r in cal])
    meas = np.array([measured_s(r) for r in cal])
    scored = []
    grid = itertools.product((0.0, 32.0, 64.0, 96.0, 128.0, 160.0, 192.0, 256.0, 320.0, 384.0),
                             (1024.0, 1536.0, 2048.0, 3072.0, 4096.0),
                             (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0), (0.0, 0.5, 1.0, 1.5, 2.0))
    for k0, ks, fixed, wave in grid:
        p = {"k_overhead": k0, "split_k_min": ks, "fixed_us": fixed, "wave_overhead_us": wave}
        scored.append((fit_level(p, shapes, meas, peak_tflops, sm)[0], p))
    scored.sort(key=lambda x: x[0])
    for _, p in scored:
        if all(solve_plateau(p, pk, n, mamf_row(d, dt)) <= 1.0 for d, dt, pk, n in PLATEAU_ROWS):
            return p
    raise RuntimeError("no candidate keeps every plateau <= 1")


def fit_curve_ramp(peak_tflops: float = 2250.0) -> float:
    """``t_ramp`` (us) of the FLOPs-only GEMM curve on the calibration rows: time =
    flops / (peak E) + t_ramp + launch, with the table's own level E fitted alongside (as in
    :func:`fit_gemm_shared`); the shipped curves use each device's MAMF / peak as E."""
    cal, _ = gemm_split()
    flops = np.array([measured_s(r) * float(r["tflops"]) * 1e12 for r in cal])
    meas = np.array([measured_s(r) for r in cal])
    best = (math.inf, 0.0)
    for t in np.arange(0.0, 40.01, 0.25):
        for e in np.arange(0.30, 1.001, 0.005):
            err = float(log_errors(flops / (peak_tflops * 1e12 * e) + (t + LAUNCH_US) * 1e-6,
                                   meas).mean())
            if err < best[0] - 1e-12:
                best = (err, float(t))
    return best[1]


# --------------------------------------------------------------------------- attention


def attention_rows(**where: str) -> list[dict[str, str]]:
    return [r for r in rows("attention") if all(r[k] == v for k, v in where.items())]


def attention_shape(r: dict[str, str], causal: bool) -> np.ndarray:
    """(batch x heads, seq_q, mean keys per query, head dim) of a benchmark row."""
    seq, d = float(r["seq_len"]), float(r["head_dim"])
    units = float(r["batch"]) * float(r["heads"])
    return np.array([[units, seq, seq / 2 if causal else seq, d]])


HEAD_DIMS = (64.0, 128.0, 256.0)


def fit_attention(impl: str, dtype: str, peak_tflops: float = 989.4, sm: int = 132,
                  device: str = "H100-SXM5", causal: bool = False) -> dict[str, Any]:
    """``kv_half`` and the plateau per head dim of ``impl`` on its non-causal (``causal``:
    causal, mean key length s / 2) forward rows: for each ``kv_half`` on a grid, each head
    dim's plateau is the geometric mean of measured / modelled-at-plateau-1; the ``kv_half``
    with the least mean |log error| wins."""
    data = [r for r in attention_rows(impl=impl, dtype=dtype, causal="true" if causal else "false",
                                      device=device) if r["pass"] == "fwd"]
    best: tuple[float, dict[str, Any]] = (math.inf, {})
    for kvh in np.arange(0.0, 4000.1, 8.0):
        unit = AttentionShapeModel({"default": ((1.0, 1.0),)}, {"default": float(kvh)})
        plateau, errs = [], []
        for d in HEAD_DIMS:
            sel = [r for r in data if float(r["head_dim"]) == d]
            if not sel:
                continue
            e1 = np.array([unit.efficiency("default", sm, attention_shape(r, causal))[0] for r in sel])
            meas = np.array([float(r["tflops"]) / peak_tflops for r in sel])
            e = float(np.exp(np.mean(np.log(meas / e1))))
            plateau.append([d, round(e, 4)])
            errs.extend(np.abs(np.log(meas / (e * e1))).tolist())
        err = float(np.mean(errs))
        if err < best[0] - 1e-12:
            best = (err, {"kv_half": float(kvh), "plateau": plateau})
    return best[1]


def backward_ratios(impl: str = "FlashAttention-3", dtype: str = "bf16",
                    device: str = "H100-SXM5") -> list[list[Any]]:
    """The backward kernel's rate over the forward's at the same head dim and length (both
    non-causal; the backward's TFLOP/s counted on 2.5x the forward FLOPs, as the source
    does): ``[[head_dim, [[seq, ratio], ...]], ...]``. Measured ratios, no fitted form."""
    fwd = {(float(r["head_dim"]), float(r["seq_len"])): float(r["tflops"])
           for r in attention_rows(impl=impl, dtype=dtype, causal="false", device=device, **{"pass": "fwd"})}
    out: dict[float, list[list[float]]] = {}
    for r in attention_rows(impl=impl, dtype=dtype, causal="false", device=device, **{"pass": "bwd"}):
        key = (float(r["head_dim"]), float(r["seq_len"]))
        if key in fwd:
            out.setdefault(key[0], []).append([key[1], round(float(r["tflops"]) / fwd[key], 4)])
    return [[d, sorted(pts)] for d, pts in sorted(out.items())]


#: the cuDNN fit's sequence lengths: those of training (the 64k and 128k rows are left out)
CUDNN_MAX_SEQ = 32768.0
#: the cuDNN 9.10 and 9.13 fits start at 1k tokens: those runs' 512-token forward runs at 0.38
#: (9.10, B200), 0.43 (9.13, B200) and 0.36 (9.13, GB300) of its 1k rate, against 0.56 with
#: cuDNN 9.17 on GB200, a per-call cost the curve's kv / (kv + kv_half) cannot take (training
#: runs 4k-8k tokens)
CUDNN_913_MIN_SEQ = 1024.0
#: SMs of B200, GB200 and GB300
BLACKWELL_SM = 148


def units(r: dict[str, str]) -> float:
    """Independent attention work units of a benchmark row: batch x query heads (the
    ``heads`` column may read "128 q / 8 kv")."""
    return float(r["batch"]) * float(str(r["heads"]).split()[0])


def cudnn_attention(source: str = "CUDNN-FE-2511", device: str = "GB200",
                    peak_tflops: float = 2500.0, dtype: str = "bf16",
                    min_seq: float = 0.0) -> dict[str, Any]:
    """cuDNN's causal ``dtype`` attention on ``device``: ``kv_half`` and the head-dim-128
    plateau (a fraction of ``peak_tflops``, the device's peak in that dtype) fitted on the
    forward rows (as :func:`fit_attention`, mean key length s / 2, lengths up to
    :data:`CUDNN_MAX_SEQ`), and the backward / forward rate per mean key length (both
    counted as the source counts them: backward FLOPs 2.5x the forward's; measured ratios)."""
    sel = [r for r in attention_rows(source=source, device=device, dtype=dtype, causal="true")
           if min_seq <= float(r["seq_len"]) <= CUDNN_MAX_SEQ]
    fwd = {float(r["seq_len"]): r for r in sel if r["pass"] == "fwd"}
    bwd = {float(r["seq_len"]): float(r["tflops"]) for r in sel if r["pass"] == "bwd"}
    meas = np.array([float(r["tflops"]) / peak_tflops for r in fwd.values()])
    best: tuple[float, dict[str, Any]] = (math.inf, {})
    for kvh in np.arange(0.0, 4000.1, 8.0):
        unit = AttentionShapeModel({"default": ((1.0, 1.0),)}, {"default": float(kvh)})
        e1 = np.array([unit.efficiency("default", BLACKWELL_SM, np.array(
            [[units(r), s, s / 2, 128.0]]))[0] for s, r in fwd.items()])
        e = float(np.exp(np.mean(np.log(meas / e1))))
        err = float(np.mean(np.abs(np.log(meas / (e * e1)))))
        if err < best[0] - 1e-12:
            best = (err, {"kv_half": float(kvh), "plateau_d128": round(e, 4)})
    ratio = [[s / 2, round(bwd[s] / float(r["tflops"]), 4)] for s, r in sorted(fwd.items()) if s in bwd]
    return {**best[1], "bwd_ratio_d128": ratio}


def device_ratio(num: str = "GB300", den: str = "GB200", source: str = "CUDNN-FE-2604") -> dict[str, float]:
    """Per pass, the geometric mean over lengths of ``num``'s causal BF16 TFLOP/s over
    ``den``'s, both measured with one library version (``source``)."""
    def rate(dev: str, pas: str) -> dict[float, float]:
        return {float(r["seq_len"]): float(r["tflops"]) for r in attention_rows(
            source=source, device=dev, dtype="bf16", causal="true", **{"pass": pas})}
    out = {}
    for pas in ("fwd", "bwd"):
        a, b = rate(num, pas), rate(den, pas)
        out[pas] = round(float(np.exp(np.mean([np.log(a[s] / b[s]) for s in a if s in b]))), 4)
    return out


def attention_fits() -> dict[str, Any]:
    """The fitted attention parameters (H100 FA3 BF16 and FP8, H100 FA2 BF16, cuDNN BF16 and
    FP8 on GB200, GB300 / GB200) and FA3's backward / forward rate ratios."""
    return {"fa3_bf16": fit_attention("FlashAttention-3", "bf16"),
            "fa3_fp8": fit_attention("FlashAttention-3", "fp8", peak_tflops=1979.0),
            "fa2_bf16": fit_attention("FlashAttention-2", "bf16"),
            "cudnn_h100_bf16": fit_attention("cuDNN", "bf16", causal=True),
            "cudnn_h100_bf16_unmasked": fit_attention("cuDNN", "bf16"),
            "cudnn_h100_fp8": fit_attention("cuDNN", "fp8", peak_tflops=1979.0),
            "fa3_bwd_ratio": backward_ratios(),
            "fa2_bwd_ratio": backward_ratios("FlashAttention-2"),
            "cudnn_gb200": cudnn_attention(),
            "cudnn_gb200_fp8": cudnn_attention("CUDNN-FE-2511-FP8", peak_tflops=5000.0, dtype="fp8"),
            "cudnn_gb300_over_gb200": device_ratio(),
            **{f"cudnn{ver}_{dev.lower()}{'_fp8' if dt == 'fp8' else ''}": cudnn_attention(
                src, dev, peak * (2 if dt == "fp8" else 1), dt, CUDNN_913_MIN_SEQ)
               for ver, src, dev, peak in (("913", "CUDNN-FE-2509-FP8", "B200", 2250.0),
                                           ("913", "CUDNN-FE-2509-FP8", "GB300", 2500.0),
                                           ("910", "CUDNN-FE-2506-FP8", "B200", 2250.0))
               for dt in ("bf16", "fp8")}}


# --------------------------------------------------------------------------- memory


def memory_fraction(device: str) -> float:
    """Achieved / datasheet bandwidth of FluidX3D FP32/FP32 (a streaming, bandwidth-bound
    kernel) on ``device`` (the CSV's device name)."""
    hit = [r for r in rows("membw") if r["device"] == device and r["benchmark"].startswith(
        "FluidX3D LBM FP32/FP32")]
    if len(hit) != 1:
        raise KeyError(f"no single FluidX3D FP32/FP32 row for {device}")
    return float(hit[0]["achieved_GBps"]) / float(hit[0]["spec_GBps"])


def fit_all() -> dict[str, Any]:
    """Every fit of the module docstring (a few seconds)."""
    return {"gemm_shared": fit_gemm_shared(), "gemm_curve_t_ramp_us": fit_curve_ramp(),
            "gemm_typical_q": typical_ratios(), "attention": attention_fits()}


def main() -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the fit differs from FITTED")
    args = ap.parse_args()
    got = fit_all()
    print(json.dumps(got, indent=1))
    same = json.dumps(got, sort_keys=True) == json.dumps(FITTED, sort_keys=True)
    print("matches FITTED" if same else "DIFFERS from FITTED")
    return 0 if (same or not args.check) else 1


if __name__ == "__main__":
    raise SystemExit(main())
