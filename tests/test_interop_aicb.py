"""SimAI / AICB workload files: parsing, replay on a tracesim cluster, round trips."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from tracesim.api import build_workload
from tracesim.catalog import load_cluster
from tracesim.engine.replay import replay
from tracesim.errors import InputError
from tracesim.interop.aicb import format_aicb, parse_aicb, read_aicb, write_aicb
from tracesim.interop.aicb_export import graph_to_aicb
from tracesim.interop.aicb_graph import aicb_to_graph
from tracesim.interop.chakra import export_chakra
from tracesim.interop.chakra_import import import_chakra
from tracesim.network.model import NetworkModel, collective_time_ns
from tracesim.options import ReplayOptions
from tracesim.pipeline import replay_graph

DATA = Path(__file__).resolve().parent / "data" / "interop"

# ------------------------------------------------------------------ a GPT-7B-style workload
# Written from the published format (header, count line, 12 columns per row; times in ns,
# sizes in bytes). GPT-7B dimensions: hidden 4096, 32 layers, sequence 2048, micro-batch 1,
# vocabulary 50304, bf16; Megatron TP 8 (column / row-parallel linears: an all-reduce of the
# 16 MiB activation after attention and MLP in the forward pass, and after the
# column-parallel linears in the backward pass), DP 2 (one gradient all-reduce per linear,
# in the weight-gradient column). Compute times are the linears' FLOPs (and 4 s^2 h / tp for
# flash attention) at an assumed 600 TFLOP/s per GPU.
H, L, S, V, TP, DP = 4096, 32, 2048, 50304, 8, 2
RATE = 600e12
ACT = S * H * 2


def _ns(flops: float) -> int:
    return int(round(flops / RATE * 1e9))


def gpt7b_text() -> str:
    qkv, core = 2 * S * H * 3 * H / TP, 4 * S * S * H / TP
    proj, fc = 2 * S * H * H / TP, 2 * S * H * 4 * H / TP
    head = 2 * S * H * V / TP
    rows = [("embedding_layer", 20000, "ALLREDUCE", ACT, 20000, "NONE", 0, 20000, "ALLREDUCE", V * H // TP * 2)]
    for _ in range(L):
        rows += [
            ("attention_column", _ns(qkv + core), "NONE", 0, _ns(qkv + 2 * core), "ALLREDUCE", ACT,
             _ns(qkv), "ALLREDUCE", 3 * H * H // TP * 2),
            ("attention_row", _ns(proj), "ALLREDUCE", ACT, _ns(proj), "NONE", 0, _ns(proj),
             "ALLREDUCE", H * H // TP * 2),
            ("mlp_column", _ns(fc), "NONE", 0, _ns(fc), "ALLREDUCE", ACT, _ns(fc), "ALLREDUCE",
             4 * H * H // TP * 2),
            ("mlp_row", _ns(fc), "ALLREDUCE", ACT, _ns(fc), "NONE", 0, _ns(fc), "ALLREDUCE",
             4 * H * H // TP * 2),
        ]
    rows.append(("final_column", _ns(head), "NONE", 0, _ns(head), "ALLREDUCE", ACT, _ns(head), "NONE", 0))
    head_line = (f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {TP} ep: 1 pp: 1 "
                 f"vpp: 1 ga: 1 all_gpus: {TP * DP} checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0")
    body = ["\t".join(str(x) for x in (r[0], -1, *r[1:], 100)) for r in rows]
    return "\n".join([head_line, str(len(rows)), *body]) + "\n"


@pytest.fixture(scope="module")
def gpt7b():
    w = parse_aicb(gpt7b_text(), "gpt7b.txt")
    return w, aicb_to_graph(w)


def test_gpt7b_collectives_per_layer(gpt7b):
    w, g = gpt7b
    assert len(w.rows) == 4 * L + 2 and w.dp == DP
    assert g.ranks == list(range(TP * DP))
    t = g.tasks[g.tasks["rank"] == 3]
    coll = t[t["kind"] == "coll"]
    for layer in range(L):
        rows = range(1 + 4 * layer, 5 + 4 * layer)
        mine = coll[coll["layer"].isin(rows)]
        assert (mine["group_kind"] == "tp").sum() == 4  # 2 forward + 2 input-gradient
        assert (mine["group_kind"] == "dp").sum() == 4  # one gradient all-reduce per linear
        assert set(mine["collective"]) == {"all_reduce"}
    assert len(coll) == 8 * L + 3  # + embedding (tp, dp) + final column (tp)
    tp_groups = {g.groups[i] for i in coll[coll["group_kind"] == "tp"]["group"]}
    dp_groups = {g.groups[i] for i in coll[coll["group_kind"] == "dp"]["group"]}
    assert tp_groups == {tuple(range(8))} and dp_groups == {(3, 11)}


def test_gpt7b_iteration_is_plausible(gpt7b):
    """Blocking TP all-reduces are exposed in full; gradient all-reduces overlap the backward
    pass, so the iteration lies between compute + TP and compute + TP + DP."""
    w, g = gpt7b
    cluster = load_cluster("h100x128")
    res = replay_graph(g, cluster).to_dict()
    it_ns = res["iteration_time_s"] * 1e9
    compute = sum(r.fwd_ns + r.ig_ns + r.wg_ns for r in w.rows)
    updates = sum(100 * sum(c.token != "NONE" for c in (r.fwd, r.ig, r.wg)) for r in w.rows)
    tp_one = collective_time_ns(cluster, "all_reduce", tuple(range(8)), ACT)
    n_tp = sum((r.fwd.token != "NONE") + (r.ig.token != "NONE") for r in w.rows)
    dp_total = sum(collective_time_ns(cluster, "all_reduce", (0, 8), r.wg.size_bytes)
                   for r in w.rows if r.wg.token != "NONE")
    lower = compute + n_tp * tp_one
    assert lower * 0.99 <= it_ns <= (lower + dp_total + updates) * 1.01
    assert 0.02 < res["iteration_time_s"] < 0.1
    bd = res["breakdown"]
    # every row's compute and the blocking process time after its collectives (the one after
    # a weight-gradient collective is that collective's own work, on the data-parallel lane)
    assert bd["compute_s"] * 1e9 == pytest.approx(compute + updates - sum(
        100 * (r.wg.token != "NONE") for r in w.rows), rel=1e-9)
    assert bd["exposed_comm_s"]["tp"] * 1e9 == pytest.approx(n_tp * tp_one, rel=0.02)
    # model FLOPs utilisation: 6 x params x tokens over the 16 GPUs at H100's bf16 peak
    params = L * 12 * H * H + V * H
    mfu = 6 * params * S * DP / (TP * DP) / res["iteration_time_s"] / 989.4e12
    assert 0.1 < mfu < 0.6


def test_aicb_round_trip_keeps_every_number(gpt7b, tmp_path):
    w, g = gpt7b
    back, warnings = graph_to_aicb(g)
    assert warnings == []
    assert format_aicb(back) == gpt7b_text()
    # through Chakra ET as well: AICB -> graph -> ET -> graph -> AICB
    export_chakra(g, tmp_path / "et")
    back2, _ = graph_to_aicb(import_chakra(tmp_path / "et"), rank=5)
    assert format_aicb(back2) == gpt7b_text()


def test_expert_parallel_groups():
    w = read_aicb(DATA / "moe_ep2.txt")
    g = aicb_to_graph(w)
    assert (w.tp, w.ep, w.dp) == (2, 2, 4)
    t = g.tasks[(g.tasks["rank"] == 0) & (g.tasks["kind"] == "coll")]
    members = {str(n).split(":", 1)[1] + "@" + str(n).split(".")[1].split("_")[0]: g.groups[grp]
               for n, grp in zip(t["name"], t["group"], strict=True)}
    assert members["ALLTOALL_EP@fwd"] == (0, 2)  # EP: same TP index, next TP group
    assert members["ALLREDUCE_DP_EP@wg"] == (0, 4)  # expert-data-parallel: every ep-th replica
    assert members["ALLREDUCE@wg"] == (0, 2, 4, 6)
    assert members["ALLGATHER@fwd"] == (0, 1)
    res = replay_graph(g, "h100x8").to_dict()
    assert res["iteration_time_s"] > sum(r.fwd_ns + r.ig_ns + r.wg_ns for r in w.rows) * 1e-9
    assert format_aicb(graph_to_aicb(g)[0]) == (DATA / "moe_ep2.txt").read_text()


def test_recompute_between_checkpoints():
    w = read_aicb(DATA / "recompute.txt")
    assert w.checkpoints == (1,) and w.checkpoint_initiates == (3,)
    g = aicb_to_graph(w)
    names = g.tasks[g.tasks["rank"] == 0]["name"].tolist()
    assert [n for n in names if n.startswith("recompute:") and n.endswith(".fwd")] == [
        "recompute:layer_a.fwd", "recompute:layer_b.fwd"]
    # without a network model collectives take their recorded 0 ns: compute plus process times
    compute = sum(r.fwd_ns + r.ig_ns + r.wg_ns for r in w.rows) + 2000 + 3000
    assert replay(g).makespan_ns == compute + 50 * 5
    assert format_aicb(graph_to_aicb(g)[0]) == (DATA / "recompute.txt").read_text()


def _bad(text: str, match: str, line: int) -> None:
    with pytest.raises(InputError, match=match) as e:
        parse_aicb(text, "w.txt")
    assert e.value.where == f"line {line}" and e.value.file == "w.txt"


def test_malformed_files_name_the_line():
    good = (DATA / "moe_ep2.txt").read_text()
    lines = good.splitlines()
    _bad(good.replace(" vpp: 1", ""), "misses field.*vpp", 1)
    _bad(good.replace("pp_comm: 0", ""), "misses field.*pp_comm", 1)
    _bad(good.replace("ep: 2", "ep: 2 foo: 3"), "unknown header field 'foo:'", 1)
    _bad(good.replace("ep: 2", "ep: 3"), "ep 3 does not divide", 1)
    _bad(good.replace("HYBRID_TRANSFORMER_FWD_IN_BCKWD", "DLRM"), "not supported", 1)
    cut = "\n".join(lines[:4] + ["\t".join(lines[4].split("\t")[:11])] + lines[5:]) + "\n"
    _bad(cut, "expected 12 columns .* got 11", 5)
    _bad(good.replace("ALLTOALL_EP\t524288\t6000\tALLREDUCE_DP_EP", "ALLTOALL_XX\t524288\t6000\tALLREDUCE_DP_EP"),
         "column 7 .*unknown comm type 'ALLTOALL_XX'", 5)
    _bad(good.replace("\t9000\tALLGATHER", "\tnine\tALLGATHER"), "column 3 .*expected an integer", 4)
    # a duration past int64 overflowed the graph's columns (an internal OverflowError)
    _bad(good.replace("\t9000\tALLGATHER", "\t99999999999999999999\tALLGATHER"),
         "column 3 .*at most 2\\^48", 4)
    _bad(good.replace("\n5\n", "\n6\n"), "announces 6 rows, the file has 5", 8)
    _bad(good.replace("\n5\n", "\n4\n"), "announces 4 rows, the file has 5", 7)


def test_builder_workload_to_aicb_and_back(tmp_path):
    """A built tracesim workload (tp 2, dp 2) written as AICB rows replays close to itself;
    the difference is what the format cannot say (the optimizer's wait for the gradient
    all-reduce), reported in the warnings. The TP overlaps are off here (their collectives
    run beside GEMM chunks, which rows cannot say: see the next test)."""
    opts = {"model": "gpt3-1.7b", "cluster": "h100x8", "tp": 2, "dp": 2, "global_batch": 2,
            "micro_batch": 1, "seq_len": 512, "tp_comm_overlap": False, "tp_bwd_overlap": False}
    g = build_workload(ReplayOptions.from_mapping(opts))
    cluster = load_cluster("h100x8")
    w, warnings = graph_to_aicb(g)
    assert (w.tp, w.dp, w.all_gpus) == (2, 2, 4)
    assert any("weight-gradient" in x for x in warnings)
    # every TP collective of rank 0 is a row's forward or input-gradient column
    t0 = g.tasks[(g.tasks["rank"] == 0) & (g.tasks["kind"] == "coll")]
    n_tp = int((t0["group_kind"] == "tp").sum())
    assert sum((r.fwd.token != "NONE") + (r.ig.token != "NONE") for r in w.rows) == n_tp
    compute = g.tasks[(g.tasks["rank"] == 0) & (g.tasks["kind"] == "gpu")]["dur_ns"].sum()
    assert sum(r.fwd_ns + r.ig_ns + r.wg_ns for r in w.rows) == compute
    a = replay(g, NetworkModel(cluster)).makespan_ns
    b = replay(aicb_to_graph(w), NetworkModel(cluster)).makespan_ns
    assert b <= a * 1.001  # only dependencies were dropped (and the parameter all-gathers)
    assert (a - b) / a < 0.15
    assert np.isfinite(a)


def test_tp_overlap_is_lost_in_aicb_rows():
    """With the megatron-core TP overlaps (the default) a TP collective runs beside a chunk of
    its GEMM, as a userbuffers transfer; an AICB row runs its collective before or after its
    compute, as an NCCL collective, so the round trip is slower, by at most the TP
    communication time the original hid when timed as NCCL collectives, and says so."""
    opts = {"model": "gpt3-1.7b", "cluster": "h100x8", "tp": 2, "dp": 2, "global_batch": 2,
            "micro_batch": 1, "seq_len": 512}
    g = build_workload(ReplayOptions.from_mapping(opts))
    cluster = load_cluster("h100x8")
    w, warnings = graph_to_aicb(g)
    said = [x for x in warnings if "non-blocking tp collective is written as a blocking one" in x]
    # one line per op, with how many of its instances were rewritten
    assert len(said) == len({x.split(":")[0] for x in said}) < 20
    assert sum(int(m.group(1)) if (m := re.search(r"\((\d+) times\)", x)) else 1
               for x in said) > 100
    r = replay(g, NetworkModel(cluster))
    b = replay(aicb_to_graph(w), NetworkModel(cluster)).makespan_ns
    assert r.makespan_ns < b
    # the same overlaps with NCCL collectives (no algorithm asked for)
    t = g.tasks
    nccl = dataclasses.replace(g, tasks=t.assign(algorithm=""))
    rn = replay(nccl, NetworkModel(cluster))
    tp0 = ((t["rank"] == 0) & (t["kind"] == "coll") & (t["group_kind"] == "tp")).to_numpy()
    tp_ns = int((rn.end_ns[tp0] - rn.start_ns[tp0]).sum())
    assert b <= rn.makespan_ns + tp_ns


def test_one_rank_symmetric_replay_matches_full(gpt7b):
    """Every rank runs the same rows: rank 0 alone, its collectives over the full groups,
    replays like all 16 (TP inside nodes, DP one NIC per rail: no shared links)."""
    w, g = gpt7b
    one = aicb_to_graph(w, one_rank=True)
    assert one.ranks == [0] and one.n_tasks * 16 == g.n_tasks
    full = replay_graph(g, "h100x128").to_dict()
    sym = replay_graph(one, "h100x128").to_dict()
    assert sym["gpus"] == 16
    assert sym["iteration_time_s"] == pytest.approx(full["iteration_time_s"], rel=0.01)
    assert format_aicb(graph_to_aicb(one)[0]) == gpt7b_text()


def test_an_aicb_file_is_written_with_its_suffix(tmp_path):
    """``--to aicb -o NAME`` writes ``NAME.txt``, the suffix replay and SimAI read it by."""
    w = read_aicb(DATA / "moe_ep2.txt")
    assert write_aicb(w, tmp_path / "w") == tmp_path / "w.txt"
    assert write_aicb(w, tmp_path / "v.txt") == tmp_path / "v.txt"
    assert read_aicb(tmp_path / "w.txt") == w
