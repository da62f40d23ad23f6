"""Calibration: curve fitting helpers, the CLI (quick mode on this CPU), the shipped host profile."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracesim.cli import cli
from tracesim.hardware.calibrate import fit_curve, saturating_curve, spread_of
from tracesim.hardware.costmodel import op_time_ns
from tracesim.hardware.device import get_device

HAVE_TORCH = importlib.util.find_spec("torch") is not None


def test_saturating_curve() -> None:
    pts = saturating_curve(0.8, 1e9, [1e8, 1e9, 1e10, 1e14])
    assert pts[1] == [1e9, 0.4]
    assert pts[0][1] == pytest.approx(0.8 / 11, abs=1e-4)
    assert pts[3][1] == pytest.approx(0.8, abs=1e-4)


def test_fit_curve_is_monotone_medians() -> None:
    sizes = [1e6, 1.1e6, 1.2e6, 1e8, 1.1e8, 1.2e8, 1e10]
    effs = [0.1, 0.2, 0.3, 0.05, 0.5, 0.6, 0.9]
    pts = fit_curve(sizes, effs)
    assert [p[1] for p in pts] == [0.2, 0.5, 0.9]
    pts = fit_curve([1e6, 1e8], [0.5, 0.1])  # a dip is flattened: larger never slower per flop
    assert [p[1] for p in pts] == [0.5, 0.5]
    assert fit_curve([1e6], [3.0])[0][1] == 1.0
    with pytest.raises(ValueError):
        fit_curve([0.0], [0.5])
    assert spread_of([1e6, 1e6], [0.5, 0.5], [[1e6, 0.5]]) == 0.05
    assert spread_of([1e6, 1e6], [0.3, 0.7], [[1e6, 0.5]]) == pytest.approx(0.5)


def test_core_imports_without_torch() -> None:
    code = ("import sys, tracesim.cli, tracesim.hardware.calibrate, "
            "tracesim.hardware.costmodel; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_calibrate_bad_device(tmp_path: Path) -> None:
    if not HAVE_TORCH:
        pytest.skip("torch not installed")
    res = CliRunner().invoke(cli, ["calibrate", "--device", "tpu", "-o", str(tmp_path / "p.yaml")],
                             obj={})
    assert res.exit_code == 2
    assert "--device: expected cpu or cuda[:N], got 'tpu'" in res.output
    res = CliRunner().invoke(cli, ["calibrate", "--threads", "0", "-o", str(tmp_path / "p.yaml")], obj={})
    assert res.exit_code == 2 and "--threads" in res.output


@pytest.mark.slow
def test_calibrate_quick_cpu(tmp_path: Path) -> None:
    if not HAVE_TORCH:
        pytest.skip("torch not installed")
    out = tmp_path / "cpu.yaml"
    res = CliRunner().invoke(cli, ["calibrate", "--device", "cpu", "--quick", "--threads", "1",
                                   "--name", "test-cpu", "-o", str(out)], obj={})
    assert res.exit_code == 0, res.output
    d = get_device(str(out))
    assert d.name == "test-cpu" and d.kind == "cpu" and d.raw["threads"] == 1
    assert 1e-4 < d.peak_tflops["fp32"] < 100  # a CPU core: between 0.1 GFLOP/s and 100 TFLOP/s
    assert 0.1 < d.hbm_GBps < 2000 and 0 < d.launch_overhead_us < 1000
    for cls in ("gemm", "attention", "elementwise", "norm", "softmax", "reduction", "embedding",
                "optimizer", "memcpy", "default"):
        assert cls in d.efficiency
    # the model reproduces a measured point: a big GEMM runs near the measured peak
    n = 512
    t = op_time_ns(d, "gemm", 2 * n**3, 12 * n * n, "fp32")
    assert 2 * n**3 / (t * 1e-9) <= d.peak_tflops["fp32"] * 1e12 * 1.001


def test_shipped_host_cpu_profile() -> None:
    d = get_device("host-cpu")
    assert d.kind == "cpu" and d.raw["calibration"]["quick"] is False
    assert d.raw["threads"] >= 1 and d.peak_tflops["fp32"] > 0
    one = get_device("host-cpu-1t")
    assert one.raw["threads"] == 1
    assert one.peak_tflops["fp32"] <= d.peak_tflops["fp32"] * 1.25  # one thread is not faster
