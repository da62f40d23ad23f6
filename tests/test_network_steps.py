"""``--network flow-steps``: the flow model with every ring step on its own (the reference
the default's rounds approximate, docs/network.md "Collective algorithms")."""

from __future__ import annotations

import json

import simpy

from tracesim.catalog import load_cluster
from tracesim.network.model import NetworkModel, replay_network
from tracesim.options import NETWORKS


def test_replay_network_choices() -> None:
    c = load_cluster("h100x128")
    assert "flow-steps" in NETWORKS
    assert replay_network(c, "flow-steps").phases == "steps"
    for net in ("flow", "flow-relays", "estimate", None):
        assert replay_network(c, net).phases == "auto"
    assert replay_network(c, "flow-relays")._shared.relay_hops
    assert not replay_network(c, "flow-steps")._shared.relay_hops


def _ring_beside_a_transfer(mode: str) -> dict[str, float]:
    """A 4-rank ring all-gather over two nodes (NVLink hops 0 -> 1 and 8 -> 9, InfiniBand
    hops 1 -> 8 and 9 -> 0) and, from 20 us on, a 256 MiB transfer 0 -> 1 on the same NVLink
    port: when each ends."""
    env = simpy.Environment()
    model = NetworkModel(load_cluster("h100x128"), phases=mode)
    model.attach(env)
    out: dict[str, float] = {}

    def ring():
        yield model.collective("all_gather", (0, 1, 8, 9), 1 << 30)
        out["ring"] = env.now

    def transfer():
        yield env.timeout(20_000)
        yield model.p2p(0, 1, 1 << 28)
        out["transfer"] = env.now

    env.process(ring())
    env.process(transfer())
    env.run()
    return out


def test_a_rings_fast_hops_burst_within_a_round_but_not_step_by_step() -> None:
    """The ring, started on free links, runs its steps as one round: its NVLink hop carries
    all three steps' bytes at its own max-min rate and shares the port with the transfer for
    that whole time; step by step the hop waits for the InfiniBand hops after every step and
    leaves the port to the transfer. The ring ends with its InfiniBand hops either way."""
    grouped, steps = _ring_beside_a_transfer("auto"), _ring_beside_a_transfer("steps")
    assert steps["ring"] == grouped["ring"]
    assert steps["transfer"] < 0.8 * grouped["transfer"]


def test_cli_network_flow_steps_reaches_the_report() -> None:
    from click.testing import CliRunner

    from tracesim.cli import cli

    args = ["replay", "--model", "llama3-8b", "--cluster", "h100x128", "--nodes", "2", "--dp", "16",
            "--global-batch", "16", "--micro-batch", "1", "--seq-len", "2048", "--network", "flow-steps"]
    r = CliRunner().invoke(cli, [*args, "--json"], obj={})
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["replay"]["network"] == "flow-steps"
    text = CliRunner().invoke(cli, args, obj={}).output
    assert "every ring step on its own" in text
