"""Collective algorithms: closed forms, NCCL-like selection, calibration, contention."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import simpy

from benchmarks.network.calibration import CASES, busbw_GBps, compare
from tracesim.catalog import load_cluster
from tracesim.errors import InputError
from tracesim.network.collectives.tree import btree_parents, double_tree, tree_height
from tracesim.network.model import NetworkModel, collective_time_ns
from tracesim.network.running import MAX_ROUNDS
from tracesim.specs.cluster import cluster_from_dict

SHARED = Path(__file__).resolve().parents[2] / "shared"
REFERENCE = SHARED / "reference" / "nccl_busbw.csv"

S = 64 << 20  # 64 MiB

# algorithm calibration used by the closed-form tests: efficiency e, step latency 1 us
UNIT = {
    name: {"efficiency": 1.0, "step_latency_us": 1.0}
    for name in ("ring", "tree", "direct", "hierarchical", "p2p")
}
UNIT["nvls"] = {"efficiency": 0.5, "step_latency_us": 1.0}


def node_cluster(n=8, bw=100.0, lat_us=2.0, kind="nvswitch", eff=1.0):
    """One node of n GPUs; per-step latency a = 1 us + lat_us (one-way GPU to GPU)."""
    algos = copy.deepcopy(UNIT)
    algos["ring"]["efficiency"] = eff
    return cluster_from_dict(
        {
            "name": "node",
            "nodes": 1,
            "gpus_per_node": n,
            "device": "h100",
            "intra_node": {"kind": kind, "bandwidth_GBps": bw, "latency_us": lat_us,
                           "nvls": kind == "nvswitch"},
            "collectives": {"algorithms": algos, "protocol": "Simple"},
        },
        "node.yaml",
    )


def net_cluster(m=8, nic_Gbps=400.0, lat_us=2.0, **inter):
    """m nodes of one GPU on one switch; per-step latency a = 1 us + lat_us (NIC to NIC)."""
    spec = {
        "name": "net",
        "nodes": m,
        "gpus_per_node": 1,
        "device": "h100",
        "intra_node": {"kind": "nvswitch", "bandwidth_GBps": 450, "latency_us": 0.5},
        "inter_node": {"nics_per_node": 1, "nic_Gbps": nic_Gbps, "topology": "fat_tree",
                       "levels": 1, "latency_us": lat_us},
        "collectives": {"algorithms": copy.deepcopy(UNIT), "protocol": "Simple"},
    }
    spec["inter_node"].update(inter)
    return cluster_from_dict(spec, "net.yaml")


# NCCL Simple terms (tracesim/network/protocols.py, from NCCL's tuning.cc): base latency
# 8.4 us once; per step the path latency + 1 us (UNIT) + Simple's extra hardware latency
# over ring/LL: NVLink ring 3.4 - 0.6 us; network with one GPU per node (tree's) 14 - 2.7 us
BASE = 8400.0
A_NODE = 3000.0 + 2800.0
A_NET = 3000.0 + 11300.0
PLATEAU = 1.4  # ring Simple all-reduce across nodes
CHUNK = 524288  # Simple chunk of a pipelined chain; 16 channels
TREE_64MIB = 0.8  # treeCorrectionFactor[Simple][log2(64 MiB / 64)]


def close(actual_ns, expect_ns, rel=0.01):
    assert actual_ns == pytest.approx(expect_ns, rel=rel), (actual_ns, expect_ns)


# ------------------------------------------------------------------ closed forms


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("eff", [1.0, 0.8])
def test_ring_all_reduce_closed_form(n, eff):
    c = node_cluster(n=8, bw=100.0, lat_us=2.0, eff=eff)
    a, b = A_NODE, 100.0 * eff  # ns; bytes/ns
    t = collective_time_ns(c, "all_reduce", n, S, "ring")
    close(t, BASE + 2 * (n - 1) * (a + S / (n * b)))


@pytest.mark.parametrize("coll", ["all_gather", "reduce_scatter"])
def test_ring_all_gather_reduce_scatter_closed_form(coll):
    n = 8
    t = collective_time_ns(node_cluster(), coll, n, S, "ring")
    close(t, BASE + (n - 1) * (A_NODE + S / (n * 100.0)))


@pytest.mark.parametrize("m", [2, 5, 16])
def test_ring_across_nodes_closed_form(m):
    # one GPU per node, 400 Gb/s NICs = 50 B/ns, a = 1 us + 2 us
    t = collective_time_ns(net_cluster(m=16), "all_reduce", m, S, "ring")
    close(t, PLATEAU * (BASE + 2 * (m - 1) * A_NET) + 2 * (m - 1) * S / (m * 50.0))


@pytest.mark.parametrize("m", [4, 8, 16])
def test_double_binary_tree_closed_form(m):
    # each inner node sends four half-buffers (parent + two children in one tree, parent in
    # the other) over its NIC: 2S/B; the trees are log2(m) deep: 2 log2(m) steps of latency
    # Simple: NCCL's tree correction at 64 MiB slows the bandwidth term, and the chain of
    # K = 2 log2(m) hops fills and drains with K - 1 chunks at one channel's rate
    t = collective_time_ns(net_cluster(m=16), "all_reduce", m, S, "tree")
    k = 2 * math.log2(m)
    bw = 25.0 * TREE_64MIB  # B/2: each inner node sends 2S over its NIC
    close(t, BASE + k * A_NET + (k - 1) * CHUNK / (bw / 16) + S / bw)


def test_direct_all_to_all_closed_form():
    n = 8
    t = collective_time_ns(node_cluster(), "all_to_all", n, S)
    close(t, 3000.0 + (n - 1) * S / (n * 100.0))
    # across nodes: every peer through the NIC
    t = collective_time_ns(net_cluster(m=8), "all_to_all", 8, S)
    close(t, 3000.0 + 7 * S / (8 * 50.0))


def test_nvls_closed_form():
    # S up and S down at e * B each, two steps of latency
    t = collective_time_ns(node_cluster(), "all_reduce", 8, S, "nvls")
    close(t, 2 * 3000.0 + S / (0.5 * 100.0))


def test_broadcast_and_reduce_pipelined_chain():
    for coll in ("broadcast", "reduce"):
        t = collective_time_ns(node_cluster(), coll, 8, S, "ring")
        close(t, BASE + 7 * A_NODE + 6 * CHUNK / (100.0 / 16) + S / 100.0)


def test_hierarchical_closed_form():
    spec = node_cluster().to_dict()
    spec.update(name="h", nodes=4, gpus_per_node=4)
    spec["inter_node"] = {"nics_per_node": 4, "nic_Gbps": 400, "topology": "rail_optimized",
                          "levels": 1, "latency_us": 2.0}
    c = cluster_from_dict(spec, "h.yaml")
    g, m = 4, 4
    a_i = 1000.0 + 2000.0
    a_n = 1000.0 + 2000.0
    expect = 2 * (g - 1) * (a_i + S / (g * 100.0)) + 2 * (m - 1) * (a_n + S / (g * m * 50.0))
    close(collective_time_ns(c, "all_reduce", 16, S, "hierarchical"), expect)


def test_p2p_time():
    c = net_cluster(m=2)
    env = simpy.Environment()
    model = NetworkModel(c)
    model.attach(env)
    ev = model.p2p(0, 1, S)
    env.run(until=ev)
    close(env.now, 3000.0 + S / 50.0)


def test_tree_shapes():
    for m in range(1, 40):
        for parents in double_tree(m):
            roots = [i for i, p in enumerate(parents) if p < 0]
            assert len(roots) == 1
            children = [sum(1 for p in parents if p == i) for i in range(m)]
            assert max(children) <= 2
            assert tree_height(parents) <= max(1, math.ceil(math.log2(m + 1)))
        t1, t2 = double_tree(m)
        inner1 = {p for p in t1 if p >= 0}
        inner2 = {p for p in t2 if p >= 0}
        if m % 2 == 0:  # mirrored trees: no node is inner in both
            assert not inner1 & inner2
    assert btree_parents(4) == [1, 3, 1, -1]


def test_aggregate_phases_match_step_by_step():
    c = load_cluster("h100x128")
    for coll, ranks in [("all_reduce", tuple(range(16))), ("all_gather", tuple(range(0, 64, 8)))]:
        times = []
        for mode in ("aggregate", "steps", "auto"):
            env = simpy.Environment()
            model = NetworkModel(c, phases=mode)
            model.attach(env)
            ev = model.collective(coll, ranks, S)
            env.run(until=ev)
            times.append(env.now)
        close(times[0], times[1], rel=1e-3)
        assert times[2] == times[0]  # alone, auto aggregates
    with pytest.raises(ValueError):
        NetworkModel(c, phases="chunks")


def test_auto_phases_go_step_by_step_under_contention():
    # a long transfer holds link 0 -> 2 of the contention cluster; a ring on (0, 2) that
    # starts while it runs shares the uplink, so auto mode runs the ring step by step
    c = contention_cluster(2.0)
    ends = {}
    for mode in ("aggregate", "steps", "auto"):
        env = simpy.Environment()
        model = NetworkModel(c, phases=mode)
        model.attach(env)
        model.p2p(1, 3, 1 << 30)

        def ring(model=model, env=env, mode=mode):
            yield env.timeout(10_000)  # the transfer's flow is running by then
            yield model.collective("all_reduce", (0, 2), 1 << 28)
            ends[mode] = env.now

        env.process(ring())
        env.run()
    assert ends["auto"] == ends["steps"]
    # both flows of the 2-rank ring are slowed alike here, so the modes agree closely
    close(ends["aggregate"], ends["steps"], rel=1e-3)


def test_auto_phases_take_at_most_max_rounds_under_contention():
    # a 16-node ring all-gather (15 steps) whose first node's uplink carries a long transfer:
    # auto runs it in rounds of ceil(15 / max_rounds) steps, each ending with its slowest flow
    c = load_cluster("h100x128")
    ranks = tuple(range(0, 128, 8))

    def run(mode, max_rounds):
        env = simpy.Environment()
        model = NetworkModel(c, phases=mode, max_rounds=max_rounds)
        model.attach(env)
        starts = []
        start = model.flows.start

        def counted(*a, **k):
            starts.append(env.now)
            return start(*a, **k)

        model.flows.start = counted
        model.p2p(0, 8, 1 << 31)
        out = {}

        def ring():
            yield env.timeout(10_000)
            n0 = len(starts)
            yield model.collective("all_gather", ranks, 1 << 30)
            out["end"], out["rounds"] = env.now, len(starts) - n0

        env.process(ring())
        env.run()
        return out

    steps = run("steps", 8)
    exact = run("auto", 15)  # one step a round: the same as steps
    assert exact == steps and steps["rounds"] >= 15
    for max_rounds in (8, MAX_ROUNDS):  # MAX_ROUNDS: the default
        grouped = run("auto", max_rounds)
        assert grouped["rounds"] <= max_rounds < steps["rounds"]
        close(grouped["end"], steps["end"], rel=1e-3)
    with pytest.raises(ValueError):
        NetworkModel(c, max_rounds=0)


# ------------------------------------------------------------------ selection


def test_selection_like_nccl():
    h100 = NetworkModel(load_cluster("h100x8"))
    r8 = tuple(range(8))
    assert h100.select("all_reduce", r8, 8) == "ring"
    assert h100.select("all_reduce", r8, 1 << 30) == "nvls"
    assert NetworkModel(load_cluster("a100-selene")).select("all_reduce", r8, 1 << 30) == "ring"
    multi = NetworkModel(load_cluster("h100x128"))
    dp = tuple(range(0, 128, 8))
    assert multi.select("all_reduce", dp, 8) == "tree"
    assert multi.select("all_reduce", dp, 1 << 30) == "ring"
    assert multi.select("all_to_all", r8, 1 << 20) == "direct"
    assert multi.select("all_gather", dp, 1 << 20) == "ring"


def test_selection_overrides():
    c = load_cluster("h100x128")
    assert NetworkModel(c, {"all_reduce": "ring"}).select("all_reduce", tuple(range(8)), 1 << 30) == "ring"
    # a preference list falls through to the first algorithm that applies
    pref = c.replace(collectives=cluster_from_dict(
        {**c.to_dict(), "collectives": {"select": {"all_reduce": ["nvls", "ring"]}}}, "x").collectives)
    m = NetworkModel(pref)
    assert m.select("all_reduce", tuple(range(8)), 8) == "nvls"
    assert m.select("all_reduce", (0, 8), 1 << 30) == "ring"
    with pytest.raises(InputError) as err:
        NetworkModel(c, {"all_reduce": "nvls"}).select("all_reduce", (0, 8), 1 << 20)
    assert "nvls" in err.value.message and err.value.file == "--algo"
    with pytest.raises(InputError):
        NetworkModel(c, {"all_reduce": "bogus"})


def test_trivial_groups_and_barrier():
    env = simpy.Environment()
    model = NetworkModel(load_cluster("h100x8"))
    model.attach(env)
    ev = model.collective("all_reduce", (3,), 1 << 20)
    env.run(until=ev)
    assert env.now == 0
    ev = model.collective("barrier", tuple(range(8)), 0)
    env.run(until=ev)
    assert 0 < env.now < 50_000  # latency only
    assert model.records[-1].msg_bytes == 0
    assert model.estimate_ns("barrier", tuple(range(8)), 0) == env.now  # started at 0
    # a send/recv pair estimate equals a simulated p2p transfer
    t0 = env.now
    ev = model.p2p(0, 1, S)
    env.run(until=ev)
    assert model.estimate_ns("send_recv", (0, 1), S) == pytest.approx(env.now - t0, abs=2)


# ------------------------------------------------------------------ calibration


def test_busbw_reproduces_the_nccl_tests_rows_it_was_calibrated_on():
    """A consistency check, not a validation: the algorithms' efficiencies were chosen on
    these rows of ../shared/reference/nccl_busbw.csv (docs/network.md, "Calibration")."""
    rows = compare(REFERENCE)
    assert len(rows) >= 10
    bad = [(r.case.label, r.reference, round(r.simulated_GBps, 1)) for r in rows if abs(r.error) > 0.10]
    assert not bad, bad


def test_busbw_falls_with_size_like_nccl_tests():
    sizes = [1 << k for k in range(3, 34, 3)]
    for cases in CASES.values():
        case = cases[0]
        bws = [busbw_GBps(case, s) for s in sizes]
        assert all(x <= y * (1 + 1e-9) for x, y in zip(bws[:-1], bws[1:], strict=True)), (case.label, bws)
        assert busbw_GBps(case, 64 << 10) < 0.5 * bws[-1], case.label  # latency-bound
        assert bws[0] < 0.01 * bws[-1]


# ------------------------------------------------------------------ contention


def contention_cluster(oversubscription):
    # 4 nodes x 1 GPU, 400 Gb/s NICs (50 GB/s); 2 NICs per leaf (nodes 0,1 | nodes 2,3);
    # a leaf has ceil(2 / o) uplinks carrying 2 x 50 / o GB/s in all
    return net_cluster(m=4, topology="spine_leaf", levels=2, nics_per_leaf=2,
                       oversubscription=oversubscription)


def _concurrent(cluster, groups, nbytes):
    env = simpy.Environment()
    model = NetworkModel(cluster)
    model.attach(env)
    ends = {}

    def run(g):
        yield model.collective("all_reduce", g, nbytes, "dp")
        ends[g] = env.now

    for g in groups:
        env.process(run(g))
    env.run()
    return [nbytes / ends[g] for g in groups]  # busbw: n = 2, so busbw = algbw


@pytest.mark.parametrize("o, alone_GBps, shared_GBps", [
    # o = 2: one 50 GB/s uplink per leaf. Alone, group (0, 2) is NIC-bound at 50 GB/s;
    # with group (1, 3) both cross-leaf flows share the 50 GB/s uplink: 25 GB/s each.
    (2.0, 50.0, 25.0),
    # o = 4: one 25 GB/s uplink: alone 25 GB/s (already spine-bound), shared 12.5 each.
    (4.0, 25.0, 12.5),
])
def test_two_dp_rings_crossing_an_oversubscribed_spine(o, alone_GBps, shared_GBps):
    c = contention_cluster(o)
    big = 1 << 30
    (alone,) = _concurrent(c, [(0, 2)], big)
    a, b = _concurrent(c, [(0, 2), (1, 3)], big)
    assert alone == pytest.approx(alone_GBps, rel=0.01)
    assert a == pytest.approx(shared_GBps, rel=0.01) and b == pytest.approx(shared_GBps, rel=0.01)
    assert a / alone == pytest.approx(shared_GBps / alone_GBps, rel=0.01)
    # groups that stay within their leaf do not slow each other
    x, y = _concurrent(c, [(0, 1), (2, 3)], big)
    assert x == pytest.approx(50.0, rel=0.01) and y == pytest.approx(50.0, rel=0.01)


def test_concurrent_groups_on_separate_links_do_not_interact():
    c = load_cluster("h100x128")
    groups = [tuple(range(8 * k, 8 * k + 8)) for k in range(4)]
    env = simpy.Environment()
    model = NetworkModel(c)
    model.attach(env)
    evs = [model.collective("all_reduce", g, S, "tp") for g in groups]
    env.run(until=simpy.AllOf(env, evs))
    assert env.now == collective_time_ns(c, "all_reduce", groups[0], S)
