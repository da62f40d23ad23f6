"""MoE parallel folding (``--etp``): the routed experts use ETP x EP x EDP ranks of each
pipeline stage, as Megatron-Core's expert rank generator forms them (docs/moe.md)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tracesim.catalog import load_model
from tracesim.errors import InputError
from tracesim.pipeline.published import bridge_options
from tracesim.pipeline.recipes import find_recipe
from tracesim.report.memory import layer_activation_bytes
from tracesim.specs.layout_options import parallel_from_options
from tracesim.specs.parallel import ParallelSpec, validate_layout
from tracesim.specs.placement import Placement

from .helpers import build, retarget
from .test_moe_build import TINY, rank0

ROOT = Path(__file__).resolve().parents[1]
EB = 2  # bf16
T = 128  # tokens per micro-batch of the TINY layouts (seq_len 128, micro-batch 1)
WIDE = dataclasses.replace(TINY, experts=64)


@pytest.mark.parametrize("kw", [
    {"tp": 2, "dp": 16, "ep": 32, "etp": 1, "sp": True},  # the H100 Qwen3 235B stage
    {"tp": 2, "dp": 4, "ep": 4, "etp": 2, "sp": True},
    {"tp": 1, "dp": 8, "ep": 4, "etp": 2},  # expert TP wider than TP
    {"tp": 2, "cp": 2, "dp": 2, "ep": 8, "etp": 1, "sp": True},  # EP over TP, CP and DP
])
def test_folded_layouts_are_accepted(kw: dict) -> None:
    validate_layout(WIDE, ParallelSpec(seq_len=128, global_batch=kw["dp"], **kw))


@pytest.mark.parametrize(("kw", "where", "needle"), [
    ({"tp": 2, "dp": 16, "ep": 32, "sp": True}, "ep", "--etp"),  # not folded: ep | dp
    ({"tp": 2, "dp": 4, "ep": 8, "etp": 2, "sp": True}, "etp", "--ep 8 x --etp 2 = 16"),
    ({"tp": 2, "dp": 4, "ep": 8, "etp": 1}, "etp", "--sp"),  # ETP != TP needs SP with TP
    ({"tp": 1, "dp": 8, "ep": 8, "etp": 128}, "etp", "moe_ffn_hidden"),
])
def test_bad_folded_layouts_name_the_option(kw: dict, where: str, needle: str) -> None:
    with pytest.raises(InputError) as err:
        validate_layout(WIDE, ParallelSpec(seq_len=128, global_batch=kw["dp"], **kw))
    assert err.value.where == where and needle in err.value.message


def test_etp_on_a_dense_model_is_an_error() -> None:
    dense = load_model("llama3-8b")
    with pytest.raises(InputError, match="etp 2 > 1 needs a model with experts"):
        validate_layout(dense, ParallelSpec(tp=2, dp=2, etp=2, sp=True, global_batch=2))


def test_cli_exits_2_naming_etp() -> None:
    p = subprocess.run([sys.executable, "-m", "tracesim.cli", "replay", "--model", "qwen3-30b-a3b",
                        "--cluster", "h100x8", "--tp", "2", "--ep", "8", "--etp", "2"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr
    assert "etp" in lines[0] and "--ep 8" in lines[0]


def test_folded_groups_follow_megatrons_expert_rank_order() -> None:
    """Stage-local rank l = e_t + etp (e_e + ep e_d): ETP fastest, then EP, then EDP."""
    pl = Placement(ParallelSpec(tp=2, dp=4, pp=2, ep=4, etp=1, sp=True))
    assert pl.groups("ep") == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)]
    assert pl.groups("edp")[:4] == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert pl.groups("etp")[:2] == [(0,), (1,)]
    assert [pl.coord(r).ep for r in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    wide = Placement(ParallelSpec(tp=1, dp=8, ep=2, etp=2))
    assert wide.groups("etp") == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert wide.groups("ep") == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert wide.groups("edp") == [(0, 4), (1, 5), (2, 6), (3, 7)]
    # cp 1 and etp = tp: the folded order is tracesim's EP-inside-DP order
    for kw in ({"tp": 2, "dp": 8, "pp": 2, "ep": 4}, {"tp": 4, "dp": 2, "ep": 2}):
        old, new = Placement(ParallelSpec(**kw)), Placement(ParallelSpec(etp=kw["tp"], **kw))
        for kind in ("ep", "edp", "etp", "tp", "dpcp"):
            assert old.groups(kind) == new.groups(kind), kind


def test_etp_equal_to_tp_builds_the_same_graph() -> None:
    kw = {"tp": 2, "sp": True, "dp": 4, "ep": 4, "global_batch": 8, "zero": 1}
    a, b = build(TINY, **kw), build(TINY, etp=2, **kw)
    pd.testing.assert_frame_equal(a.graph.tasks, b.graph.tasks)
    assert a.graph.groups == b.graph.groups
    assert (a.stage_params, a.stage_expert_params) == (b.stage_params, b.stage_expert_params)


def test_etp_equal_to_tp_keeps_the_iteration_time() -> None:
    opts = {"model": "qwen3-30b-a3b", "cluster": "h100x8", "tp": 2, "ep": 4, "global_batch": 8,
            "seq_len": 1024, "recompute": "full"}
    assert retarget({**opts, "etp": 2}).iteration_time_s == retarget(opts).iteration_time_s


def test_etp_1_dispatches_each_ranks_own_tokens_without_expert_tp() -> None:
    """TP 2 with sequence parallelism and ETP 1: a rank dispatches its T/2 tokens to the EP
    group spanning the TP and DP ranks, its experts run them with whole weights, and no
    expert-TP all-gather / reduce-scatter runs; expert gradients are reduced over EDP."""
    tp, dp, ep = 2, 4, 4
    b = build(TINY, tp=tp, sp=True, dp=dp, ep=ep, etp=1, global_batch=dp, zero=1)
    x = rank0(b)
    moe_layers = sum(TINY.moe_layer(i) for i in range(TINY.layers))
    a2a = x[x["collective"] == "all_to_all"]
    assert len(a2a) == 4 * moe_layers
    assert (a2a["msg_bytes"] == T // tp * TINY.top_k * TINY.hidden * EB).all()
    assert {b.graph.groups[g] for g in a2a["group"]} == {(0, 1, 2, 3)}
    names = set(x["name"].astype(str))
    assert not {"moe.fc1.tp_f", "moe.combine.tp_g"} & names
    ef, h = TINY.moe_ffn_hidden, TINY.hidden
    fc1 = x[(x["name"] == "moe.fc1") & (x["phase"] == "fwd")]["flops"]
    assert (fc1 == 2 * 2 * (T // tp * TINY.top_k) * h * ef).all()  # gate and up, whole width
    assert b.stage_expert_params == (moe_layers * TINY.experts // ep * 3 * h * ef,)
    grads = x[x["name"] == "dp.reduce_scatter"]
    edp = tp * dp // (ep * 1)
    assert (0, 4) in {b.graph.groups[g] for g in grads["group"]} and edp == 2


def test_etp_above_tp_gathers_over_the_expert_group() -> None:
    """TP 1, ETP 2: the two ETP ranks hold different tokens; each rank's experts run both
    ranks' routed tokens on half of each expert's width."""
    b = build(TINY, dp=4, ep=2, etp=2, global_batch=4)
    x = rank0(b)
    ag = x[(x["name"] == "moe.fc1.tp_f") & (x["phase"] == "fwd")]
    assert len(ag) == sum(TINY.moe_layer(i) for i in range(TINY.layers))
    assert (ag["msg_bytes"] == 2 * T * TINY.top_k * TINY.hidden * EB).all()
    assert {b.graph.groups[g] for g in ag["group"]} == {(0, 1)}
    fc1 = x[(x["name"] == "moe.fc1") & (x["phase"] == "fwd")]["flops"]
    assert (fc1 == 2 * 2 * (2 * T * TINY.top_k) * TINY.hidden * TINY.moe_ffn_hidden / 2).all()


def test_a_small_folded_layout_replays() -> None:
    """EP 8 over TP 2 x DP 4 (ETP 1) against EP 4 with the experts split over TP."""
    opts = {"model": "qwen3-30b-a3b", "cluster": "h100x8", "tp": 2, "global_batch": 8,
            "seq_len": 1024, "recompute": "full"}
    folded = retarget({**opts, "ep": 8, "etp": 1}).to_dict()
    assert folded["parallel"]["etp"] == 1 and folded["iteration_time_s"] > 0
    assert folded["breakdown"]["exposed_comm_s"]["ep"] > 0


def test_the_h100_qwen3_235b_row_folds_ep_over_tp_and_dp() -> None:
    """The recipe's expert_tensor_parallel_size=1 reaches the row's options, whose layout
    (tp 2 x dp 16 = 32 ranks per stage, ep 32) is now valid."""
    row = {"system": "DGX-H100", "model": "qwen3-235b-a22b", "gpus": "256", "precision": "fp8-cs",
           "gbs": "2048", "mbs": "1", "seq_len": "4096", "fsdp": "0", "tp": "2", "pp": "8",
           "cp": "1", "vp": "4", "ep": "32"}
    opts = bridge_options(row, Path("rows.csv"), 0)
    assert opts["etp"] == 1
    run = find_recipe("DGX-H100", "qwen3-235b-a22b", "fp8-cs")
    assert run is not None and run.expert_tp == 1
    model = load_model("qwen3-235b-a22b")
    given = {k: v for k, v in opts.items() if k not in ("model", "cluster", "stack", "template")}
    par = parallel_from_options(given, model, 256)
    validate_layout(model, par, 256)
    assert (par.ep, par.expert_tp, par.edp) == (32, 1, 1)
    assert find_recipe("DGX-H100", "llama3-70b", "fp8-cs").expert_tp is None  # type: ignore[union-attr]


def test_memory_counts_the_ranks_own_routed_tokens_with_etp_1() -> None:
    """TP 2 (SP), ETP 1: the experts' input holds the rank's T/2 routed copies, not the T
    gathered over TP; the expert features are T/2 tokens at full width = T at half width."""
    par = ParallelSpec(tp=2, sp=True, dp=4, ep=4, seq_len=128, global_batch=4)
    layer = 1  # a MoE layer of TINY
    base = layer_activation_bytes(TINY, par, layer, flash=True)
    folded = layer_activation_bytes(TINY, par.replace(etp=1), layer, flash=True)
    assert base - folded == pytest.approx(128 * TINY.hidden * TINY.top_k)  # 2 bytes x sbhk/2
    assert par.replace(etp=1).expert_token_split == 2.0 and par.expert_token_split == 1.0
