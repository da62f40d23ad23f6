"""Repeated pipeline schedules (``--pp-rounds``) and FSDP2's gather / reduce timing
(``--no-fsdp-reshard``, ``--fsdp-defer-sync``): the passes and collectives each builds, and
the torchtitan table columns that set them (NeMo AutoModel's table)."""

from __future__ import annotations

import pytest

from tests.helpers import retarget
from tracesim.build.schedules import get_schedule, iteration_items
from tracesim.errors import InputError
from tracesim.options import ReplayOptions
from tracesim.pipeline.build import build
from tracesim.pipeline.published import table_rows, validate_rows

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


def test_fsdp_gathers_and_reduces_per_micro_batch_unless_deferred() -> None:
    ag, rs = "zero3.all_gather", "zero3.reduce_scatter"
    each = (_count(FSDP, ag, "fwd"), _count(FSDP, ag, "bwd"), _count(FSDP, rs))
    m = 4  # micro-batches per rank
    assert each[0] == each[1] == each[2] and each[0] % m == 0
    per_mb = each[0] // m
    kept = {**FSDP, "fsdp_reshard": False}
    assert (_count(kept, ag, "fwd"), _count(kept, ag, "bwd"), _count(kept, rs)) == (
        each[0], 0, each[2])
    defer = {**FSDP, "fsdp_defer_sync": True}
    assert (_count(defer, ag, "fwd"), _count(defer, ag, "bwd"), _count(defer, rs)) == (
        per_mb, 0, per_mb)
    base, deferred = retarget(FSDP), retarget(defer)
    assert deferred.breakdown["exposed_comm_s"]["dp"] <= base.breakdown["exposed_comm_s"]["dp"]
    # the gathered weights and unsharded gradients stay through the iteration
    assert deferred.memory_gib_per_gpu > base.memory_gib_per_gpu
    for key, value in (("fsdp_defer_sync", True), ("fsdp_reshard", False)):
        with pytest.raises(InputError, match=key):
            retarget({**FSDP, "fsdp": False, "stack": "megatron-core", key: value})


def test_automodel_rows_set_rounds_and_fsdp_timing(tmp_path) -> None:
    table = "benchmarks/published/automodel_h100.csv"
    rows = {r[5]: r[4] for r in table_rows([table])}
    assert len(rows) == 6
    dsv3 = next(o for label, o in rows.items() if "deepseek-v3" in label and "1024" in label)
    assert (dsv3["pp"], dsv3["vpp"], dsv3["dp"], dsv3["ep"], dsv3["micro_batch"]) == (4, 8, 256, 64, 1)
    assert dsv3["global_batch"] == 8192 and dsv3["pp_rounds"] == 4
    assert dsv3["stage_layers"] == (2,) * 29 + (1,) * 3  # as AutoModel splits 61 layers
    assert (dsv3["fsdp_reshard"], dsv3["fsdp_defer_sync"], dsv3["moe_dispatcher"]) == (
        False, True, "deepep")
    oss = next(o for label, o in rows.items() if "gpt-oss-120b" in label)
    assert "pp_rounds" not in oss and oss["recompute"] == "none" and oss["fsdp_reshard"]
    got = [r for r in validate_rows([table]) if "8 GPUs" in r.label]
    assert len(got) == 2 and all(r.predicted > 0 for r in got)
    bad = tmp_path / "bad.csv"
    text = open(table).read()
    bad.write_text(text.replace("DGX-H100,qwen3-30b-a3b,8,bf16,4,4,", "DGX-H100,qwen3-30b-a3b,8,bf16,4,3,"))
    with pytest.raises(InputError, match="row 5: mbs"):
        list(table_rows([bad]))
