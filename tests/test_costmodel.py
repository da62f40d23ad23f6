"""The roofline cost model, its band, scaling of measured times, and cross-device sanity."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracesim.hardware.costmodel import (
    op_time_band_ns,
    op_time_bands_ns,
    op_time_ns,
    op_times_ns,
    scale_duration,
    scale_duration_band,
    scale_durations,
)
from tracesim.hardware.device import get_device
from tracesim.ops.classify import OpCost, op_cost

FLAT = {"name": "flat", "peak_tflops": {"fp32": 10.0, "bf16": 100.0}, "hbm_GBps": 1000.0,
        "launch_overhead_us": 3.0,
        "efficiency": {"default": {"compute": [[1.0, 0.5]], "memory": [[1.0, 0.8]], "spread": 0.2}}}


def test_roofline_closed_form() -> None:
    d = get_device(FLAT)
    # compute-bound bf16 GEMM: 1e12 flops at 100 TFLOP/s * 0.5 = 20 ms (+ 3 us)
    assert op_time_ns(d, "gemm", 1e12, 1e6, "bf16") == 20_000_000 + 3_000
    # memory-bound: 8e9 bytes at 1000 GB/s * 0.8 = 10 ms
    assert op_time_ns(d, "elementwise", 1e6, 8e9, "bf16") == 10_000_000 + 3_000
    # elementwise FLOPs run at the fp32 (vector) peak, not the bf16 matrix peak
    assert op_time_ns(d, "elementwise", 1e12, 0, "bf16") == 200_000_000 + 3_000
    assert op_time_ns(d, "other", 0, 0, "fp32") == 3_000
    lo, mid, hi = op_time_band_ns(d, "gemm", 1e12, 0, "bf16")
    assert mid == 20_003_000
    assert lo == round(1e12 / (100e12 * 0.6) * 1e9) + 3_000
    assert hi == round(1e12 / (100e12 * 0.4) * 1e9) + 3_000


def test_cross_device_sanity_h100_vs_a100() -> None:
    # both at their kernel benchmarks' rate, as the MAMF ratio compares them
    a100, h100 = get_device("a100").burst(), get_device("h100").burst()
    big = op_cost("aten::mm", [[16384, 16384], [16384, 16384]], ["c10::BFloat16"] * 2)
    ratio = op_time_ns(a100, "gemm", big.flops, big.bytes, "bf16") / op_time_ns(
        h100, "gemm", big.flops, big.bytes, "bf16")
    assert ratio == pytest.approx(794.5 / 271.2, rel=0.02)  # MAMF ratio 2.93 (peak ratio 3.17)
    n = 1 << 28
    add = op_cost("aten::add", [[n], [n], []], ["c10::BFloat16"] * 2 + ["Scalar"])
    ratio = op_time_ns(a100, "elementwise", add.flops, add.bytes, "bf16") / op_time_ns(
        h100, "elementwise", add.flops, add.bytes, "bf16")
    assert ratio == pytest.approx(2693 / 1565, rel=0.03)  # achieved (FluidX3D) bandwidth ratio 1.72
    tiny = op_cost("aten::add", [[1], [1], []], ["float", "float", "Scalar"])
    for d in (a100, h100):
        t = op_time_ns(d, tiny.op_class, tiny.flops, tiny.bytes, tiny.dtype)
        assert t == pytest.approx(d.launch_overhead_us * 1000, rel=0.02)  # launch-bound


def test_sizes_and_dtypes_move_times_the_right_way() -> None:
    h100 = get_device("h100")
    t = [op_time_ns(h100, "gemm", 2 * n**3, 6 * n * n, "bf16") for n in (256, 1024, 4096, 16384)]
    assert t == sorted(t)
    achieved = [2 * n**3 / (x * 1e-9) for n, x in zip((256, 1024, 4096, 16384), t, strict=True)]
    assert achieved == sorted(achieved)  # efficiency grows with size
    f, b = 2 * 8192**3, 6 * 8192**2
    assert op_time_ns(h100, "gemm", f, b, "fp8") < op_time_ns(h100, "gemm", f, b, "bf16") < \
        op_time_ns(h100, "gemm", f, b, "tf32") < op_time_ns(h100, "gemm", f, b, "fp32")
    v100 = get_device("v100")  # bf16 has no tensor cores on V100: the fp32 rate
    assert op_time_ns(v100, "gemm", f, b, "bf16") > 5 * op_time_ns(v100, "gemm", f, b, "fp16")


def test_scale_duration_methods() -> None:
    a100, h100 = get_device("a100"), get_device("h100")
    c = op_cost("aten::mm", [[4096, 4096], [4096, 4096]], ["c10::BFloat16"] * 2)
    assert scale_duration(123_456, a100, c, a100, c) == (123_456, "measured")
    ns, method = scale_duration(123_456, a100, c, h100, c)
    assert c.shape == (1, 4096, 4096, 4096)  # the ratio comes from the shape-aware model
    # A100's profile has no sustained-load data: both at their benchmarks' rate (like with like)
    model_ratio = op_time_ns(h100.burst(), "gemm", c.flops, c.bytes, "bf16", shape=c.shape) / op_time_ns(
        a100, "gemm", c.flops, c.bytes, "bf16", shape=c.shape)
    assert method == "scaled" and ns == round(123_456 * model_ratio)
    # H100 and B200 both have it: both at their sustained clocks
    b200 = get_device("b200")
    sus = op_time_ns(b200, "gemm", c.flops, c.bytes, "bf16", shape=c.shape) / op_time_ns(
        h100, "gemm", c.flops, c.bytes, "bf16", shape=c.shape)
    assert scale_duration(123_456, h100, c, b200, c)[0] == round(123_456 * sus)
    # a CPU source: the GPU target at its sustained clock (the CPU profile is its benchmarks')
    cpu = get_device("host-cpu")
    on_cpu = op_time_ns(cpu, "gemm", c.flops, c.bytes, "bf16", shape=c.shape)
    assert scale_duration(on_cpu, cpu, c, h100, c)[0] == op_time_ns(h100, "gemm", c.flops, c.bytes,
                                                                     "bf16", shape=c.shape)
    assert sus != pytest.approx(op_time_ns(b200.burst(), "gemm", c.flops, c.bytes, "bf16", shape=c.shape)
                                / op_time_ns(h100.burst(), "gemm", c.flops, c.bytes, "bf16", shape=c.shape),
                                rel=1e-3)
    c2 = op_cost("aten::mm", [[8192, 4096], [4096, 4096]], ["c10::BFloat16"] * 2)  # shapes changed
    ns2, method2 = scale_duration(123_456, a100, c, a100, c2)
    assert method2 == "scaled" and 1.6 < ns2 / 123_456 < 2.1
    ns3, method3 = scale_duration(None, a100, c, h100, c)
    assert method3 == "model" and ns3 == op_time_ns(h100, "gemm", c.flops, c.bytes, "bf16",
                                                    shape=c.shape)
    lo, mid, hi, m = scale_duration_band(123_456, a100, c, a100, c)
    assert lo == mid == hi == 123_456 and m == "measured"
    lo, mid, hi, m = scale_duration_band(123_456, a100, c, h100, c)
    assert lo < mid < hi and m == "scaled"
    lo, mid, hi, m = scale_duration_band(None, a100, c, h100, c)
    assert lo < mid < hi and m == "model"


def test_vectorised_matches_scalar() -> None:
    rng = np.random.default_rng(0)
    n = 2000
    classes = rng.choice(["gemm", "attention", "elementwise", "norm", "other"], n)
    dtypes = rng.choice(["fp32", "bf16", "tf32", "fp8", ""], n)
    flops = 10 ** rng.uniform(0, 13, n)
    nbytes = 10 ** rng.uniform(0, 10, n)
    d = get_device("h100")
    vec = op_times_ns(d, classes, flops, nbytes, dtypes)
    lo, mid, hi = op_time_bands_ns(d, classes, flops, nbytes, dtypes)
    assert (mid == vec).all() and (lo <= mid).all() and (mid <= hi).all()
    for i in range(0, n, 97):
        assert vec[i] == op_time_ns(d, classes[i], flops[i], nbytes[i], dtypes[i] or "fp32")
    assert op_times_ns(d, "gemm", [1e9, 1e10], 0.0, "bf16").shape == (2,)


def test_scale_durations_vectorised() -> None:
    a100, h100 = get_device("a100"), get_device("h100")
    src = pd.DataFrame({"op_class": ["gemm", "gemm", "elementwise", "gemm"],
                        "flops": [1e12, 1e12, 1e6, 1e12], "bytes": [1e8, 1e8, 1e9, 1e8],
                        "dtype": ["bf16"] * 4})
    dst = src.copy()
    dst.loc[1, "flops"] = 2e12
    meas = np.array([5e6, 5e6, 1e6, np.nan])
    ns, method = scale_durations(meas, a100, src, a100, dst)
    assert list(method) == ["measured", "scaled", "measured", "model"]
    assert ns[0] == 5_000_000 and ns[2] == 1_000_000
    assert ns[3] == op_time_ns(a100, "gemm", 1e12, 1e8, "bf16")
    assert 1.8 < ns[1] / 5e6 < 2.05
    lo, mid, hi, method = scale_durations(meas, a100, src, h100, dst, band=True)
    assert list(method) == ["scaled", "scaled", "scaled", "model"]
    for i in range(4):
        c_s = OpCost(*src.loc[i, ["op_class", "flops", "bytes", "dtype"]])
        c_d = OpCost(*dst.loc[i, ["op_class", "flops", "bytes", "dtype"]])
        m = None if np.isnan(meas[i]) else int(meas[i])
        want = scale_duration_band(m, a100, c_s, h100, c_d)
        assert method[i] == want[3]
        assert np.abs(np.array([lo[i], mid[i], hi[i]]) - np.array(want[:3])).max() <= 1  # rounding


def test_vectorised_matches_scalar_on_many_ops() -> None:
    # speed is measured in scripts/bench*.py, not here (the machine is shared and noisy)
    n = 20_000
    rng = np.random.default_rng(1)
    classes = rng.choice(["gemm", "elementwise", "norm", "softmax", "memcpy"], n)
    flops, nbytes = 10 ** rng.uniform(3, 12, n), 10 ** rng.uniform(2, 9, n)
    out = op_times_ns("h100", classes, flops, nbytes, "bf16")
    assert out.shape == (n,) and (out > 0).all()
    for i in rng.choice(n, 50, replace=False):
        assert abs(int(out[i]) - op_time_ns("h100", str(classes[i]), float(flops[i]), float(nbytes[i]), "bf16")) <= 1


def test_shape_path_closed_form_and_fallbacks() -> None:
    prof = {**FLAT, "name": "shaped", "sm_count": 4, "shape_model": {
        "gemm": {"plateau": {"default": 0.5}, "tiles": [[128, 128]], "k_overhead": 0,
                 "wave_overhead_us": 0, "split_k_min": 1 << 30, "fixed_us": 0},
        "attention": {"plateau": {"default": [[64, 0.4], [128, 0.8]]}, "kv_half": {"default": 0}}}}
    d = get_device(prof)
    # 4 tiles of 128 x 128 on 4 SMs: one full wave at the plateau, like the size curve here
    f = 2.0 * 256 * 256 * 1024
    assert op_time_ns(d, "gemm", f, 0, "bf16", shape=(1, 256, 256, 1024)) == op_time_ns(d, "gemm", f, 0, "bf16")
    # one column more: a second wave of mostly empty tiles doubles the time
    f2 = 2.0 * 256 * 257 * 1024
    t2 = op_time_ns(d, "gemm", f2, 0, "bf16", shape=(1, 256, 257, 1024)) - 3_000
    assert t2 == pytest.approx(2 * (op_time_ns(d, "gemm", f, 0, "bf16") - 3_000), rel=1e-3)
    # the shape sets the efficiency, the op's FLOPs the work (a caller's own FLOP count wins)
    t_half = op_time_ns(d, "gemm", f2 / 2, 0, "bf16", shape=(1, 256, 257, 1024)) - 3_000
    assert t_half == pytest.approx(t2 / 2, rel=1e-3)
    # attention: the plateau follows the head dim (log2-interpolated)
    fa = 4.0 * 8 * 512 * 512 * 96
    t96 = op_time_ns(d, "attention", fa, 0, "bf16", shape=(8, 512, 512, 96)) - 3_000
    assert fa / (t96 * 1e-9) == pytest.approx(100e12 * (0.4 + 0.4 * np.log2(1.5)), rel=1e-3)
    # no shape, a zero in it, or a class the shape model does not cover: the size curve
    base = op_time_ns(d, "gemm", f, 0, "bf16")
    assert op_time_ns(d, "gemm", f, 0, "bf16", shape=(1, 0, 256, 1024)) == base
    assert op_time_ns(d, "elementwise", 1e6, 1e6, "bf16", shape=(1, 2, 3, 4)) == op_time_ns(
        d, "elementwise", 1e6, 1e6, "bf16")


def test_shape_path_vectorised_matches_scalar_and_scale_durations_reads_columns() -> None:
    b200 = get_device("b200")
    rng = np.random.default_rng(2)
    n = 400
    shape = np.stack([np.ones(n), *(2 ** rng.integers(6, 14, (3, n)))], axis=1).astype(float)
    shape[::7] = 0.0  # unknown shapes in between
    flops = 2.0 * shape.prod(axis=1) + (shape[:, 0] == 0) * 1e9
    classes = np.where(np.arange(n) % 3 == 0, "attention", "gemm")
    vec = op_times_ns(b200, classes, flops, 1e6, "bf16", shape=shape)
    for i in range(0, n, 13):
        assert vec[i] == op_time_ns(b200, classes[i], flops[i], 1e6, "bf16", shape=tuple(shape[i]))
    df = pd.DataFrame({"op_class": classes, "flops": flops, "bytes": 1e6, "dtype": "bf16",
                       "shape_b": shape[:, 0], "shape_m": shape[:, 1], "shape_n": shape[:, 2],
                       "shape_k": shape[:, 3]})
    ns, method = scale_durations(np.full(n, np.nan), b200, df, b200, df)
    assert (ns == vec).all() and (method == "model").all()
    other = df.assign(shape_n=df["shape_n"] * 2)  # same FLOPs, other shape: not "measured"
    _, method = scale_durations(np.full(n, 1e5), b200, df, b200, other)
    assert (method[shape[:, 0] > 0] == "scaled").all()
