"""Recorded trajectories of the flow network (tracesim.network.lazy) change no time.

A batch alone on its links whose flows end at different times (an all-to-all over nodes) is
recorded step by step the first time its route carries those bytes; later runs started on
free links follow the record as one heap entry. When another batch comes onto their links,
or a collective asks whether a link is busy, they get the state the step-by-step run had.
Every operation must end at the same nanosecond with and without the records: lone
operations, operations joined at every instant of a recorded run, random mixes on three
fabrics with and without the fast path, and a whole MoE replay.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import retarget
from tests.test_network_fastpath import CLUSTERS, MIB, _workload, run_ops
from tracesim.network import flows as netflows
from tracesim.network.flowstate import SolveCache


def _ends(cluster: str, ops: list[tuple[int, str, tuple[int, ...], int]], *, memo: bool,
          fast: bool = True, phases: str = "auto") -> tuple[list[int], int]:
    """End time of each (start_ns, collective, ranks, bytes) and how many batches ran from a
    recorded trajectory."""
    ends, model = run_ops(cluster, ops, fast=fast, phases=phases, memo=memo)
    assert not model.flows.link_flows.any()  # every flow counted off its links
    LINK_BYTES[memo] = model.flows.link_bytes.copy()
    return ends, model.flows.memo_runs


#: bytes each link carried in the last run with and without records
LINK_BYTES: dict[bool, np.ndarray] = {}


#: an all-to-all over two nodes: its flows inside a node end before those between nodes
A2A = tuple(range(16))


def test_repeated_all_to_all_runs_from_its_record():
    ops = [(k * 2_000_000, "all_to_all", A2A, 32 * MIB) for k in range(4)]
    slow, none = _ends("rail", ops, memo=False)
    memo, runs = _ends("rail", ops, memo=True)
    assert none == 0 and runs == 3  # recorded on the first, followed on the next three
    assert memo == slow
    assert len({e - t for e, (t, *_) in zip(memo, ops, strict=True)}) == 1


@pytest.mark.parametrize("cluster", ["rail", "ecmp-o2"])
def test_joined_at_every_instant_of_a_recorded_run(cluster: str):
    first = (0, "all_to_all", A2A, 32 * MIB)
    again = 3_000_000
    base = [first, (again, "all_to_all", A2A, 32 * MIB)]
    ends, runs = _ends(cluster, base, memo=True)
    assert runs == 1
    life = ends[1] - again
    # a transfer and a ring onto the second run's links at instants across its life,
    # including its start and its end
    for dt in sorted({0, 1, 2_000, life // 5, life // 3, life // 2, 2 * life // 3, life - 1, life}):
        for extra in [(again + dt, "send_recv", (0, 8), 8 * MIB),
                      (again + dt, "all_reduce", (0, 8), 4 * MIB),
                      (again + dt, "all_reduce", tuple(range(8)), 16 * MIB)]:
            ops = [*base, extra]
            assert _ends(cluster, ops, memo=True)[0] == _ends(cluster, ops, memo=False)[0], (dt, extra)


def _moe_workload(seed: int, gpus: int, n_ops: int) -> list[tuple[int, str, tuple[int, ...], int]]:
    """All-to-alls of a few sizes over nodes (repeated, so that records are followed) mixed
    with the fast-path test's random traffic."""
    rng = np.random.default_rng(seed)
    ops = _workload(seed, gpus, n_ops // 2)
    for k in range(n_ops - len(ops)):
        t0 = k * 300_000 + int(rng.integers(0, 100_000))
        g0 = int(rng.integers(0, 2)) * 16
        ops.append((t0, "all_to_all", tuple(range(g0, g0 + 16)), int(rng.choice([MIB, 8 * MIB]))))
    return ops


@pytest.mark.parametrize("cluster", list(CLUSTERS))
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("fast", [True, False])
def test_random_mixes_same_times(cluster: str, seed: int, fast: bool):
    ops = _moe_workload(seed, 64, 80)
    slow, none = _ends(cluster, ops, memo=False, fast=fast)
    memo, runs = _ends(cluster, ops, memo=True, fast=fast)
    assert none == 0 and runs > 0
    assert memo == slow
    np.testing.assert_allclose(LINK_BYTES[True], LINK_BYTES[False], rtol=1e-12)


def test_steps_phases_same_times():
    ops = _moe_workload(3, 64, 60)
    assert (_ends("ecmp-o2", ops, memo=True, phases="steps")[0]
            == _ends("ecmp-o2", ops, memo=False, phases="steps")[0])


def test_records_are_bounded(monkeypatch: pytest.MonkeyPatch):
    """Past the bound every record (and every cached solve) is dropped and recording
    starts over; times unchanged."""
    from tracesim.network import flowstate, lazy

    ops = _moe_workload(4, 64, 60)
    slow = _ends("rail", ops, memo=False)[0]
    monkeypatch.setattr(lazy, "MEMO_MAX_VALUES", 3000)
    monkeypatch.setattr(lazy, "MEMO_PER_ROUTE", 1)
    monkeypatch.setattr(flowstate, "SOLVE_CACHE_MAX_VALUES", 100)
    assert _ends("rail", ops, memo=True)[0] == slow


MOE = {"model": "qwen3-30b-a3b", "cluster": "h100x128", "ep": 16, "dp": 16, "pp": 1,
       "micro_batch": 1, "global_batch": 32, "seq_len": 1024, "network": "flow"}


def test_replay_same_times(monkeypatch: pytest.MonkeyPatch):
    runs: list[netflows.FlowNetwork] = []
    orig = netflows.FlowNetwork.__init__

    def keep(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        orig(self, *a, **k)
        runs.append(self)

    monkeypatch.setattr(netflows.FlowNetwork, "__init__", keep)
    memo = retarget(MOE).to_dict()
    assert sum(n.memo_runs for n in runs) > 0

    def off(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        orig(self, *a, **{**k, "memo": False})

    monkeypatch.setattr(netflows.FlowNetwork, "__init__", off)
    slow = retarget(MOE).to_dict()
    assert memo["iteration_time_s"] == slow["iteration_time_s"]
    assert memo["breakdown"] == slow["breakdown"]


class _NoStore(SolveCache):
    def keep(self, *_a: object) -> None:  # forget every solve
        pass


def test_solves_of_partial_states_are_cached(monkeypatch: pytest.MonkeyPatch):
    """Batches of the same routes meeting again with the same flows alive take the last
    solve's rates: fewer max-min solves, the same times."""
    from tracesim.network import flowstate

    calls = [0]
    orig_solve = flowstate.max_min_bottlenecks

    def counted(*a):  # noqa: ANN002, ANN202
        calls[0] += 1
        return orig_solve(*a)

    monkeypatch.setattr(flowstate, "max_min_bottlenecks", counted)
    ops = [(k * 700_000 + d, "all_to_all", A2A, b) for k in range(6)
           for d, b in ((0, 32 * MIB), (150_000, 8 * MIB))]
    cached = _ends("ecmp-o2", ops, memo=False)[0]
    n_cached = calls[0]
    orig_init = netflows.FlowNetwork.__init__

    def no_cache(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        orig_init(self, *a, **k)
        self._solved = _NoStore()

    monkeypatch.setattr(netflows.FlowNetwork, "__init__", no_cache)
    calls[0] = 0
    assert _ends("ecmp-o2", ops, memo=False)[0] == cached
    assert n_cached < calls[0], (n_cached, calls[0])
