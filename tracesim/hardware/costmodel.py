"""Kernel-time model and scaling of measured times to other devices and shapes.

The model (DESIGN.md, "Kernel-time scaling") is a roofline with size-dependent efficiency::

    t = max(flops / (peak[dtype] * sustained[dtype] * eff_c(class, dtype, flops)),
            bytes / (hbm_bw * eff_m(class, bytes))) + launch_overhead

with the curves taken from the device profile (``sustained``: the compute rate a GPU holds at
its power limit over its kernel benchmarks' rate, per dtype for matrix classes and the
profile's default for the others, 1 unless the profile says). A class whose profile says ``compute_size:
unit`` reads its compute curve at ``flops / units`` (FLOPs of one independent work unit, e.g.
one attention head; ``units`` is 1 unless given). Where a GEMM's or an attention's ``shape``
``(batch, m, n, k)`` is given and the profile has a ``shape_model``, the compute term's
efficiency comes from the shape instead (wave and tile quantisation, head dim and key length:
:mod:`tracesim.hardware.shapemodel`); without a shape, or on a profile without a shape model,
the size curve is used, so callers that pass no shape are unaffected. The band (low, mid, high) widens each
efficiency by the class's ``spread``: low uses ``eff * (1 + spread)`` (capped at 1), high uses
``eff * (1 - spread)``; the launch overhead is the same in all three.

Scaling (:func:`scale_duration`): a measured time on the same device at the same cost
features is used as is (``measured``); a measured time on another device or at other shapes
is multiplied by the model's ratio (target over source, ``scaled``); with no measurement the
model alone is used (``model``). Every function has a vectorised twin for op tables with
millions of rows: :func:`op_times_ns`, :func:`op_time_bands_ns`, :func:`scale_durations`.
All times returned are integer nanoseconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import pandas as pd

from tracesim.hardware.device import DeviceProfile, get_device

METHODS = ("measured", "scaled", "model")

#: op-table columns holding an op's shape ``(batch, m, n, k)`` (GEMM: per-batch ``m x k``
#: times ``k x n``; attention: ``batch x heads``, query length, mean key length per query,
#: head dim); 0 or missing = unknown
SHAPE_COLUMNS = ("shape_b", "shape_m", "shape_n", "shape_k")

#: classes whose FLOPs run on matrix units at the dtype's peak; the others run on vector units
#: (CUDA cores, CPU SIMD) at the fp32 peak whatever their storage dtype
MATRIX_CLASSES = ("gemm", "attention", "scan")


class CostLike(Protocol):
    """Anything with the four cost features (e.g. tracesim.ops.classify.OpCost)."""

    op_class: str
    flops: float
    bytes: float
    dtype: str


def _units_of(cost: Any) -> float:
    """Work units of a cost (``units`` attribute, 1 when absent or not positive)."""
    u = getattr(cost, "units", 1.0)
    return float(u) if u and u > 0 else 1.0


def _shape_of(cost: Any) -> tuple[float, ...] | None:
    """A cost's ``shape`` attribute as 4 floats, None when absent or malformed."""
    sh = getattr(cost, "shape", None)
    if sh is None or len(sh) != 4:
        return None
    return tuple(float(x) for x in sh)


def _arr_shape(shape: Any, n: int) -> np.ndarray | None:
    """``shape`` (None, one 4-tuple or an n x 4 array) as an n x 4 float array; rows with a
    non-positive or non-finite entry become zeros (= unknown)."""
    if shape is None:
        return None
    a = np.asarray(shape, dtype=float)
    if a.ndim == 1:
        if a.shape[0] != 4:
            raise ValueError(f"a shape is (batch, m, n, k), got {shape!r}")
        a = np.broadcast_to(a, (n, 4))
    if a.shape != (n, 4):
        raise ValueError(f"expected {n} x 4 shapes, got an array of shape {a.shape}")
    ok = (np.isfinite(a) & (a > 0)).all(axis=1)
    return np.where(ok[:, None], a, 0.0)


def _dev(device: DeviceProfile | str | Mapping[str, Any]) -> DeviceProfile:
    return device if isinstance(device, DeviceProfile) else get_device(device)


