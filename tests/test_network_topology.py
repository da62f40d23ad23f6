"""Topology graph and routing: valid shortest paths, deterministic ECMP, rail alignment."""

from __future__ import annotations

import copy
import itertools

import networkx as nx
import numpy as np
import pytest

from tracesim.catalog import load_cluster
from tracesim.network.routing import Router, ecmp_hash
from tracesim.network.topology import KIND_FABRIC, KIND_NIC, Topology
from tracesim.specs.cluster import cluster_from_dict

BASE = {
    "name": "t",
    "nodes": 8,
    "gpus_per_node": 4,
    "device": "h100",
    "intra_node": {"kind": "nvswitch", "bandwidth_GBps": 300, "latency_us": 0.5},
    "inter_node": {
        "nics_per_node": 4,
        "nic_Gbps": 200,
        "topology": "fat_tree",
        "levels": 2,
        "nics_per_leaf": 8,
        "latency_us": 2.0,
    },
}


def make(**inter):
    d = copy.deepcopy(BASE)
    d["inter_node"].update(inter)
    return cluster_from_dict(d, "test.yaml")


def check_path(topo, route, src, dst):
    """Consecutive links connect (directly, or GPU -> its NIC over PCIe, which is not a
    modelled link); the path starts at src's side and ends at dst's side."""
    g = topo.cluster.gpus_per_node
    for a, b in zip(route[:-1], route[1:], strict=True):
        if topo.dst[a] == topo.src[b]:
            continue
        u, v = topo.vertex_name(int(topo.dst[a])), topo.vertex_name(int(topo.src[b]))
        if u.startswith("gpu") and v.startswith("nic"):
            assert int(v[3:]) in topo.nics_of_gpu(int(u[3:])), (u, v)
        elif u.startswith("nic") and v.startswith("gpu"):
            assert int(u[3:]) in topo.nics_of_gpu(int(v[3:])), (u, v)
        else:
            raise AssertionError(f"{topo.link_name(a)} does not lead to {topo.link_name(b)}")
    assert len(set(route.tolist())) == len(route), "a route repeats a link"
    names = [topo.link_name(lk) for lk in route]
    if src // g == dst // g:
        assert names[0].startswith(f"gpu{src}->") and names[-1].endswith(f"->gpu{dst}")
    else:
        first_nic = topo.vertex_name(int(topo.src[route[np.flatnonzero(topo.kind[route] == KIND_NIC)[0]]]))
        assert first_nic.startswith("nic")


@pytest.mark.parametrize("routing", ["adaptive", "ecmp"])
@pytest.mark.parametrize("topology, levels", [("fat_tree", 1), ("fat_tree", 2), ("fat_tree", 3),
                                              ("spine_leaf", 2), ("rail_optimized", 2),
                                              ("rail_optimized", 3)])
def test_routes_are_shortest_paths(topology, levels, routing):
    c = make(topology=topology, levels=levels, nics_per_leaf=4 if levels == 3 else 8,
             routing=routing)
    topo = Topology(c)
    router = Router(topo)
    graph = topo.to_networkx()
    for src, dst in itertools.product(range(0, c.gpus, 3), range(1, c.gpus, 5)):
        route = router.route(src, dst)
        if src == dst:
            assert len(route) == 0
            continue
        check_path(topo, route, src, dst)
        nic = np.flatnonzero(topo.kind[route] == KIND_NIC)
        if len(nic) == 0:  # same node: through the switch
            assert len(route) == nx.shortest_path_length(graph, f"gpu{src}", f"gpu{dst}")
            continue
        # the NIC-to-NIC part is a shortest path in the fabric
        a = topo.vertex_name(int(topo.src[route[nic[0]]]))
        b = topo.vertex_name(int(topo.dst[route[nic[-1]]]))
        assert nic[-1] - nic[0] + 1 == nx.shortest_path_length(graph, a, b)
        if topology != "rail_optimized":  # no relays: the whole route is shortest
            # (the exported graph adds a GPU-NIC edge at each end, not a link of the route)
            assert len(route) == nx.shortest_path_length(graph, f"gpu{src}", f"gpu{dst}") - 2
            assert topo.vertex_name(int(topo.src[route[0]])) in {f"nic{n}" for n in topo.nics_of_gpu(src)}


def test_ecmp_is_deterministic_and_spreads():
    c = make(levels=2, routing="ecmp")
    r1, r2 = Router(Topology(c)), Router(Topology(c))
    uplinks = set()
    topo = r1.topo
    for src in range(0, 16):
        for dst in range(16, 32):
            a, b = r1.route(src, dst), r2.route(src, dst)
            assert a.tolist() == b.tolist()
            up = [lk for lk in a if topo.kind[lk] == KIND_FABRIC]
            assert len(up) == 2
            uplinks.add(int(up[0]))
    assert len(uplinks) >= 6  # flows spread over the equal-cost uplinks
    assert ecmp_hash(1, 2) != ecmp_hash(2, 1)
    assert ecmp_hash(5, 9) == ecmp_hash(5, 9)


