"""Userbuffers transfers (Transformer Engine's TP overlaps, no NCCL): closed-form time without
NCCL's base latency, independence from the NCCL protocol choice, the fallback outside a node,
the spec's ring efficiencies, and the builder's mark reaching the network model."""

from __future__ import annotations

import pytest

from tracesim.catalog import load_cluster
from tracesim.engine.replay import replay
from tracesim.network.collectives import ALGORITHMS
from tracesim.network.model import NetworkModel, collective_time_ns
from tracesim.network.protocols import (
    BASE_LATENCY_US,
    DEFAULT_CHANNELS,
    HW_LATENCY_US,
    Shape,
    channels_used,
)
from tracesim.options import ReplayOptions
from tracesim.pipeline.build import build
from tracesim.specs.cluster import cluster_from_dict

H100 = load_cluster("h100x8")
MULTI = load_cluster("h100x128")
UB = ALGORITHMS["userbuffers"]


def _per_byte_ns(n: int, efficiency: float = 0.80) -> float:
    """ns per message byte of a ring all-gather's bandwidth term on the spec's NVLink:
    each rank sends (n-1)/n of the message at efficiency x 450 GB/s."""
    return (n - 1) / n / (efficiency * H100.intra_node.bandwidth_GBps)


@pytest.mark.parametrize("msg_bytes", [64 << 10, 1 << 20, 3 << 20, 48 << 20])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_userbuffers_chunk_pays_no_nccl_base_latency(n: int, msg_bytes: int) -> None:
    # one step: the userbuffers step latency plus the NVLink path latency, then the bytes
    lat_ns = (UB.defaults.step_latency_us + H100.intra_node.latency_us) * 1000.0
    ub = collective_time_ns(H100, "all_gather", n, msg_bytes, "userbuffers")
    assert ub == pytest.approx(lat_ns + msg_bytes * _per_byte_ns(n), abs=1)
    # an NCCL ring Simple all-gather of the same bytes: the same bandwidth on the channels it
    # uses, plus NCCL's base latency and a Simple NVLink hardware latency per step
    # (src/graph/tuning.cc)
    simple = collective_time_ns(H100, "all_gather", n, msg_bytes, "ring", protocol="Simple")
    nccl_lat_ns = (BASE_LATENCY_US["ring"][2] + (n - 1) * HW_LATENCY_US["nvlink"]["ring"][2]) * 1000.0
    shape = Shape("ring", "all_gather", n, 1, "hopper", "nvlink", DEFAULT_CHANNELS)
    share = channels_used(shape, 2, msg_bytes) / DEFAULT_CHANNELS
    assert simple == pytest.approx(nccl_lat_ns + msg_bytes * _per_byte_ns(n) / share, abs=1)
    # whatever NCCL picks pays at least its smallest base latency; userbuffers is cheaper
    auto = collective_time_ns(H100, "all_gather", n, msg_bytes)
    assert auto >= min(BASE_LATENCY_US["ring"]) * 1000.0 + msg_bytes * _per_byte_ns(n)
    assert ub < auto


def test_userbuffers_ignores_the_nccl_protocol_and_reduce_scatter_matches() -> None:
    m = 4 << 20
    ub = collective_time_ns(H100, "reduce_scatter", 4, m, "userbuffers")
    assert collective_time_ns(H100, "reduce_scatter", 4, m, "userbuffers", protocol="LL") == ub
    assert ub == collective_time_ns(H100, "all_gather", 4, m, "userbuffers")
    # an all-reduce is a reduce-scatter step then an all-gather step
    ar = collective_time_ns(H100, "all_reduce", 4, m, "userbuffers")
    assert ar == pytest.approx(2 * ub, abs=2)


def test_automatic_selection_never_picks_userbuffers() -> None:
    net = NetworkModel(H100)
    for coll in ("all_gather", "reduce_scatter", "all_reduce"):
        for m in (1 << 10, 1 << 20, 1 << 28):
            assert net.select(coll, range(8), m) != "userbuffers"


def test_userbuffers_outside_one_node_falls_back_to_nccl() -> None:
    net = NetworkModel(MULTI)
    assert UB.check(net._shared.group((0, 8)), "all_gather") is not None
    assert net.compiled("all_gather", (0, 8), 1 << 20, "userbuffers").algorithm != "userbuffers"
    assert net.compiled("all_gather", (0, 1), 1 << 20, "userbuffers").algorithm == "userbuffers"
    with pytest.raises(ValueError, match="unknown algorithm"):
        net.compiled("all_gather", (0, 1), 1 << 20, "nccl-ub")


def test_userbuffers_takes_the_specs_ring_efficiency() -> None:
    d = H100.to_dict()
    d["collectives"]["algorithms"]["ring"]["efficiency"]["intra"] = 0.4
    slow = cluster_from_dict(d, "x.yaml")
    m = 24 << 20
    lat_ns = (UB.defaults.step_latency_us + H100.intra_node.latency_us) * 1000.0
    got = collective_time_ns(slow, "all_gather", 4, m, "userbuffers")
    assert got == pytest.approx(lat_ns + m * _per_byte_ns(4, 0.4), abs=1)
    # its own entry in the spec wins
    d["collectives"]["algorithms"]["userbuffers"] = {"efficiency": {"intra": 0.8}, "step_latency_us": 1.0}
    own = cluster_from_dict(d, "y.yaml")
    got = collective_time_ns(own, "all_gather", 4, m, "userbuffers")
    assert got == pytest.approx((1.0 + H100.intra_node.latency_us) * 1000.0 + m * _per_byte_ns(4), abs=1)


