"""Builder: per-rank communication volume per iteration against the textbook formulas, and
layout invariances with free communication."""

from __future__ import annotations

import pandas as pd
import pytest

from tracesim.build.builder import build_graph
from tracesim.engine.replay import replay
from tracesim.specs.model import ModelSpec
from tracesim.specs.parallel import ParallelSpec
from tracesim.template.analytic import first_principles_template

from .helpers import build, op_time

GPT = ModelSpec(name="t", family="gpt", layers=4, hidden=256, heads=8, vocab=1024, seq_len=128,
                kv_heads=8, ffn_hidden=1024, dtype="bf16")
LLAMA = ModelSpec(name="l", family="llama", layers=4, hidden=256, heads=8, vocab=1024, seq_len=128,
                  kv_heads=4, ffn_hidden=768, activation="swiglu", norm="rmsnorm",
                  tied_embeddings=False)
MOE = LLAMA.replace(name="m", family="moe", experts=4, top_k=2, moe_ffn_hidden=384)
EB = 2  # bf16


def rank_tasks(b, rank: int = 0) -> pd.DataFrame:
    t = b.graph.tasks
    return t[t["rank"] == rank]


def test_graph_is_valid_and_every_collective_is_complete() -> None:
    b = build(GPT, tp=2, pp=2, dp=2, global_batch=8, sp=True, recompute="selective")
    b.graph.validate()
    t = b.graph.tasks
    coll = t[t["kind"] == "coll"]
    sizes = coll.groupby("match_key")["rank"].nunique()
    group_size = coll.groupby("match_key")["group"].first().map(lambda g: len(b.graph.groups[g]))
    assert (sizes == group_size).all()
    p2p = t[t["kind"].isin(["send", "recv"])].groupby("match_key")["kind"].apply(sorted)
    assert all(v == ["recv", "send"] for v in p2p)


def test_megatron_tp_all_reduces_per_layer() -> None:
    m, t_ = 3, 2
    b = build(GPT, tp=t_, global_batch=m)
    x = rank_tasks(b)
    blk = x[(x["collective"] == "all_reduce") & (x["layer"] >= 0) & (x["group_kind"] == "tp")]
    # 2 forward (after attention and MLP) + 2 backward (inputs of QKV and fc1) per layer
    assert len(blk) == 4 * GPT.layers * m
    assert (blk["msg_bytes"] == m * 0 + 128 * 256 * EB).all()
    # full recomputation repeats the two forward all-reduces
    b = build(GPT, tp=t_, global_batch=m, recompute="full")
    x = rank_tasks(b)
    assert ((x["collective"] == "all_reduce") & (x["layer"] >= 0)).sum() == 6 * GPT.layers * m


def test_sequence_parallel_all_gather_reduce_scatter_volume() -> None:
    b = build(GPT, tp=4, sp=True, global_batch=2)
    x = rank_tasks(b)
    blk = x[(x["layer"] >= 0) & (x["group_kind"] == "tp")]
    ag = blk[blk["collective"] == "all_gather"]
    rs = blk[blk["collective"] == "reduce_scatter"]
    assert len(ag) == len(rs) == 4 * GPT.layers * 2
    assert (blk["collective"] == "all_reduce").sum() == 0
    # same bus volume as the all-reduces they replace: AG + RS of b*s*h each
    assert ag["msg_bytes"].sum() == rs["msg_bytes"].sum() == 8 * GPT.layers * 128 * 256 * EB


def _local_params(model: ModelSpec, tp: int) -> float:
    h, f, v, s = model.hidden, model.ffn_hidden, model.vocab, model.seq_len
    per_layer = (3 * h * h + 3 * h) / tp + h * h / tp + h + (h * f + f) / tp + h * f / tp + h + 4 * h
    return model.layers * per_layer + v * h / tp + s * h + 2 * h


@pytest.mark.parametrize("tp", [1, 2])
def test_dp_gradient_bytes_are_local_parameters(tp: int) -> None:
    b = build(GPT, tp=tp, dp=2, global_batch=4)
    x = rank_tasks(b)
    dp = x[(x["group_kind"] == "dp") & (x["collective"] == "all_reduce")]
    expected = _local_params(GPT, tp) * EB
    assert dp["msg_bytes"].sum() == pytest.approx(expected, rel=1e-6)
    if tp == 1:  # = all parameters x bytes
        assert dp["msg_bytes"].sum() == pytest.approx(GPT.params() * EB, rel=1e-6)


