"""Block-scaled GEMMs against Transformer Engine's GEMM profiles on B300 and H200 NVL
(benchmarks/kernels/gemm_precision.py, data/gemm_precision.csv): the Blackwell MXFP8, the
Blackwell Ultra NVFP4 and the Hopper block-scaled FP8 levels are set from their ratios to
FP8; B300's BF16 / FP8 ratio and H200's delayed-scaling time are held out."""

from __future__ import annotations

import pytest

from benchmarks.kernels import kernel_fit as kf
from benchmarks.kernels.gemm_precision import (
    block_over_fp8,
    delayed_check,
    mxfp8_over_fp8,
    nvfp4_over_fp8,
    quantize_rate,
)
from tracesim.hardware.costmodel import op_time_ns
from tracesim.hardware.device import get_device

TOKENS, HIDDEN, FFN = 15872, 4096, 16384
#: the table's four linears as (k, n) of their forward GEMMs
LINEARS = ((HIDDEN, 3 * HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, FFN), (FFN, HIDDEN))
BYTES = {"bf16": 2.0, "fp8": 1.0, "mxfp8": 1.0 + 1 / 32, "nvfp4": 0.5 + 1 / 16}


def _layer_ms(device: str, dtype: str, burst: bool = True) -> float:
    """The model's time of the table's 12 GEMMs (forward, data and weight gradients)."""
    dev = get_device(device).burst() if burst else get_device(device)
    total = 0
    for k, n in LINEARS:
        for sh in ((1, TOKENS, n, k), (1, TOKENS, k, n), (1, k, n, TOKENS)):
            nbytes = BYTES[dtype] * (sh[1] * sh[3] + sh[3] * sh[2]) + 2 * sh[1] * sh[2]
            total += op_time_ns(dev, "gemm", 2.0 * sh[1] * sh[2] * sh[3], nbytes, dtype, shape=sh)
    return total / 1e6


def _measured_ms(column: str, mode: str = "pre-quantized", profile: str = "b300") -> float:
    return sum(float(r[f"{column}_ms"]) for r in kf.rows("gemm_precision")
               if r["mode"] == mode and r["profile"] == profile)


def test_the_table_ratios() -> None:
    assert mxfp8_over_fp8() == pytest.approx(6.812 / 7.162, abs=1e-4)
    assert nvfp4_over_fp8() == pytest.approx(6.812 / 3.764, abs=1e-4)


@pytest.mark.parametrize(("dtype", "column", "tol"), [
    ("mxfp8", "mxfp8", 0.01),  # calibrated
    ("nvfp4", "nvfp4", 0.01),  # calibrated
    ("bf16", "bf16", 0.03),    # held out: BF16 and FP8 come from the MAMF tables
])
def test_b300_reproduces_each_precision_over_fp8(dtype: str, column: str, tol: float) -> None:
    model = _layer_ms("b300", dtype) / _layer_ms("b300", "fp8")
    data = _measured_ms(column) / _measured_ms("fp8_current")
    assert model == pytest.approx(data, rel=tol)


def test_mxfp8_is_slower_than_fp8_on_every_blackwell_profile() -> None:
    for name in ("b200", "gb200", "b300", "gb300"):
        ratio = _layer_ms(name, "fp8") / _layer_ms(name, "mxfp8")
        assert ratio == pytest.approx(mxfp8_over_fp8(), rel=0.01), name


def test_ultra_nvfp4_follows_fp8_and_b200_keeps_its_own_rows() -> None:
    gb300 = _layer_ms("gb300", "fp8") / _layer_ms("gb300", "nvfp4")
    assert gb300 == pytest.approx(nvfp4_over_fp8(), rel=0.01)
    # B200's NVFP4 is its own measured rows' (TORCHAO-NVFP4), not the B300 ratio
    b200 = get_device("b200").raw["calibration"]["shape_model.gemm.plateau"]["nvfp4"]
    assert "Blackwell Ultra" not in b200
    assert "Blackwell Ultra" in get_device("b300").raw["calibration"]["shape_model.gemm.plateau"]["nvfp4"]


@pytest.mark.parametrize(("dtype", "column"), [("bf16", "bf16"), ("fp8", "fp8_current")])
def test_b300_at_its_sustained_clock_reproduces_the_table(dtype: str, column: str) -> None:
    """Held out: the table's absolute times, against the profile's in-step rate (B200's
    saturated matmul rate, benchmarks/kernels/sustained.py), within 3%."""
    assert _layer_ms("b300", dtype, burst=False) == pytest.approx(_measured_ms(column), rel=0.03)


