"""Repeated pipeline schedules (``--pp-rounds``) and FSDP2's gather / reduce timing
(``--no-fsdp-reshard``, ``--fsdp-defer-sync``): the passes and collectives each builds, and
the torchtitan table columns that set them (NeMo AutoModel's table)."""

from __future__ import annotations

import pytest

from tests.helpers import retarget
from tracesim.build.schedules import get_schedule, iteration_items
from tracesim.errors import InputError
from tracesim.network.collectives import find
from tracesim.network.collectives.dedup import kept_share, kept_share_round_robin
from tracesim.options import ReplayOptions
from tracesim.pipeline.build import build
from tracesim.pipeline.published import _rows, validate_rows

PIPE = {"model": "llama3-8b", "cluster": "h100x8", "pp": 4, "dp": 2, "global_batch": 32,
        "micro_batch": 1, "seq_len": 2048, "host_launch": False}
FSDP = {"model": "llama3-8b", "cluster": "h100x8", "dp": 8, "fsdp": True, "global_batch": 32,
        "micro_batch": 1, "seq_len": 2048, "stack": "torchtitan", "host_launch": False}


@pytest.mark.parametrize(("schedule", "vpp"), [("1f1b", 1), ("interleaved", 2), ("gpipe", 1)])
def test_rounds_repeat_the_schedule_over_consecutive_micro_batches(schedule: str, vpp: int) -> None:
    for stage in range(4):
        got = iteration_items(schedule, 4, stage, 16, vpp, 2)
        one = get_schedule(schedule)(4, stage, 8, vpp)
        assert got[:len(one)] == one
        assert [(i.kind, i.chunk, i.mb - 8) for i in got[len(one):]] == [tuple(i) for i in one]
        assert sorted((i.kind, i.chunk, i.mb) for i in got) == sorted(
            (i.kind, i.chunk, i.mb) for i in get_schedule(schedule)(4, stage, 16, vpp))


def test_each_schedule_run_pays_its_own_fill_and_drain() -> None:
    one, two, four = (retarget({**PIPE, "pp_rounds": n}) for n in (1, 2, 4))
    assert retarget(PIPE).iteration_time_s == one.iteration_time_s
    assert one.iteration_time_s < two.iteration_time_s < four.iteration_time_s
    assert one.breakdown["bubble_s"] < two.breakdown["bubble_s"] < four.breakdown["bubble_s"]
    assert one.breakdown["compute_s"] == pytest.approx(four.breakdown["compute_s"], rel=1e-6)
    # without a pipeline a run of the schedule is one micro-batch's forward and backward
    flat = {**PIPE, "pp": 1, "dp": 8, "global_batch": 64}
    assert retarget({**flat, "pp_rounds": 4}).iteration_time_s == retarget(flat).iteration_time_s
    with pytest.raises(InputError, match="pp_rounds"):
        retarget({**PIPE, "pp_rounds": 3})
    with pytest.raises(InputError, match="per schedule run"):  # 8 rounds of 2 on pp 4
        retarget({**PIPE, "schedule": "interleaved", "vpp": 2, "pp_rounds": 8})


def _count(opts: dict, name: str, phase: str | None = None) -> int:
    t = build(None, ReplayOptions.from_mapping(opts)).graph.tasks
    sel = t["name"].astype(str) == name
    if phase is not None:
        sel &= t["phase"].astype(str) == phase
    return int(sel.sum())


def test_fsdp_gathers_and_reduces_per_micro_batch_unless_kept_or_deferred() -> None:
    ag, rs = "zero3.all_gather", "zero3.reduce_scatter"
    each = (_count(FSDP, ag, "fwd"), _count(FSDP, ag, "bwd"), _count(FSDP, rs))
    m = 4  # micro-batches per rank
    assert each[0] == each[1] == each[2] and each[0] % m == 0
    per_mb = each[0] // m
    cases = {"fsdp_reshard": (False, (each[0], 0, each[2])),
             "fsdp_defer_sync": (True, (each[0], each[1], per_mb)),
             "fsdp_keep_gathered": (True, (per_mb, 0, each[2]))}
    for key, (value, want) in cases.items():
        opts = {**FSDP, key: value}
        assert (_count(opts, ag, "fwd"), _count(opts, ag, "bwd"), _count(opts, rs)) == want, key
    both = {**FSDP, "fsdp_defer_sync": True, "fsdp_keep_gathered": True}
    base, once = retarget(FSDP), retarget(both)
    assert once.breakdown["exposed_comm_s"]["dp"] <= base.breakdown["exposed_comm_s"]["dp"]
    # the gathered weights and unsharded gradients stay through the iteration
    assert once.memory_gib_per_gpu > retarget({**FSDP, "fsdp_defer_sync": True}).memory_gib_per_gpu
    assert retarget({**FSDP, "fsdp_defer_sync": True}).memory_gib_per_gpu > base.memory_gib_per_gpu
    for key, value in (("fsdp_defer_sync", True), ("fsdp_reshard", False),
                       ("fsdp_keep_gathered", True)):
        with pytest.raises(InputError, match=key):
            retarget({**FSDP, "fsdp": False, "stack": "megatron-core", key: value})


