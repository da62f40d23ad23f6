"""FP8 with blockwise scaling (Transformer Engine's ``Float8BlockScaling``; Megatron's
``--fp8-recipe blockwise``, Megatron-Bridge's ``fp8_sc``): both layouts quantized from BF16
on every GPU, the gathered column-wise copy reordered after the backward's gather, no amax
all-reduce, GEMMs at the device's block-scaled FP8 level (tracesim.template.fp8)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tracesim.catalog import load_model
from tracesim.errors import InputError
from tracesim.options import ReplayOptions
from tracesim.pipeline.build import build
from tracesim.pipeline.published import read_table, row_options
from tracesim.template.analytic import first_principles_template
from tracesim.template.fp8 import AMAX_SUFFIX, fp8_template

ROOT = Path(__file__).resolve().parents[1]
BASE = {"model": "llama3-8b", "cluster": "h100x8", "micro_batch": 1, "seq_len": 4096,
        "dtype": "fp8", "fp8_recipe": "blockwise"}


def _build(**kw: object):  # noqa: ANN202
    tp = int(kw.get("tp", 1))  # type: ignore[call-overload]
    opts = {**BASE, "global_batch": 8 // tp, "dp": 8 // tp, **kw}
    return build(None, ReplayOptions.from_mapping(opts), per_op=True)


def _built(**kw: object):  # noqa: ANN202
    return _build(**kw).built


@pytest.mark.parametrize("transposes", [True, False])  # Hopper, Blackwell
def test_both_layouts_from_bf16_on_every_gpu(transposes: bool) -> None:
    base = first_principles_template(load_model("gpt3-1.7b"))
    tpl = fp8_template(base, "blockwise", param_gather=False, gemm_dtype="mxfp8",
                       transposes=transposes)
    gemms = [o for o in tpl.ops if o.op_class == "gemm" and o.section == "block"]
    casts = [o for o in tpl.ops if o.name.endswith(".fp8_cast")]
    assert gemms and all(o.dtype == "mxfp8" for o in gemms) and len(casts) == len(gemms)
    gathered = [o for o in casts if o.shard == "sequence"]
    # the shard is quantized row-wise before the gather; elsewhere both layouts, 4 n + n / 16
    assert len(gathered) == 4 and all(o.bytes.startswith("(4.0625-min(tps-1,1))*") for o in gathered)
    assert all(o.bytes.startswith("4.0625*") for o in casts if o not in gathered)
    assert {o.out_dtype for o in casts if o.phase == "fwd"} == {"mxfp8"}  # 1 + 1/32 bytes on the wire
    assert not any(o.quant for o in casts)  # the per-tensor casts' memory-bound rate
    reorder = [o for o in tpl.ops if o.name.endswith(".fp8_transpose")]
    assert sorted(o.name for o in reorder) == ["attn.proj.fp8_transpose", "attn.qkv.fp8_transpose",
                                               "mlp.fc1.fp8_transpose", "mlp.fc2.fp8_transpose"]
    assert all(o.phase == "bwd" and o.when == "tps-1" for o in reorder)
    # 128 x 128 weight blocks: both copies once per step (the transpose of the gathered FP8)
    assert [o.bytes for o in tpl.ops if o.name == "fp8.weight_cast"] == ["4*params"]
    assert [o.bytes for o in fp8_template(base, "blockwise", True, "mxfp8", transposes=transposes).ops
            if o.name == "fp8.weight_cast"] == ["2*params"]


def test_no_amax_reduction_and_the_block_scaled_level() -> None:
    out = _build(tp=4)
    sec = out.built.resolved.dense
    assert not [r for r in sec.fwd + sec.bwd if r.name.endswith(AMAX_SUFFIX)]
    assert out.par.gemm_dtype == "mxfp8" and out.par.fp8_param_gather
    assert out.stack["fp8"]["recipe"] == "blockwise"


def test_slower_than_per_tensor_fp8_faster_than_bf16_on_hopper() -> None:
    """Hopper's block-scaled GEMMs run at 0.82 of its FP8 rate (tests/test_gemm_precision.py),
    still well above BF16's."""
    def qkv_ns(b) -> float:  # noqa: ANN001
        t = b.graph.tasks
        return float(t[t["name"].astype(str).str.startswith("attn.qkv")
                       & (t["kind"] == "gpu") & ~t["name"].astype(str).str.contains("fp8")]["dur_ns"].sum())

    block, current = _build(), _build(fp8_recipe="current")
    bf16 = _build(dtype="bf16", fp8_recipe=None)
    assert qkv_ns(current) < qkv_ns(block) < qkv_ns(bf16)
    assert qkv_ns(current) / qkv_ns(block) == pytest.approx(0.82, abs=0.03)


def test_only_stacks_with_transformer_engine_run_it() -> None:
    with pytest.raises(InputError, match="blockwise"):
        _built(stack="torchtitan")
    res = subprocess.run([sys.executable, "-m", "tracesim.cli", "replay", "--model", "llama3-8b",
                          "--cluster", "h100x8", "--dp", "8", "--dtype", "fp8", "--fp8-recipe",
                          "blockwise", "--stack", "deepspeed"],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 2 and "blockwise" in res.stderr and "Traceback" not in res.stderr


def test_the_fp8_sc_precision_of_a_table() -> None:
    table = ROOT / "benchmarks" / "published" / "megatron_moe_recipes.csv"
    fmt, rows = read_table(table)
    k = next(i for i, r in enumerate(rows) if r["precision"] == "fp8-sc")
    opts, label, _ = row_options(fmt, rows[k], table, k)
    assert (opts["dtype"], opts["fp8_recipe"]) == ("fp8", "blockwise") and "fp8-sc" in label
