"""Cluster specs: shipped topologies load, strict validation names file and key."""

from __future__ import annotations

import copy

import pytest
import yaml

from tracesim.catalog import cluster_mapping, clusters_dir, known_clusters, load_cluster
from tracesim.errors import InputError
from tracesim.network.collectives import ALGORITHMS
from tracesim.specs.cluster import ClusterSpec, cluster_from_dict

SHIPPED = ("h100x8", "h100x128", "h100x1024", "a100-selene", "h200x8")

BASE = {
    "name": "t",
    "nodes": 2,
    "gpus_per_node": 8,
    "device": "h100",
    "intra_node": {"kind": "nvswitch", "bandwidth_GBps": 450, "latency_us": 0.6, "nvls": True},
    "inter_node": {
        "nics_per_node": 8,
        "nic_Gbps": 400,
        "topology": "rail_optimized",
        "latency_us": 2.7,
    },
}


def test_shipped_clusters_load_with_expected_shapes():
    assert set(SHIPPED) <= set(known_clusters())
    expect = {
        "h100x8": (1, 8, 450, None),
        "h200x8": (1, 8, 450, None),
        "h100x128": (16, 8, 450, 400),
        "h100x1024": (128, 8, 450, 400),
        "a100-selene": (384, 8, 300, 200),
    }
    for name, (nodes, gpn, nvlink, nic) in expect.items():
        c = load_cluster(name)
        assert (c.nodes, c.gpus_per_node, c.intra_node.bandwidth_GBps) == (nodes, gpn, nvlink)
        assert c.sources, f"{name} names no sources"
        if nic is not None:
            assert c.inter_node is not None and c.inter_node.nic_Gbps == nic
    assert load_cluster("a100-selene").gpus == 3072
    assert load_cluster("a100-selene").inter_node.levels == 3
    assert load_cluster("h100x128").inter_node.topology == "rail_optimized"
    assert load_cluster("h100x1024").inter_node.topology == "spine_leaf"
    assert load_cluster("h100x8").intra_node.nvls
    assert not load_cluster("a100-selene").intra_node.nvls


#: NVLink 5's intra-node efficiencies (Azure's GB200 ring sweep; docs/network.md), every
#: other efficiency and latency of the Blackwell specs the defaults
NVLINK5 = ("dgx-b200", "dgx-b300", "gb200-nvl72", "gb300-nvl72")
NVLINK5_INTRA = {"ring": 0.755, "tree": 0.695, "hierarchical": 0.755, "direct": 0.755,
                 "p2p": 0.755, "nvls": 0.61}
#: one Infinity Fabric link's efficiency (a 2-GPU all-reduce on MI300X; docs/network.md)
XGMI = ("mi300x-platform", "mi355x-platform")
XGMI_INTRA = {"ring": 0.745, "tree": 0.685, "hierarchical": 0.745, "direct": 0.745,
              "p2p": 0.745}


def test_shipped_calibration_is_set_once():
    """Every shipped spec carries the algorithm defaults, but inside an NVLink 5 node and an
    Infinity Fabric mesh the ones measured there."""
    for name in SHIPPED + NVLINK5 + XGMI:
        c = load_cluster(name)
        for algo_name, p in c.collectives.algorithms:
            d = ALGORITHMS[algo_name].defaults
            if p.efficiency_intra is not None:
                want = (NVLINK5_INTRA[algo_name] if name in NVLINK5 else
                        XGMI_INTRA[algo_name] if name in XGMI else d.efficiency_intra)
                assert p.efficiency_intra == want, (name, algo_name)
            if p.efficiency_inter is not None:
                assert p.efficiency_inter == d.efficiency_inter, (name, algo_name)
            if p.step_latency_us is not None:
                assert p.step_latency_us == d.step_latency_us, (name, algo_name)


def test_load_by_path_and_roundtrip(tmp_path):
    c = load_cluster(clusters_dir() / "h100x128.yaml")
    assert c == load_cluster("h100x128")
    p = tmp_path / "copy.yaml"
    p.write_text(yaml.safe_dump(c.to_dict(), sort_keys=False))
    assert load_cluster(p) == c
    assert load_cluster(c) is c


def test_variants_are_new_frozen_specs():
    c = load_cluster("h100x128")
    fast = c.with_nic_Gbps(800)
    assert fast.inter_node.nic_Gbps == 800 and fast.inter_node.nic_GBps == 100
    assert c.inter_node.nic_Gbps == 400
    assert fast.key() != c.key()
    bigger = c.replace(nodes=32)
    assert bigger.gpus == 256 and c.gpus == 128
    assert c.with_inter_node(oversubscription=2).inter_node.oversubscription == 2
    with pytest.raises(InputError) as err:  # variants are validated like files
        c.replace(nodes=0)
    assert err.value.where == "nodes"
    with pytest.raises(InputError):
        c.with_inter_node(nics_per_node=3)
    with pytest.raises(AttributeError):
        c.nodes = 3  # type: ignore[misc]
    assert isinstance(hash(c.inter_node), int)


