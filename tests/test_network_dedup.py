"""The deduplicated all-to-all of DeepEP / HybridEP (``dedup:E:K``) and ``--moe-dispatcher``."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from tracesim.catalog import load_cluster
from tracesim.cli import cli as main
from tracesim.errors import InputError
from tracesim.network.collectives import find
from tracesim.network.collectives.dedup import algorithm_name, kept_share
from tracesim.network.model import NetworkModel, collective_time_ns

MIB = 2**20


@pytest.mark.parametrize("experts, top_k, parts", [(128, 8, 8), (128, 8, 4), (256, 8, 64), (128, 4, 2)])
def test_kept_share_is_the_mean_of_random_routing(experts: int, top_k: int, parts: int) -> None:
    """The closed form against routing drawn at random (K distinct experts per token, experts
    split evenly over the parts): the mean distinct parts per token over K."""
    rng = np.random.default_rng(0)
    tokens = 20000
    picks = np.argsort(rng.random((tokens, experts)), axis=1)[:, :top_k]
    part_of = picks // (experts // parts)
    distinct = np.array([len(set(row)) for row in part_of])
    assert kept_share(experts, top_k, parts) == pytest.approx(distinct.mean() / top_k, rel=0.01)
    assert kept_share(experts, top_k, experts) == 1.0  # one expert per part: nothing merges


def test_one_node_sends_a_token_once_per_rank() -> None:
    """Inside one node the all-to-all moves the kept share of the copies: a large message
    takes that share of the plain all-to-all's time."""
    c = load_cluster("h100x8")
    direct = collective_time_ns(c, "all_to_all", 8, 256 * MIB, "direct")
    dedup = collective_time_ns(c, "all_to_all", 8, 256 * MIB, algorithm_name(128, 8))
    assert dedup / direct == pytest.approx(kept_share(128, 8, 8), rel=0.02)


@pytest.mark.parametrize("ranks", [16, 32, 64])
def test_across_nodes_the_nic_carries_one_copy_per_node(ranks: int) -> None:
    """DeepSeek-V3's routing (256 experts, top 8) over 2-8 nodes of 8 H100s: the network
    carries a token once per remote node, at the NIC's rate. DeepEP's normal kernels reach
    43-58 GB/s of such traffic per H800 on 400 Gb/s NICs at EP 16-64 (deepseek-ai/DeepEP
    docs/legacy.md); the model gives 0.94 x 50 GB/s (the spec's direct efficiency)."""
    c = load_cluster("h100x128")
    msg = 256 * MIB
    nodes = ranks // 8
    t = collective_time_ns(c, "all_to_all", ranks, msg, algorithm_name(256, 8)) / 1e9
    rdma = msg * kept_share(256, 8, nodes) * (nodes - 1) / nodes
    assert 43e9 <= rdma / t <= 58e9
    assert t < collective_time_ns(c, "all_to_all", ranks, msg, "direct") / 1e9


def test_names_and_fallbacks() -> None:
    """``dedup:E:K`` parses into a registered variant; bad ones are unknown; a group spread
    unevenly over nodes takes the model's next choice (the direct all-to-all)."""
    assert find("dedup:128:8") is find("dedup:128:8") is not None
    assert find("dedup:128:0") is None and find("dedup:x:8") is None and find("ring:3") is None
    c = load_cluster("h100x128")
    model = NetworkModel(c)
    assert model.compiled("all_to_all", tuple(range(12)), MIB, "dedup:128:8").algorithm == "direct"
    assert model.compiled("all_to_all", tuple(range(16)), MIB, "dedup:128:8").algorithm == "dedup:128:8"
    with pytest.raises(ValueError, match="unknown algorithm"):
        model.compiled("all_to_all", tuple(range(16)), MIB, "dedup:1:8")
    NetworkModel(c, {"all_to_all": "dedup:128:8"})  # a variant is a valid --algo choice
    with pytest.raises(InputError):
        NetworkModel(c, {"all_to_all": "dedup:"})


def test_the_dispatcher_reaches_the_graph(tmp_path) -> None:
    """``--moe-dispatcher deepep`` marks the EP all-to-alls with the model's routing and drops
    the alltoall dispatcher's sorts; the replay is faster across nodes; a bad value is exit 2."""
    from tracesim.options import ReplayOptions
    from tracesim.pipeline.run import predict

    base = {"model": "qwen3-30b-a3b", "cluster": "h100x128", "ep": 16, "dp": 16, "micro_batch": 1,
            "global_batch": 32, "seq_len": 1024}
    runs = {}
    for disp in ("alltoall", "deepep"):
        opts = ReplayOptions.from_mapping({**base, "moe_dispatcher": disp}, tmp_path / "o.yaml", "x")
        runs[disp] = predict(None, opts, detail=True)
    g = runs["deepep"].graph.tasks
    ep = g[g["name"].str.contains("moe.dispatch|moe.combine", regex=True)]
    assert len(ep) and set(ep["algorithm"]) == {"dedup:128:8"}
    assert not g["name"].str.contains("moe.sort").any()
    a = runs["alltoall"].graph.tasks
    assert a["name"].str.contains("moe.sort").any()
    assert set(a[a["name"].str.contains("moe.dispatch")]["algorithm"]) == {""}
    assert runs["deepep"].iteration_time_s < runs["alltoall"].iteration_time_s
    res = CliRunner().invoke(main, ["replay", "--model", "qwen3-30b-a3b", "--cluster", "h100x128",
                                    "--ep", "16", "--dp", "16", "--moe-dispatcher", "nccl",
                                    "--output", str(tmp_path / "r")])
    assert res.exit_code == 2 and "'--moe-dispatcher': 'nccl' is not one of" in res.output
    assert not (tmp_path / "r").exists()
