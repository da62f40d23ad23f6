"""The flow model's fast path (tracesim.network.fastpath) changes no time.

An operation alone on its links runs as one timeout with its links reserved; when another
batch comes onto them, or a collective asks whether they are busy, it is released into the
flow state it would have had. Every operation here must end at the same nanosecond with and
without the fast path: lone operations, operations joined in their latency, in their flows
and in a later phase, rings of different groups crossing the same uplinks, and whole replays.
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from tests.helpers import retarget
from tracesim.catalog import load_cluster
from tracesim.network import model as netmodel
from tracesim.network.model import NetworkModel

MIB = 1 << 20


CLUSTERS = {
    "rail": lambda: load_cluster("h100x128"),
    "ecmp-o2": lambda: load_cluster("h100x1024").with_inter_node(routing="ecmp", oversubscription=2),
    "adaptive-o4": lambda: load_cluster("h100x1024").with_inter_node(oversubscription=4),
}


def run_ops(cluster: str, ops: list[tuple[int, str, tuple[int, ...], int]], *, fast: bool,
            phases: str = "auto", memo: bool = True) -> tuple[list[int], NetworkModel]:
    """End time of each (start_ns, collective, ranks, bytes), and the network model after the
    run (``send_recv`` is a transfer ranks[0] -> ranks[1]; ``memo``: the flow network's
    recorded trajectories, tests/test_network_memo.py)."""
    env = simpy.Environment()
    model = NetworkModel(CLUSTERS[cluster](), phases=phases, fast_path=fast)
    model.flows.memo = memo
    model.attach(env)
    ends = [-1] * len(ops)

    def go(i: int, t0: int, coll: str, ranks: tuple[int, ...], nbytes: int):  # noqa: ANN202
        yield env.timeout(t0)
        if coll == "send_recv":
            ev = model.p2p(ranks[0], ranks[1], nbytes)
        else:
            ev = model.collective(coll, ranks, nbytes, "x")
        yield ev
        ends[i] = int(env.now)

    for i, (t0, coll, ranks, nbytes) in enumerate(ops):
        env.process(go(i, t0, coll, ranks, nbytes))
    env.run()
    return ends, model


def _ends(cluster: str, ops: list[tuple[int, str, tuple[int, ...], int]], *, fast: bool,
          phases: str = "auto") -> tuple[list[int], int]:
    """End times and how many operations ran on the fast path."""
    ends, model = run_ops(cluster, ops, fast=fast, phases=phases)
    return ends, model.flows.reservations._next


def _workload(seed: int, gpus: int, n_ops: int) -> list[tuple[int, str, tuple[int, ...], int]]:
    rng = np.random.default_rng(seed)
    ops = []
    node = 8
    for _ in range(n_ops):
        t0 = int(rng.integers(0, 400_000))
        kind = rng.integers(0, 4)
        nbytes = int(rng.choice([0, 4096, MIB, 16 * MIB, 64 * MIB]))
        if kind == 0:  # TP inside a node
            n0 = int(rng.integers(0, gpus // node)) * node
            ops.append((t0, "all_reduce", tuple(range(n0, n0 + node)), nbytes))
        elif kind == 1:  # a DP ring on one local index
            t = int(rng.integers(0, node))
            ops.append((t0, "all_reduce", tuple(range(t, gpus, node)), nbytes))
        elif kind == 2:  # a transfer between nodes
            a, b = rng.choice(gpus, 2, replace=False)
            ops.append((t0, "send_recv", (int(a), int(b)), nbytes))
        else:
            t = int(rng.integers(0, node))
            coll = str(rng.choice(["all_gather", "reduce_scatter", "all_to_all"]))
            ops.append((t0, coll, tuple(range(t, gpus, node)), nbytes))
    return ops


@pytest.mark.parametrize("cluster", list(CLUSTERS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_overlaps_same_times(cluster: str, seed: int):
    ops = _workload(seed, 64, 60)
    slow, none = _ends(cluster, ops, fast=False)
    fast, taken = _ends(cluster, ops, fast=True)
    assert none == 0 and taken > 0
    assert fast == slow


def test_joined_in_latency_flows_and_later_phase():
    ring = tuple(range(0, 64, 8))
    base = [(0, "all_reduce", ring, 64 * MIB)]
    alone, taken = _ends("ecmp-o2", base, fast=True)
    assert taken == 1
    t_end = alone[0]
    # a transfer onto the ring's first link at several instants of its life
    for t in (0, 1, 5_000, t_end // 3, t_end // 2, t_end - 1, t_end):
        ops = [*base, (t, "send_recv", (0, 8), 16 * MIB)]
        assert _ends("ecmp-o2", ops, fast=True)[0] == _ends("ecmp-o2", ops, fast=False)[0]


def _recorded(cluster: str, ops: list[tuple[int, str, tuple[int, ...], int]], *,
              fast: bool) -> tuple[list[int], tuple[np.ndarray, np.ndarray], np.ndarray, int, int]:
    """Sorted end times, the recorder's (links, bytes per 40 bins), bytes per link, flow
    records and fast-path operations of ``ops`` run with a LinkRecorder."""
    from tracesim.report.links import LinkRecorder

    env = simpy.Environment()
    model = NetworkModel(CLUSTERS[cluster](), fast_path=fast)
    rec = LinkRecorder.install(model)
    model.attach(env)
    ends: list[int] = []

    def go(t0: int, coll: str, ranks: tuple[int, ...], nbytes: int):  # noqa: ANN202
        yield env.timeout(t0)
        yield (model.p2p(ranks[0], ranks[1], nbytes) if coll == "send_recv"
               else model.collective(coll, ranks, nbytes, "x"))
        ends.append(int(env.now))

    for op in ops:
        env.process(go(*op))
    env.run()
    edges = np.linspace(0, max(ends), 41)
    return (sorted(ends), rec.traffic(edges), rec.link_bytes.copy(), len(rec.records),
            model.flows.reservations._next)


@pytest.mark.parametrize("cluster", ["rail", "ecmp-o2"])
def test_recorded_traffic_same_with_the_fast_path(cluster: str):
    """A result directory's per-link traffic (a LinkRecorder) takes the fast path too: the
    operations that end on it hand their flows to the record, those released finish as
    flows, and every link carries the same bytes in every time bin as without it."""
    ops = _workload(3, 64, 60)
    e1, (l1, b1), lb1, n1, taken = _recorded(cluster, ops, fast=True)
    e0, (l0, b0), lb0, n0, none = _recorded(cluster, ops, fast=False)
    assert taken > 0 and none == 0
    assert e1 == e0 and n1 == n0
    np.testing.assert_array_equal(l1, l0)
    np.testing.assert_allclose(b1, b0, rtol=1e-12, atol=1e-6)
    np.testing.assert_allclose(lb1, lb0, rtol=1e-12)
    np.testing.assert_allclose(b1.sum(axis=1), lb1[l1], rtol=1e-9)  # every byte, in some bin


def test_aggregate_phases_same_times():
    ops = _workload(7, 64, 40)
    assert (_ends("ecmp-o2", ops, fast=True, phases="aggregate")[0]
            == _ends("ecmp-o2", ops, fast=False, phases="aggregate")[0])


SMALL = {"model": "gpt3-1.7b", "cluster": "h100x128", "tp": 2, "pp": 2, "dp": 16,
         "micro_batch": 1, "global_batch": 64, "network": "flow"}


def test_replay_same_times(monkeypatch: pytest.MonkeyPatch):
    fast = retarget({**SMALL, "full": True}).to_dict()
    orig = netmodel.NetworkModel.__init__

    def no_fast(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        orig(self, *a, **{**k, "fast_path": False})

    monkeypatch.setattr(netmodel.NetworkModel, "__init__", no_fast)
    slow = retarget({**SMALL, "full": True}).to_dict()
    assert fast["iteration_time_s"] == slow["iteration_time_s"]
    assert fast["breakdown"] == slow["breakdown"]


def test_reservations_release_the_running_plans_on_links():
    """A release hands over only the running plans sharing a link with the route, oldest
    first, whenever they registered."""
    from types import SimpleNamespace

    from tracesim.network.fastpath import Reservations

    res = Reservations(8)
    a = res.register(np.array([1, 2]))
    route = np.array([2, 3])
    b = res.register(np.array([3]))
    c = res.register(np.array([5, 6]))
    d = res.register(np.array([0, 3, 7]))  # on the route, never running
    released = []

    def run(pid: int) -> SimpleNamespace:
        r = SimpleNamespace(pid=pid, rid=-1)
        r.release = lambda now, r=r: released.append((r.pid, now))
        r.rid = res.hold(r)  # type: ignore[arg-type]
        return r

    run(b), run(c), run(a)
    assert not res.free(a) and res.count == 3
    res.release_on(route, 7)
    assert released == [(b, 7), (a, 7)]  # in the order they started
    assert res.count == 1 and res.free(a) and not res.free(c) and res.free(d)
    assert not res._mark.any()  # the scratch is left clear
    res.release_on(np.array([4]), 8)  # no running plan there
    assert res.count == 1 and released == [(b, 7), (a, 7)]