def test_gpus_key_fills_nodes():
    d = dict(BASE)
    del d["nodes"]
    d["gpus"] = 24
    c = cluster_from_dict(d, "x.yaml")
    assert c.nodes == 3 and c.gpus == 24


def _bad(mutate, where, file="bad.yaml"):
    d = copy.deepcopy(BASE)
    mutate(d)
    with pytest.raises(InputError) as err:
        cluster_mapping(d, file)
    assert err.value.file == file
    assert err.value.where == where, err.value.line()
    return err.value


@pytest.mark.parametrize(
    "mutate, where",
    [
        (lambda d: d.update(colour="red"), "colour"),
        (lambda d: d["intra_node"].update(bandwith_GBps=1), "intra_node.bandwith_GBps"),
        (lambda d: d["inter_node"].update(nic_gbps=1), "inter_node.nic_gbps"),
        (lambda d: d["intra_node"].update(bandwidth_GBps=-5), "intra_node.bandwidth_GBps"),
        (lambda d: d["intra_node"].update(bandwidth_GBps=0), "intra_node.bandwidth_GBps"),
        (lambda d: d["inter_node"].update(nic_Gbps=0), "inter_node.nic_Gbps"),
        (lambda d: d["inter_node"].update(oversubscription=-1), "inter_node.oversubscription"),
        (lambda d: d.update(gpus=20), "gpus"),
        (lambda d: d.update(gpus=24), "gpus"),
        (lambda d: d.update(nodes=0), "nodes"),
        (lambda d: d.update(gpus_per_node=2.5), "gpus_per_node"),
        (lambda d: d["inter_node"].update(nics_per_node=3), "inter_node.nics_per_node"),
        (lambda d: d["inter_node"].update(nics_per_node=8_000_000_000), "inter_node.nics_per_node"),
        (lambda d: d.pop("inter_node"), "inter_node"),
        (lambda d: d["intra_node"].pop("latency_us"), "intra_node.latency_us"),
        (lambda d: d["intra_node"].update(kind="infinity_fabric"), "intra_node.kind"),
        (lambda d: d["intra_node"].update(kind="pcie"), "intra_node.nvls"),
        (lambda d: d["inter_node"].update(topology="torus"), "inter_node.topology"),
        (lambda d: d["inter_node"].update(topology="spine_leaf", levels=3), "inter_node.levels"),
        (lambda d: d.update(collectives={"select": {"all_reduce": "magic"}}), "collectives.select.all_reduce"),
        (lambda d: d.update(collectives={"select": {"all_to_all": "nvls"}}), "collectives.select.all_to_all"),
        (lambda d: d.update(collectives={"select": {"allreduce": "ring"}}), "collectives.select.allreduce"),
        (lambda d: d.update(collectives={"algorithms": {"ring": {"efficiency": 1.3}}}), "collectives.algorithms.ring.efficiency"),
        (lambda d: d.update(collectives={"algorithms": {"ring": {"efficiency": {"intra": 0}}}}), "collectives.algorithms.ring.efficiency.intra"),
        (lambda d: d.update(collectives={"algorithms": {"ring": {"eff": 0.5}}}), "collectives.algorithms.ring.eff"),
        (lambda d: d.update(collectives={"algorithms": {"rign": {}}}), "collectives.algorithms.rign"),
        (lambda d: d.update(device=7), "device"),
    ],
)
def test_bad_specs_name_file_and_key(mutate, where):
    _bad(mutate, where)


def test_collectives_section_parsed():
    d = copy.deepcopy(BASE)
    d["collectives"] = {
        "select": {"all_reduce": ["nvls", "ring"], "all_gather": "ring"},
        "algorithms": {"ring": {"efficiency": {"intra": 0.7}, "step_latency_us": 2}, "tree": {"efficiency": 0.5}},
    }
    c = cluster_from_dict(d, "x.yaml")
    assert c.collectives.selection("all_reduce") == ("nvls", "ring")
    assert c.collectives.selection("all_gather") == ("ring",)
    assert c.collectives.selection("all_to_all") == ("auto",)
    ring = c.collectives.params("ring")
    assert (ring.efficiency_intra, ring.efficiency_inter, ring.step_latency_us) == (0.7, None, 2)
    tree = c.collectives.params("tree")
    assert tree.efficiency_intra == tree.efficiency_inter == 0.5
    assert cluster_from_dict(c.to_dict(), "y.yaml") == c


def test_unknown_cluster_name_lists_known():
    with pytest.raises(InputError) as err:
        load_cluster("h100x9999")
    assert err.value.file == "--cluster"
    assert "h100x8" in err.value.message


def test_bad_yaml_file(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("name: [unclosed\n")
    with pytest.raises(InputError) as err:
        load_cluster(p)
    assert err.value.file == str(p)


def test_unknown_device_is_rejected_via_device_profiles():
    d = copy.deepcopy(BASE)
    d["device"] = "tpu-v9"
    with pytest.raises(InputError) as err:
        cluster_from_dict(d, "x.yaml")
    assert err.value.where == "device"


def test_spec_is_a_frozen_dataclass():
    import dataclasses

    assert dataclasses.is_dataclass(ClusterSpec)
    assert ClusterSpec.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert clusters_dir().name == "topologies"
