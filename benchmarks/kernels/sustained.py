"""The rate a GPU sustains under a training step's load, over its kernel benchmarks' rate.

A GPU running dense matrix work back to back reaches its board power limit and lowers its SM
clock until it stays under it; short kernel benchmarks (the ones every profile's compute
curves are calibrated on: MAMF's 100 iterations, pyptx's 20-200, cuDNN's benchmark runs)
catch the clock before it settles. A training step is one long saturated run. The profile's
``sustained_clock`` is the ratio of the two; the cost model multiplies every compute rate by it
(tracesim.hardware.device.DeviceProfile). Data: ``data/sustained.csv`` (sources in
``data/SOURCES.md``).

Per GPU and dtype (:func:`sustained_clock`): the sustained matmul rate (MSMF: the best shape
held at the power limit once the clock has settled) over the profile's large-GEMM level of
that dtype (the shape model's ceiling, ``q`` x MAMF); at most 1 (a profile already at or
below the sustained rate keeps its rates). BF16's ratio is the profile's default (every
dtype and class without one of its own); FP8 gets its own where its MSMF is measured (an FP8
GEMM draws another power per FLOP, so the clock settles elsewhere: H200 1374 MHz against
1465 for BF16). A GPU without an MSMF of its own takes one of the same die at its own power
limit, scaled as the cube root of the power ratio (dynamic power ~ f V^2 with the voltage
following the clock, so P ~ f^3 at the power limit; derived, :data:`DERIVED_FROM`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from benchmarks.kernels import kernel_fit as kf
from tracesim.hardware.fleet import expected_max

#: board power limits (W) of the GPUs scaled from another's MSMF, with their sources
POWER_W: dict[str, tuple[float, str]] = {
    "b200": (1000.0, "NVIDIA B200 HGX datasheet (1000 W; the MSMF run drew it, source MLE-MSMF)"),
    "gb200": (1200.0, "GB200 NVL72 specification, 1200 W per GPU (the profile's source; "
                      "facebookexperimental/triton PR #2023 sets GB200 to 1200 W as its rated power)"),
    "gb300": (1400.0, "GB300 NVL72 specification, 1400 W per GPU (the profile's source; "
                      "facebookexperimental/triton PR #2023: default_limit == max_limit == 1400 W)"),
    "b300": (1000.0, "B300 SXM maximum TGP 1000 W: stas00/ml-engineering@744d01e "
                     "compute/accelerator/README.md power table (its note 6: NVIDIA DGX B300 power capping)"),
}

#: profile -> (the profile whose MSMF row it takes, why)
DERIVED_FROM: dict[str, tuple[str, str]] = {
    "h100": ("h200", "the same GH100 die at the same 700 W limit; an H100 SXM5 training Llama 3 8B "
                     "in BF16 held 1464 MHz, the H200's 1465 under its BF16 MSMF (als244/ml_dataflow "
                     "@ 067dd2c docs/sample_profiling_trace.md, Nsight's GPC clock)"),
    "gb200": ("b200", "the same Blackwell die at a higher power limit"),
    "gb300": ("b200", "Blackwell Ultra at a higher power limit (no MSMF of its own)"),
    "b300": ("b200", "Blackwell Ultra at B200's power limit (no MSMF of its own)"),
}


def rows(role: str | None = None) -> list[dict[str, str]]:
    """Rows of ``data/sustained.csv`` (``role``: calibrated / tested / None for all)."""
    return [r for r in kf.rows("sustained") if role is None or r["role"] == role]


def msmf_row(profile: str, dtype: str = "bf16") -> dict[str, str] | None:
    """The MSMF (calibrated matmul) row of a profile's own device in ``dtype``, None when
    there is none."""
    hit = [r for r in rows("calibrated") if r["profile"] == profile and r["dtype"] == dtype]
    return hit[0] if hit else None


def _rate(name: str, dtype: str) -> tuple[float, str] | None:
    """(sustained TFLOP/s, how) of ``name``'s GPU in ``dtype``: its own MSMF row or its base's
    scaled to its power limit; None without data."""
    own = msmf_row(name, dtype)
    if own is not None:
        rate = float(own["sustained_tflops"])
        return rate, (f"{own['device']} MSMF {rate:g} TFLOP/s {dtype.upper()} at {own['power_W']} W"
                      f" (data/sustained.csv, source {own['source']})")
    if name not in DERIVED_FROM:
        return None
    base, why = DERIVED_FROM[name]
    row = msmf_row(base, dtype)
    if row is None:
        return None
    rate = float(row["sustained_tflops"])
    how = f"{row['device']} MSMF {rate:g} TFLOP/s {dtype.upper()} (source {row['source']}): {why}"
    if name in POWER_W and base in POWER_W:
        k = (POWER_W[name][0] / POWER_W[base][0]) ** (1.0 / 3.0)
        rate *= k
        how += (f", x (P / P_{base})^(1/3) = ({POWER_W[name][0]:g} / {POWER_W[base][0]:g})^(1/3)"
                f" = {k:.4f} -> {rate:.1f} TFLOP/s ({POWER_W[name][1]}; derived)")
    else:
        how += " (derived)"
    return rate, how


def sustained_clock(name: str, ceilings_tflops: dict[str, float]
                    ) -> tuple[float | dict[str, float], str]:
    """(ratio, its source) of a generated GPU: a number (BF16's, for every dtype) or, where
    FP8 has an MSMF of its own, ``{default: BF16's, fp8: FP8's}``. ``ceilings_tflops``: the
    profile's large-GEMM level per dtype (``bf16``, ``fp8``: the shape model's ceiling x the
    dtype's peak)."""
    out: dict[str, float] = {}
    notes = []
    for dtype in ("bf16", "fp8"):
        got = _rate(name, dtype)
        if got is None or dtype not in ceilings_tflops:
            continue
        rate, how = got
        level = ceilings_tflops[dtype]
        ratio = min(1.0, rate / level)
        cap = "" if ratio < 1.0 else " (at or above the profile's level: capped at 1)"
        out["default" if dtype == "bf16" else dtype] = round(ratio, 4)
        notes.append(f"{dtype.upper()} {ratio:.4f}{cap} = {how} over the profile's {dtype.upper()} "
                     f"large-GEMM level {level:.1f} TFLOP/s (shape_model.gemm.ceiling x peak)")
    if "default" not in out:
        return 1.0, ("1.0: no sustained-load data for this GPU; the rates of its kernel "
                     "benchmarks")
    text = "; ".join(notes) + ("; other dtypes and classes: BF16's" if len(out) > 1 else "")
    return (out if len(out) > 1 else out["default"]), text


# --------------------------------------------------------------------------- the slowest GPU

#: profile -> (the profile whose node measurement it takes, why); a GPU on another board or
#: cooling has none (the spread comes from the dies and from the board's power and cooling)
FLEET_FROM: dict[str, tuple[str, str]] = {
    "h100": ("h200", "the same GH100 die at the same 700 W on an air-cooled 8-GPU baseboard"),
}
#: profile -> (the profile whose per-GPU spread it takes, why): the same die on another board,
#: so the dies' spread (``chip_sigma``) carries over and what the board's shared power and
#: cooling do does not: ``concurrent`` (1.0) and ``run_sigma`` (0.0), not measured
DIE_FROM: dict[str, tuple[str, str]] = {
    "gb200": ("b200", "the same Blackwell die; an NVL72 compute tray is another board, power "
                      "budget and cooling than the air-cooled DGX B200 node, so its concurrent "
                      "is not carried over (1.0: no whole tray measured at once)"),
}
#: Monte Carlo draws of the 8 chips x 5 rounds range (fixed seed: the same profile every run)
_DRAWS = 20_000


def _range_of(chips: int, runs: int) -> Callable[[float, float], float]:
    """The expected range (max - min) of ``chips x runs`` draws as a function of the chip
    offsets' sigma and the run-to-run noise's (relative units), on one fixed set of standard
    normal draws (the bisection below compares sigmas on the same draws)."""
    rng = np.random.default_rng(0)
    c = rng.standard_normal((_DRAWS, chips, 1))
    e = rng.standard_normal((_DRAWS, chips, runs))

    def expected(sigma_chip: float, sigma_run: float) -> float:
        x = (c * sigma_chip + e * sigma_run).reshape(_DRAWS, -1)
        return float((x.max(axis=1) - x.min(axis=1)).mean())

    return expected


def fleet(name: str) -> tuple[dict[str, float] | None, str]:
    """(``sustained_fleet``, its source) of a generated GPU: the node's all-GPUs-at-once mean
    over one GPU alone, and the per-GPU standard deviation that gives the all-at-once runs'
    range (8 chips x 5 rounds, each run with the run-to-run noise of one GPU's runs while its
    siblings ran: their range / d2(5)); None
    without data (tracesim.hardware.fleet)."""
    if name in DIE_FROM:
        src, why = DIE_FROM[name]
        got_src, text = fleet(src)
        if got_src is not None:
            return ({"concurrent": 1.0, "chip_sigma": got_src["chip_sigma"], "run_sigma": 0.0},
                    f"chip_sigma from {src}: {text}; {why}; nor is its run_sigma (the motion "
                    "of one GPU's rate with its siblings busy on that board: 0, not measured) "
                    "(derived)")
    own = name
    why = ""
    if name in FLEET_FROM:
        own, why = FLEET_FROM[name]
    got = {r["setup"]: r for r in kf.rows("concurrent") if r["profile"] == own}
    if "alone" not in got or "all_concurrent" not in got:
        return None, ("none: no measurement of a whole node's GPUs saturated at once on this "
                      "GPU's board; every GPU of a job at the profile's rate")
    alone, allc = got["alone"], got["all_concurrent"]
    noisy = got.get("gpu0_siblings_busy", alone)  # one GPU's runs while the others run
    conc = min(1.0, float(allc["mean_tflops"]) / float(alone["mean_tflops"]))
    d2 = 2.0 * expected_max(int(noisy["runs"]))  # the expected range of that many normal draws
    sigma_run = float(noisy["range_pct"]) / 100.0 / d2
    chips = int(allc["chips"])
    runs = int(allc["runs"]) // chips
    target = float(allc["range_pct"]) / 100.0
    expected = _range_of(chips, runs)
    lo, hi = 0.0, target
    for _ in range(40):  # the range grows with sigma_chip: bisect
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if expected(mid, sigma_run) < target else (lo, mid)
    sigma = round(0.5 * (lo + hi), 4)
    text = (f"{alone['device']} BF16 MSMF, {chips} GPUs x {runs} rounds at once: mean "
            f"{allc['mean_tflops']} over {alone['mean_tflops']} alone -> concurrent {conc:.4f}; "
            f"range {allc['range_pct']}% -> chip_sigma {sigma:.4f}; run_sigma {sigma_run:.4f}: "
            f"one GPU's {noisy['runs']} runs while its siblings ran, range {noisy['range_pct']}% "
            f"over d2({noisy['runs']}) {d2:.3f}; "
            f"data/concurrent.csv, source {alone['source']}" + (f"; {why} (derived)" if why else ""))
    return {"concurrent": round(conc, 4), "chip_sigma": sigma, "run_sigma": round(sigma_run, 4)}, text