def test_round_robin_routing_sends_a_token_to_the_parts_its_expert_block_spans() -> None:
    assert kept_share_round_robin(128, 8, 8) == 1 / 8  # Qwen3 on EP 8: one rank per token
    assert kept_share_round_robin(256, 8, 64) == 2 / 8  # DeepSeek-V3 on EP 64: two ranks
    assert kept_share_round_robin(256, 8, 8) == 1 / 8  # ... on one node
    # 22 consecutive of 512 over 64 ranks of 8: three or four ranks (22 t mod 8 decides)
    assert kept_share_round_robin(512, 22, 64) == pytest.approx(3.5 / 22)
    assert kept_share_round_robin(8, 8, 8) == 1.0 == kept_share(8, 8, 8)
    assert kept_share_round_robin(128, 8, 8) < kept_share(128, 8, 8)
    rr = find("dedup:128:8:rr")
    assert rr is not None and rr.name == "dedup:128:8:rr"
    assert find("dedup:128:8:xx") is None
    opts = {"model": "qwen3-30b-a3b", "cluster": "h100x8", "ep": 8, "dp": 8, "fsdp": True,
            "stack": "torchtitan", "global_batch": 8, "seq_len": 4096, "moe_dispatcher": "deepep"}
    uniform, robin = retarget(opts), retarget({**opts, "moe_routing": "round-robin"})
    assert robin.breakdown["exposed_comm_s"]["ep"] < uniform.breakdown["exposed_comm_s"]["ep"] / 3
    # the alltoall dispatcher sends every copy whatever the routing
    a2a = {**opts, "moe_dispatcher": "alltoall"}
    assert retarget(a2a).iteration_time_s == retarget({**a2a, "moe_routing": "round-robin"}).iteration_time_s


def test_automodel_rows_set_rounds_routing_and_fsdp_timing(tmp_path) -> None:
    table = "benchmarks/published/automodel_h100.csv"
    rows = {r[5]: r[4] for r in _rows([table], None, True) if r[4] is not None}
    assert len(rows) == 9  # and Nemotron 3 Ultra, not shipped
    dsv3 = next(o for label, o in rows.items() if "deepseek-v3" in label and "1024" in label)
    assert (dsv3["pp"], dsv3["vpp"], dsv3["dp"], dsv3["ep"], dsv3["micro_batch"]) == (4, 8, 256, 64, 1)
    assert dsv3["global_batch"] == 8192 and dsv3["pp_rounds"] == 4
    assert dsv3["stage_layers"] == (2,) * 29 + (1,) * 3  # as AutoModel splits 61 layers
    assert (dsv3["fsdp_reshard"], dsv3["fsdp_defer_sync"], dsv3["fsdp_keep_gathered"]) == (
        False, True, True)
    assert (dsv3["moe_dispatcher"], dsv3["moe_routing"]) == ("deepep", "round-robin")
    oss = next(o for label, o in rows.items() if "gpt-oss-120b" in label)
    assert "pp_rounds" not in oss and oss["recompute"] == "none" and oss["fsdp_reshard"]
    llama = next(o for label, o in rows.items() if "llama3.1-70b" in label)
    assert (llama["cp"], llama["dp"], llama["grad_reduce_fp32"], llama["seq_len"]) == (2, 32, False, 8192)
    got = [r for r in validate_rows([table]) if " 8 GPUs" in r.label]
    assert len(got) == 3 and all(r.predicted > 0 for r in got)
    bad = tmp_path / "bad.csv"
    text = open(table).read()
    bad.write_text(text.replace("DGX-H100,qwen3-30b-a3b,8,bf16,4,4,", "DGX-H100,qwen3-30b-a3b,8,bf16,4,3,"))
    with pytest.raises(InputError, match="row 8: mbs"):
        list(_rows([bad], None, True))
    bad.write_text(text.replace("deepep,round-robin", "deepep,sticky", 1))
    assert any("routing" in str(r[6]) for r in _rows([bad], None, True) if r[4] is None)
