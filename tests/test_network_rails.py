"""Concurrent data-parallel rings on one rail each (issue 20, item 1), in closed form.

With TP 8 inside a node, the DP communicator of local GPU t holds GPU t of every node; NCCL
runs its ring on the NIC local to GPU t, so the 8 DP all-reduces of a layer run on 8
disjoint rails. Each must get its NIC's bandwidth when the fabric can carry them: on a
rail-optimised fabric (rail t stays on rail-t leaves) and on a non-blocking spine-leaf with
per-rack leaves (the rings' edges leaving a rack share its uplinks, which adaptive routing
uses as one bundle). Across an oversubscribed spine that every edge crosses they slow down
by the oversubscription. Static per-flow ECMP (``routing: ecmp``) shows the collisions the
flow model used to predict for every fabric (the 2.3x of issue 20).
"""

from __future__ import annotations

import copy

import pytest
import simpy

from tracesim.catalog import load_cluster
from tracesim.network.model import NetworkModel
from tracesim.specs.cluster import ClusterSpec, cluster_from_dict

MIB = 1 << 20
NIC_GBPS = 50.0 * 0.94  # 400 Gb/s NIC at the ring's inter-node efficiency


def dp_groups(c: ClusterSpec, nodes: int) -> list[tuple[int, ...]]:
    g = c.gpus_per_node
    return [tuple(n * g + t for n in range(nodes)) for t in range(g)]


def concurrent_ns(c: ClusterSpec, groups: list[tuple[int, ...]], nbytes: int) -> list[int]:
    """End time of each group's ring all-reduce, all started at t = 0."""
    env = simpy.Environment()
    model = NetworkModel(c, {"all_reduce": "ring"}, protocol="Simple")  # NIC rate, not LL128's
    model.attach(env)
    ends: list[int] = [0] * len(groups)
    for i, grp in enumerate(groups):
        ev = model.collective("all_reduce", grp, nbytes, "dp")
        ev.callbacks.append(lambda _e, i=i: ends.__setitem__(i, int(env.now)))
    env.run()
    return ends


def bandwidth_ns(c: ClusterSpec, grp: tuple[int, ...], nbytes: int, t_ns: int) -> float:
    """The time a ring spends moving bytes: its time less the fixed latency."""
    fixed = NetworkModel(c, {"all_reduce": "ring"}, protocol="Simple").compiled("all_reduce", grp, nbytes).fixed_ns
    return t_ns - fixed


def ring_bw_ns(n: int, nbytes: int, gbps: float) -> float:
    """Closed form: 2(n-1)/n x S / B (ns, B in GB/s = bytes/ns)."""
    return 2 * (n - 1) / n * nbytes / gbps


@pytest.mark.parametrize("name, nodes", [("h100x128", 16), ("h100x1024", 128)])
def test_eight_rail_rings_each_get_their_nic(name: str, nodes: int) -> None:
    c = load_cluster(name)
    groups = dp_groups(c, nodes)
    size = 256 * MIB
    ends = concurrent_ns(c, groups, size)
    for grp, t in zip(groups, ends, strict=True):
        assert bandwidth_ns(c, grp, size, t) == pytest.approx(ring_bw_ns(nodes, size, NIC_GBPS), rel=0.01)
    alone = concurrent_ns(c, groups[:1], size)[0]
    assert max(ends) == pytest.approx(alone, rel=1e-3)


def one_node_per_leaf(oversubscription: float, routing: str = "adaptive") -> ClusterSpec:
    d = copy.deepcopy(load_cluster("h100x1024").to_dict())
    d["name"] = f"leaf8-o{oversubscription}"
    d["nodes"] = 16
    d["inter_node"].update(nics_per_leaf=8, oversubscription=oversubscription, routing=routing)
    return cluster_from_dict(d, "test")


