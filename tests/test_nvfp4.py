"""NVFP4 (``--dtype fp8 --fp8-recipe nvfp4``): the transformer layers' linears at the
device's FP4 rate on half-byte operands, Transformer Engine's NVFP4 quantization kernels, the
Megatron-Bridge recipes' settings (no FP8 parameter gather, no userbuffers TP overlap), and
the Blackwell profiles' FP4 peaks (tracesim.template.fp8, docs/stacks.md)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tracesim.cli import cli
from tracesim.errors import InputError
from tracesim.hardware.costmodel import op_time_ns
from tracesim.hardware.device import get_device
from tracesim.options import ReplayOptions
from tracesim.pipeline.build import build
from tracesim.template.fp8 import AMAX_SUFFIX, CAST_BYTES_PER_ELEM

BASE = {"model": "llama3-8b", "cluster": "dgx-b200", "micro_batch": 1, "seq_len": 4096,
        "dtype": "fp8", "global_batch": 2, "dp": 2, "tp": 4}


def _built(**kw):
    return build(None, ReplayOptions.from_mapping({**BASE, **kw}), per_op=True)


def test_the_linears_run_in_nvfp4_with_its_quantization_kernels() -> None:
    built = _built(fp8_recipe="nvfp4")
    sec = built.built.resolved.dense
    gemms = {r.name: r for r in sec.fwd if r.op_class == "gemm"}
    assert {"attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2"} <= set(gemms)
    ops = {o.name: o for o in built.template.ops if o.phase in ("fwd", "opt")}
    assert ops["mlp.fc1"].dtype == "nvfp4" and ops["attn.core"].dtype == ""  # attention stays BF16
    cast = ops["mlp.fc1.fp8_cast"]
    assert cast.bytes.startswith(CAST_BYTES_PER_ELEM["nvfp4"] + "*") and cast.out_dtype == "nvfp4"
    # the per-tensor scale of a gathered tensor takes the TP group's amax, as current scaling
    assert "attn.qkv" + AMAX_SUFFIX in [r.name for r in sec.fwd]
    weight = ops["fp8.weight_cast"]
    assert weight.bytes == "3*params"
    # the same linear is faster than at the FP8 rate (B200: FP4 peak 2 x FP8)
    mx = {r.name: r for r in _built(fp8_recipe="mxfp8").built.resolved.dense.fwd}
    assert gemms["mlp.fc1"].dur_ns < 0.7 * mx["mlp.fc1"].dur_ns


def test_megatron_bridge_runs_nvfp4_without_fp8_parameters_or_userbuffers() -> None:
    par = _built(fp8_recipe="nvfp4").par
    assert par.fp8_recipe == "nvfp4" and par.gemm_dtype == "nvfp4"
    assert not par.fp8_param_gather and not par.tp_comm_overlap
    cur = _built(fp8_recipe="current").par
    assert cur.fp8_param_gather and cur.tp_comm_overlap


def test_nvfp4_needs_fp4_tensor_cores_and_bf16_parameters() -> None:
    with pytest.raises(InputError, match="nvfp4 needs FP4 tensor cores"):
        _built(fp8_recipe="nvfp4", cluster="h100x8")
    with pytest.raises(InputError, match="drop --fp8-param-gather"):
        _built(fp8_recipe="nvfp4", fp8_param_gather=True)
    res = CliRunner().invoke(cli, ["replay", "--model", "llama3-8b", "--cluster", "h100x8",
                                   "--dtype", "fp8", "--fp8-recipe", "nvfp4"])
    assert res.exit_code == 2 and "nvfp4 needs FP4 tensor cores" in res.output


@pytest.mark.parametrize(("device", "fp4"), [("b200", 9000), ("b300", 12600), ("gb200", 10000),
                                             ("gb300", 15000)])
def test_blackwell_profiles_carry_the_fp4_peak_and_the_measured_fraction(device: str, fp4: float) -> None:
    d = get_device(device)
    assert d.peak_flops("nvfp4") == pytest.approx(fp4 * 1e12)
    assert d.sustained("nvfp4") == d.sustained("fp8")
    src = d.raw["calibration"]["shape_model.gemm.plateau"]["nvfp4"]
    assert "TORCHAO-NVFP4" in src and (device == "b200") == ("derived" not in src)
    # a large NVFP4 GEMM runs at the measured fraction of the FP4 peak (about 0.59 on B200),
    # below the fraction FP8 GEMMs reach of theirs; Blackwell Ultra (B300, GB300) at its FP8
    # rate times the NVFP4 / FP8 ratio measured on B300 (tests/test_gemm_precision.py)
    gm = d.shape_model.gemm  # type: ignore[union-attr]
    b200 = get_device("b200").shape_model.gemm.ceiling["nvfp4"]  # type: ignore[union-attr]
    if device in ("b300", "gb300"):
        assert "Blackwell Ultra" in src and gm.ceiling["nvfp4"] < b200
    else:
        assert gm.ceiling["nvfp4"] == pytest.approx(b200)
    assert gm.ceiling["nvfp4"] < gm.ceiling["fp8"]
    assert get_device("h100").peak_flops("nvfp4") == get_device("h100").peak_flops("fp8")


def test_the_b200_profile_reproduces_the_measured_nvfp4_gemms() -> None:
    """The square torch._scaled_mm NVFP4 rows of data/gemm.csv (B200, source TORCHAO-NVFP4)
    that the profile was fitted on, at the burst rate (a short benchmark)."""
    from benchmarks.kernels import kernel_fit as kf

    dev = get_device("b200").burst()
    rows = kf.gemm_rows(source="TORCHAO-NVFP4")
    assert len(rows) == 7
    for r in rows:
        m = int(r["m"])
        flops = 2.0 * m ** 3
        got = flops / op_time_ns(dev, "gemm", flops, 0.0, "nvfp4", shape=(1, m, m, m)) / 1e3
        assert got == pytest.approx(float(r["tflops"]), rel=0.10 if m >= 4096 else 0.6), m


def test_the_bridge_tables_nvfp4_rows_take_their_recipes() -> None:
    from pathlib import Path

    from tracesim.pipeline.published import table_rows

    table = Path(__file__).resolve().parents[1] / "benchmarks" / "published" / "megatron_bridge_26_02.csv"
    rows = list(table_rows([table], lambda label: " nvfp4 " in label))
    assert len(rows) == 4
    for _, _, _, _, opts, _, _ in rows:
        assert (opts["dtype"], opts["fp8_recipe"]) == ("fp8", "nvfp4")
        assert opts["tp"] == 1 or opts["tp_comm_overlap"] is False  # the recipes' setting


def test_mfu_is_against_the_fp4_peak() -> None:
    from tests.helpers import retarget

    res = retarget({"model": "llama3-8b", "cluster": "dgx-b200", "dp": 8, "global_batch": 8,
                    "micro_batch": 1, "seq_len": 2048, "dtype": "fp8", "fp8_recipe": "nvfp4"})
    assert res.mfu == pytest.approx(res.tflops_per_gpu / 9000.0)
