"""Model-only prediction of the public GPU traces' GEMM kernels (docs/devices.md tables)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tracesim.hardware import datasheet
from tracesim.hardware.kernel_ablation import ablation_table
from tracesim.hardware.kernel_eval import (
    evaluate_trace,
    fit_from_trace,
    resnet50_batch,
    resnet50_convs,
    summarize,
)
from tracesim.trace.kineto import load_trace_json


def test_resnet50_layer_list() -> None:
    convs = resnet50_convs(1)
    assert len(convs) == 53
    macs = sum(c["cout"] * c["h_out"] ** 2 * c["cin"] * c["k"] ** 2 for c in convs)
    assert macs == pytest.approx(4.09e9, rel=0.01)  # torchvision: 4.09 GMACs (conv part)
    assert convs[-1]["h_out"] == 7 and convs[-1]["cout"] == 2048


def test_resnet50_batch_from_relu_grid(public_traces: Path) -> None:
    for name in ("v100_1rank.json.gz", "a100_2rank_nccl.json.gz"):
        assert resnet50_batch(load_trace_json(public_traces / name)) == 32


def _show(rows: pd.DataFrame, title: str) -> None:
    print(f"\n{title}\n" + summarize(rows, ["op_class"]).to_string(index=False))
    print(summarize(rows, ["name"]).to_string(index=False))


@pytest.mark.slow
def test_v100_resnet50_gemm_mape(public_traces: Path) -> None:
    rows = evaluate_trace(public_traces / "v100_1rank.json.gz", "v100", "resnet50")
    _show(rows, "V100 ResNet-50 (datasheet profile, model alone)")
    gemm = rows[rows["op_class"] == "gemm"]
    assert len(gemm) == 5 * (53 * 2 + 3)  # 5 steps: 53 forward + 53 backward convs, FC GEMMs
    # measured 0.118 with the shape model (0.171 roofline only, docs/devices.md); issue: < 20%
    assert gemm["ape"].mean() < 0.14
    roof = evaluate_trace(public_traces / "v100_1rank.json.gz", "v100", "resnet50", shapes_model=False)
    assert roof[roof["op_class"] == "gemm"]["ape"].mean() > gemm["ape"].mean() + 0.04
    plain = evaluate_trace(public_traces / "v100_1rank.json.gz", "v100", "resnet50", algorithms=False)
    assert plain[plain["op_class"] == "gemm"]["ape"].mean() > 0.25  # Winograd matters on V100


@pytest.mark.slow
def test_a100_resnet50_gemm_mape(public_traces: Path) -> None:
    rows = evaluate_trace(public_traces / "a100_2rank_nccl.json.gz", "NVIDIA A100-PG509-200", "resnet50")
    _show(rows, "A100-40GB ResNet-50 (TF32 curve calibrated on sampled_128rank_r0)")
    gemm = rows[rows["op_class"] == "gemm"]
    assert len(gemm) == 3 * (53 * 2 + 3)
    # measured 0.222 with the shape model (0.249 roofline only, docs/devices.md): short of the
    # issue's 20% (cuDNN's 3x3 implicit-GEMM kernels outrun the r0-calibrated TF32 curve)
    assert gemm["ape"].mean() < 0.235
    assert abs(gemm["predicted_ns"].sum() / gemm["kernel_ns"].sum() - 1) < 0.15
    per_op = summarize(gemm, ["name"]).set_index("name")["mape"]
    assert per_op["aten::cudnn_convolution"] < 0.27 and per_op["aten::convolution_backward"] < 0.22


@pytest.mark.slow
def test_a100_tf32_curve_reproduces_from_its_calibration_trace(public_traces: Path) -> None:
    cal = datasheet.A100_TF32_FROM_TRACE
    rows = evaluate_trace(public_traces / cal["trace"], "a100", "recorded", classes=None)
    fit = fit_from_trace(rows, "a100", min_alignment=cal["min_alignment"])
    assert len(fit["compute"]) == len(cal["points"])
    for (s, e), (s0, e0) in zip(fit["compute"], cal["points"], strict=True):
        assert s == pytest.approx(s0, rel=1e-3) and e == pytest.approx(e0, abs=1e-3)
    assert fit["compute_spread"] == pytest.approx(cal["spread"], abs=1e-3)


@pytest.mark.slow
def test_shape_model_ablation(public_traces: Path) -> None:
    """Each variant refits the A100 TF32 curve on sampled_128rank_r0 (r1 as a check) and is
    scored on the ResNet-50 traces; the shipped model must beat the roofline alone on both."""
    table = ablation_table(public_traces)
    print("\n" + table.to_string(index=False))
    a100 = table[table["device"] == "a100-40gb"].set_index(["variant", "calibration"])["mape"]
    v100 = table[table["device"] == "v100"].set_index("variant")["mape"]
    r0, r1 = "sampled_128rank_r0.json.gz", "sampled_128rank_r1.json.gz"
    assert a100[("roofline only", r0)] == pytest.approx(0.246, abs=0.005)
    assert a100[("all (shipped)", r0)] < 0.235  # measured 0.222
    assert a100[("all (shipped)", r1)] < 0.235  # calibrated on the other rank instead: 0.223
    assert a100[("all (shipped)", r0)] < a100[("roofline only", r0)] - 0.02
    assert v100["all (shipped)"] < v100["roofline only"] - 0.04
