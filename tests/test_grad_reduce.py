"""The gradients' reduction dtype (``--grad-reduce-fp32``): the stacks' defaults, the bytes the
data-parallel collectives move, the memory estimate, and the published rows that set it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tracesim.errors import InputError
from tracesim.options import ReplayOptions
from tracesim.pipeline.build import build
from tracesim.pipeline.published import table_rows
from tracesim.report.memory import estimate_memory
from tracesim.report.terminal import metric_rows

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"model": "gpt3-1.7b", "cluster": "h100x8", "tp": 1, "dp": 8, "global_batch": 8,
         "micro_batch": 1, "seq_len": 512, "host_launch": False}


def _built(**extra):
    return build(None, ReplayOptions.from_mapping({**SMALL, **extra}))


def _dp_bytes(b) -> int:
    """Bytes of the gradient reduce-scatters / all-reduces of the data-parallel buckets."""
    t = b.graph.tasks
    names = t["name"].astype(str).to_numpy()
    grads = np.char.startswith(names.astype(str), "dp.") & (t["collective"].astype(str).to_numpy()
                                                            != "all_gather")
    return int(t["msg_bytes"].to_numpy()[grads].sum())


def test_stack_defaults_and_the_users_choice() -> None:
    assert not _built().par.grad_reduce_fp32  # megatron-core: the Bridge / NeMo recipes'
    assert _built(stack="torchtitan").par.grad_reduce_fp32  # FSDP mixed_precision_reduce
    assert not _built(stack="torchtitan", grad_reduce_fp32=False).par.grad_reduce_fp32
    on = _built(grad_reduce_fp32=True)
    assert on.par.grad_reduce_fp32 and on.stack["grad_reduce"] == "fp32"
    assert dict(metric_rows({"stack": on.stack}))["stack"].startswith(
        "megatron-core, fp32 gradient reduction;")


def test_fp32_gradients_double_the_reduction_and_the_buffer() -> None:
    bf16, fp32 = _built(), _built(grad_reduce_fp32=True)
    assert _dp_bytes(bf16) > 0 and _dp_bytes(fp32) == 2 * _dp_bytes(bf16)
    # the parameter all-gathers keep the parameters' dtype
    def gathers(b):
        t = b.graph.tasks
        return int(t["msg_bytes"].to_numpy()[(t["collective"].astype(str) == "all_gather").to_numpy()].sum())
    assert gathers(fp32) == gathers(bf16)
    mem = [estimate_memory(b.model, b.par, b.built.stage_params, b.built.stage_expert_params)
           for b in (bf16, fp32)]
    assert mem[1].grads_gib == pytest.approx(2 * mem[0].grads_gib) and mem[0].grads_gib > 0
    assert mem[1].params_gib == pytest.approx(mem[0].params_gib)


def test_published_rows_that_ran_megatron_lm_reduce_in_fp32() -> None:
    pub = ROOT / "benchmarks/published"
    for name in ("megatron_core_h100_weak_scaling.csv",
                 "megatron_moe_modelzoo_h100.csv", "megatron_dsv3_gb200_roadmap.csv"):
        assert all(opts["grad_reduce_fp32"] for *_, opts, _, _ in table_rows([pub / name], None))
    # Megatron-Bridge's recipes (the MoE recipes' numbers were measured with them) and the
    # MLPerf NeMo runs: grad_reduce_in_fp32 False
    for path in (ROOT.parent / "shared/reference/megatron_bridge_25_11.csv",
                 pub / "megatron_moe_recipes.csv", pub / "mlperf_training_llama31_8b.csv"):
        assert not any(opts.get("grad_reduce_fp32") for *_, opts, _, _ in table_rows([path], None))


def test_bad_grad_reduce_cell_exits_2(tmp_path: Path) -> None:
    lines = (ROOT / "benchmarks/published/megatron_moe_recipes.csv").read_text().splitlines()
    bad = tmp_path / "t.csv"
    bad.write_text("\n".join([lines[0], lines[1].replace(",bf16,qwen3_", ",fp64,qwen3_", 1)]) + "\n")
    with pytest.raises(InputError) as e:
        list(table_rows([bad], None))
    assert "row 2: grad_reduce" in str(e.value)