def test_block_scaled_quantization_rates_come_from_the_autocast_rows() -> None:
    """Autocast less pre-quantized is each recipe's quantization time; over tracesim's bytes
    per element (6, 4.0625, 5.125) MXFP8's and NVFP4's rates relative to current scaling's are
    the Blackwell profiles' ``quantize`` (Hopper has none: per-tensor casts only)."""
    dt = {c: _measured_ms(c, "autocast") - _measured_ms(c) for c in ("fp8_current", "mxfp8", "nvfp4")}
    assert quantize_rate("mxfp8") == pytest.approx(4.0625 / dt["mxfp8"] / (6 / dt["fp8_current"]), abs=1e-4)
    assert quantize_rate("nvfp4") == pytest.approx(5.125 / dt["nvfp4"] / (6 / dt["fp8_current"]), abs=1e-4)
    assert 0.5 < quantize_rate("nvfp4") < quantize_rate("mxfp8") < 1.0
    for name in ("b200", "gb200", "b300", "gb300"):
        dev = get_device(name)
        assert dev.quantize_rate("mxfp8") == quantize_rate("mxfp8")
        assert dev.quantize_rate("nvfp4") == quantize_rate("nvfp4")
    assert get_device("h100").quantize_rate("mxfp8") == 1.0


def test_block_scaled_casts_take_the_quantize_rate() -> None:
    """An MXFP8 / NVFP4 recipe's casts carry their recipe (``quant``) and cost the elementwise
    time over the profile's rate; per-tensor recipes' casts are plain elementwise ops."""
    from tracesim.catalog import load_model
    from tracesim.template.analytic import first_principles_template
    from tracesim.template.durations import make_op_time
    from tracesim.template.fp8 import fp8_template

    base = first_principles_template(load_model("llama3-8b"))
    dev = get_device("b200")
    for recipe, quant in (("current", ""), ("delayed", ""), ("mxfp8", "mxfp8"), ("nvfp4", "nvfp4")):
        tpl = fp8_template(base, recipe, False)
        casts = [o for o in tpl.ops if o.name.endswith(".fp8_cast")]
        assert casts and {o.quant for o in casts} == {quant}
        op_time, _ = make_op_time(tpl, dev, "bf16")
        plain = casts[0].replace(quant="")
        ns, ns_plain = (op_time("elementwise", 1e9, 4e9, o) for o in (casts[0], plain))
        assert ns == pytest.approx(ns_plain / dev.quantize_rate(quant) if quant else ns_plain, abs=1)


@pytest.mark.parametrize("bad", [{"mxfp8": 1.2}, {"fp8": 0.9}, [0.8]])
def test_a_bad_quantize_entry_names_the_key(bad: object) -> None:
    from tracesim.errors import InputError
    from tracesim.hardware.device import parse_profile

    data = {**get_device("b200").raw, "quantize": bad}
    with pytest.raises(InputError, match="b200.yaml: device.quantize"):
        parse_profile(data, "b200.yaml")


def test_hopper_block_scaled_fp8_from_the_h200_table() -> None:
    """The blockwise recipe's GEMM time on H200 NVL is its autocast time less its quantization
    (4.0625 bytes an element at current scaling's rate per byte); over current scaling's
    pre-quantized GEMMs it sets the Hopper profiles' block-scaled (``mxfp8``) level."""
    quant = (_measured_ms("fp8_current", "autocast", "h200") - _measured_ms("fp8_current", profile="h200")) / 6
    gemm = _measured_ms("fp8_block", "autocast", "h200") - 4.0625 * quant
    assert block_over_fp8() == pytest.approx(_measured_ms("fp8_current", profile="h200") / gemm, abs=1e-4)
    assert 0.75 < block_over_fp8() < 0.9
    for name in ("h100", "h200"):  # h200 calibrated, h100 derived (the same die)
        ratio = _layer_ms(name, "fp8") / _layer_ms(name, "mxfp8")
        assert ratio == pytest.approx(block_over_fp8(), rel=0.01), name
        assert "mxfp8" not in get_device(name).peak_tflops  # no MX units: the level is FP8 scaled


def test_hopper_delayed_scaling_held_out() -> None:
    """Held out in the same table: delayed scaling's autocast time from current scaling's GEMMs
    and its 4 bytes an element, within 2%."""
    predicted, measured = delayed_check()
    assert predicted == pytest.approx(measured, rel=0.02)
