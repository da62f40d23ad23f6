"""ASTRA-sim system JSON keys -> tracesim collective choices and device settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracesim.catalog import load_cluster
from tracesim.errors import InputError
from tracesim.hardware.device import get_device
from tracesim.interop.aicb import read_aicb
from tracesim.interop.aicb_graph import aicb_to_graph
from tracesim.interop.astrasim_system import (
    apply_system,
    load_astrasim_system,
    system_from_astrasim_dict,
)
from tracesim.network.model import NetworkModel
from tracesim.pipeline import replay_graph

DATA = Path(__file__).resolve().parent / "data" / "interop"


def test_fixture_maps_and_reports_every_key():
    m = load_astrasim_system(DATA / "astrasim_system.json")
    assert m.collectives["select"] == {
        "all_reduce": ["hierarchical", "ring"],
        "all_gather": ["ring"],
        "reduce_scatter": ["ring"],
        "all_to_all": ["direct"],
    }
    assert m.collectives["algorithms"]["ring"] == {"step_latency_us": 0.01}
    text = " ".join(m.warnings)
    for key in ("LIFO", "localBWAware", "active-chunks-per-dimension", "preferred-dataset-splits"):
        assert key in text
    assert m.ignored == ("boost-mode",)
    assert "not used" in m.mapped["local-mem-bw"]
    data = json.loads((DATA / "astrasim_system.json").read_text())
    accounted = set(m.mapped) | set(m.ignored) | {w.split()[0].split("[")[0] for w in m.warnings}
    assert set(data) <= accounted  # every key is mapped, warned about or listed as ignored


def test_unknown_keys_and_values_are_errors():
    with pytest.raises(InputError, match="unknown ASTRA-sim system key 'warp-speed'") as e:
        system_from_astrasim_dict({"warp-speed": 9}, "sys.json")
    assert e.value.where == "warp-speed"
    with pytest.raises(InputError, match="unknown ASTRA-sim collective implementation 'fast'") as e:
        system_from_astrasim_dict({"all-gather-implementation": ["ring", "fast"]}, "sys.json")
    assert e.value.where == "all-gather-implementation[1]"
    with pytest.raises(InputError, match="LIFO, FIFO or EXPLICIT"):
        system_from_astrasim_dict({"scheduling-policy": "RANDOM"})


def test_unsupported_algorithms_are_warned_not_dropped():
    m = system_from_astrasim_dict({"all-reduce-implementation": ["halvingDoubling"],
                                   "all-to-all-implementation": "ring_direct"})
    assert "all_reduce" not in m.collectives.get("select", {})
    assert m.collectives["select"]["all_to_all"] == ["direct"]
    assert any("halving-doubling" in w for w in m.warnings)
    assert any("does not implement all_to_all" in w for w in m.warnings)


def test_applied_choice_reaches_the_network_model():
    base = load_cluster("h100x128")
    m = load_astrasim_system(DATA / "astrasim_system.json")
    c = apply_system(base, m)
    net = NetworkModel(c)
    two_nodes = tuple(range(0, 16))
    one_node = tuple(range(8))
    assert net.compiled("all_reduce", two_nodes, 1 << 26).algorithm == "hierarchical"
    assert net.compiled("all_reduce", one_node, 1 << 26).algorithm == "ring"
    assert net.compiled("all_gather", two_nodes, 1 << 26).algorithm == "ring"
    # endpoint-delay 10 ns replaces the calibrated per-step latency of every algorithm
    assert dict(c.collectives.algorithms)["ring"].step_latency_us == pytest.approx(0.01)
    assert dict(c.collectives.algorithms)["ring"].efficiency_inter == \
        dict(base.collectives.algorithms)["ring"].efficiency_inter


def test_roofline_keys_set_the_device():
    m = system_from_astrasim_dict({"roofline-enabled": 1, "peak-perf": 900, "local-mem-bw": 1600})
    c = apply_system(load_cluster("h100x8"), m)
    dev = get_device(c.device)
    assert dev.peak_flops("bf16") == pytest.approx(900e12)
    assert dev.hbm_GBps == pytest.approx(1600)
    assert dev.peak_flops("fp32") == get_device("h100").peak_flops("fp32")


def test_astrasim_network_and_system_replay_an_aicb_workload(tmp_path):
    """An ASTRA-sim analytical network YAML plus system JSON as the cluster for an imported
    AICB workload: the system's algorithm choice changes the replayed iteration."""
    net = tmp_path / "network.yml"
    net.write_text("topology: [ Switch, Switch ]\nnpus_count: [ 4, 2 ]\n"
                   "bandwidth: [ 300.0, 25.0 ]\nlatency: [ 500.0, 2000.0 ]\n")
    g = aicb_to_graph(read_aicb(DATA / "moe_ep2.txt"))
    plain = replay_graph(g, net).to_dict()
    sysjson = tmp_path / "sys.json"
    sysjson.write_text(json.dumps({"all-reduce-implementation": ["direct"],
                                   "all-gather-implementation": ["direct"],
                                   "reduce-scatter-implementation": ["direct"],
                                   "all-to-all-implementation": ["direct"],
                                   "scheduling-policy": "FIFO"}))
    direct = replay_graph(g, net, sysjson).to_dict()
    assert plain["gpus"] == direct["gpus"] == 8
    assert direct["iteration_time_s"] != plain["iteration_time_s"]
    assert direct["warnings"] == []
