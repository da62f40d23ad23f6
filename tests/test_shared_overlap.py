"""Shared experts beside the EP all-to-alls (``--moe-shared-expert-overlap``, Megatron-Core's
``moe_shared_expert_overlap``; tracesim/build/shared_overlap.py, docs/moe.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracesim.build.shared_overlap import why_not
from tracesim.catalog import load_model
from tracesim.pipeline.published import table_rows
from tracesim.specs.parallel import ParallelSpec

from .helpers import build, retarget
from .test_moe_build import TINY

REF = "../shared/reference/megatron_bridge_25_11.csv"


def _layer(b, layer: int, phase: str) -> pd.DataFrame:
    t = b.graph.tasks
    return t[(t["rank"] == 0) & (t["layer"] == layer) & (t["phase"] == phase)]


def _edges(b) -> set[tuple[int, int]]:
    e = b.graph.edges
    return set(zip(e["src"].tolist(), e["dst"].tolist(), strict=True))


def _id(x: pd.DataFrame, name: str) -> int:
    return int(x[x["name"] == name]["task_id"].iloc[0])


def test_shared_experts_move_beside_the_all_to_alls_and_do_not_wait_for_them() -> None:
    off = build(TINY, dp=2, ep=2, global_batch=2)
    on = build(TINY, dp=2, ep=2, global_batch=2, moe_shared_expert_overlap=True)
    fwd, bwd, edges = _layer(on, 1, "fwd"), _layer(on, 1, "bwd"), _edges(on)
    order = list(fwd["name"].astype(str))
    # Megatron-Core: fc1 + activation after the dispatch, fc2 after the combine
    assert order.index("moe.router") < order.index("moe.dispatch") < order.index("moe.shared.fc1") \
        < order.index("moe.shared.act") < order.index("moe.sort")
    assert order.index("moe.combine") < order.index("moe.shared.fc2") < order.index("moe.unpermute")
    for comm, side, main in (("moe.dispatch", "moe.shared.fc1", "moe.sort"),
                             ("moe.combine", "moe.shared.fc2", "moe.unpermute")):
        assert (_id(fwd, comm), _id(fwd, main)) in edges  # the routed path waits for it
        assert not any(d == _id(fwd, side) for _, d in edges)  # the shared experts do not
    border = list(bwd["name"].astype(str))
    assert border.index("moe.combine") < border.index("moe.shared.fc2") < border.index("moe.unsort")
    assert not any(d == _id(bwd, "moe.shared.fc2") for _, d in edges)
    # the same tasks, only moved: nothing added, nothing lost
    assert len(on.graph.tasks) == len(off.graph.tasks)
    assert sorted(_layer(off, 1, "fwd")["name"].astype(str)) == sorted(order)


def test_a_side_chain_ending_on_a_collective_is_joined_by_the_main_chain() -> None:
    """TP 2: the backward of the shared experts ends on their input's TP collective, on the
    side stream; the routed path goes on without it, and the MoE block's input gradient
    (``ln2``'s backward: Megatron-Core sums both branches' there) waits for it.
    The first shared task waits for nothing after the fork."""
    on = build(TINY, tp=2, sp=True, dp=2, ep=2, global_batch=2, moe_shared_expert_overlap=True)
    bwd, edges = _layer(on, 1, "bwd"), _edges(on)
    names = list(bwd["name"].astype(str))
    side = [i for i, n in enumerate(names) if n.startswith("moe.shared")]
    assert side == list(range(side[0], side[-1] + 1))  # one run, after the combine
    last, after = bwd.iloc[side[-1]], bwd.iloc[side[-1] + 1]
    assert last["kind"] == "coll" and after["name"] == "moe.unsort"
    waiting = [d for s_, d in edges if s_ == int(last["task_id"])]
    assert waiting == [_id(bwd, "ln2")]  # the MoE block's input gradient
    assert not any(d == int(bwd.iloc[side[0]]["task_id"]) for _, d in edges)
    on.graph.validate()


def test_the_overlap_hides_shared_expert_time_behind_the_all_to_alls() -> None:
    opts = {"model": "deepseek-moe-16b", "cluster": "h100x8", "tp": 1, "pp": 1, "dp": 8,
            "ep": 8, "micro_batch": 1, "global_batch": 8, "seq_len": 1024}
    off = retarget(opts, detail=True)
    on = retarget({**opts, "moe_shared_expert_overlap": True}, detail=True)
    assert on.iteration_time_s < off.iteration_time_s
    assert "moe_shared_expert_overlap" in on.to_dict()["stack"]["overlaps"]
    t = on.graph.tasks
    start, end = np.asarray(on.start_ns), np.asarray(on.end_ns)
    r0 = t[(t["rank"] == 0) & (t["layer"] == 1) & (t["phase"] == "fwd")]
    fc1 = int(r0[r0["name"] == "moe.shared.fc1"]["task_id"].iloc[0])
    disp = int(r0[r0["name"] == "moe.dispatch"]["task_id"].iloc[0])
    assert start[fc1] < end[disp]  # runs while the dispatch is in flight
    # it cannot gain more than the shared experts' own time
    shared = t[(t["rank"] == 0) & t["name"].astype(str).str.startswith("moe.shared")]
    shared_s = float((end[shared["task_id"]] - start[shared["task_id"]]).sum()) * 1e-9
    assert off.iteration_time_s - on.iteration_time_s <= shared_s


@pytest.mark.parametrize(("changes", "reason"), [
    ({"moe_dispatcher": "hybridep"}, "alltoall dispatcher"),
    ({"moe_a2a_overlap": True}, "--moe-a2a-overlap"),
    ({"recompute": "selective", "recompute_modules": ("shared_experts",)}, "recomputed"),
])
def test_megatron_core_conditions(changes: dict, reason: str) -> None:
    model = load_model("deepseek-v3")
    assert why_not(ParallelSpec(dp=8, ep=8), model) == ""
    assert reason in why_not(ParallelSpec(dp=8, ep=8, **changes), model)
    assert "no shared experts" in why_not(ParallelSpec(dp=8, ep=8), load_model("qwen3-30b-a3b"))


def test_pytorch_native_stacks_run_it_beside_any_dispatcher() -> None:
    """NeMo AutoModel's side stream runs the shared experts beside DeepEP's dispatch: on a
    PyTorch-native stack the dispatcher does not stop the option, and it hides time."""
    model = load_model("deepseek-v3")
    assert why_not(ParallelSpec(dp=8, ep=8, moe_dispatcher="deepep", stack="torchtitan"), model) == ""
    assert "alltoall" in why_not(ParallelSpec(dp=8, ep=8, moe_dispatcher="deepep",
                                              stack="megatron-core"), model)
    opts = {"model": "deepseek-moe-16b", "cluster": "h100x8", "dp": 8, "ep": 8, "fsdp": True,
            "stack": "torchtitan", "moe_dispatcher": "deepep", "micro_batch": 1,
            "global_batch": 8, "seq_len": 4096}
    off, on = retarget(opts), retarget({**opts, "moe_shared_expert_overlap": True})
    assert on.iteration_time_s < off.iteration_time_s
    assert not any("ignored" in w for w in on.warnings)


def test_ignored_with_a_warning_where_megatron_core_refuses() -> None:
    res = retarget({"model": "qwen3-30b-a3b", "cluster": "h100x8", "tp": 1, "pp": 1, "dp": 8,
                    "ep": 8, "micro_batch": 1, "global_batch": 8, "seq_len": 1024,
                    "moe_shared_expert_overlap": True})
    assert any("--moe-shared-expert-overlap ignored: qwen3-30b-a3b has no shared experts" in w
               for w in res.warnings)


def test_the_b200_deepseek_recipe_runs_it() -> None:
    """Megatron-Bridge's DeepSeek provider sets moe_shared_expert_overlap; the B200 row keeps
    the alltoall dispatcher and no EP overlap, which would turn it off."""
    rows = list(table_rows([REF], lambda label: "DGX-B200 deepseek-v3" in label))
    assert len(rows) == 1 and rows[0][4].get("moe_shared_expert_overlap") is True
    other = list(table_rows([REF], lambda label: "DGX-GB200 deepseek-v3" in label))
    assert other and all(not r[4].get("moe_shared_expert_overlap") for r in other)
