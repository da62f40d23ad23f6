"""Model-only prediction of the public GPU traces' GEMM kernels (docs/devices.md tables)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tracesim.hardware import conv_tf32, datasheet
from tracesim.hardware.conv_shapes import ALEXNET_FC_LAYERS, alexnet_batch, alexnet_convs
from tracesim.hardware.kernel_ablation import ablation_table, layer_table
from tracesim.hardware.kernel_eval import (
    evaluate,
    evaluate_trace,
    fit_from_trace,
    resnet50_batch,
    resnet50_convs,
    summarize,
    trace_groups,
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


def test_alexnet_layer_list() -> None:
    convs = alexnet_convs(1)
    assert [c["h_out"] for c in convs] == [55, 27, 13, 13, 13]
    conv_macs = sum(c["cout"] * c["h_out"] ** 2 * c["cin"] * c["k"] ** 2 for c in convs)
    fc_macs = sum(i * o for i, o in ALEXNET_FC_LAYERS)
    assert conv_macs + fc_macs == pytest.approx(0.714e9, rel=0.005)  # torchvision: 0.71 GFLOPS (MACs)
    # the trace's weight uploads (bytes) are exactly these layers' fp32 weights
    weights = [c["cout"] * c["cin"] * c["k"] ** 2 * 4 for c in convs] + [i * o * 4 for i, o in ALEXNET_FC_LAYERS]
    assert weights == [92928, 1228800, 2654208, 3538944, 2359296, 150994944, 67108864, 16384000]


def test_alexnet_batch_and_shapes(public_traces: Path) -> None:
    """AlexNet's kernels carry the launch's correlation id as External id: the ReLU kernel is
    found through the launch call inside the op; its grid gives 128 x 64 x 55 x 55 elements."""
    assert alexnet_batch(load_trace_json(public_traces / "a100_alexnet_cuda_sync.json.gz")) == 128
    g = trace_groups(public_traces / "a100_alexnet_cuda_sync.json.gz", "alexnet")
    convs = g[g["name"] == "aten::cudnn_convolution"]
    assert len(convs) == 10 and len(g[g["name"] == "aten::addmm"]) == 6
    # conv3-5 ran on cuDNN's TF32 implicit-GEMM kernel with a 128 x 128 tile: its launch grid
    # (n tiles, m tiles) = (Cout / 128, 128 * 13 * 13 / 128) fits the rebuilt shapes
    for _, r in convs.iterrows():
        grids = [c for k, c in zip(r["kernel_names"], r["kernel_ctas"], strict=True) if "xmma" in k]
        if grids:
            cout = int(r["shapes"].split("],[")[1].split(",")[0])
            assert grids == [cout // 128 * 169]


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
    """Test trace: nothing is fitted on it. TF32 GEMM curve from sampled_128rank_r0, TF32
    implicit-GEMM convolution plateau from a100_alexnet_cuda_sync."""
    rows = evaluate_trace(public_traces / "a100_2rank_nccl.json.gz", "NVIDIA A100-PG509-200", "resnet50")
    _show(rows, "A100-40GB ResNet-50 (GEMM curve from sampled_128rank_r0, conv curve from AlexNet)")
    gemm = rows[rows["op_class"] == "gemm"]
    assert len(gemm) == 3 * (53 * 2 + 3)
    # issue #4: GEMM MAPE under 20%. Measured 0.161 (deterministic; 0.222 without the
    # convolution curve, 0.283 roofline alone, docs/devices.md), held to 0.17
    assert gemm["ape"].mean() < 0.20
    assert gemm["ape"].mean() < 0.17
    assert abs(gemm["predicted_ns"].sum() / gemm["kernel_ns"].sum() - 1) < 0.12  # measured -0.086
    per_op = summarize(gemm, ["name"]).set_index("name")["mape"]
    assert per_op["aten::cudnn_convolution"] < 0.18 and per_op["aten::convolution_backward"] < 0.18


@pytest.mark.slow
def test_a100_tf32_curve_reproduces_from_its_calibration_trace(public_traces: Path) -> None:
    cal = datasheet.A100_TF32_FROM_TRACE
    rows = evaluate_trace(public_traces / cal["trace"], "a100", "recorded", classes=None)
    fit = fit_from_trace(rows, "a100", min_alignment=cal["min_alignment"])
    assert len(fit["compute"]) == len(cal["points"])
    for (s, e), (s0, e0) in zip(fit["compute"], cal["points"], strict=True):
        assert s == pytest.approx(s0, rel=1e-3) and e == pytest.approx(e0, abs=1e-3)
    assert fit["compute_spread"] == pytest.approx(cal["spread"], abs=1e-3)


def test_conv_tf32_plateau_reproduces_from_alexnet(public_traces: Path) -> None:
    cal = conv_tf32.A100_TF32_CONV_FROM_TRACE
    fit = conv_tf32.calibrate_on_alexnet(public_traces / cal["trace"], cal["device"])
    assert (fit["n"], fit["e_max"], fit["min"], fit["max"]) == (cal["n"], cal["e_max"], cal["min"], cal["max"])
    # the calibration ops themselves: conv3-5 predicted within 5% (transforms included)
    rows = evaluate(trace_groups(public_traces / cal["trace"], "alexnet"), cal["device"], ("gemm",))
    tc = rows[rows["conv_fraction"] > 0.999]
    assert len(tc) == 6 and tc["ape"].max() < 0.05


def test_conv_curve_only_on_calibrated_tf32_devices() -> None:
    a100 = conv_tf32.conv_tf32_profile("a100-40gb")
    assert a100 is not None
    curve = a100.class_efficiency("gemm").compute_curve("tf32")
    e = conv_tf32.CONV_TF32_E_MAX["a100-40gb"]
    # the roofline plus an 8 us ramp: at 30 GFLOP (AlexNet conv3) 0.822 * 30 / (30 + 1.03)
    assert curve.at(3e10) == pytest.approx(e * 3e10 / (3e10 + 156e12 * e * 8e-6), rel=0.01)
    assert conv_tf32.conv_tf32_profile("v100") is None  # no TF32
    assert conv_tf32.conv_tf32_profile("h100") is None  # no calibration
    assert conv_tf32.conv_tf32_profile("h100", e_max=0.7) is not None


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
    assert a100[("+ launches (previous model)", r0)] == pytest.approx(0.222, abs=0.005)
    assert a100[("all (shipped)", r0)] < 0.17  # measured 0.161
    assert a100[("all (shipped)", r1)] < 0.17  # GEMM curve calibrated on the other rank: 0.161
    assert a100[("all (shipped)", r0)] < a100[("+ launches (previous model)", r0)] - 0.04
    assert v100["all (shipped)"] < v100["roofline only"] - 0.04
    # the convolution curve changes nothing on V100 (no TF32)
    assert v100["all (shipped)"] == v100["+ launches (previous model)"]
    conv_e = table[table["device"] == "a100-40gb"].set_index(["variant", "calibration"])["conv_e_max"]
    assert conv_e[("all (shipped)", r0)] == conv_tf32.A100_TF32_CONV_FROM_TRACE["e_max"]


@pytest.mark.slow
def test_layer_table(public_traces: Path) -> None:
    """Per ResNet-50 layer class: the convolution curve fixes the 3x3 implicit-GEMM classes."""
    t = layer_table(public_traces)
    print("\n" + t.to_string(index=False))
    a = t[t["device"] == "a100-40gb"].set_index("layer_class")
    assert a.loc["all", "n"] == 327 and a.loc["all", "mape_shipped"] == pytest.approx(0.161, abs=0.002)
    for c in ("forward 3x3, NHWC transforms", "backward 3x3, NHWC transforms"):
        assert a.loc[c, "mape_shipped"] < 0.2 < a.loc[c, "mape_previous_model"]
    v = t[t["device"] == "v100"].set_index("layer_class")
    assert (v["mape_shipped"] == v["mape_previous_model"]).all()
