"""Ablation of the shape-aware GEMM model on the public ResNet-50 traces (docs/devices.md).

Each variant switches on a subset of :data:`benchmarks.kernels.kernel_eval.SHAPE_PARTS`.
Because the A100 TF32 curves are calibrated under the model they are used with, every
variant refits them on their calibration traces: the GEMM curve on ``sampled_128rank_r0``
(``r1``, the same job's other rank, as a check of the calibration's stability) with
:func:`~benchmarks.kernels.kernel_eval.fit_from_trace`, and, for variants with the ``conv``
part, the implicit-GEMM convolution plateau on ``a100_alexnet_cuda_sync`` with
:func:`calibrate_on_alexnet`; then it predicts the A100
ResNet-50 convolutions and GEMMs with them. The V100 profile has no trace-calibrated curve
(datasheet peaks, documented e_max; no TF32), so its rows use the shipped profile. Durations
of the test traces are never used except to score the predictions.

:func:`layer_table` scores the shipped model, the previous one (without the convolution
curve) and the roofline alone per layer class of the ResNet-50 traces; :func:`transform_table`
checks the layout-transform kernels alone (measured against their bytes at the memory curve).

``python -m benchmarks.kernels.kernel_ablation --ablation`` / ``--layers`` print the tables.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.kernels.conv_tf32 import fit_conv_tf32
from benchmarks.kernels.gemm_shape import layout_transform, layout_transform_kernels
from benchmarks.kernels.kernel_eval import (
    PUBLIC_TRACES,
    SHAPE_PARTS,
    evaluate,
    evaluate_trace,
    fit_from_trace,
    summarize,
    trace_groups,
)
from tracesim.hardware.costmodel import op_times_ns
from tracesim.hardware.device import DeviceProfile, get_device, parse_profile

_PREVIOUS = ("waves", "grids", "l2", "transforms", "launches")

#: (label, shape-model parts): none, each part added in turn, all, and all but one or two
VARIANTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("roofline only", ()),
    ("+ waves (shape rule)", ("waves",)),
    ("+ waves from launch grids", ("waves", "grids")),
    ("+ l2", ("waves", "grids", "l2")),
    ("+ transforms", ("waves", "grids", "l2", "transforms")),
    ("+ launches (previous model)", _PREVIOUS),
    ("all (shipped)", SHAPE_PARTS),
    ("roofline + conv curve", ("conv",)),
    ("all but grids (shape rule)", ("waves", "l2", "transforms", "launches", "conv")),
    ("all but l2", ("waves", "grids", "transforms", "launches", "conv")),
    ("all but waves and l2", ("transforms", "launches", "conv")),
)

#: test traces: (file, device profile); the TF32 curve is refitted for A100 ones
TEST_TRACES = (("a100_2rank_nccl.json.gz", "a100-40gb"), ("v100_1rank.json.gz", "v100"))

CALIBRATION_TRACES = ("sampled_128rank_r0.json.gz", "sampled_128rank_r1.json.gz")

#: calibration trace of the TF32 implicit-GEMM convolution plateau (device profile)
CONV_CALIBRATION = ("a100_alexnet_cuda_sync.json.gz", "a100-40gb")


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
    sum_error, tf32_at_7GF (the refitted A100 TF32 GEMM efficiency at 7.2 GFLOP, NaN for
    V100), conv_e_max (the refitted implicit-GEMM convolution plateau, NaN where unused).
    The second calibration trace is run for the shipped variant only. ``min_alignment``:
    the TF32 fit leaves out GEMMs whose kernels load fewer elements per access (``align1``),
    as the shipped calibration does (:data:`benchmarks.kernels.datasheet.A100_TF32_FROM_TRACE`).
    """
    root = Path(root)
    cal_groups = {c: trace_groups(root / c) for c in calibrations if (root / c).exists()}
    tests = {t: (d, trace_groups(root / t, "resnet50")) for t, d in TEST_TRACES if (root / t).exists()}
    conv_path = root / CONV_CALIBRATION[0]
    out = []
    for label, parts in variants:
        conv_e = (calibrate_on_alexnet(conv_path, CONV_CALIBRATION[1], parts)["e_max"]
                  if "conv" in parts and conv_path.exists() else float("nan"))
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
                tf32 = "tf32" in dev.peak_tflops
                parts_here = parts if conv_e == conv_e else tuple(p for p in parts if p != "conv")
                score = _score(evaluate(tg, dev, ("gemm",), shapes_model=parts_here,
                                        conv_e_max=conv_e if tf32 and conv_e == conv_e else None))
                eff7 = dev.class_efficiency("gemm").compute_curve("tf32").at(7.2e9) \
                    if tf32 else float("nan")
                out.append({"variant": label, "calibration": cal if tf32 else "-", "trace": trace,
                            "device": devname, **score, "tf32_at_7GF": eff7,
                            "conv_e_max": conv_e if tf32 else float("nan")})
    return pd.DataFrame(out)


