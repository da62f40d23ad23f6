"""Degraded and failed links (tracesim/network/faults.py, routing around them), in closed form.

A collective's time is L + k x bytes (latency plus a bandwidth term); the checks compare the
bandwidth term, T(S) - T(1 byte), against what the changed capacity says it must be.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tracesim.api import replay
from tracesim.catalog import load_cluster
from tracesim.errors import InputError
from tracesim.network.model import NetworkModel, collective_time_ns
from tracesim.specs.cluster import ClusterSpec, cluster_from_dict
from tracesim.specs.fabric import parse_link_faults

GIB = 1 << 30


def two_nodes(**inter: object) -> ClusterSpec:
    """2 nodes of 1 GPU, one 400 Gb/s NIC each, on one switch."""
    return cluster_from_dict({
        "name": "pair", "nodes": 2, "gpus_per_node": 1, "device": "h100",
        "intra_node": {"kind": "nvswitch", "bandwidth_GBps": 450, "latency_us": 0.6},
        "inter_node": {"nics_per_node": 1, "nic_Gbps": 400, "topology": "fat_tree",
                       "latency_us": 2.0, "levels": 1, **inter}})


def faulted(c: ClusterSpec, spec: str) -> ClusterSpec:
    return c.with_fabric(parse_link_faults(spec))


def bandwidth_ns(c: ClusterSpec, ranks: list[int], nbytes: int = GIB, algo: str = "ring") -> int:
    # one protocol for both sizes (NCCL Simple), so the difference is the bandwidth part
    return (collective_time_ns(c, "all_reduce", ranks, nbytes, algo, protocol="Simple")
            - collective_time_ns(c, "all_reduce", ranks, 1, algo, protocol="Simple"))


@pytest.mark.parametrize("factor", [0.5, 0.25])
def test_a_degraded_nic_slows_a_two_node_ring_by_its_factor(factor):
    c = two_nodes()
    healthy = bandwidth_ns(c, [0, 1])
    assert bandwidth_ns(faulted(c, f"nic0:{factor}"), [0, 1]) == pytest.approx(healthy / factor, rel=1e-3)  # NCCL Simple per-step terms ride along
    # the capacity model: both directions of NIC 0's port, nothing else
    topo = NetworkModel(faulted(c, f"nic0:{factor}")).topology
    changed = (topo.capacity != topo.healthy_capacity).nonzero()[0].tolist()
    assert sorted(changed) == sorted([int(topo.nic_up[0]), int(topo.nic_down[0])])


def test_a_factor_of_one_is_the_healthy_fabric_exactly():
    c = load_cluster("h100x128")
    for spec in ("nic0:1", "gpu3:1,leaf0.up:1"):
        assert collective_time_ns(faulted(c, spec), "all_reduce", list(range(16)), GIB) == \
            collective_time_ns(c, "all_reduce", list(range(16)), GIB)
    opts = dict(model="gpt3-1.7b", cluster="h100x8", tp=1, pp=1, dp=8, micro_batch=1, global_batch=8)
    base = replay(**opts)
    same = replay(**opts, degrade_link=("gpu2:1",))
    assert same.iteration_time_s == base.iteration_time_s
    assert same.details["perturbation"]["impact"] == 0.0


@pytest.mark.parametrize("routing", ["adaptive", "ecmp"])
def test_a_failed_uplink_with_spares_changes_nothing_on_a_non_blocking_fabric(routing):
    # 128 nodes, 4 leaves per rail of 32 uplinks; one GPU per node: the ring's edges
    # between racks are one flow per leaf uplink direction, far below what is left
    c = load_cluster("h100x1024").with_inter_node(routing=routing)
    ring = list(range(0, 1024, 8))
    healthy = collective_time_ns(c, "all_reduce", ring, GIB, "ring")
    for spec in ("leaf0.up3:0", "leaf0.up0:0", "spine0:0"):
        assert collective_time_ns(faulted(c, spec), "all_reduce", ring, GIB, "ring") == healthy
    # at half speed, static ECMP pins the flow to a half-speed uplink; adaptive routing
    # spreads it over the bundle, which still has 16 NICs' worth
    half = collective_time_ns(faulted(c, "leaf0.up:0.5"), "all_reduce", ring, GIB, "ring")
    lat = collective_time_ns(c, "all_reduce", ring, 1, "ring", protocol="Simple")  # latency part
    assert half - lat > 1.9 * (healthy - lat) if routing == "ecmp" else half == healthy


def test_a_failed_uplink_bundle_loses_its_share_under_adaptive_routing():
    c = load_cluster("h100x1024")
    topo = NetworkModel(faulted(c, "leaf1.up5:0,leaf1.up6:0.5")).topology
    lk = int(topo.leaf_up[1, 0])
    assert topo.capacity[lk] == pytest.approx(topo.healthy_capacity[lk] * (1 - 1.5 / 32))
    assert topo.alive.all()


def test_a_failed_nic_sends_its_traffic_over_the_next_rail():
    c = load_cluster("h100x128")
    model = NetworkModel(faulted(c, "nic0:0"))
    topo, route = model.topology, model.router.route(0, 8)  # GPU 0 of node 0 -> node 1
    assert int(topo.nic_up[1]) in route.tolist() and int(topo.nic_down[9]) in route.tolist()
    assert int(topo.gpu_up[0]) in route.tolist()  # over NVLink to GPU 1, which owns NIC 1
    assert topo.alive[route].all()
    # two full nodes: rail 1 carries channels 0 and 1, as NIC 0 at half speed would
    ranks = list(range(16))
    # equal but for the NVLink hop's latency on the detour
    assert bandwidth_ns(faulted(c, "nic0:0"), ranks) == pytest.approx(
        bandwidth_ns(faulted(c, "nic0:0.5"), ranks), rel=1e-4)


def test_a_failed_nvlink_of_a_mesh_takes_a_two_hop_detour():
    c = load_cluster("h100x8").replace(intra_node=load_cluster("h100x8").intra_node.__class__(
        kind="nvlink_mesh", bandwidth_GBps=300.0, latency_us=0.6))
    model = NetworkModel(faulted(c, "gpu0-gpu1:0"))
    route = model.router.route(0, 1)
    assert len(route) == 2 and model.topology.alive[route].all()


def test_no_path_left_is_an_input_error():
    c = load_cluster("h100x1024")
    with pytest.raises(InputError, match="no path"):
        collective_time_ns(faulted(c, "leaf0.up:0"), "all_reduce", [0, 256], GIB, "ring")
    with pytest.raises(InputError, match="no path"):
        collective_time_ns(faulted(load_cluster("h100x8"), "gpu1:0"), "all_reduce", [0, 1], GIB, "ring")


def test_a_degraded_nic_in_a_replay_names_the_rank_and_the_slowed_collective():
    opts = dict(model="gpt3-1.7b", cluster="h100x128", tp=1, pp=1, dp=16, micro_batch=1,
                global_batch=16)
    base = replay(**opts, full=True)  # the reference is a replay of every rank
    slow = replay(**opts, degrade_link=("nic0:0.5",))
    pt = slow.details["perturbation"]
    assert not slow.details["replay"]["symmetric"]
    assert pt["unperturbed_iteration_time_s"] == pytest.approx(base.iteration_time_s, rel=1e-9)
    assert pt["impact"] > 0.02
    assert pt["degraded_links"] == [{"link": "nic0", "factor": 0.5, "ranks": [0]}]
    top = pt["slowed_operations"][0]
    assert top["group_kind"] == "dp" and top["ranks"].startswith("0..15")
    # the DP ring's inter-node edge on rail 0 runs at half speed: its operations nearly double
    assert 1.7 < top["perturbed_s"] / top["unperturbed_s"] <= 2.0


def test_a_cluster_spec_may_carry_degraded_links():
    c = load_cluster("h100x128")
    d = c.to_dict() | {"degraded_links": ["nic3:0.5", "leaf0.up:0.9"]}
    spec = cluster_from_dict(d)
    assert [f.text() for f in spec.degraded_links] == ["nic3:0.5", "leaf0.up:0.9"]
    assert cluster_from_dict(spec.to_dict()) == spec
    assert spec.healthy == c
    with pytest.raises(InputError, match="degraded_links"):
        cluster_from_dict(c.to_dict() | {"degraded_links": ["nic3"]})


def _cli(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracesim.cli", "replay", "--model", "gpt3-1.7b",
                           "--cluster", "h100x8", *flags], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("flags, words", [
    (["--degrade-link", "nic0:0.5"], "no link 'nic0'"),  # one node: no NICs in the model
    (["--degrade-link", "gpu99:0.5"], "gpu0..gpu7"),
    (["--degrade-link", "gpu1:2"], "0 <= FACTOR <= 1"),
    (["--degrade-link", "switch3:0.5"], "NAME one of"),
    (["--degrade-link", "gpu1:0"], "no path"),
])
def test_bad_degrade_link_options_exit_2_naming_the_option(flags, words):
    r = _cli(*flags)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "--degrade-link" in r.stderr and words in r.stderr, r.stderr


def test_a_degraded_link_without_a_cluster_exits_2():
    trace = str(Path(__file__).parent / "data" / "traces" / "hta-v100-2rank-r1-many-allreduce")
    r = subprocess.run([sys.executable, "-m", "tracesim.cli", "replay", trace, "--degrade-link",
                        "gpu1:0.5"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "--degrade-link" in r.stderr and "--cluster" in r.stderr, r.stderr
