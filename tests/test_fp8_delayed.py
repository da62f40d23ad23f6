"""Delayed FP8 scaling reduces the amaxes of every FP8 module of a rank once per model chunk
and micro-batch in each pass, blocking, over the stage's TP x DP x CP ranks
(tracesim.build.fp8_delayed)."""

from __future__ import annotations

import numpy as np
import pytest

from tracesim.build.fp8_delayed import PREFIX, VALUES
from tracesim.options import ReplayOptions
from tracesim.pipeline.build import build
from tracesim.pipeline.run import predict
from tracesim.specs.parallel import ParallelSpec
from tracesim.specs.placement import STAGE_KIND, Placement

BASE = {"model": "llama3-8b", "cluster": "h100x128", "micro_batch": 1, "seq_len": 4096,
        "dtype": "fp8", "fp8_recipe": "delayed", "tp": 4, "pp": 2, "host_launch": False}


def _opts(**kw):
    opts = {**BASE, "dp": 2, "global_batch": 8, **kw}
    return ReplayOptions.from_mapping({k: v for k, v in opts.items() if v is not None})


def _tasks(**kw):
    graph = build(None, _opts(**kw), per_op=True).built.graph
    t = graph.tasks
    names = np.asarray(t["name"]).astype(str)
    lanes = graph.lanes.set_index("lane")["name"]
    return t, names, lanes[np.asarray(t["lane"])].to_numpy().astype(str)


def test_two_reductions_per_chunk_and_micro_batch_on_the_compute_stream() -> None:
    t, names, lanes = _tasks(vpp=2)
    sel = names == f"{PREFIX}.all_reduce"
    ranks = 4 * 2 * 2
    # 4 micro-batches, 2 chunks per stage, forward and backward, on every rank
    assert sel.sum() == ranks * 4 * 2 * 2
    assert set(lanes[sel]) == {"compute"}
    assert set(np.asarray(t["group_kind"])[sel]) == {"dp"}  # reported as data-parallel
    assert set(np.asarray(t["phase"])[sel]) == {"fwd", "bwd"}
    for kernel in ("cat", "update"):
        assert (names == f"{PREFIX}.{kernel}").sum() == sel.sum()
    # 16 layers a stage (both chunks'), 4 FP8 linears a layer (qkv, proj, fc1, fc2): 3 values
    # each forward, 2 backward, 4 bytes a value
    msg = np.asarray(t["msg_bytes"])[sel]
    phase = np.asarray(t["phase"])[sel]
    assert set(msg[phase == "fwd"]) == {4 * VALUES["fwd"] * 16 * 4}
    assert set(msg[phase == "bwd"]) == {4 * VALUES["bwd"] * 16 * 4}


@pytest.mark.parametrize("kw", [{"fp8_recipe": "current"}, {"dtype": "bf16", "fp8_recipe": None}])
def test_none_without_delayed_scaling(kw: dict) -> None:
    _, names, _ = _tasks(**kw)
    assert not np.char.startswith(names, PREFIX).any()


def test_the_reduction_spans_the_stage_and_slows_with_its_size() -> None:
    small = _tasks()
    big = _tasks(dp=4, global_batch=16)
    dur = [np.asarray(t["dur_ns"])[n == f"{PREFIX}.all_reduce"] for t, n, _ in (small, big)]
    # 8 ranks in one node against 16 over 2 nodes: NCCL's latency grows with the nodes
    assert 5_000 < dur[0].min() and dur[0].max() < dur[1].min() < 200_000


def test_the_blocking_reductions_lengthen_the_step_by_their_time(monkeypatch) -> None:
    # one stage: every reduction is on the compute stream's critical path
    opts = _opts(pp=1, dp=4, global_batch=16)
    t, names, _ = _tasks(pp=1, dp=4, global_batch=16)
    rank0 = np.asarray(t["rank"]) == 0
    added = np.asarray(t["dur_ns"])[rank0 & np.char.startswith(names, PREFIX)].sum() / 1e9
    with_them = predict(None, opts).iteration_time_s
    monkeypatch.setattr("tracesim.build.fp8_delayed.applies", lambda par: False)
    without = predict(None, opts).iteration_time_s
    assert added > 0
    assert with_them - without == pytest.approx(added, rel=0.05)


