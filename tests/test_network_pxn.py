"""PXN relays: a ring edge or a transfer that leaves its node on another GPU's NIC.

On a rail-optimised fabric NCCL sends a node-crossing edge on the NIC of the destination's
rail, relayed over NVLink to the GPU owning it (PXN). Ring / tree edges and point-to-point
transfers keep that hop's latency but not the hop itself as a link of their flow (it is at
most the NIC's rate); all-to-alls keep it; ``NetworkModel(relay_hops=True)`` keeps it
everywhere. Checked here in closed form on two H100 nodes (450 GB/s NVLink ports, 50 GB/s
NICs).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import simpy

from tracesim.catalog import load_cluster
from tracesim.network.model import NetworkModel
from tracesim.network.topology import KIND_INTRA, KIND_NIC

MIB = 1 << 20


def _cluster():  # type: ignore[no-untyped-def]
    return load_cluster("h100x128")


def _kinds(model: NetworkModel, links: np.ndarray) -> set[int]:
    return {int(k) for k in model.topology.kind[links]}


@pytest.mark.parametrize("relay_hops", [False, True])
def test_relayed_transfer_keeps_its_latency_not_its_hop(relay_hops: bool) -> None:
    """gpu0 (node 0, rail 0) -> gpu9 (node 1, rail 1): out on node 0's rail-1 NIC, owned
    by gpu1, so the route starts with the NVLink hop gpu0 -> gpu1."""
    model = NetworkModel(_cluster(), relay_hops=relay_hops)
    route = model.router.route(0, 9)
    assert model.topology.kind[route[0]] == KIND_INTRA
    links = model.links_of_p2p(0, 9)
    assert (KIND_INTRA in _kinds(model, links)) is relay_hops
    assert KIND_NIC in _kinds(model, links)
    kept = NetworkModel(_cluster(), relay_hops=True)._compiled_p2p(0, 9)
    cc = model._compiled_p2p(0, 9)
    assert cc is not None and kept is not None
    assert cc.fixed_ns == kept.fixed_ns == pytest.approx(
        1000.0 + model.router.latency_ns(route))  # the p2p step latency + the whole route


def test_transfer_on_its_own_rail_is_unchanged() -> None:
    """gpu0 -> gpu8: the same rail on both nodes, no relay; both settings give one route."""
    a = NetworkModel(_cluster()).links_of_p2p(0, 8)
    b = NetworkModel(_cluster(), relay_hops=True).links_of_p2p(0, 8)
    assert np.array_equal(np.sort(a), np.sort(b))


def test_ring_of_an_uneven_group_drops_its_relay_hops() -> None:
    """Ranks 0..7 of node 0 and gpu 8 of node 1: node 1's lone GPU reaches the eight
    channels' rails over NVLink; the ring's flows cross NVLink only inside node 0."""
    grp = tuple(range(9))
    out = NetworkModel(_cluster(), {"all_reduce": "ring"})
    keep = NetworkModel(_cluster(), {"all_reduce": "ring"}, relay_hops=True)
    a = out.compiled("all_reduce", grp, 64 * MIB)
    b = keep.compiled("all_reduce", grp, 64 * MIB)
    assert a.fixed_ns == b.fixed_ns
    t = out.topology
    node1_ports = {int(t.gpu_up[g]) for g in range(8, 16)} | {int(t.gpu_down[g]) for g in range(8, 16)}
    assert not node1_ports & set(np.concatenate([p.e_link for p in a.phases]).tolist())
    assert node1_ports & set(np.concatenate([p.e_link for p in b.phases]).tolist())


def test_all_to_all_keeps_its_relay_hops() -> None:
    grp = (0, 1, 8, 9)
    links = NetworkModel(_cluster(), {"all_to_all": "direct"}).compiled("all_to_all", grp, 64 * MIB)
    kinds = {int(k) for p in links.phases for k in NetworkModel(_cluster()).topology.kind[p.e_link]}
    assert KIND_INTRA in kinds and KIND_NIC in kinds


def _port_share_ns(relay_hops: bool) -> int:
    """End of an NVLink transfer gpu0 -> gpu1 while a relayed transfer gpu0 -> gpu9 runs
    (out over gpu0's port to gpu1's NIC)."""
    env = simpy.Environment()
    model = NetworkModel(_cluster(), relay_hops=relay_hops)
    model.attach(env)
    ends: dict[str, int] = {}
    for name, (s, d, n) in {"nvlink": (0, 1, 256 * MIB), "relayed": (0, 9, 256 * MIB)}.items():
        model.p2p(s, d, n).callbacks.append(lambda _e, name=name: ends.__setitem__(name, int(env.now)))
    env.run()
    return ends["nvlink"]


def test_the_hop_takes_its_share_of_the_port_only_when_kept() -> None:
    """Kept, the relayed flow (at its NIC's 50 x 0.94 GB/s) takes that much of gpu0's
    450 GB/s port from the NVLink transfer; left out, the NVLink transfer has the port."""
    out, kept = _port_share_ns(False), _port_share_ns(True)
    nbytes = 256 * MIB
    eff = 0.80  # p2p inside a node, as the ring (docs/network.md)
    alone = nbytes / eff / 450.0
    assert out == pytest.approx(alone, rel=0.01)
    assert kept == pytest.approx(nbytes / eff / (450.0 - 50.0), rel=0.01)


def test_cli_network_flow_relays_keeps_the_hops() -> None:
    """``--network flow-relays`` reaches the network model and the report (the stage 1 -> 2
    transfers, gpus 4-7 -> 8-11, leave node 0 relayed to rails 0-3)."""
    from click.testing import CliRunner

    from tracesim.cli import cli

    args = ["replay", "--model", "llama3-8b", "--cluster", "h100x128", "--tp", "4", "--pp", "4",
            "--dp", "1", "--global-batch", "8", "--micro-batch", "1", "--seq-len", "2048"]
    out: dict[str, dict] = {}
    for net in ("flow", "flow-relays"):
        r = CliRunner().invoke(cli, [*args, "--network", net, "--json"], obj={})
        assert r.exit_code == 0, r.output
        out[net] = json.loads(r.output)
        assert out[net]["replay"]["network"] == net
    text = CliRunner().invoke(cli, [*args, "--network", "flow-relays"], obj={}).output
    assert "PXN relay hops in the flows" in text


def test_a_degraded_nvlink_port_keeps_every_hop() -> None:
    """With an NVLink port at half its rate the relay through it must see that rate: the
    relayed transfer gpu0 -> gpu9 (over gpu1's NIC) crosses gpu1's degraded down-port."""
    from tracesim.specs.fabric import parse_link_faults

    c = _cluster().with_fabric(parse_link_faults("gpu1:0.5"))
    model = NetworkModel(c)
    assert model._shared.relay_hops
    assert KIND_INTRA in _kinds(model, model.links_of_p2p(0, 9))
    assert not NetworkModel(_cluster())._shared.relay_hops