def _times_s(dev: DeviceProfile, op_class: Any, flops: np.ndarray, nbytes: np.ndarray,
             dtype: Any, sign: float, units: np.ndarray | None = None,
             shape: np.ndarray | None = None) -> np.ndarray:
    """Seconds per op; ``sign`` = 0 (mid), +1 (low: faster), -1 (high: slower); ``shape``:
    n x 4 (zeros = unknown), used by classes the profile's shape model covers."""
    n = flops.shape[0]
    cls = np.broadcast_to(np.asarray(op_class, dtype=object), (n,))
    dts = np.broadcast_to(np.asarray(dtype, dtype=object), (n,))
    out = np.empty(n, dtype=float)
    if n == 0:
        return out
    groups: list[tuple[Any, Any]]
    if cls.ndim == 1 and n > 1 and not (isinstance(op_class, str) and isinstance(dtype, str)):
        codes, uniques = pd.factorize(pd.MultiIndex.from_arrays([cls, dts]))
        groups = [(np.flatnonzero(codes == j), u) for j, u in enumerate(uniques)]
    else:
        groups = [(slice(None), (cls[0], dts[0]))]
    bw = dev.hbm_GBps * 1e9
    launch = dev.launch_overhead_us * 1e-6
    for idx, (c, dt) in groups:
        ce = dev.class_efficiency(str(c))
        dt = str(dt) if dt else "fp32"
        f = flops[idx]
        b = nbytes[idx]
        scale = 1.0 + sign * ce.spread
        size = f
        if ce.per_unit and units is not None:  # callers clamp units to >= 1 (_arr_units)
            size = f / np.broadcast_to(units, (n,))[idx]
        eff_c = np.minimum(ce.compute_curve(dt).at(size) * scale, 1.0)
        eff_m = np.minimum(ce.memory.at(b) * scale, 1.0)
        peak = (dev.peak_flops(dt) * dev.sustained(dt) if c in MATRIX_CLASSES
                else dev.peak_flops("fp32") * dev.sustained_clock)
        t_c = f / (peak * eff_c)
        if shape is not None and dev.shape_model is not None and c in MATRIX_CLASSES:
            t_c = _shaped(dev, str(c), dt, peak, shape[idx], f, t_c, scale)
        t_m = b / (bw * eff_m)
        out[idx] = np.maximum(t_c, t_m) + launch
    return out


def _shaped(dev: DeviceProfile, op_class: str, dtype: str, peak: float, shape: np.ndarray,
            flops: np.ndarray, t_c: np.ndarray, scale: float) -> np.ndarray:
    """``t_c`` with the rows whose shape is known timed by the profile's shape model (the
    band's ``scale`` divides the time, never below the peak rate)."""
    known = shape[:, 0] > 0
    if not known.any():
        return t_c
    assert dev.shape_model is not None
    t = dev.shape_model.compute_time_s(op_class, dtype, peak, dev.sm_count, shape[known],
                                       flops[known])
    if t is None:
        return t_c
    out = np.array(t_c, dtype=float, copy=True)
    out[known] = np.maximum(t / scale, flops[known] / peak)
    return out


def _arr(x: Any) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    a = np.atleast_1d(a)
    return np.where(np.isfinite(a) & (a > 0), a, 0.0)


def _ns(t: np.ndarray) -> np.ndarray:
    return np.rint(t * 1e9).astype(np.int64)


# --------------------------------------------------------------------------- scalar API


def op_time_ns(device: DeviceProfile | str, op_class: str, flops: float, bytes: float,
               dtype: str, units: float = 1.0, shape: Any = None) -> int:
    """Model time of one op on ``device``, in integer nanoseconds.

    Args:
        device: a :class:`DeviceProfile` or anything :func:`get_device` accepts.
        op_class: op class (tracesim.ops.classify.OP_CLASSES).
        flops: floating-point operations; bytes: bytes moved; dtype: compute dtype.
        units: independent work units the FLOPs split into (attention: batch x heads); used
            by classes whose profile says ``compute_size: unit``.
        shape: optional ``(batch, m, n, k)`` of a GEMM or an attention (:data:`SHAPE_COLUMNS`);
            with it, a profile's ``shape_model`` sets the compute efficiency.
    """
    t = _times_s(_dev(device), op_class, _arr(flops), _arr(bytes), dtype, 0.0, _arr_units(units),
                 _arr_shape(shape, 1))
    return int(_ns(t)[0])


def op_time_band_ns(device: DeviceProfile | str, op_class: str, flops: float, bytes: float,
                    dtype: str, units: float = 1.0, shape: Any = None) -> tuple[int, int, int]:
    """(low, mid, high) model time in ns from the class's efficiency spread."""
    dev = _dev(device)
    f, b, u, sh = _arr(flops), _arr(bytes), _arr_units(units), _arr_shape(shape, 1)
    lo, mid, hi = (int(_ns(_times_s(dev, op_class, f, b, dtype, s, u, sh))[0])
                   for s in (1.0, 0.0, -1.0))
    return lo, mid, hi