def test_the_stage_group_holds_every_rank_of_a_stage() -> None:
    par = ParallelSpec(tp=2, cp=2, dp=2, pp=2)
    groups = Placement(par).groups(STAGE_KIND)
    assert groups == [tuple(range(8)), tuple(range(8, 16))]


def test_a_fully_recomputed_layer_reduces_the_forward_amaxes_again() -> None:
    # Transformer Engine's checkpoint reruns the layer in an FP8 region of its own
    t, names, _ = _tasks(recompute="full")
    sel = names == f"{PREFIX}.all_reduce"
    phase, msg = np.asarray(t["phase"])[sel], np.asarray(t["msg_bytes"])[sel]
    fwd_bytes = 4 * VALUES["fwd"] * 16 * 4
    ranks, micro, layers = 4 * 2 * 2, 4, 16
    assert (phase == "fwd").sum() == ranks * micro  # one chunk a stage
    bwd = msg[phase == "bwd"]
    assert (bwd == fwd_bytes).sum() == ranks * micro * layers
    assert (bwd == 4 * VALUES["bwd"] * 16 * 4).sum() == ranks * micro
    _, names, _ = _tasks(recompute="full", recompute_layers=2)
    assert (names == f"{PREFIX}.all_reduce").sum() == ranks * micro * (1 + 1 + 2)


def test_tp_only_amax_reduction_stays_in_the_replica() -> None:
    t, names, _ = _tasks(dp=4, global_batch=16, fp8_amax_tp_only=True)
    sel = names == f"{PREFIX}.all_reduce"
    assert set(np.asarray(t["group_kind"])[sel]) == {"tp"}
    dur = np.asarray(t["dur_ns"])[sel]
    t2, n2, _ = _tasks(dp=4, global_batch=16)
    stage = np.asarray(t2["dur_ns"])[n2 == f"{PREFIX}.all_reduce"]
    # the 4 TP ranks of one node against the 16 ranks of the stage over two nodes
    assert dur.max() < stage.min()
    par = ParallelSpec(tp=2, cp=2, dp=2, pp=2)
    assert Placement(par).groups("tpcp")[:2] == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_tp_only_amax_reduction_needs_delayed_scaling() -> None:
    from tracesim.errors import InputError
    with pytest.raises(InputError, match="fp8_amax_tp_only"):
        _tasks(fp8_recipe="current", fp8_amax_tp_only=True)


def test_the_report_names_the_amax_group() -> None:
    from tracesim.api import replay
    small = {"model": "llama3-8b", "cluster": "h100x8", "tp": 4, "dp": 2, "micro_batch": 1,
             "global_batch": 8, "seq_len": 1024, "dtype": "fp8"}
    stage = replay(**small, fp8_recipe="delayed").to_dict()["stack"]["fp8"]
    tp = replay(**small, fp8_recipe="delayed", fp8_amax_tp_only=True).to_dict()["stack"]["fp8"]
    assert (stage["amax_group"], tp["amax_group"]) == ("tp x dp x cp", "tp x cp")
    assert "amax_group" not in replay(**small, fp8_recipe="current").to_dict()["stack"]["fp8"]


def test_a_table_row_may_say_tp_only_amax_red(tmp_path) -> None:
    from tracesim.errors import InputError
    from tracesim.pipeline.published import table_rows
    head = "system,model,gpus,precision,gbs,mbs,seq_len,fsdp,tp,pp,cp,vp,ep,ga,step_time_s,tp_only_amax_red"
    table = tmp_path / "runs.csv"
    table.write_text(f"{head}\nDGX-H100,llama3-8b,16,fp8-ds,16,1,4096,0,4,1,1,,1,4,1.0,true\n"
                     f"DGX-H100,llama3-8b,16,fp8-cs,16,1,4096,0,4,1,1,,1,4,1.0,true\n"
                     f"DGX-H100,llama3-8b,16,fp8-ds,16,1,4096,0,4,1,1,,1,4,1.0,\n")
    opts = [o for *_, o, _, _ in table_rows([table], None)]
    assert opts[0]["fp8_amax_tp_only"] is True
    assert "fp8_amax_tp_only" not in opts[1] and "fp8_amax_tp_only" not in opts[2]
    table.write_text(f"{head}\nDGX-H100,llama3-8b,16,fp8-ds,16,1,4096,0,4,1,1,,1,4,1.0,maybe\n")
    with pytest.raises(InputError, match="row 2: tp_only_amax_red"):
        list(table_rows([table], None))