def layer_class(name: str, shapes: Any, kernel_names: Sequence[str]) -> str:
    """ResNet-50 layer class of a GEMM-class op: ``FC (addmm, mm)`` or ``forward|backward``
    with the kernel size (``7x7 stem``, ``3x3``, ``1x1``) and ``, NHWC transforms`` when cuDNN
    ran layout-transform kernels around it."""
    if name in ("aten::addmm", "aten::mm"):
        return "FC (addmm, mm)"
    dims = json.loads(shapes) if isinstance(shapes, str) else shapes
    backward = name == "aten::convolution_backward"
    k = int(dims[2 if backward else 1][2])
    label = f"{'backward' if backward else 'forward'} {k}x{k}{' stem' if k == 7 else ''}"
    return label + (", NHWC transforms" if any(layout_transform(n) for n in kernel_names) else "")


#: the columns of :func:`layer_table`: label -> shape-model parts
LAYER_MODELS = (("roofline only", False), ("previous model", _PREVIOUS), ("shipped", True))


def layer_table(root: str | Path) -> pd.DataFrame:
    """GEMM MAPE per ResNet-50 layer class and test trace for :data:`LAYER_MODELS` (shipped
    profiles), with the shipped model's median APE and p10 / p90 of predicted/measured, and
    ``ratio_ex_transforms``: the median of predicted/measured with the layout-transform
    kernels taken out of both (their durations from the measurement, their model time and
    launches from the prediction); a final ``all`` row per trace."""
    root = Path(root)
    out = []
    for trace, devname in TEST_TRACES:
        if not (root / trace).exists():
            continue
        groups = trace_groups(root / trace, "resnet50")
        runs = {label: evaluate(groups, devname, ("gemm",), shapes_model=parts)
                for label, parts in LAYER_MODELS}
        ship = runs["shipped"]
        dev = get_device(devname)
        launch_ns = dev.launch_overhead_us * 1e3
        tb = ship["transform_bytes"].to_numpy(float)
        t_tr = np.where(tb > 0, op_times_ns(dev, "memcpy", 0.0, tb, "fp32") - launch_ns, 0.0)
        meas_tr = [sum(d for k, d in zip(kn, kd, strict=True) if layout_transform(k))
                   for kn, kd in zip(ship["kernel_names"], ship["kernel_durs"], strict=True)]
        ex = ((ship["predicted_ns"] - t_tr - ship["n_transforms"] * launch_ns)
              / (ship["kernel_ns"] - np.asarray(meas_tr, dtype=float)))
        cls = pd.Series([layer_class(n, s, k) for n, s, k in zip(
            ship["name"], ship["shapes"], ship["kernel_names"], strict=True)], index=ship.index)
        for c in [*sorted(cls.unique()), "all"]:
            m = (cls == c) if c != "all" else cls.notna()
            row: dict[str, Any] = {"trace": trace, "device": devname, "layer_class": c, "n": int(m.sum())}
            for label, _ in LAYER_MODELS:
                row[f"mape_{label.replace(' ', '_')}"] = runs[label].loc[m, "ape"].mean()
            row.update(median_ape=ship.loc[m, "ape"].median(), ratio_p10=ship.loc[m, "ratio"].quantile(0.1),
                       ratio_p90=ship.loc[m, "ratio"].quantile(0.9),
                       ratio_ex_transforms=ex[m].median())
            out.append(row)
    return pd.DataFrame(out)


