"""Megatron's per-step work on its gradient buffer (docs/stacks.md, "Data-parallel overlaps and
the distributed optimizer"): a memset of the rank's whole buffer, then over the optimizer's
shard the gradients' fp32 copy, their norm and the clip's scale, in the optimizer step of
the Megatron stacks only."""

from __future__ import annotations

import pytest

from tracesim.options import ReplayOptions
from tracesim.pipeline.build import build
from tracesim.template.optimizer import grad_buffer_ops

SMALL = {"model": "gpt3-1.7b", "cluster": "h100x8", "tp": 2, "dp": 4, "global_batch": 8,
         "micro_batch": 1, "seq_len": 512, "host_launch": False}


def _step(**extra: object) -> tuple[float, float, int]:
    """The optimizer task's FLOPs and bytes on rank 0, and its ZeRO stage."""
    b = build(None, ReplayOptions.from_mapping({**SMALL, **extra}))
    t = b.graph.tasks
    o = t[(t["name"] == "optimizer.step") & (t["rank"] == 0)]
    assert len(o) == 1
    return float(o["flops"].iloc[0]), float(o["bytes"].iloc[0]), b.par.zero


def test_ops_by_clip_policy() -> None:
    zero, prep = grad_buffer_ops(True)
    assert (zero.name, zero.bytes, zero.flops) == ("optimizer.zero_grad", "gb*params", "0")
    assert prep.bytes == "params*(3*(4 - gb) + 4 + 8)" and prep.flops == "3*params"
    assert grad_buffer_ops(False)[1].bytes == "params*(3*(4 - gb) + 4)"


@pytest.mark.parametrize("fp32,gb", [(False, 2.0), (True, 4.0)])
def test_megatron_core_memsets_the_whole_buffer_and_preps_the_shard(fp32: bool, gb: float) -> None:
    flops, nbytes, zero = _step(grad_reduce_fp32=fp32)
    assert zero == 1
    shard = flops / 15.0  # Adam's 12 FLOPs and the norm's 2 and scale's 1 per shard parameter
    whole = 4 * shard  # dp 4: the distributed optimizer's shard is a quarter of the buffer
    cast = 6.0 if gb == 2.0 else 0.0  # BF16 gradients copied to fp32; an fp32 buffer is its own
    assert nbytes == pytest.approx(shard * (28 + 2) + gb * whole + shard * (cast + 4 + 8), rel=1e-9)


def test_other_stacks_keep_adam_alone_and_2021_clips_only_when_needed() -> None:
    flops, nbytes, _ = _step(stack="torchtitan", fsdp=False, zero=1)
    assert nbytes == pytest.approx(flops / 12.0 * 30.0, rel=1e-9)
    flops, nbytes, zero = _step(stack="megatron-2021", sp=False)
    assert zero == 0  # every rank steps over all its parameters
    local = flops / 14.0  # Adam 12, the norm 2 (2021's clip scales only a norm above the limit)
    assert nbytes == pytest.approx(local * (30 + 2 + 6 + 4), rel=1e-9)


def test_the_report_names_it() -> None:
    kernels = build(None, ReplayOptions.from_mapping(SMALL)).stack["kernels"]
    assert kernels["grad_buffer"].endswith("normed and clip-scaled")
    old = build(None, ReplayOptions.from_mapping({**SMALL, "stack": "megatron-2021", "sp": False}))
    assert old.stack["kernels"]["grad_buffer"].endswith("normed")
    titan = build(None, ReplayOptions.from_mapping({**SMALL, "stack": "torchtitan"}))
    assert "grad_buffer" not in titan.stack["kernels"]
