"""Engine semantics on small hand-made graphs (exact integer-ns answers)."""

from __future__ import annotations

import pytest

from tests.helpers import graph
from tracesim.engine.replay import replay
from tracesim.errors import ReplayError


def T(rank, lane, dur, kind="cpu", name="op", **kw):
    return {"rank": rank, "lane": lane, "kind": kind, "name": name, "dur_ns": dur, **kw}


def test_serial_lane_with_gaps():
    g = graph([T(0, 0, 100), T(0, 0, 50, gap_ns=10), T(0, 0, 25, gap_ns=5)])
    r = replay(g)
    assert r.start_ns.tolist() == [0, 110, 165]
    assert r.end_ns.tolist() == [100, 160, 190]
    assert r.makespan_ns == 190


def test_two_parallel_streams_overlap():
    # CPU launches two kernels on two streams; they overlap.
    g = graph(
        [T(0, 0, 10, name="launch1"), T(0, 0, 10, name="launch2"),
         T(0, 1, 100, "gpu", "k1"), T(0, 2, 100, "gpu", "k2")],
        edges=[(0, 2), (1, 3)],
        lanes=[(0, "cpu", "cpu"), (0, "s7", "gpu"), (0, "s20", "gpu")],
    )
    r = replay(g)
    assert r.start_ns.tolist() == [0, 10, 10, 20]
    assert r.makespan_ns == 120


def test_event_wait_orders_streams():
    # k2 on stream B must wait for k1 on stream A (cudaEventRecord -> cudaStreamWaitEvent)
    g = graph(
        [T(0, 0, 5, name="launch1"), T(0, 0, 5, name="launch2"),
         T(0, 1, 100, "gpu", "k1"), T(0, 2, 30, "gpu", "k2")],
        edges=[(0, 2), (1, 3), (2, 3)],
        lanes=[(0, "cpu", "cpu"), (0, "sA", "gpu"), (0, "sB", "gpu")],
    )
    r = replay(g)
    assert r.start_ns[3] == 105 and r.end_ns[3] == 135


def test_device_sync_blocks_cpu_until_gpu_done():
    g = graph(
        [T(0, 0, 5, name="launch"), T(0, 0, 2, name="cudaDeviceSynchronize"),
         T(0, 0, 7, name="after"), T(0, 1, 1000, "gpu", "k")],
        edges=[(0, 3), (3, 1)],
        lanes=[(0, "cpu", "cpu"), (0, "s7", "gpu")],
    )
    r = replay(g)
    assert r.start_ns[1] == 1005
    assert r.end_ns[2] == 1014


def test_collective_waits_for_all_members_and_takes_min_recorded():
    g = graph(
        [T(0, 0, 100, name="work0"), T(0, 0, 80, "coll", "ar", match_key="ar#0", group=0),
         T(1, 1, 300, name="work1"), T(1, 1, 50, "coll", "ar", match_key="ar#0", group=0)],
        groups=[(0, 1)],
    )
    r = replay(g)
    assert r.start_ns[1] == 100 and r.start_ns[3] == 300
    assert r.end_ns[1] == r.end_ns[3] == 350


def test_deadlock_cycle_names_blocked_tasks():
    g = graph([T(0, 0, 10, name="a"), T(0, 1, 10, name="b")], edges=[(0, 1), (1, 0)])
    with pytest.raises(ReplayError, match="deadlocked.*'a'"):
        replay(g)


def test_unmatched_collective_member_errors():
    g = graph([T(0, 0, 10, "coll", "ar", match_key="k", group=0)], groups=[(0, 1)])
    with pytest.raises(ReplayError, match="1 of 2 members"):
        replay(g)


def test_unmatched_send_errors():
    g = graph([T(0, 0, 10, "send", "send", match_key="p2p#0", peer=1, msg_bytes=4)])
    with pytest.raises(ReplayError, match="1 of 2 members"):
        replay(g)


def test_deterministic_repeat():
    tasks = [T(r, r, 10 + r, gap_ns=r) for r in range(4)] + [
        T(r, r, 5, "coll", "ar", match_key="x", group=0) for r in range(4)]
    g = graph(tasks, groups=[(0, 1, 2, 3)])
    a, b = replay(g), replay(g)
    assert a.start_ns.tolist() == b.start_ns.tolist() and a.end_ns.tolist() == b.end_ns.tolist()


def test_observer_sees_every_task():
    seen = []
    g = graph([T(0, 0, 3), T(0, 0, 4)])
    replay(g, observers=[lambda t, s, e: seen.append((t, s, e))])
    assert seen == [(0, 0, 3), (1, 3, 7)]


@pytest.mark.parametrize("full", [False, True])
def test_own_event_loop_gives_simpys_times(monkeypatch: pytest.MonkeyPatch, full: bool):
    """The replay pushes its compute wake-ups onto SimPy's queue itself and runs the queue in
    its own loop; with SimPy's timeouts and ``env.run()`` instead (the path for other
    environments) every time is the same to the nanosecond: the symmetric replay (one rank per
    stage, its copies on the flow network) and the full one."""
    import itertools

    import simpy

    import tracesim.engine.replay as engine
    from tests.helpers import retarget

    opts = {"model": "gpt3-1.7b", "cluster": "h100x128", "tp": 2, "pp": 2, "dp": 16,
            "micro_batch": 1, "global_batch": 64, "network": "flow", "full": full}
    own = retarget(opts).to_dict()
    used: list[bool] = []

    def plain(env: simpy.Environment) -> tuple[None, itertools.count]:
        used.append(True)
        return None, itertools.count()

    monkeypatch.setattr(engine, "_internals", plain)
    simpys = retarget(opts).to_dict()
    assert used
    assert own["replay"]["events"] == simpys["replay"]["events"]
    assert own["iteration_time_s"] == simpys["iteration_time_s"]
    assert own["breakdown"] == simpys["breakdown"]