#: traces whose cuDNN layout transforms :func:`transform_table` checks: (file, device, shapes)
TRANSFORM_TRACES = (("a100_alexnet_cuda_sync.json.gz", "a100-40gb", "alexnet"),
                    ("a100_2rank_nccl.json.gz", "a100-40gb", "resnet50"))


def transform_table(root: str | Path) -> pd.DataFrame:
    """Each NCHW <-> NHWC transform kernel against the model's time for it (its tensor read
    and written once at the memory curve, plus a launch), summed per trace, direction and
    spatial size H*W of the converted tensor (R*S for a filter; 1 for 1x1 filters). cuDNN's
    transpose kernel works on 32 x 32 tiles of (H*W, C), so a small H*W leaves most of each
    tile empty. Columns: trace, direction, hw, n, measured_us, model_us, ratio (measured /
    model)."""
    root = Path(root)
    out = []
    for trace, devname, shapes in TRANSFORM_TRACES:
        if not (root / trace).exists():
            continue
        dev = get_device(devname)
        g = evaluate(trace_groups(root / trace, shapes), dev, ("gemm",))
        for _, r in g.iterrows():
            for j, nbytes, hw in layout_transform_kernels(r["name"], r["shapes"], r["flops"],
                                                          r["kernel_names"]):
                out.append({"trace": trace, "direction": "to NHWC" if layout_transform(
                    r["kernel_names"][j]) > 0 else "to NCHW", "hw": hw,
                    "measured_us": r["kernel_durs"][j] / 1e3,
                    "model_us": float(op_times_ns(dev, "memcpy", 0.0, nbytes, "fp32")[0]) / 1e3})
    if not out:
        return pd.DataFrame(columns=["trace", "direction", "hw", "n", "measured_us", "model_us", "ratio"])
    t = pd.DataFrame(out).groupby(["trace", "direction", "hw"], sort=True).agg(
        n=("hw", "size"), measured_us=("measured_us", "sum"), model_us=("model_us", "sum")).reset_index()
    return t.assign(ratio=t["measured_us"] / t["model_us"])


def calibrate_on_alexnet(path: str | Path, device: DeviceProfile | str = "a100-40gb",
                         shapes_model: bool | Iterable[str] = True) -> dict[str, Any]:
    """:func:`fit_conv_tf32` on an AlexNet trace (shapes rebuilt by :func:`annotate_alexnet`)
    evaluated with the shape-model parts ``shapes_model`` (as in
    :func:`benchmarks.kernels.kernel_eval.evaluate`)."""
    rows = evaluate(trace_groups(path, "alexnet"), device, ("gemm",), shapes_model=shapes_model)
    return fit_conv_tf32(rows, device)


def main(argv: Sequence[str] | None = None) -> int:
    """Print per-class and per-op kernel-prediction tables for the public traces
    (``--ablation``: the shape-model ablation, ``--layers``: the ResNet-50 layer classes,
    ``--transforms``: the layout-transform kernels, of :mod:`benchmarks.kernels.kernel_ablation`)."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("traces", nargs="?", type=Path,
                    default=Path(__file__).resolve().parents[3] / "shared/traces/public")
    for flag in ("--ablation", "--layers", "--transforms"):
        ap.add_argument(flag, action="store_true")
    ns = ap.parse_args(sys.argv[1:] if argv is None else argv)
    flags = [f for f in ("--ablation", "--layers", "--transforms") if getattr(ns, f[2:])]
    root = ns.traces
    pd.set_option("display.width", 200)
    if flags:
        table = {"--ablation": ablation_table, "--layers": layer_table,
                 "--transforms": transform_table}[flags[0]](root)
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        return 0 if len(table) else 2
    frames = []
    for name, dev, shapes in PUBLIC_TRACES:
        if (root / name).exists():
            frames.append(evaluate_trace(root / name, dev, shapes, classes=None))
    if not frames:
        print(f"no public traces under {root}", file=sys.stderr)
        return 2
    rows = pd.concat(frames, ignore_index=True)
    rows["op"] = rows["name"].str.replace("aten::", "", regex=False)
    for title, by in (("per class", ["trace", "device", "op_class"]),
                      ("per op (gemm, attention)", ["trace", "op"])):
        sub = rows if by[-1] == "op_class" else rows[rows["op_class"].isin(["gemm", "attention"])]
        print(f"\n== {title}")
        print(summarize(sub, by).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
