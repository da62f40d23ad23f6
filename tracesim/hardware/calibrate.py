"""A device profile from measured kernel timings: efficiency curves fitted to samples.

``tracesim calibrate --device cpu|cuda[:N] -o PROFILE.yaml`` runs :func:`calibrate`: GEMMs
over a grid of sizes (compute efficiency vs FLOPs), copies over a range of sizes (memory
bandwidth), pointwise / norm / softmax / reduction / embedding / optimizer / attention ops
(their efficiency vs size) and a one-element op (the launch / dispatch overhead). Each op's
FLOPs and bytes come from :func:`tracesim.ops.classify.op_cost`, the same function that
reads traces, so the profile and the op table agree on what an op costs.

Compute efficiencies are derived by inverting the cost model
(``eff_c = flops / (peak * (t - launch))``, median per half decade, made non-decreasing).
Memory-bound classes get a robust fit of ``t = t0 + bytes / rate`` per class
(:func:`fit_affine`), written as the efficiency curve that reproduces it
(:func:`affine_curve`): a fixed time plus a rate, so doubling an op's bytes never more than
doubles its time. (Binned medians of ``bytes / (bandwidth * (t - launch))`` put 100-1000x
cliffs into the curves wherever one size was slowed down by other processes during the run;
scaled predictions crossing such a cliff were off by as much.) Every op is timed in
interleaved passes, keeping its fastest. On a GPU the peaks are the datasheet profile's; on a
CPU (no datasheet) peak FLOP/s and bandwidth are the best measured GEMM rate and copy
bandwidth, so the curves top out at 1.0.

The measuring (:mod:`tracesim.collectors.calibrate`, which needs torch) records (FLOPs, bytes,
seconds) samples; this module turns them into a profile (:func:`assemble_profile`) and holds
the curve helpers. It imports without torch.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

# --------------------------------------------------------------------------- curve helpers


def saturating_curve(e_max: float, half_size: float, sizes: Sequence[float]) -> list[list[float]]:
    """Points of ``eff(s) = e_max * s / (s + half_size)`` at ``sizes`` (rounded to 4 digits).

    With ``half_size = peak * e_max * t_ramp`` this is the roofline plus a fixed ramp time
    ``t_ramp`` per kernel; the shipped datasheet profiles use it (docs/devices.md).
    """
    return [[float(s), round(max(e_max * s / (s + half_size), 1e-4), 4)] for s in sizes]


def fit_curve(sizes: Sequence[float], effs: Sequence[float], *, per_decade: int = 1,
              min_points: int = 1, monotone: bool = True) -> list[list[float]]:
    """An efficiency table from scattered samples.

    Samples are binned by log10(size) (``per_decade`` bins per decade); each bin gives its
    median size and median efficiency, clipped to (1e-4, 1]. With ``monotone`` the
    efficiencies are made non-decreasing with size (compute curves: a larger GEMM never runs
    less efficiently). :func:`calibrate` fits memory curves with :func:`fit_affine` instead.
    """
    s = np.asarray(sizes, dtype=float)
    e = np.asarray(effs, dtype=float)
    ok = np.isfinite(s) & np.isfinite(e) & (s > 0) & (e > 0)
    s, e = s[ok], np.minimum(e[ok], 1.0)
    if s.size == 0:
        raise ValueError("no valid samples to fit")
    bins = np.floor(np.log10(s) * per_decade).astype(int)
    pts = []
    for b in np.unique(bins):
        m = bins == b
        if m.sum() < min_points:
            continue
        pts.append([float(np.median(s[m])), float(np.median(e[m]))])
    pts.sort()
    best = 0.0
    for p in pts:
        best = max(best, p[1]) if monotone else p[1]
        p[1] = round(float(np.clip(best, 1e-4, 1.0)), 4)
        p[0] = float(f"{p[0]:.4g}")
    return pts


def spread_of(sizes: Sequence[float], effs: Sequence[float], curve: Sequence[Sequence[float]]) -> float:
    """Relative half-width of the band: 1.5 x the median |eff / curve - 1|, in [0.05, 0.5]."""
    s = np.log10(np.maximum(np.asarray(sizes, dtype=float), 1.0))
    e = np.asarray(effs, dtype=float)
    xs = np.log10([p[0] for p in curve])
    ys = np.array([p[1] for p in curve])
    pred = np.interp(s, xs, ys)
    dev = np.abs(e / np.maximum(pred, 1e-9) - 1.0)
    return round(float(np.clip(1.5 * np.median(dev) if dev.size else 0.25, 0.05, 0.5)), 3)


def fit_affine(sizes: Sequence[float], times_s: Sequence[float]) -> tuple[float, float]:
    """Robust fit of ``t = t0 + size / rate`` to (size, seconds) samples.

    Minimises the sum of ``|log(model / measured)|`` (a median-like fit: a few samples slowed
    down by other processes on a shared machine barely move it) over a log grid, refined
    once. Returns ``(t0_s, rate)``: the fixed per-op time in seconds (>= 0) and the rate in
    size units per second (bytes/s for a memory-bound op).
    """
    s = np.asarray(sizes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    ok = np.isfinite(s) & np.isfinite(t) & (s > 0) & (t > 0)
    s, t = s[ok], t[ok]
    if s.size == 0:
        raise ValueError("no valid samples to fit")
    lt = np.log(t)

    def best(t0s: np.ndarray, rates: np.ndarray) -> tuple[float, float]:
        model = t0s[:, None, None] + s[None, None, :] / rates[None, :, None]
        err = np.abs(np.log(model) - lt[None, None, :]).sum(axis=2)
        i, j = np.unravel_index(int(np.argmin(err)), err.shape)
        return float(t0s[i]), float(rates[j])

    rate_c = float(np.median(s / t))
    t0s = np.concatenate([[0.0], np.logspace(-8, np.log10(max(t.max(), 1e-7)), 97)])
    rates = rate_c * np.logspace(-1, 3, 161)
    t0, rate = best(t0s, rates)
    t0s = np.concatenate([[0.0], np.maximum(t0, 1e-9) * np.logspace(-0.1, 0.1, 21)])
    rates = rate * np.logspace(-0.05, 0.05, 21)
    return best(t0s, rates)


def affine_curve(t0_s: float, rate: float, launch_s: float, peak_rate: float,
                 sizes: Sequence[float]) -> list[list[float]]:
    """Efficiency points at ``sizes`` that make the roofline reproduce ``t = t0 + size / rate``.

    With the model ``t = size / (peak_rate * eff) + launch``, the affine time is the
    saturating curve ``eff = e_max * size / (size + half)`` with ``e_max = rate / peak_rate``
    and ``half = (t0 - launch) * rate`` (as :func:`saturating_curve`, kept to 4 significant
    digits): the fixed part of the op's time does not scale with size, the rest linearly.
    """
    e_max = min(rate / peak_rate, 1.0)
    half = max(t0_s - launch_s, 0.0) * e_max * peak_rate
    return [[float(x), float(f"{max(e_max * x / (x + half), 1e-6):.4g}")] for x in sizes]


#: sizes (bytes) at which the fitted memory curves are written: 4 points per decade, 1 KB-10 GB
MEMORY_CURVE_SIZES = [float(f"{10 ** (k / 4):.4g}") for k in range(12, 41)]

def _fresh(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _fresh(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_fresh(x) for x in v]
    return v


def assemble_profile(samples: dict[str, dict[str, list[tuple[float, float, float]]]], launch: float,
              peaks: dict[str, float], bw: float, mem_gib: float, is_cuda: bool, name: str | None,
              ref_name: str, machine: str, quick: bool, torch_version: str,
              threads: int, attn_units: list[float] | None = None) -> dict[str, Any]:
    """Turn (flops, bytes, seconds) samples into a profile mapping (see module docstring).
    ``attn_units``: work units of each attention sample (CPU: the curve is per unit)."""

    def busy(t: float) -> float:  # time left after the fixed overhead (never below 10% of t)
        return max(t - launch, 0.1 * t)

    gemm = samples["gemm"]
    flat_samples = {c: v["default"] for c, v in samples.items() if c != "gemm"}
    measured_peaks = {k: max(f / t for f, _, t in v) / 1e12 for k, v in gemm.items()}
    if not peaks:
        peaks = {("fp32" if k == "default" else k): round(v, 4) for k, v in measured_peaks.items()}
    if bw <= 0:
        bw = round(max(b / t for _, b, t in flat_samples["memcpy"]) / 1e9, 3)

    def peak_of(key: str) -> float:
        k = "fp32" if key == "default" else key
        return float(peaks.get(k) or peaks.get("fp32") or max(peaks.values())) * 1e12

    mem_fits: dict[str, dict[str, float]] = {}

    def mem_curve(rows: list[tuple[float, float, float]], cls: str) -> tuple[list[list[float]], list, list]:
        # a fixed time plus bytes / rate (robust fit): a 2x larger op costs at most 2x, and
        # one slowed-down size cannot put a cliff into the curve
        sizes = [b for _, b, _ in rows]
        effs = [b / (bw * 1e9 * busy(t)) for _, b, t in rows]
        t0, rate = fit_affine(sizes, [t for _, _, t in rows])
        mem_fits[cls] = {"fixed_us": round(t0 * 1e6, 3), "rate_GBps": round(rate / 1e9, 2)}
        return affine_curve(t0, rate, launch, bw * 1e9, MEMORY_CURVE_SIZES), sizes, effs

    def comp_curve(rows: list[tuple[float, float, float]], key: str,
                   units: list[float] | None = None) -> tuple[list[list[float]], list, list]:
        sizes = [f / u for (f, _, _), u in zip(rows, units, strict=True)] if units else [f for f, _, _ in rows]
        effs = [f / (peak_of(key) * busy(t)) for f, _, t in rows]
        return fit_curve(sizes, effs, per_decade=2), sizes, effs

    copy_curve, cs, ce = mem_curve(flat_samples["memcpy"], "memcpy")
    flat = [[1.0, 1.0]]
    eff: dict[str, Any] = {}
    g_curves = {}
    g_spreads = []
    for key, rows in gemm.items():
        curve, s, e = comp_curve(rows, key)
        g_curves[key] = curve
        g_spreads.append(spread_of(s, e, curve))
    eff["gemm"] = {"compute": g_curves if len(g_curves) > 1 else g_curves["default"],
                   "memory": copy_curve, "spread": max(g_spreads)}
    # CPU: one (batch, head) problem after another on the cores, so the curve is over FLOPs
    # per unit (sequence x sequence x head dim), not the total (docs/devices.md)
    per_unit = not is_cuda and bool(attn_units)
    att, s, e = comp_curve(flat_samples["attention"], "default", attn_units if per_unit else None)
    eff["attention"] = {"compute": att, "memory": copy_curve, "spread": spread_of(s, e, att)}
    if per_unit:
        eff["attention"]["compute_size"] = "unit"
    ew_mem, s, e = mem_curve(flat_samples["elementwise"], "elementwise")
    # transcendental pointwise ops (gelu) set one size-independent compute efficiency: the
    # size ramp is already in the memory curve, and a curve over FLOPs would wrongly slow
    # down cheap ops (add) of the same size
    _, s2, e2 = comp_curve(flat_samples["elementwise_compute"], "default")
    big = [x for x, sz in zip(e2, s2, strict=True) if sz >= np.median(s2)]
    ew_comp = [[1.0, round(float(np.clip(np.median(big), 1e-4, 1.0)), 4)]]
    eff["elementwise"] = {"compute": ew_comp, "memory": ew_mem, "spread": spread_of(s, e, ew_mem)}
    eff["memcpy"] = {"compute": flat, "memory": copy_curve, "spread": spread_of(cs, ce, copy_curve)}
    for cls in ("norm", "softmax", "reduction", "embedding", "optimizer"):
        curve, s, e = mem_curve(flat_samples[cls], cls)
        eff[cls] = {"compute": flat, "memory": curve, "spread": spread_of(s, e, curve)}
    eff["default"] = dict(eff["elementwise"])
    # fresh lists everywhere, so the YAML has no anchors / aliases
    eff = {c: {k: _fresh(v) for k, v in d.items()} for c, d in eff.items()}
    today = _dt.date.today().isoformat()
    nm = name or ("host-cpu" if not is_cuda else f"{ref_name or 'gpu'}-measured")
    prof: dict[str, Any] = {
        "name": nm,
        "kind": "gpu" if is_cuda else "cpu",
        "source": (f"tracesim calibrate{' --quick' if quick else ''} on {machine}, {today}, "
                   f"torch {torch_version}" + ("" if is_cuda else f", {threads} threads")),
        "peak_tflops": {k: round(float(v), 4) for k, v in peaks.items()},
        "hbm_GBps": round(float(bw), 3),
        "hbm_GiB": round(float(mem_gib), 1),
        "launch_overhead_us": round(launch * 1e6, 3),
        "calibration": {
            "date": today, "machine": machine, "cpu_count": os.cpu_count(), "torch": torch_version,
            "quick": quick, "threads": threads,
            "measured_peak_tflops": {k: round(v, 4) for k, v in measured_peaks.items()},
            "datasheet": ref_name or None,
            "memory_fits": mem_fits,
        },
        "efficiency": eff,
    }
    if not is_cuda:
        prof["threads"] = threads
    return prof