def _arr_units(units: Any) -> np.ndarray:
    u = np.atleast_1d(np.asarray(units, dtype=float))
    return np.where(np.isfinite(u) & (u >= 1.0), u, 1.0)


def _same(src_dev: DeviceProfile, src: CostLike, dst_dev: DeviceProfile, dst: CostLike) -> bool:
    return (src_dev.name == dst_dev.name and src.op_class == dst.op_class
            and float(src.flops) == float(dst.flops) and float(src.bytes) == float(dst.bytes)
            and (src.dtype or "fp32") == (dst.dtype or "fp32")
            and _units_of(src) == _units_of(dst) and _shape_of(src) == _shape_of(dst))


def alike_profiles(src: DeviceProfile, dst: DeviceProfile) -> tuple[DeviceProfile, DeviceProfile]:
    """The two profiles a measured time is scaled between: two GPUs at their sustained
    clocks where both say how they throttle at their power limit, else both at their kernel
    benchmarks' rate. A recorded kernel ran in one regime; a GPU profile without
    sustained-load data (1: not known, not "never throttles") would otherwise make every
    kernel recorded on a GPU that has one look that much faster on it. A CPU source or
    target keeps its profiles as they are (a CPU profile is its microbenchmarks' rate)."""
    if src.kind != "gpu" or dst.kind != "gpu" or (src.throttles and dst.throttles):
        return src, dst
    return src.burst(), dst.burst()


def scale_duration(measured_ns: int | None, src_device: DeviceProfile | str, src_cost: CostLike,
                   dst_device: DeviceProfile | str, dst_cost: CostLike) -> tuple[int, str]:
    """Duration of an op on ``dst_device`` at ``dst_cost``, anchored on a measurement.

    Returns:
        (duration_ns, method) with method ``measured`` (same device and cost features),
        ``scaled`` (measured x model ratio dst/src) or ``model`` (``measured_ns`` is None).
    """
    lo_mid_hi = scale_duration_band(measured_ns, src_device, src_cost, dst_device, dst_cost)
    return lo_mid_hi[1], lo_mid_hi[3]


def scale_duration_band(measured_ns: int | None, src_device: DeviceProfile | str,
                        src_cost: CostLike, dst_device: DeviceProfile | str,
                        dst_cost: CostLike) -> tuple[int, int, int, str]:
    """(low, mid, high, method): :func:`scale_duration` with its uncertainty band.

    A measured op has no band (low = mid = high); a scaled op's band is the measurement times
    the target's (low, high) over the source's mid; a modelled op uses :func:`op_time_band_ns`.
    """
    dst_dev = _dev(dst_device)
    if measured_ns is None or not np.isfinite(measured_ns) or measured_ns < 0:
        lo, mid, hi = op_time_band_ns(dst_dev, dst_cost.op_class, dst_cost.flops, dst_cost.bytes,
                                      dst_cost.dtype, _units_of(dst_cost), _shape_of(dst_cost))
        return lo, mid, hi, "model"
    src_dev = _dev(src_device)
    m = int(measured_ns)
    if _same(src_dev, src_cost, dst_dev, dst_cost):
        return m, m, m, "measured"
    src_dev, dst_dev = alike_profiles(src_dev, dst_dev)
    src_t = op_time_ns(src_dev, src_cost.op_class, src_cost.flops, src_cost.bytes, src_cost.dtype,
                       _units_of(src_cost), _shape_of(src_cost))
    lo, mid, hi = op_time_band_ns(dst_dev, dst_cost.op_class, dst_cost.flops, dst_cost.bytes,
                                  dst_cost.dtype, _units_of(dst_cost), _shape_of(dst_cost))
    if src_t <= 0:
        return m, m, m, "scaled"
    return (int(round(m * lo / src_t)), int(round(m * mid / src_t)), int(round(m * hi / src_t)),
            "scaled")


# --------------------------------------------------------------------------- vectorised API


def op_times_ns(device: DeviceProfile | str, op_class: Any, flops: Any, bytes: Any,
                dtype: Any, units: Any = 1.0, shape: Any = None) -> np.ndarray:
    """Vectorised :func:`op_time_ns`: arrays (or scalars, broadcast) in, int64 ns array out;
    ``shape``: None, one ``(batch, m, n, k)`` for all ops, or an n x 4 array (zero rows:
    unknown)."""
    f, b, u = np.broadcast_arrays(_arr(flops), _arr(bytes), _arr_units(units))
    return _ns(_times_s(_dev(device), op_class, np.ascontiguousarray(f), np.ascontiguousarray(b),
                        dtype, 0.0, np.ascontiguousarray(u), _arr_shape(shape, f.shape[0])))