def test_rail_alignment_uses_destination_rail_via_nvlink():
    c = load_cluster("h100x128")
    topo = Topology(c)
    router = Router(topo)
    # GPU 3 (node 0, rail 3) to GPU 13 (node 1, rail 5): relay over NVLink to GPU 5, then
    # NIC 5 of node 0 -> rail-5 leaf -> NIC 5 of node 1 -> GPU 13; no spine
    names = [topo.link_name(lk) for lk in router.route(3, 13)]
    assert names == ["gpu3->nvswitch0", "nvswitch0->gpu5", "nic5->leaf5", "leaf5->nic13"]
    # every inter-node route stays on one rail leaf (16 nodes fit one scalable unit)
    for src, dst in [(0, 8), (7, 127), (12, 100), (64, 3)]:
        route = router.route(src, dst)
        assert not (topo.kind[route] == KIND_FABRIC).any()
        leaves = {int(topo.leaf_of_nic[n]) for n in range(topo.nic_up.size)
                  if topo.nic_up[n] in route or topo.nic_down[n] in route}
        assert len(leaves) == 1


def test_fabric_sizes_and_oversubscription():
    c = load_cluster("h100x1024").replace()
    topo = Topology(c)
    assert topo.n_leaves == 1024 // 32 and topo.uplinks == 32
    for o in (1.0, 2.0, 3.0):
        t = Topology(c.with_inter_node(oversubscription=o))
        up_cap = t.capacity[t.leaf_up[0]].sum()
        assert up_cap == pytest.approx(32 * 50.0 / o)
    sel = Topology(load_cluster("a100-selene"))
    assert sel.levels == 3 and sel.n_leaves == 20 * 8  # 20 scalable units x 8 rails
    assert sel.capacity[sel.nic_up].max() == 25.0  # 200 Gb/s


@pytest.mark.parametrize("levels", [2, 3])
def test_adaptive_routing_bundles_equal_cost_links(levels):
    """Adaptive routing spreads every flow over all equal-cost uplinks: the topology models
    a leaf's uplinks (and a pod's spine uplinks) as one link of their total capacity; ECMP
    keeps each physical link. Capacities per leaf and per pod are the same either way."""
    kw = {"topology": "fat_tree", "levels": levels, "nics_per_leaf": 4, "oversubscription": 2}
    ad, ec = Topology(make(**kw)), Topology(make(routing="ecmp", **kw))
    assert ad.bundled and not ec.bundled and ad.uplinks == ec.uplinks == 2
    assert ad.leaf_up.shape == (ad.n_leaves, 1) and ec.leaf_up.shape == (ec.n_leaves, 2)
    for t in (ad, ec):
        assert t.capacity[t.leaf_up[0]].sum() == pytest.approx(4 * 25.0 / 2)
        assert t.capacity[t.leaf_down[3]].sum() == pytest.approx(4 * 25.0 / 2)
    if levels == 3:  # pods of 4 leaves: 2 spines x 4 core uplinks of 25 GB/s per pod
        assert ad.spine_up.shape == (2, 1) and ec.spine_up.shape == (4, 4)
        assert ad.capacity[ad.spine_up[0]].sum() == pytest.approx(ec.capacity[ec.spine_up[:2]].sum())
    assert ad.n_links < ec.n_links


@pytest.mark.parametrize("kind, links_per_gpu", [("nvlink_mesh", 3), ("nvlink_ring", 2), ("pcie", 1)])
def test_intra_node_kinds(kind, links_per_gpu):
    d = copy.deepcopy(BASE)
    d["intra_node"]["kind"] = kind
    c = cluster_from_dict(d, "t.yaml")
    topo = Topology(c)
    router = Router(topo)
    out = [int(x) for x in topo.src if x < c.gpus_per_node]
    assert out.count(0) == links_per_gpu
    route = router.route(0, 2)
    check_path(topo, route, 0, 2)
    if kind == "nvlink_ring":
        assert len(route) == 2  # two hops round the 4-GPU ring
        assert topo.capacity[route[0]] == 150.0  # half the GPU's bandwidth per neighbour
    if kind == "nvlink_mesh":
        assert topo.capacity[route[0]] == 100.0  # a third of 300 to each of 3 peers


def test_networkx_export_has_capacities():
    topo = Topology(load_cluster("h100x8"))
    g = topo.to_networkx()
    assert g.number_of_nodes() == 8 + 1
    assert g["gpu0"]["nvswitch0"]["capacity_GBps"] == 450.0
    assert g["gpu0"]["nvswitch0"]["latency_us"] == pytest.approx(0.3)
