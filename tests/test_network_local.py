"""Local max-min updates (tracesim.network.local) give the rates of the whole solve.

The solve records a bottleneck link per flow (saturated, no faster flow on it: the
certificate of a max-min allocation); a local update re-solves only the flows whose
certificate a start or an end breaks. Checked here: the certificate of every solve on random
problems, random flow workloads on random capacities with and without local updates (every
batch ends at the same nanosecond), the fabric's collectives mixed at random (the same), and
a whole symmetric replay at 512 GPUs.
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from tests.test_network_fastpath import _workload, run_ops
from tracesim.network import flows as netflows
from tracesim.network import local as netlocal
from tracesim.network.maxmin import max_min_bottlenecks, max_min_rates


@pytest.mark.parametrize("seed", range(8))
def test_every_flow_is_max_on_a_saturated_link_of_its_route(seed: int):
    rng = np.random.default_rng(seed)
    n_links = int(rng.integers(3, 40))
    cap = rng.uniform(1.0, 50.0, n_links)
    routes = [sorted(rng.choice(n_links, int(rng.integers(1, 5)), replace=False).tolist())
              for _ in range(int(rng.integers(1, 120)))]
    lens = [len(r) for r in routes]
    e_flow = np.repeat(np.arange(len(routes)), lens)
    e_link = np.concatenate([np.asarray(r) for r in routes])
    rate, bott = max_min_bottlenecks(e_flow, e_link, cap)
    assert np.allclose(rate, max_min_rates(routes, cap), rtol=1e-12)
    load = np.bincount(e_link, weights=rate[e_flow], minlength=n_links)
    top = np.zeros(n_links)
    np.maximum.at(top, e_link, rate[e_flow])
    for f, r in enumerate(routes):
        b = int(bott[f])
        assert b in r
        assert load[b] >= cap[b] * (1 - 1e-9)
        assert rate[f] >= top[b] * (1 - 1e-9)


def _flow_ends(seed: int, *, local: bool, n_batches: int = 40) -> tuple[list[int], int]:
    """End time of each batch of a random workload on random links, and the local updates."""
    rng = np.random.default_rng(seed)
    n_links = 300
    cap = rng.uniform(5.0, 100.0, n_links)
    net = netflows.FlowNetwork(cap)
    net.local = local
    env = simpy.Environment()
    net.attach(env)
    ends = [-1] * n_batches
    # a few long batches of many flows (the all-reduces) and many short ones (transfers)
    specs = []
    for i in range(n_batches):
        big = i % 6 == 0
        n = int(rng.integers(60, 120)) if big else int(rng.integers(1, 12))
        lens = rng.integers(1, 5, n)
        links = np.concatenate([rng.choice(n_links, k, replace=False) for k in lens])
        ptr = np.r_[0, np.cumsum(lens)]
        # a big batch's flows end in a few groups (a ring's copies), not all apart
        nbytes = (rng.choice([4e5, 8e5, 1.6e6], n) if big else rng.uniform(1e4, 2e5, n))
        nbytes[rng.random(n) < 0.05] = 0.0
        specs.append((int(rng.integers(0, 200_000)), ptr, links, nbytes))

    def go(i: int, t0: int, ptr: np.ndarray, links: np.ndarray, nbytes: np.ndarray):  # noqa: ANN202
        yield env.timeout(t0)
        yield net.start(ptr, links, nbytes)
        ends[i] = int(env.now)

    for i, spec in enumerate(specs):
        env.process(go(i, *spec))
    env.run()
    assert not net.link_flows.any()
    return ends, net.local_updates


@pytest.mark.parametrize("seed", range(4))
def test_local_updates_end_every_batch_when_the_whole_solve_does(seed: int,
                                                                 monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(netlocal, "LOCAL_MIN_ENTRIES", 0)
    monkeypatch.setattr(netlocal, "LOCAL_MIN_RATIO", 0)
    rounds: list[int] = []
    solve, gather = netlocal.LocalUpdates._local_solve, netlocal.LocalUpdates._entries_on

    def counted_solve(self, *a):  # noqa: ANN001, ANN002, ANN202
        rounds.append(0)
        return solve(self, *a)

    def counted_gather(self, *a):  # noqa: ANN001, ANN002, ANN202
        rounds[-1] += 1
        return gather(self, *a)

    monkeypatch.setattr(netlocal.LocalUpdates, "_local_solve", counted_solve)
    monkeypatch.setattr(netlocal.LocalUpdates, "_entries_on", counted_gather)
    whole, none = _flow_ends(seed, local=False)
    part, used = _flow_ends(seed, local=True)
    assert none == 0 and used > 0
    assert max(rounds) >= 2  # some updates grew the free set
    assert part == whole


@pytest.mark.parametrize("cluster", ["rail", "ecmp-o2", "adaptive-o4"])
def test_collectives_on_a_fabric_end_as_with_whole_solves(cluster: str,
                                                         monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(netlocal, "LOCAL_MIN_ENTRIES", 0)
    monkeypatch.setattr(netlocal, "LOCAL_MIN_RATIO", 0)
    ops = _workload(3, 64, 120)
    monkeypatch.setattr(netlocal.LocalUpdates, "local", False)
    whole, _ = run_ops(cluster, ops, fast=True)
    monkeypatch.setattr(netlocal.LocalUpdates, "local", True)
    part, model = run_ops(cluster, ops, fast=True)
    assert model.flows.local_updates > 0
    assert part == whole


def test_a_symmetric_replay_at_512_gpus_keeps_its_iteration_time(monkeypatch: pytest.MonkeyPatch):
    from tests.helpers import retarget

    opts = {"model": "llama3-8b", "cluster": "gb200-nvl72", "nodes": 8, "tp": 2, "pp": 4,
            "dp": 64, "micro_batch": 1, "global_batch": 512, "seq_len": 2048}
    counted = [0]
    orig = netlocal.LocalUpdates._try_local

    def count(self, gids, comps, now):  # noqa: ANN001, ANN202
        got = orig(self, gids, comps, now)
        counted[0] += got is not None
        return got

    monkeypatch.setattr(netlocal.LocalUpdates, "local", False)
    whole = retarget(opts).iteration_time_s
    monkeypatch.setattr(netlocal.LocalUpdates, "local", True)
    monkeypatch.setattr(netlocal.LocalUpdates, "_try_local", count)
    assert abs(retarget(opts).iteration_time_s - whole) <= 1e-8
    assert counted[0] > 0