SMALL = {"model": "gpt3-1.7b", "cluster": "h100x8", "tp": 4, "dp": 2, "global_batch": 2,
         "micro_batch": 1, "seq_len": 512, "host_launch": False}


def _tp_algorithms(**extra) -> tuple[dict[str, str], object]:
    b = build(None, ReplayOptions.from_mapping({**SMALL, **extra}))
    t = b.graph.tasks
    tp = t[(t["kind"] == "coll") & (t["group_kind"] == "tp")]
    return dict(zip(tp["name"].astype(str), tp["algorithm"].astype(str), strict=False)), b


def test_builder_marks_userbuffers_chunks_and_the_network_runs_them_so() -> None:
    algos, b = _tp_algorithms()
    # ring-exchange / pipelined chunks (``name#k``) are userbuffers transfers ...
    assert any("#" in k for k in algos)
    assert all(v == "userbuffers" for k, v in algos.items() if "#" in k)
    # ... the embedding / head / loss collectives NCCL's
    assert any(v == "" for v in algos.values())
    # the engine hands the mark to the network model: one operation per TP group's members
    t = b.graph.tasks
    marked = int(((t["kind"] == "coll") & (t["algorithm"] == "userbuffers")).sum())
    net = NetworkModel(b.cluster)
    replay(b.graph, net)
    tp = [r for r in net.records if r.group_kind == "tp"]
    assert sum(r.algorithm == "userbuffers" for r in tp) == marked // 4
    assert {r.algorithm for r in tp if r.algorithm != "userbuffers"} <= {"ring", "tree", "nvls"}
    # without userbuffers (NCCL's asynchronous backward overlap only) nothing is marked
    off, _ = _tp_algorithms(tp_comm_overlap=False)
    assert set(off.values()) == {""}


def _alone_ns(ranks: tuple[int, ...], coll: str, msg: int, algorithm: str, chunks: int,
              cluster=H100) -> int:
    import simpy

    env = simpy.Environment()
    net = NetworkModel(cluster)
    net.attach(env)
    env.run(until=net.collective(coll, ranks, msg, "tp", algorithm=algorithm, chunks=chunks))
    return int(env.now)


@pytest.mark.parametrize("algorithm", ["userbuffers", ""])
@pytest.mark.parametrize(("coll", "n", "k"), [("all_gather", 8, 7), ("reduce_scatter", 4, 3),
                                              ("reduce_scatter", 2, 4)])
def test_a_task_of_k_chunks_takes_k_chunks_time(algorithm: str, coll: str, n: int, k: int) -> None:
    # the merged transfer chunks of an overlapped GEMM (tracesim.build.overlap): k operations
    # of msg / k back to back, each with its own latency (a userbuffers step, or an NCCL
    # collective of the chunk's size with its protocol and base latency)
    ranks = tuple(range(n))
    chunk = 1_348_169
    one = _alone_ns(ranks, coll, chunk, algorithm, 1)
    assert _alone_ns(ranks, coll, k * chunk, algorithm, k) == k * one
    # not the same as one operation of all the bytes: k - 1 more latencies
    assert _alone_ns(ranks, coll, k * chunk, algorithm, 1) < k * one


def test_chunks_that_share_links_run_as_one_transfer() -> None:
    """Two chunked userbuffers operations on the same links: ``auto`` runs each one's chunks
    left as one transfer after their latencies (a few flow batches instead of one per
    chunk); chunk by chunk (``steps``) they end within the latencies' placement of that,
    and the bytes are the same. (Chunks of a multi-step NCCL phase keep ``auto``'s step by
    step run under sharing.)"""
    algorithm = "userbuffers"
    import simpy

    def run(phases: str) -> tuple[list[int], int, float]:
        env = simpy.Environment()
        net = NetworkModel(H100, phases=phases)
        net.attach(env)
        ranks, k, chunk = tuple(range(4)), 6, 3 << 20
        ends: list[int] = []
        for msg in (k * chunk, 2 * k * chunk):  # started together; the second is longer
            ev = net.collective("all_gather", ranks, msg, "tp", algorithm=algorithm, chunks=k)
            ev.callbacks.append(lambda _e: ends.append(int(env.now)))
        env.run()
        return ends, net.flows._next_group, float(net.flows.link_bytes.sum())

    merged, batches, carried = run("auto")
    chunked, batches_chunked, carried_chunked = run("steps")
    assert carried == pytest.approx(carried_chunked, rel=1e-12)
    assert (batches, batches_chunked) == (5, 12)
    lat_ns = 6 * (UB.defaults.step_latency_us + H100.intra_node.latency_us) * 1000.0
    for a, b in zip(merged, chunked, strict=True):
        assert abs(a - b) <= 2 * lat_ns + 12
