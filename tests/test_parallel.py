"""ParallelSpec validation, CLI-option defaults and Megatron-style group placement."""

from __future__ import annotations

import pytest

from tracesim.errors import InputError
from tracesim.specs.layout_options import parallel_from_options
from tracesim.specs.model import ModelSpec
from tracesim.specs.parallel import (
    ParallelSpec,
    default_vpp,
    validate_layout,
)
from tracesim.specs.placement import Placement

GPT = ModelSpec(name="t", family="gpt", layers=8, hidden=256, heads=8, vocab=1000, seq_len=128,
                kv_heads=8, ffn_hidden=1024)
MOE = GPT.replace(name="m", family="moe", experts=4, top_k=2, moe_ffn_hidden=512)


@pytest.mark.parametrize(
    ("par", "gpus", "words"),
    [
        (ParallelSpec(tp=2, pp=2, dp=2, global_batch=8), 16, ["tp 2", "pp 2", "dp 2", "8 GPUs", "16"]),
        (ParallelSpec(tp=3, global_batch=1), None, ["heads 8", "tp 3"]),
        (ParallelSpec(pp=16, global_batch=16), None, ["layers 8", "pp 16"]),
        (ParallelSpec(pp=3, global_batch=3), None, ["layers 8", "not divisible", "pp 3"]),
        (ParallelSpec(dp=2, micro_batch=3, global_batch=8), None, ["global batch 8", "micro-batch 3", "dp 2"]),
        (ParallelSpec(pp=2, vpp=2, schedule="interleaved", global_batch=3), None, ["micro-batches (3)", "pp 2"]),
        (ParallelSpec(cp=3, global_batch=1, seq_len=128), None, ["seq_len 128", "cp"]),
        (ParallelSpec(ep=2, global_batch=1), None, ["ep 2", "experts"]),
        (ParallelSpec(pp=2, stage_layers=(3, 4), global_batch=2), None, ["sum to 7", "8 layers"]),
        (ParallelSpec(zero=2, fsdp=True, global_batch=1), None, ["fsdp", "zero 2"]),
    ],
)
def test_impossible_layouts_name_the_numbers(par: ParallelSpec, gpus: int | None, words: list[str]) -> None:
    with pytest.raises(InputError) as exc:
        validate_layout(GPT, par, gpus)
    msg = str(exc.value)
    for w in words:
        assert w in msg, (w, msg)


def test_moe_expert_split_and_ep_within_dp() -> None:
    validate_layout(MOE, ParallelSpec(dp=4, ep=4, global_batch=4), 4)
    with pytest.raises(InputError, match="experts 4 are not divisible by ep 3"):
        validate_layout(MOE, ParallelSpec(dp=3, ep=3, global_batch=3), 3)
    with pytest.raises(InputError, match="ep 4 must divide dp 2"):
        validate_layout(MOE, ParallelSpec(dp=2, ep=4, global_batch=2), 2)


def test_uneven_stage_split_is_accepted() -> None:
    validate_layout(GPT, ParallelSpec(pp=2, stage_layers=(3, 5), global_batch=2), 2)


def test_options_fill_dp_from_the_cluster_and_pick_interleaving_depth() -> None:
    par = parallel_from_options({"tp": 2, "pp": 2, "global_batch": 64, "schedule": "interleaved"}, GPT, 16)
    assert (par.dp, par.num_micro, par.vpp, par.schedule) == (4, 16, 2, "interleaved")
    # one stage: nothing to interleave
    par = parallel_from_options({"schedule": "interleaved"}, GPT, 4)
    assert (par.schedule, par.vpp) == ("1f1b", 1)
    # MoE with TP needs sequence parallelism (Megatron-core)
    assert parallel_from_options({"tp": 2}, MOE, 2).sp
    assert not parallel_from_options({"tp": 2, "sp": False}, MOE, 2).sp
    with pytest.raises(InputError, match="not divisible by tp 3"):
        parallel_from_options({"tp": 3}, GPT, 16)
    assert default_vpp(24, 2) == 2 and default_vpp(105, 35) == 3 and default_vpp(7, 7) == 1


def test_placement_orders_tp_cp_dp_pp() -> None:
    pl = Placement(ParallelSpec(tp=2, cp=2, dp=2, pp=2, global_batch=2, seq_len=128))
    assert pl.groups("tp")[:2] == [(0, 1), (2, 3)]
    assert pl.groups("cp")[0] == (0, 2)
    assert pl.groups("dp")[0] == (0, 4)
    assert pl.groups("pp")[0] == (0, 8)
    assert pl.groups("dpcp")[0] == (0, 2, 4, 6)
    c = pl.coord(13)
    assert (c.tp, c.cp, c.dp, c.pp) == (1, 0, 1, 1)
    assert pl.rank(1, 0, 1, 1) == 13
    assert pl.next_stage_rank(5) == 13 and pl.prev_stage_rank(5) == 13
    assert pl.representatives() == [0, 8]
    # every rank is in exactly one group of each kind
    for kind in ("tp", "cp", "dp", "pp", "dpcp"):
        members = sorted(r for g in pl.groups(kind) for r in g)
        assert members == list(range(16)), kind


def test_expert_groups_are_consecutive_dp_ranks() -> None:
    pl = Placement(ParallelSpec(tp=2, dp=4, ep=2, global_batch=4))
    assert pl.groups("ep")[:2] == [(0, 2), (1, 3)]
    assert pl.groups("edp")[0] == (0, 4)
    assert pl.group_of("ep", 6) == (4, 6)
