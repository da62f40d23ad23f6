"""Ablation of the shape-aware GEMM model on the public ResNet-50 traces (docs/devices.md).

Each variant switches on a subset of :data:`tracesim.hardware.kernel_eval.SHAPE_PARTS`.
Because the A100 TF32 curve is calibrated under the model it is used with, every variant
refits that curve on its calibration trace (``sampled_128rank_r0`` by default; ``r1``, the
same job's other rank, as a check of the calibration's stability) with
:func:`~tracesim.hardware.kernel_eval.fit_from_trace`, then predicts the A100 ResNet-50
convolutions and GEMMs with it. The V100 profile has no trace-calibrated curve (datasheet
peaks, documented e_max), so its rows use the shipped profile. Durations of the test traces
are never used except to score the predictions.

``python -m tracesim.hardware.kernel_eval --ablation`` prints the table.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from tracesim.hardware.device import DeviceProfile, get_device, parse_profile
from tracesim.hardware.kernel_eval import SHAPE_PARTS, evaluate, fit_from_trace, trace_groups

#: (label, shape-model parts): none, each part added in turn, all, and all but one or two
VARIANTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("roofline only", ()),
    ("+ waves (shape rule)", ("waves",)),
    ("+ waves from launch grids", ("waves", "grids")),
    ("+ l2", ("waves", "grids", "l2")),
    ("+ transforms", ("waves", "grids", "l2", "transforms")),
    ("all (shipped)", SHAPE_PARTS),
    ("all but grids (shape rule)", ("waves", "l2", "transforms", "launches")),
    ("all but l2", ("waves", "grids", "transforms", "launches")),
    ("all but waves and l2", ("transforms", "launches")),
)

#: test traces: (file, device profile); the TF32 curve is refitted for A100 ones
TEST_TRACES = (("a100_2rank_nccl.json.gz", "a100-40gb"), ("v100_1rank.json.gz", "v100"))

CALIBRATION_TRACES = ("sampled_128rank_r0.json.gz", "sampled_128rank_r1.json.gz")


def with_tf32_curve(device: DeviceProfile | str, points: Sequence[Sequence[float]]) -> DeviceProfile:
    """``device`` with its GEMM TF32 compute curve replaced by ``points`` ([size, eff])."""
    dev = get_device(device) if not isinstance(device, DeviceProfile) else device
    raw: dict[str, Any] = json.loads(json.dumps(dict(dev.raw)))
    raw["efficiency"]["gemm"]["compute"]["tf32"] = [list(p) for p in points]
    return parse_profile(raw, None, f"device {dev.name} (refitted tf32)")


def _score(rows: pd.DataFrame) -> dict[str, float]:
    g = rows[rows["op_class"] == "gemm"]
    return {"n": len(g), "mape": g["ape"].mean(), "median_ape": g["ape"].median(),
            "ratio_p10": g["ratio"].quantile(0.10), "ratio_p90": g["ratio"].quantile(0.90),
            "sum_error": g["predicted_ns"].sum() / g["kernel_ns"].sum() - 1.0}


def ablation_table(root: str | Path, variants: Sequence[tuple[str, tuple[str, ...]]] = VARIANTS,
                   calibrations: Sequence[str] = CALIBRATION_TRACES,
                   min_alignment: int = 4) -> pd.DataFrame:
    """GEMM MAPE per variant, calibration trace and test trace (missing traces skipped).

    Columns: variant, calibration, trace, device, n, mape, median_ape, ratio_p10, ratio_p90,
    sum_error, tf32_at_7GF (the refitted A100 TF32 efficiency at 7.2 GFLOP, NaN for V100).
    The second calibration trace is run for the shipped variant only. ``min_alignment``:
    the TF32 fit leaves out GEMMs whose kernels load fewer elements per access (``align1``),
    as the shipped calibration does (:data:`tracesim.hardware.datasheet.A100_TF32_FROM_TRACE`).
    """
    root = Path(root)
    cal_groups = {c: trace_groups(root / c) for c in calibrations if (root / c).exists()}
    tests = {t: (d, trace_groups(root / t, "resnet50")) for t, d in TEST_TRACES if (root / t).exists()}
    out = []
    for label, parts in variants:
        for i, (cal, groups) in enumerate(cal_groups.items()):
            if i > 0 and set(parts) != set(SHAPE_PARTS):
                continue
            fit = fit_from_trace(evaluate(groups, "a100", None, shapes_model=parts), "a100",
                                 min_alignment=min_alignment)
            for trace, (devname, tg) in tests.items():
                if i > 0 and devname == "v100":
                    continue
                dev = with_tf32_curve(devname, fit["compute"]) if "tf32" in get_device(
                    devname).peak_tflops else get_device(devname)
                score = _score(evaluate(tg, dev, ("gemm",), shapes_model=parts))
                eff7 = dev.class_efficiency("gemm").compute_curve("tf32").at(7.2e9) \
                    if "tf32" in dev.peak_tflops else float("nan")
                out.append({"variant": label, "calibration": cal if "tf32" in dev.peak_tflops
                             else "-", "trace": trace, "device": devname, **score,
                             "tf32_at_7GF": eff7})
    return pd.DataFrame(out)