@pytest.mark.parametrize("o", [1, 2, 4])
def test_oversubscribed_spine_slows_rail_rings_in_proportion(o: int) -> None:
    """One node per leaf: every ring edge leaves its leaf, the leaf's 8 rings share uplinks
    of 8 x 50 / o GB/s, so each ring gets 50 / o GB/s of wire rate (its NIC's at o = 1)."""
    c = one_node_per_leaf(o)
    groups = dp_groups(c, 16)
    size = 256 * MIB
    ends = concurrent_ns(c, groups, size)
    for grp, t in zip(groups, ends, strict=True):
        assert bandwidth_ns(c, grp, size, t) == pytest.approx(ring_bw_ns(16, size, NIC_GBPS / o), rel=0.01)


def test_half_the_spine_is_enough_for_rings_on_per_rack_leaves() -> None:
    """h100x1024 at oversubscription 2: a leaf (4 nodes) sends only the edges of the 8 rings
    from its last node to the next leaf, 8 x 47 GB/s against 800 GB/s of uplinks."""
    c = load_cluster("h100x1024").with_inter_node(oversubscription=2)
    groups = dp_groups(c, 128)
    ends = concurrent_ns(c, groups, 256 * MIB)
    assert max(ends) == pytest.approx(concurrent_ns(load_cluster("h100x1024"), groups[:1], 256 * MIB)[0],
                                      rel=1e-3)


def test_static_ecmp_collides_where_adaptive_routing_does_not() -> None:
    """The artefact behind issue 20's 2.3x: one flow per ring edge hashed onto one of a
    leaf's 32 uplinks; the 8 rings' edges leaving a rack collide and a ring runs at the rate
    of its worst edge. Alone, a ring is as fast with either routing."""
    ecmp = load_cluster("h100x1024").with_inter_node(routing="ecmp")
    groups = dp_groups(ecmp, 128)
    size = 256 * MIB
    alone = concurrent_ns(ecmp, groups[:1], size)[0]
    assert alone == pytest.approx(concurrent_ns(load_cluster("h100x1024"), groups[:1], size)[0], rel=1e-6)
    ends = concurrent_ns(ecmp, groups, size)
    assert max(ends) > 2 * alone


def test_a_ring_over_an_uneven_group_spreads_over_the_nics() -> None:
    """A pipeline stage's data-parallel group that does not fill whole nodes (2 GPUs of the
    first node, all 8 of the next three, 6 of the last): its ring gets one channel per
    rail of its fullest node, crossing nodes on the channel's rail over PXN, so it runs
    near the aligned group's rate, not at one NIC's (a single channel in rank order)."""
    from tracesim.network.bench import run_netbench
    from tracesim.network.collectives import Group
    from tracesim.network.routing import Router
    from tracesim.network.topology import Topology

    c = load_cluster("h100x128")
    uneven = tuple([6, 7] + list(range(8, 32)) + list(range(32, 38)))
    aligned = tuple(range(8, 40))
    assert len(uneven) == len(aligned) == 32
    topo = Topology(c)
    group = Group(topo, Router(topo), uneven)
    chans = group.channels()
    assert not group.uniform and len(chans) == 8
    for order, rail in chans:
        assert sorted(order) == sorted(uneven) and rail is not None
        for a, b in zip(order, order[1:] + order[:1], strict=True):
            if a // 8 != b // 8:  # crossing nodes: on the channel's rail at both ends
                route = group.edge_route(a, b, rail)
                nics = [int(x) for x in route if int(x) in set(topo.nic_up.tolist())]
                assert nics and all(topo.nic_up.tolist().index(n) % 8 == rail for n in nics)
    rate = {name: run_netbench(c, "reduce_scatter", grp, [1 << 30])[0]["busbw_GBps"]
            for name, grp in (("uneven", uneven), ("aligned", aligned))}
    assert rate["uneven"] == pytest.approx(rate["aligned"], rel=0.15)
    assert rate["uneven"] > 4 * NIC_GBPS
