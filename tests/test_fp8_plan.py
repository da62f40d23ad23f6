"""Low-precision recipes with exceptions: ``--fp8-plan`` (modules in another precision, as
Transformer Engine's quantization config) and ``--bf16-layers`` (Megatron's
first_last_layers_bf16); docs/stacks.md, "FP8"."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tracesim.catalog import load_model
from tracesim.cli import cli as main
from tracesim.errors import InputError
from tracesim.options import ReplayOptions
from tracesim.pipeline.published import table_rows
from tracesim.pipeline.run import predict
from tracesim.specs.parallel import ParallelSpec
from tracesim.template.analytic import first_principles_template
from tracesim.template.fp8 import fp8_template
from tracesim.template.resolve import resolve_template

BASE = {"model": "llama3-8b", "cluster": "dgx-b200", "tp": 1, "pp": 1, "dp": 8,
        "micro_batch": 1, "global_batch": 8, "seq_len": 4096, "stack": "megatron-core",
        "template": "analytic"}


def _flat(*_: object) -> int:
    return 1


def _quantized(section) -> bool:  # noqa: ANN001
    """Whether a resolved layer runs quantization kernels (its GEMMs in low precision)."""
    return any(o.name.endswith(".fp8_cast") for o in section.fwd)


def test_the_plan_gives_each_linear_its_recipe() -> None:
    m = load_model("nemotron-3-super")
    plan = (("attn.*", "bf16"), ("mamba.out_proj", "mxfp8"))
    tpl = fp8_template(first_principles_template(m), "nvfp4", False, "nvfp4", plan)
    ops = {(o.name, o.phase): o for o in tpl.ops}
    assert ops[("attn.qkv", "fwd")].dtype == "" and ("attn.qkv.fp8_cast", "fwd") not in ops
    assert ops[("mamba.out_proj", "fwd")].dtype == "mxfp8"
    assert ops[("mamba.out_proj.fp8_cast", "fwd")].bytes.startswith("4.0625*")  # MXFP8's cast
    assert ops[("mamba.in_proj", "fwd")].dtype == "nvfp4" and ops[("moe.fc1", "bwd")].dtype == "nvfp4"
    assert tpl.plain is not None and tpl.plain.ops == first_principles_template(m).ops


def test_bf16_layers_take_the_unquantized_sections() -> None:
    """--bf16-layers 1,2 on a 32-layer model: layers 0, 30, 31 and the MTP module (past the
    last layer) keep BF16 GEMMs, the others run FP8."""
    m = load_model("llama3-8b")
    par = ParallelSpec(dp=8, micro_batch=1, global_batch=8, seq_len=4096, dtype="fp8",
                       fp8_recipe="mxfp8", bf16_layers=(1, 2))
    tpl = fp8_template(first_principles_template(m), "mxfp8", False, "mxfp8")
    res = resolve_template(tpl, m, par, _flat)
    low = [i for i in range(m.layers + 1) if _quantized(res.layer(m, i))]
    assert low == list(range(1, 30))


def test_all_layers_in_bf16_replay_as_bf16() -> None:
    fp8 = {**BASE, "dtype": "fp8", "fp8_recipe": "mxfp8", "fp8_param_gather": False}
    bf16 = predict(None, ReplayOptions.from_mapping({**BASE, "dtype": "bf16"}, None, "x"))
    kept = predict(None, ReplayOptions.from_mapping({**fp8, "bf16_layers": "32,0"}, None, "x"))
    low = predict(None, ReplayOptions.from_mapping(fp8, None, "x"))
    # no layer quantized: no weight cast either (the FP8 stack's other settings stay)
    assert kept.iteration_time_s == pytest.approx(bf16.iteration_time_s, rel=0.01)
    assert low.iteration_time_s < 0.9 * kept.iteration_time_s
    assert kept.details["stack"]["fp8"]["bf16_layers"] == [32, 0]


@pytest.mark.parametrize(("extra", "needle"), [
    (["--fp8-plan", "attn.*=fp4"], "--fp8-plan: attn.*=fp4: 'fp4' is not one of bf16"),
    (["--fp8-plan", "attn.*"], "--fp8-plan: expected GLOB=VALUE"),
    (["--bf16-layers", "3"], "--bf16-layers: expected FIRST,LAST"),
    (["--bf16-layers", "20,20"], "bf16_layers: 20,20 BF16 layers of 32"),
    (["--dtype", "bf16", "--bf16-layers", "1,1"], "bf16_layers needs dtype fp8"),
])
def test_bad_plans_exit_2_naming_the_option(extra: list[str], needle: str) -> None:
    args = ["replay", "--model", "llama3-8b", "--cluster", "dgx-b200", "--nodes", "1",
            "--micro-batch", "1", "--global-batch", "8", "--dtype", "fp8"]
    res = CliRunner().invoke(main, args + extra)
    assert res.exit_code == 2 and needle in res.output and "Traceback" not in res.output


def test_table_cells_and_recipes(tmp_path: Path) -> None:
    """The Nemotron 3 Super NVFP4 rows take their recipe's exceptions (recipes.py), a row's
    own fp8_plan and bf16_layers columns reach its replay, and a malformed cell names the
    file, the row and the column."""
    src = Path(__file__).resolve().parents[1] / "benchmarks" / "published" / "megatron_bridge_nemotron3.csv"
    got = [opts for _, _, _, _, opts, label, _ in table_rows([src]) if "nvfp4" in label]
    assert len(got) == 4 and all(o["fp8_plan"] == "attn.*=bf16,mamba.out_proj=mxfp8" and
                                 o["bf16_layers"] == "0,14" and o["mtp_layers"] == 2 for o in got)
    text = src.read_text().splitlines()
    row = next(ln for ln in text if ",nvfp4," in ln)
    t = tmp_path / "t.csv"
    t.write_text(f"{text[0]},fp8_plan,bf16_layers\n{row},moe.*=bf16,\"2,3\"\n")
    (opts,) = [o for _, _, _, _, o, _, _ in table_rows([t])]
    assert (opts["fp8_plan"], opts["bf16_layers"]) == ("moe.*=bf16", "2,3")
    t.write_text(f"{text[0]},bf16_layers\n{row},\"0,x\"\n")
    with pytest.raises(InputError) as exc:
        list(table_rows([t]))
    assert exc.value.where == "row 2: bf16_layers" and str(t) in exc.value.line()
