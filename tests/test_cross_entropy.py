"""``--cross-entropy-fusion``: Megatron's fused vocab-parallel cross-entropy or its fp32
softmax, loss and gradient kernels (Megatron-LM's default); docs/stacks.md, "The stacks"."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from click.testing import CliRunner

from tracesim.cli import cli as main
from tracesim.options import ReplayOptions
from tracesim.pipeline.published import read_table, row_options
from tracesim.pipeline.run import predict
from tracesim.template.stacks import get_stack, with_cross_entropy

BASE = {"model": "llama3-8b", "cluster": "h100x8", "tp": 1, "pp": 1, "dp": 8, "micro_batch": 1,
        "global_batch": 8, "seq_len": 4096, "full": True}
WEAK = Path(__file__).resolve().parents[1] / "benchmarks" / "published" / "megatron_core_h100_weak_scaling.csv"


def _loss_ns(**kw: object) -> tuple[float, dict]:
    res = predict(None, ReplayOptions.from_mapping({**BASE, **kw}), detail=True)
    t = res.graph.tasks
    df = pd.DataFrame({c: t[c].to_numpy() for c in ("rank", "kind", "name", "dur_ns")})
    loss = df[(df["rank"] == 0) & (df["kind"] == "gpu") & (df["name"] == "loss")]["dur_ns"].sum()
    return float(loss), res.details["stack"]


def test_the_unfused_cross_entropy_moves_more_bytes() -> None:
    fused, st_fused = _loss_ns()
    unfused, st_unfused = _loss_ns(cross_entropy_fusion=False)
    assert unfused > 2 * fused
    assert "fused" in st_fused["kernels"]["cross_entropy"].lower()
    assert "fp32" in st_unfused["kernels"]["cross_entropy"]
    assert _loss_ns(cross_entropy_fusion=True)[0] == fused  # the megatron-core default


def test_the_override_keeps_the_stack_otherwise() -> None:
    mc = get_stack("megatron-core")
    assert with_cross_entropy(mc, None) is mc and with_cross_entropy(mc, True) is mc
    off = with_cross_entropy(mc, False)
    assert not off.fused_ce and off.name == mc.name and off.attention == mc.attention
    assert with_cross_entropy(get_stack("megatron-2021"), True).fused_ce


def test_megatron_lm_weak_scaling_rows_run_megatron_lm_default() -> None:
    fmt, rows = read_table(WEAK)
    opts, _, _ = row_options(fmt, rows[0], WEAK, 0)
    assert opts["cross_entropy_fusion"] is False and opts["grad_reduce_fp32"] is True


def test_the_cli_flag() -> None:
    args = ["replay", "--model", "llama3-8b", "--cluster", "h100x8", "--tp", "1", "--dp", "8",
            "--micro-batch", "1", "--seq-len", "4096", "--no-cross-entropy-fusion"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
