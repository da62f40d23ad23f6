"""A dtype's GEMM level from a square sweep of ordinary shapes, where a device has no MAMF
row for it (a MAMF row is the best of a brute-force shape search; a sweep of squares is what
ordinary shapes reach, so it needs no ``q``): used for Blackwell's NVFP4 and MI355X's FP8
(:mod:`benchmarks.kernels.datasheet`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from benchmarks.kernels import kernel_fit as kf
from benchmarks.kernels.datasheet_specs import SPECS


@dataclass(frozen=True)
class SweepFit:
    """``plateau``: the shared GEMM model's plateau solved at the fastest row; ``ceiling``:
    the geometric mean over the rows with every dimension >= :data:`kf.TYPICAL_MIN_DIM` of
    their compute-part rate (launch overhead out) over the peak; ``curve``: the same rows'
    geometric-mean TFLOP/s over the peak (the size path's E)."""

    plateau: float
    curve: float
    ceiling: float
    best: dict[str, str]
    n_big: int


def sweep_fit(rows: list[dict[str, str]], peak_tflops: float, sm_count: int,
              launch_us: float) -> SweepFit:
    """:class:`SweepFit` of GEMM rows (data/gemm.csv) at a dtype's peak."""
    best = max(rows, key=lambda r: float(r["tflops"]))
    plateau = kf.solve_plateau(kf.FITTED["gemm_shared"], peak_tflops, sm_count, best)
    big = [r for r in rows if min(int(r["m"]), int(r["n"]), int(r["k"])) >= kf.TYPICAL_MIN_DIM]
    rate = [2.0 * float(r["m"]) * float(r["n"]) * float(r["k"])
            / (kf.measured_s(r) - launch_us * 1e-6) / 1e12 for r in big]
    ceiling = round(float(np.exp(np.mean(np.log(rate)))) / peak_tflops, 4)
    curve = round(float(np.exp(np.mean(np.log([float(r["tflops"]) for r in big])))) / peak_tflops, 4)
    return SweepFit(round(plateau, 4), curve, ceiling, best, len(big))


#: dtypes calibrated on a square sweep of ordinary shapes instead of a MAMF row: (device rows
#: in data/gemm.csv, source) per profile and dtype
SQUARE_ROWS: dict[str, dict[str, tuple[str, str]]] = {"mi355x": {"fp8": ("MI355X", "HIPKITTENS")}}


@functools.cache
def square_fit(name: str, dtype: str) -> tuple[float, float, float, str]:
    """(plateau, size-curve E, ceiling, source) of a profile's ``dtype`` calibrated on the
    square sweep :data:`SQUARE_ROWS` names (:func:`sweep_fit` at the datasheet peak)."""
    dev, source = SQUARE_ROWS[name][dtype]
    rows = kf.gemm_rows(source=source, device=dev, dtype=dtype)
    spec = SPECS[name]
    peak = float(spec["peak_tflops"][dtype])
    fit = sweep_fit(rows, peak, spec["sm_count"], kf.LAUNCH_US)
    text = (f"{fit.best['kernel']} on {dev}, square {min(int(r['m']) for r in rows)}-"
            f"{max(int(r['m']) for r in rows)} (data/gemm.csv, source {source}): plateau solved at "
            f"its best row {fit.best['m']}^3 = {fit.best['tflops']} TFLOP/s; ceiling {fit.ceiling} "
            f"and size-curve E {fit.curve}: the geometric mean of the {fit.n_big} rows >= "
            f"{kf.TYPICAL_MIN_DIM}^3 over the {dtype.upper()} peak {peak:g}")
    return fit.plateau, fit.curve, fit.ceiling, text