def op_time_bands_ns(device: DeviceProfile | str, op_class: Any, flops: Any, bytes: Any,
                     dtype: Any, units: Any = 1.0,
                     shape: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised :func:`op_time_band_ns`: (low, mid, high) int64 ns arrays."""
    dev = _dev(device)
    f, b, u = np.broadcast_arrays(_arr(flops), _arr(bytes), _arr_units(units))
    f, b, u = np.ascontiguousarray(f), np.ascontiguousarray(b), np.ascontiguousarray(u)
    sh = _arr_shape(shape, f.shape[0])
    lo, mid, hi = (_ns(_times_s(dev, op_class, f, b, dtype, s, u, sh)) for s in (1.0, 0.0, -1.0))
    return lo, mid, hi


def _cols(costs: Mapping[str, Any], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                     np.ndarray, np.ndarray | None]:
    def col(k: str, default: Any) -> np.ndarray:
        v = costs[k] if k in costs else default
        return np.broadcast_to(np.asarray(v, dtype=object if k in ("op_class", "dtype") else float), (n,))

    dts = col("dtype", "fp32")
    dts = np.where(pd.isna(dts) | (dts == ""), "fp32", dts).astype(object)
    shape = None
    if all(k in costs for k in SHAPE_COLUMNS):
        shape = _arr_shape(np.nan_to_num(np.stack([col(k, 0.0) for k in SHAPE_COLUMNS], axis=1)), n)
    return (col("op_class", "other"), _arr(col("flops", 0.0)), _arr(col("bytes", 0.0)), dts,
            _arr_units(col("units", 1.0)), shape)


def scale_durations(measured_ns: Any, src_device: DeviceProfile | str, src_costs: Mapping[str, Any],
                    dst_device: DeviceProfile | str, dst_costs: Mapping[str, Any],
                    *, band: bool = False) -> Any:
    """Vectorised :func:`scale_duration` over op tables.

    Args:
        measured_ns: measured durations; NaN or a negative value means "not measured".
        src_costs, dst_costs: mappings (e.g. DataFrames) with columns ``op_class``, ``flops``,
            ``bytes``, ``dtype`` and optionally ``units`` and the four :data:`SHAPE_COLUMNS`
            (scalars broadcast).
        band: also return the low and high arrays.

    Returns:
        ``(ns, method)`` — int64 durations and a string array of :data:`METHODS` — or, with
        ``band=True``, ``(low, mid, high, method)``.
    """
    meas = np.atleast_1d(np.asarray(measured_ns, dtype=float))
    n = meas.shape[0]
    src_dev, dst_dev = _dev(src_device), _dev(dst_device)
    sc, sf, sb, sd, su, ssh = _cols(src_costs, n)
    dc, df, db, dd, du, dsh = _cols(dst_costs, n)
    have = np.isfinite(meas) & (meas >= 0)
    same = (have & (src_dev.name == dst_dev.name) & (sc == dc) & (sf == df) & (sb == db)
            & (sd == dd) & (su == du))
    if ssh is not None or dsh is not None:
        zeros = np.zeros((n, 4))
        same &= ((zeros if ssh is None else ssh) == (zeros if dsh is None else dsh)).all(axis=1)
    scaled = have & ~same
    src_a, dst_a = alike_profiles(src_dev, dst_dev)
    # scaled ops take the target in the source's regime; unmeasured ones ("model") the target
    lo, mid, hi = (_times_s(dst_a, dc, df, db, dd, s, du, dsh) for s in (1.0, 0.0, -1.0))
    if dst_a is not dst_dev and not have.all():
        mlo, mmid, mhi = (_times_s(dst_dev, dc, df, db, dd, s, du, dsh) for s in (1.0, 0.0, -1.0))
        lo, mid, hi = (np.where(have, t, m) for t, m in ((lo, mlo), (mid, mmid), (hi, mhi)))
    src_t = _times_s(src_a, sc, sf, sb, sd, 0.0, su, ssh)
    ratio_ok = scaled & (src_t > 0)
    m = np.where(have, meas, 0.0)
    outs = []
    for t in (lo, mid, hi):
        o = np.where(same, m * 1e-9, t)
        o = np.where(ratio_ok, m * 1e-9 * t / np.where(src_t > 0, src_t, 1.0), o)
        o = np.where(scaled & ~ratio_ok, m * 1e-9, o)
        outs.append(_ns(o))
    method = np.where(same, "measured", np.where(scaled, "scaled", "model")).astype(object)
    if band:
        return outs[0], outs[1], outs[2], method
    return outs[1], method