def test_dp_gradient_bytes_split_over_pipeline_stages() -> None:
    b = build(GPT.replace(tied_embeddings=False), pp=2, dp=2, global_batch=4)
    t = b.graph.tasks
    dp = t[(t["group_kind"] == "dp")].groupby("rank")["msg_bytes"].sum()
    model = GPT.replace(tied_embeddings=False)
    total = model.params() * EB
    # every stage reduces its own parameters once: the stages together hold the model once
    assert dp[0] + dp[2] == pytest.approx(total, rel=1e-6)
    assert dp[0] == pytest.approx(total / 2, rel=0.05)


def test_zero3_two_all_gathers_one_reduce_scatter() -> None:
    b = build(GPT, dp=2, zero=3, global_batch=2)
    x = rank_tasks(b)
    p = _local_params(GPT, 1) * EB
    ag = x[(x["collective"] == "all_gather") & (x["group_kind"] == "dp")]["msg_bytes"].sum()
    rs = x[(x["collective"] == "reduce_scatter") & (x["group_kind"] == "dp")]["msg_bytes"].sum()
    assert ag == pytest.approx(2 * p, rel=1e-6)
    assert rs == pytest.approx(p, rel=1e-6)
    assert (x["collective"] == "all_reduce").sum() == 0
    fsdp = rank_tasks(build(GPT, dp=2, fsdp=True, global_batch=2))
    assert fsdp["msg_bytes"].sum() == x["msg_bytes"].sum()


def test_zero1_reduce_scatter_then_all_gather() -> None:
    x = rank_tasks(build(GPT, dp=4, zero=1, global_batch=4))
    p = _local_params(GPT, 1) * EB
    assert x[x["collective"] == "reduce_scatter"]["msg_bytes"].sum() == pytest.approx(p, rel=1e-6)
    assert x[x["collective"] == "all_gather"]["msg_bytes"].sum() == pytest.approx(p, rel=1e-6)


