"""The ``transformers`` stack (Hugging Face modules in eager PyTorch) and ``--optimizer``
(docs/stacks.md), and the cuDNN frontend's Llama 3.2 1B table (docs/accuracy.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import retarget
from tracesim.catalog import load_model
from tracesim.errors import InputError
from tracesim.options import OPTIMIZERS as OPTION_CHOICES
from tracesim.pipeline.published import table_rows, validate_rows
from tracesim.report.memory import GiB
from tracesim.template.eager_chains import HF_KERNELS, HF_PASSES, TORCH_CE_PASSES
from tracesim.template.layer import evaluate
from tracesim.template.optimizer import OPTIMIZERS, optimizer_op, state_bytes
from tracesim.template.stacks import Stack, get_stack, stack_template

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "benchmarks/published/cudnn_frontend_llama32_1b.csv"
ONE = {"model": "llama3.2-1b", "cluster": "h200x8", "dp": 1, "micro_batch": 2, "global_batch": 2,
       "seq_len": 2048}


def _op(tpl, name: str, phase: str):
    return next(o for o in tpl.ops if o.name == name and o.phase == phase)


def test_transformers_kernels_are_the_eager_modules_passes() -> None:
    model = load_model("llama3.2-1b")
    fused = stack_template(model, get_stack("megatron-core"))
    hf = stack_template(model, get_stack("transformers"))
    for name, chain in (("ln1", "norm"), ("mlp.act", "act"), ("attn.rope", "rope")):
        for phase, k in zip(("fwd", "bwd"), HF_PASSES[chain], strict=True):
            assert _op(hf, name, phase).bytes == f"{k:g}*({_op(fused, name, phase).bytes})"
    # torch's cross_entropy on fp32 logits over the template's fp32 loss ops
    plain = stack_template(model, Stack("plain", "the template's fp32 loss"))
    for phase, k in zip(("fwd", "bwd"), TORCH_CE_PASSES, strict=True):
        assert _op(hf, "loss", phase).bytes == f"{k:g}*({_op(plain, 'loss', phase).bytes})"
    # the GEMMs and attention are the same kernels' work
    for name in ("attn.qkv", "mlp.fc1", "attn.core", "head"):
        assert _op(hf, name, "fwd") == _op(fused, name, "fwd")
    # torch.compile fuses the chains again, both ways
    comp = stack_template(model, get_stack("transformers"), compiled=True)
    assert _op(comp, "ln1", "bwd").bytes == _op(fused, "ln1", "bwd").bytes
    assert _op(comp, "loss", "bwd").bytes == _op(plain, "loss", "bwd").bytes
    assert hf.meta["op_kernels"]["ln1"] == HF_KERNELS["norm"] and "op_kernels" not in comp.meta
    assert hf.meta["optimizer"] == "adam" and hf.meta["master_weights"] is False


def test_the_calibrated_passes_match_the_kernel_data() -> None:
    from benchmarks.kernels.eager_chains import calibrated

    cal = calibrated()
    for chain, kernel in (("norm", "rms_norm"), ("rope", "rope")):
        assert HF_PASSES[chain] == (cal[(kernel, "fwd")], cal[(kernel, "bwd")])
    assert TORCH_CE_PASSES == (cal[("cross_entropy", "fwd")], cal[("cross_entropy", "bwd")])


def test_transformers_stack_is_dense_only() -> None:
    with pytest.raises(InputError, match="dense transformer blocks"):
        stack_template(load_model("qwen3-30b-a3b"), get_stack("transformers"))


def test_optimizer_costs_and_states() -> None:
    env = {"params": 1e9, "eb": 2}
    cost = {(o, m): (evaluate(optimizer_op(o, m).flops, env), evaluate(optimizer_op(o, m).bytes, env))
            for o in ("adam", "sgd") for m in (True, False)}
    assert cost[("adam", True)] == (12e9, 30e9)
    assert cost[("adam", False)] == (12e9, 40e9)
    assert cost[("sgd", True)] == (2e9, 14e9)
    assert cost[("sgd", False)] == (2e9, 6e9)
    assert [state_bytes("adam", True, 2), state_bytes("adam", True, 4), state_bytes("sgd", True, 2),
            state_bytes("adam", False, 2), state_bytes("sgd", False, 2)] == [12, 8, 4, 4, 0]
    with pytest.raises(ValueError):
        optimizer_op("lion", True)
    assert OPTION_CHOICES == OPTIMIZERS  # the option's choices are the template's optimizers


def test_sgd_is_a_cheaper_step_and_smaller_states() -> None:
    adam = retarget({**ONE, "stack": "transformers"}, detail=True)
    sgd = retarget({**ONE, "stack": "transformers", "optimizer": "sgd"}, detail=True)
    assert sgd.iteration_time_s < adam.iteration_time_s
    params = load_model("llama3.2-1b").params()
    assert adam.to_dict()["memory"]["optimizer"] == pytest.approx(4 * params / GiB, abs=1e-3)
    assert sgd.to_dict()["memory"]["optimizer"] == 0
    mixed = retarget({**ONE, "optimizer": "sgd"})  # megatron-core: fp32 master weights
    assert mixed.to_dict()["stack"]["kernels"]["optimizer"] == "SGD over fp32 master weights"
    assert sgd.to_dict()["stack"]["name"] == "transformers"


def test_optimizer_with_a_recorded_template_warns() -> None:
    res = retarget({**ONE, "model": "llama-tiny", "stack": "eager", "optimizer": "sgd"})
    assert any("--optimizer is not used" in w for w in res.warnings)


def test_bad_optimizer_exits_2() -> None:
    r = subprocess.run([sys.executable, "-m", "tracesim.cli", "replay", "--model", "llama3.2-1b",
                        "--cluster", "h200x8", "--dp", "1", "--optimizer", "lion"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "optimizer" in r.stderr


def test_the_cudnn_frontend_llama_table() -> None:
    rows = list(table_rows([TABLE]))
    assert len(rows) == 24 and {r[2] for r in rows} == {"titan"}
    opts = rows[0][4]
    assert (opts["stack"], opts["optimizer"], opts["cudnn"], opts["dp"], opts["fsdp"],
            opts["loss_fp32"]) == ("transformers", "sgd", "9.9.0", 1, False, False)
    got = list(validate_rows([TABLE]))
    # the B200 profile has no FlashAttention-2 rates: those six rows are reported, not replayed
    skipped = [r for r in got if r.error]
    assert len(skipped) == 6 and all("DGX-B200" in r.label and "flash2" in r.error for r in skipped)
    done = [r for r in got if not r.error]
    assert all(np.isfinite(r.predicted) and r.predicted > 0 for r in done)
    # published tokens/s = batch x sequence / the benchmark's seconds per iteration
    row = rows[0][3]
    assert float(row["tokens_per_s_per_gpu"]) == pytest.approx(
        int(row["local_batch"]) * int(row["seq_len"]) / float(row["step_s"]), rel=1e-5)


def test_a_bad_stack_cell_is_bad_input(tmp_path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(TABLE.read_text().replace(",transformers,", ",keras,", 1))
    with pytest.raises(InputError, match="row 2: stack"):
        list(table_rows([bad]))


def test_the_loss_on_compute_dtype_logits() -> None:
    model = load_model("llama3.2-1b")
    hf = stack_template(model, get_stack("transformers"))
    bf16 = stack_template(model, get_stack("transformers"), loss_fp32=False)
    for phase in ("fwd", "bwd"):
        k = TORCH_CE_PASSES[phase == "bwd"]
        plain = _op(stack_template(model, Stack("plain", "fp32 loss")), "loss", phase).bytes
        assert _op(bf16, "loss", phase).bytes == f"{k:g}*(eb/4*({plain}))"
        assert _op(hf, "loss", phase).bytes == f"{k:g}*({plain})"
    fp32 = retarget({**ONE, "stack": "transformers"})
    half = retarget({**ONE, "stack": "transformers", "loss_fp32": False})
    assert half.iteration_time_s < fp32.iteration_time_s
    assert half.to_dict()["stack"]["kernels"]["cross_entropy"].endswith("compute-dtype logits")
    fused = retarget({**ONE, "loss_fp32": False})  # megatron-core: its fused cross-entropy
    assert any("--no-loss-fp32 is not used" in w for w in fused.warnings)


def test_list_stacks() -> None:
    r = subprocess.run([sys.executable, "-m", "tracesim.cli", "list", "stacks", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    names = [e["name"] for e in json.loads(r.stdout)["stacks"]]
    assert names[:5] == ["megatron-core", "megatron-2021", "torchtitan", "deepspeed", "transformers"]
