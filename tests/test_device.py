"""Device profiles: lookup by name / datasheet / trace strings, inline and file profiles."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tracesim.errors import InputError
from tracesim.fileio import read_yaml, write_yaml
from tracesim.hardware.device import (
    DEVICES_DIR,
    device_from_properties,
    get_device,
    known_devices,
    normalize_name,
)

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"


@pytest.mark.parametrize("spec, name", [
    ("v100", "v100"), ("a100", "a100"), ("h100", "h100"), ("h200", "h200"), ("b200", "b200"),
    ("host-cpu", "host-cpu"), ("cpu", "host-cpu"), ("mi250", "mi250"),
    ("A100-SXM4-80GB", "a100"), ("H100-SXM5-80GB", "h100"), ("H200-SXM-141GB", "h200"),
    ("B200-HGX", "b200"), ("V100-SXM2-32GB", "v100"),
    ("NVIDIA A100-PG509-200", "a100-40gb"), ("Tesla V100-SXM2-32GB", "v100"),
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("AMD Instinct MI250", "mi250"), ("  nvidia_h200  ", "h200"),
    ("gb200", "gb200"), ("NVIDIA GB200", "gb200"), ("GB300", "gb300"), ("B200-SXM", "b200"),
    ("NVIDIA B300 SXM6 AC", "b300"), ("NVIDIA GB300", "gb300"),
    ("AMD Instinct MI300X", "mi300x"), ("mi300x", "mi300x"),
])
def test_lookup(spec: str, name: str) -> None:
    assert get_device(spec).name == name


def test_known_devices() -> None:
    names = known_devices()
    for required in ("v100", "a100", "h100", "h200", "b200", "b300", "gb200", "gb300", "mi300x", "host-cpu",
                     "mi250"):
        assert required in names


def test_unknown_device_lists_known() -> None:
    with pytest.raises(InputError) as exc:
        get_device("tpu-v5e", file="cluster.yaml", where="device")
    msg = str(exc.value)
    assert msg.startswith("cluster.yaml: device: unknown device 'tpu-v5e'")
    assert "a100" in msg and "h100" in msg and "host-cpu" in msg


def test_datasheet_figures_match_reference_csv() -> None:
    path = REFERENCE / "devices.csv"
    if not path.exists():
        pytest.skip(f"{path} not found")
    names = {"V100-SXM2-32GB": "v100", "A100-SXM4-80GB": "a100", "H100-SXM5-80GB": "h100",
             "H200-SXM-141GB": "h200", "B200-HGX": "b200"}
    with open(path) as fh:
        for row in csv.DictReader(fh):
            d = get_device(row["device"])
            assert d.name == names[row["device"]]
            assert d.peak_tflops["fp32"] == pytest.approx(float(row["fp32_tflops"]))
            key = "fp16" if d.name == "v100" else "bf16"
            assert d.peak_tflops[key] == pytest.approx(float(row["bf16_dense_tflops"]))
            if row["tf32_dense_tflops"]:
                assert d.peak_tflops["tf32"] == pytest.approx(float(row["tf32_dense_tflops"]))
            if row["fp8_dense_tflops"]:
                assert d.peak_tflops["fp8"] == pytest.approx(float(row["fp8_dense_tflops"]))
            assert d.hbm_GBps == pytest.approx(float(row["hbm_tbps"]) * 1000)
            assert d.hbm_GiB == pytest.approx(float(row["hbm_gb"]))


def test_peak_fallback() -> None:
    v100 = get_device("v100")
    assert v100.peak_flops("bf16") == pytest.approx(15.7e12)  # no bf16 units on V100
    assert v100.peak_flops("fp16") == pytest.approx(125e12)
    assert v100.peak_flops("tf32") == pytest.approx(15.7e12)
    assert get_device("a100").peak_flops("fp8") == pytest.approx(312e12)
    assert get_device("h100").peak_flops("fp8") == pytest.approx(1979e12)
    assert get_device("h100").peak_flops("int64") == pytest.approx(67e12)


def test_inline_profile_with_base_and_errors() -> None:
    d = get_device({"base": "h100", "name": "h100-lowclock", "peak_tflops": {"bf16": 800.0}})
    assert d.name == "h100-lowclock" and d.peak_tflops["bf16"] == 800.0
    assert d.hbm_GBps == get_device("h100").hbm_GBps
    assert d.efficiency["gemm"] == get_device("h100").efficiency["gemm"]
    with pytest.raises(InputError, match="cluster.yaml: device.hbm_gbps: unknown key"):
        get_device({"base": "a100", "name": "x", "hbm_gbps": 1}, file="cluster.yaml")
    with pytest.raises(InputError, match="device.efficiency.default: missing required key"):
        get_device({"name": "x", "peak_tflops": {"fp32": 1}, "hbm_GBps": 1, "launch_overhead_us": 1,
                    "efficiency": {"gemm": {"compute": [[1, 1]], "memory": [[1, 1]]}}})
    bad_curve = {"base": "a100", "name": "x",
                 "efficiency": {"default": {"compute": [[1e6, 1.5]], "memory": [[1, 1]]}}}
    with pytest.raises(InputError, match=r"efficiency.default.compute\[0\]"):
        get_device(bad_curve)
    with pytest.raises(InputError, match="unknown op class 'matmul'"):
        get_device({"base": "a100", "name": "x", "efficiency": {
            "default": {"compute": [[1, 1]], "memory": [[1, 1]]},
            "matmul": {"compute": [[1, 1]], "memory": [[1, 1]]}}})
    with pytest.raises(InputError, match="unknown base profile 'z100'"):
        get_device({"base": "z100", "name": "x"})


def test_profile_file_round_trip(tmp_path: Path) -> None:
    prof = read_yaml(DEVICES_DIR / "h200.yaml")
    prof["name"] = "h200-mine"
    path = tmp_path / "mine.yaml"
    write_yaml(path, prof)
    d = get_device(str(path))
    assert d.name == "h200-mine" and d.hbm_GBps == 4800.0
    with pytest.raises(InputError, match="file not found"):
        get_device(str(tmp_path / "missing.yaml"))


def test_curves_interpolate_in_log_size() -> None:
    gemm = get_device("a100").class_efficiency("gemm")
    curve = gemm.compute_curve("bf16")
    e_small, e_mid, e_big = curve.at(1e6), curve.at(1e10), curve.at(1e14)
    assert e_small < e_mid < e_big <= 271.2 / 312  # the MAMF fraction of peak (0.87)
    assert gemm.compute_curve("tf32") is not curve  # calibrated per dtype
    assert get_device("a100").class_efficiency("no-such-class") is get_device("a100").efficiency["default"]


def test_device_from_properties() -> None:
    a100_40 = {"name": "NVIDIA A100-PG509-200", "totalGlobalMem": 42297524224}
    assert device_from_properties(a100_40) == "a100-40gb"
    assert device_from_properties({"name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85e9}) == "a100"
    amd = {"name": "AMD Radeon Graphics", "computeMajor": 9, "numSms": 104}
    assert device_from_properties(amd) == "mi250"
    mi3 = {"name": "AMD Radeon Graphics", "computeMajor": 9, "numSms": 304}
    assert device_from_properties({**mi3, "totalGlobalMem": 205822885888}) == "mi300x"
    assert device_from_properties({**mi3, "totalGlobalMem": 274877906944}) == "mi325x"
    assert device_from_properties({"name": "Some GPU"}) is None


def test_a_generic_amd_name_in_a_trace_names_its_profile(public_traces) -> None:
    """ROCm records "AMD Radeon Graphics"; the trace's CU count says MI250, so the trace
    replays on another device without --source-device."""
    from tracesim.options import ReplayOptions
    from tracesim.pipeline.run import predict
    from tracesim.trace.sources import load_source

    trace = public_traces / "mi250_minitoy.json.gz"
    assert load_source(trace).device == "mi250"
    res = predict(trace, ReplayOptions(device="mi300x"))
    assert res.details["recorded"]["device"] == "mi250"
    assert res.device == "mi300x" and res.iteration_time_s > 0


def test_normalize_name() -> None:
    assert normalize_name("NVIDIA  A100_SXM4 80GB") == "a100-sxm4-80gb"
    assert normalize_name("AMD Instinct MI250") == "mi250"
