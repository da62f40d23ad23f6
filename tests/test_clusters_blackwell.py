"""The Blackwell cluster specs: DGX B200, DGX B300, GB200 NVL72 and GB300 NVL72 build and replay.

An NVL72 rack is one 72-GPU NVLink domain, expressed as ``gpus_per_node: 72`` (the "node" of
a cluster spec is its NVLink domain); racks are scaled with ``nodes`` like the H100 specs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import retarget
from tracesim.catalog import known_clusters, load_cluster
from tracesim.fileio import write_yaml
from tracesim.hardware.device import get_device
from tracesim.network.topology import KIND_INTRA, KIND_NIC, Topology

#: name: (gpus per node, device, NVLink GB/s per direction, NICs per node, NIC Gb/s)
EXPECT = {"dgx-b200": (8, "b200", 900, 8, 400), "gb200-nvl72": (72, "gb200", 900, 72, 400),
          "gb300-nvl72": (72, "gb300", 900, 72, 800), "dgx-b300": (8, "b300", 900, 8, 800)}


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_spec_loads_with_datasheet_figures_and_sources(name: str) -> None:
    gpn, dev, nvlink, nics, nic = EXPECT[name]
    assert name in known_clusters()
    c = load_cluster(name)
    assert (c.nodes, c.gpus_per_node, get_device(c.device).name) == (1, gpn, dev)
    assert c.intra_node.kind == "nvswitch" and c.intra_node.bandwidth_GBps == nvlink
    assert c.intra_node.nvls
    assert c.inter_node is not None
    assert (c.inter_node.nics_per_node, c.inter_node.nic_Gbps) == (nics, nic)
    assert len(c.sources) >= 3


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_topology_scales_with_nodes(name: str) -> None:
    c = load_cluster(name)
    one = Topology(c)
    assert (one.kind == KIND_NIC).sum() == 0  # one rack / node: no fabric to simulate
    assert (one.kind == KIND_INTRA).sum() == 2 * c.gpus_per_node  # every GPU to the NVLink switch
    two = Topology(c.replace(nodes=2))
    assert two.n_gpus == 2 * c.gpus_per_node
    assert (two.kind == KIND_NIC).sum() == 2 * 2 * c.inter_node.nics_per_node  # type: ignore[union-attr]


def test_nvl72_keeps_data_parallel_traffic_of_72_gpus_on_nvlink(tmp_path: Path) -> None:
    # the same 72-GPU layout on one NVL72 rack and on 9 DGX B200 nodes: the gradient
    # all-reduce stays on NVLink in the rack and crosses the 400 Gb/s NICs between the nodes
    res = {}
    for cluster, nodes in (("gb200-nvl72", 1), ("dgx-b200", 9)):
        path = tmp_path / f"{cluster}.yaml"
        write_yaml(path, load_cluster(cluster).replace(nodes=nodes).to_dict())
        res[cluster] = retarget({"model": "llama3-8b", "cluster": str(path), "tp": 8, "pp": 1,
                                 "dp": 9, "global_batch": 9, "micro_batch": 1,
                                 "seq_len": 1024}).to_dict()
    assert res["gb200-nvl72"]["gpus"] == res["dgx-b200"]["gpus"] == 72
    assert (res["gb200-nvl72"]["breakdown"]["exposed_comm_s"]["dp"]
            < res["dgx-b200"]["breakdown"]["exposed_comm_s"]["dp"])


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_replays_a_small_model(name: str) -> None:
    gpn = EXPECT[name][0]
    out = retarget({"model": "llama-tiny", "cluster": name, "tp": 1, "pp": 1, "dp": gpn,
                    "global_batch": gpn, "micro_batch": 1}).to_dict()
    assert out["gpus"] == gpn and out["iteration_time_s"] > 0
    assert 0 < out["mfu"] < 1


def test_the_nodes_option_scales_a_shipped_spec(tmp_path: Path) -> None:
    # --nodes 9 on dgx-b200 is the spec with nodes: 9 written out, to the nanosecond
    opts = {"model": "llama3-8b", "tp": 8, "pp": 1, "dp": 9, "global_batch": 9,
            "micro_batch": 1, "seq_len": 1024}
    path = tmp_path / "dgx-b200x9.yaml"
    write_yaml(path, load_cluster("dgx-b200").replace(nodes=9).to_dict())
    scaled = retarget({**opts, "cluster": "dgx-b200", "nodes": 9}).to_dict()
    written = retarget({**opts, "cluster": str(path)}).to_dict()
    assert scaled["gpus"] == 72 and scaled["iteration_time_s"] == written["iteration_time_s"]
    # a single-node spec without a fabric cannot grow
    from tracesim.errors import InputError

    with pytest.raises(InputError, match="inter-node fabric"):
        retarget({"model": "llama-tiny", "cluster": "host-cpu", "nodes": 2, "dp": 2})