def test_pipeline_sends_b_s_h_per_micro_batch_per_boundary() -> None:
    m = 4
    b = build(GPT.replace(tied_embeddings=False), pp=2, global_batch=m, micro_batch=2)
    t = b.graph.tasks
    act = 2 * 128 * 256 * EB
    s0 = t[(t["rank"] == 0) & (t["kind"] == "send")]
    s1 = t[(t["rank"] == 1) & (t["kind"] == "send")]
    assert len(s0) == len(s1) == m // 2
    assert (s0["msg_bytes"] == act).all() and (s1["msg_bytes"] == act).all()
    # with TP the activation is scattered over the TP ranks (Megatron's scatter/gather)
    b = build(GPT.replace(tied_embeddings=False), pp=2, tp=2, global_batch=2)
    t = b.graph.tasks
    sends = t[(t["kind"] == "send") & (t["phase"] == "fwd")]
    per_mb = sends.groupby("match_key")["msg_bytes"].sum()  # one key per TP rank and micro-batch
    assert sends["msg_bytes"].sum() == 2 * 128 * 256 * EB  # 2 micro-batches, b*s*h each
    assert (per_mb == 128 * 256 * EB // 2).all()


def test_expert_parallel_all_to_all_sizes() -> None:
    b = build(MOE, dp=2, ep=2, global_batch=2)
    x = rank_tasks(b)
    a2a = x[x["collective"] == "all_to_all"]
    # dispatch and combine, forward and backward, per MoE layer and micro-batch
    assert len(a2a) == 4 * MOE.layers
    assert (a2a["msg_bytes"] == 128 * MOE.top_k * 256 * EB).all()
    assert (a2a["group_kind"] == "ep").all()
    groups = {b.graph.groups[g] for g in a2a["group"]}
    assert groups == {(0, 1)}


def test_context_parallel_ring_volume() -> None:
    cp = 2
    b = build(LLAMA, cp=cp, global_batch=1)
    x = rank_tasks(b)
    sends = x[(x["kind"] == "send") & (x["group_kind"] == "cp")]
    kv = 2 * (128 // cp) * LLAMA.kv_heads * LLAMA.head_dim * EB  # K and V blocks
    fwd = sends[sends["phase"] == "fwd"]["msg_bytes"].sum()
    bwd = sends[sends["phase"] == "bwd"]["msg_bytes"].sum()
    assert fwd == (cp - 1) * kv * LLAMA.layers
    assert bwd == 2 * fwd  # keys/values and their gradients


def _step(model: ModelSpec, **kw: object) -> int:
    b = build(model, **kw)
    return replay(b.graph).makespan_ns


def test_dp1_and_dp2_same_step_time_with_free_communication() -> None:
    for model, kw in ((GPT, {"tp": 2, "pp": 2}), (MOE, {"ep": 1}), (LLAMA, {"cp": 2})):
        one = _step(model, dp=1, global_batch=4, **kw)
        two = _step(model, dp=2, global_batch=8, **kw)
        assert one == two, (model.name, kw)
    # ZeRO-3 shards the optimizer's work, so compare without the optimizer step
    tpl = first_principles_template(GPT).without(["optimizer"])
    steps = [replay(build_graph(GPT, ParallelSpec(dp=d, zero=3, global_batch=2 * d, seq_len=128),
                                tpl, op_time).graph).makespan_ns for d in (1, 2)]
    assert steps[0] == steps[1]


def test_representatives_replay_like_the_full_graph() -> None:
    par = ParallelSpec(tp=2, pp=2, dp=2, global_batch=8, seq_len=128, schedule="interleaved", vpp=2)
    tpl = first_principles_template(GPT)

    def ct(coll: str, kind: str, n: int, nbytes: int) -> int:
        return 1000 + nbytes // 1000

    full = build_graph(GPT, par, tpl, op_time, comm_time=ct)
    rep = build_graph(GPT, par, tpl, op_time, comm_time=ct, representatives=True)
    assert rep.graph.ranks == [0, 4]
    assert rep.graph.n_tasks * 4 == full.graph.n_tasks
    assert replay(full.graph).makespan_ns == replay(rep.graph).makespan_ns


def test_tp_plan_replicate_removes_tp_communication() -> None:
    par = ParallelSpec(tp=2, global_batch=1, seq_len=128, tp_plan=(("mlp.*", "replicate"),))
    b = build_graph(GPT, par, first_principles_template(GPT), op_time)
    x = rank_tasks(b)
    blk = x[(x["layer"] == 0) & (x["group_kind"] == "tp")]
    assert len(blk) == 2  # attention only: one forward, one backward all-reduce
    fc1 = x[(x["name"] == "mlp.fc1") & (x["phase"] == "fwd")]["flops"].iloc[0]
    assert fc1 == 2 * 128 * 256 * 1024  # not split


def test_uneven_stages_and_gradient_overlap() -> None:
    b = build(GPT, pp=2, global_batch=2, stage_layers=(1, 3))
    t = b.graph.tasks
    layers = t[t["layer"] >= 0].groupby("rank")["layer"].unique()
    assert sorted(layers[0]) == [0] and sorted(layers[1]) == [1, 2, 3]
    # DP buckets start before the backward pass has ended (overlap), unless switched off
    m = GPT.replace(layers=8)
    for overlap in (True, False):
        bb = build(m, dp=2, global_batch=2, bucket_params=200_000, dp_overlap=overlap)
        r = replay(bb.graph)
        x = bb.graph.tasks
        bwd_end = r.end_ns[(x["phase"] == "bwd").to_numpy() & (x["kind"] == "gpu").to_numpy()].max()
        first_ar = r.start_ns[(x["group_kind"] == "dp").to_numpy()].min()
        assert (first_ar < bwd_end) == overlap


def test_merged_compute_replays_the_same() -> None:
    par = ParallelSpec(tp=2, pp=2, dp=2, cp=2, global_batch=8, seq_len=128, schedule="interleaved",
                       vpp=2, recompute="selective", sp=True)
    tpl = first_principles_template(LLAMA)

    def ct(coll: str, kind: str, n: int, nbytes: int) -> int:
        return 1000 + nbytes // 1000

    plain = build_graph(LLAMA, par, tpl, op_time, comm_time=ct)
    merged = build_graph(LLAMA, par, tpl, op_time, comm_time=ct, merge_compute=True)
    assert merged.graph.n_tasks < 0.8 * plain.graph.n_tasks
    merged.graph.validate()
    assert replay(merged.graph).makespan_ns == replay(plain.graph).makespan_ns
    t = merged.graph.tasks
    assert t["dur_ns"].sum() == plain.graph.tasks["dur_ns"].sum()


def test_first_bucket_is_capped_like_pytorch_ddp() -> None:
    """``first_bucket_params``: the first gradient bucket (the last layers' gradients) closes at
    its own, smaller cap; the others at ``bucket_params``; the bytes add up either way."""
    m = GPT.replace(layers=8)

    def dp_msgs(**kw: object) -> list[int]:
        x = build(m, dp=2, global_batch=2, **kw).graph.tasks
        dp = x[(x["group_kind"] == "dp") & (x["rank"] == 0)]
        return dp["msg_bytes"].astype(int).tolist()

    one = dp_msgs(bucket_params=10**9)
    capped = dp_msgs(bucket_params=10**9, first_bucket_params=1_000)
    assert len(one) == 1 and len(capped) == 2
    assert sum(capped) == sum(one)
    # the epilogue's gradients alone exceed 1,000 parameters: the first bucket is just them
    assert capped[0] < capped[1]
