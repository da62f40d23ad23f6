"""Deadlocks end with ReplayError naming the blocked tasks and ranks, or, for graphs of
recordings (``on_stall="fallback"``), fall back to the recorded order; never a hang.

tests/test_engine.py covers a two-lane cycle, a collective with a missing member and an
unmatched send; these add the deadlocks that need several ranks to see (send/recv and
collectives issued in different orders), cycles through program order, self loops, a
deadlock inside a large graph (bounded message, bounded time), one behind an earlier
blocked task on the same lane, and the command-line contract (exit 2, one line). The
fallback tests at the end replay the same graphs to the end and count what fell back.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import graph
from tracesim.engine.replay import replay
from tracesim.errors import ReplayError
from tracesim.graph.io import save_graph

ROOT = Path(__file__).resolve().parents[1]


def T(rank, lane, dur, kind="cpu", name="op", **kw):
    return {"rank": rank, "lane": lane, "kind": kind, "name": name, "dur_ns": dur, **kw}


def _blocked(g) -> str:
    with pytest.raises(ReplayError) as e:
        replay(g)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("replay deadlocked with ")
    return msg


def test_send_recv_in_opposite_orders():
    """rank 0: send A, recv B; rank 1: send B, recv A -- each send waits for a recv that is
    queued behind the other rank's send (rendezvous semantics)."""
    g = graph([T(0, 0, 5, "send", "sendA", match_key="A", peer=1, msg_bytes=4),
               T(0, 0, 5, "recv", "recvB", match_key="B", peer=1, msg_bytes=4),
               T(1, 1, 5, "send", "sendB", match_key="B", peer=0, msg_bytes=4),
               T(1, 1, 5, "recv", "recvA", match_key="A", peer=0, msg_bytes=4)])
    msg = _blocked(g)
    assert "4 of 4 tasks unfinished" in msg
    assert "'sendA' (rank 0" in msg and "'sendB' (rank 1" in msg
    assert msg.count("1 of 2 members") == 2


def test_collectives_issued_in_different_orders():
    g = graph([T(0, 0, 5, "coll", "ar_x", match_key="x", group=0),
               T(0, 0, 5, "coll", "ar_y", match_key="y", group=0),
               T(1, 1, 5, "coll", "ar_y", match_key="y", group=0),
               T(1, 1, 5, "coll", "ar_x", match_key="x", group=0)], groups=[(0, 1)])
    msg = _blocked(g)
    assert "collective 'x' has 1 of 2 members" in msg and "collective 'y' has 1 of 2 members" in msg
    assert "(rank 0, lane 0)" in msg and "(rank 1, lane 1)" in msg


def test_cycle_across_ranks_through_a_collective():
    """rank 1's work waits for rank 0's op after the all-reduce: the all-reduce never fills."""
    g = graph([T(0, 0, 5, "coll", "ar", match_key="k", group=0), T(0, 0, 5, name="after"),
               T(1, 1, 5, name="work1"), T(1, 1, 5, "coll", "ar", match_key="k", group=0)],
              edges=[(1, 2)], groups=[(0, 1)])
    msg = _blocked(g)
    assert "'ar' (rank 0, lane 0): collective 'k' has 1 of 2 members" in msg
    assert "'work1' (rank 1, lane 1): waits on 1 unfinished predecessor(s)" in msg


def test_self_loop_and_backward_edge_within_a_lane():
    assert "'a' (rank 0, lane 0): waits on 1" in _blocked(graph([T(0, 0, 5, name="a")],
                                                                edges=[(0, 0)]))
    # b runs after a on the lane (program order), but a waits for b
    msg = _blocked(graph([T(0, 0, 5, name="a"), T(0, 0, 5, name="b")], edges=[(1, 0)]))
    assert "2 of 2 tasks unfinished" in msg and "'a'" in msg


def test_collective_stuck_behind_its_blocked_lane():
    """A member that never arrives because its lane is blocked earlier by a cycle."""
    g = graph([T(0, 0, 5, name="a"), T(0, 1, 5, name="b"),
               T(0, 0, 5, "coll", "ar", match_key="k", group=0),
               T(1, 2, 5, "coll", "ar", match_key="k", group=0)],
              edges=[(0, 1), (1, 0)], groups=[(0, 1)])
    msg = _blocked(g)
    assert "'ar' (rank 1, lane 2): collective 'k' has 1 of 2 members" in msg
    assert "(rank 0, lane 0): waits on 1" in msg


def test_deadlock_in_a_large_graph_is_quick_and_the_message_bounded():
    """2,000 lanes of 10 tasks, a cycle between the last tasks of lanes 0 and 1."""
    tasks = [T(r, r, 3, name=f"t{r}_{i}") for r in range(2000) for i in range(10)]
    g = graph(tasks, edges=[(9, 19), (19, 9)])
    t0 = time.perf_counter()
    msg = _blocked(g)
    assert time.perf_counter() - t0 < 30
    assert "2 of 20000 tasks unfinished" in msg
    assert len(msg) < 1000
    assert "'t0_9' (rank 0, lane 0)" in msg and "'t1_9' (rank 1, lane 1)" in msg


def test_many_blocked_lanes_are_summarised():
    tasks = [T(r, r, 5, "coll", "ar", match_key=f"k{r}", group=0) for r in range(8)]
    msg = _blocked(graph(tasks, groups=[tuple(range(16))]))
    assert "8 of 8 tasks unfinished" in msg
    assert len(re.findall(r"task \d+ 'ar'", msg)) == 5 and msg.endswith(" ...")


def test_deadlocked_workload_at_the_command_line(tmp_path):
    """tracesim replay WORKLOAD --cluster C on a deadlocked graph: exit 2, one line, names."""
    g = graph([T(0, 0, 5, "send", "sendA", match_key="A", peer=1, msg_bytes=4096),
               T(0, 0, 5, "recv", "recvB", match_key="B", peer=1, msg_bytes=4096),
               T(1, 1, 5, "send", "sendB", match_key="B", peer=0, msg_bytes=4096),
               T(1, 1, 5, "recv", "recvA", match_key="A", peer=0, msg_bytes=4096)],
              lanes=[(0, "compute", "gpu"), (1, "compute", "gpu")])
    save_graph(g, tmp_path / "wl")
    p = subprocess.run([sys.executable, "-m", "tracesim.cli", "replay", str(tmp_path / "wl"),
                        "--cluster", "h100x8", "-o", str(tmp_path / "out")], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith("tracesim: error: replay deadlocked")
    assert "'sendA' (rank 0" in lines[0] and "'sendB' (rank 1" in lines[0]
    assert not (tmp_path / "out").exists()


# -- falling back to the recorded order (graphs of recordings)


def _fallback(g, **kw):
    r = replay(g, on_stall="fallback", **kw)
    assert (r.end_ns >= 0).all() and (r.end_ns >= r.start_ns).all()
    return r


def test_unmatched_collective_and_edge_from_a_task_that_never_runs():
    """Rank 0's all-reduce has no partner (rank 1's trace is absent); a CPU task waits for a
    GPU op that, through a cycle, can never run first. Both fall back and are counted."""
    g = graph([T(0, 0, 10, name="launch", rec_start=0),
               T(0, 0, 5, name="sync", rec_start=20),      # waits on k2 (a wrong edge)
               T(0, 0, 7, name="launch2", rec_start=40),
               T(0, 1, 100, "gpu", "k1", rec_start=12),
               T(0, 1, 30, "gpu", "k2", rec_start=112),    # launched by launch2: after sync
               T(0, 2, 50, "coll", "ar", match_key="x", group=0, rec_start=30)],
              edges=[(0, 3), (4, 1), (2, 4)], groups=[(0, 1)])
    g = g.replace(edges=g.edges.assign(kind=["launch", "sync", "launch"]))
    with pytest.raises(ReplayError):
        replay(g)  # hand-made graphs still report the deadlock
    r = _fallback(g)
    assert dict(r.fallbacks) == {"sync": 1, "collective-unmatched": 1}
    assert r.fallback_summary() == ("2 dependencies fell back to the recorded order "
                                    "(collective-unmatched: 1, sync: 1)")
    # when nothing could move (k1 ended at 110), the sync (recorded first of the blocked
    # tasks) ran without waiting for k2; then k2 after launch2 and k1
    assert r.start_ns[1] == 110 and r.end_ns[1] == 115
    assert r.start_ns[4] == max(r.end_ns[2], r.end_ns[3]) == 122
    # at the next stall the lone all-reduce (arrived at 0) ran for its recorded duration
    assert r.start_ns[5] == 0 and r.end_ns[5] == r.end_ns[4] + 50


def test_the_blocked_task_recorded_first_is_released_first():
    """Two lanes wait on each other; the one whose task was recorded first goes first."""
    def g(rec_a, rec_b):
        return graph([T(0, 0, 5, name="a", rec_start=rec_a), T(0, 1, 7, name="b", rec_start=rec_b)],
                     edges=[(0, 1), (1, 0)])

    r = _fallback(g(100, 200))
    assert (r.start_ns[0], r.start_ns[1]) == (0, 5) and dict(r.fallbacks) == {"dep": 1}
    r = _fallback(g(300, 200))
    assert (r.start_ns[1], r.start_ns[0]) == (0, 7)
    # without recorded starts: task id order
    r = _fallback(graph([T(0, 0, 5, name="a"), T(0, 1, 7, name="b")], edges=[(0, 1), (1, 0)]))
    assert (r.start_ns[0], r.start_ns[1]) == (0, 5)


def test_collectives_in_different_orders_and_a_lone_send():
    """Every deadlock of this file's first tests replays to the end under the fallback."""
    g = graph([T(0, 0, 5, "coll", "ar_x", match_key="x", group=0),
               T(0, 0, 5, "coll", "ar_y", match_key="y", group=0),
               T(1, 1, 5, "coll", "ar_y", match_key="y", group=0),
               T(1, 1, 5, "coll", "ar_x", match_key="x", group=0)], groups=[(0, 1)])
    r = _fallback(g)
    # x on rank 0 runs alone first (task 0 has the lowest id); rank 0's y then meets rank
    # 1's y, and rank 1's x, arriving after x was run alone, runs alone at the next stall
    assert dict(r.fallbacks) == {"collective-unmatched": 2}
    assert r.end_ns[1] == r.end_ns[2] == 10 and r.end_ns[3] == 15
    p2p = graph([T(0, 0, 5, "send", "sendA", match_key="A", peer=1, msg_bytes=4),
                 T(0, 0, 5, "recv", "recvB", match_key="B", peer=1, msg_bytes=4),
                 T(1, 1, 5, "send", "sendB", match_key="B", peer=0, msg_bytes=4),
                 T(1, 1, 5, "recv", "recvA", match_key="A", peer=0, msg_bytes=4)])
    assert _fallback(p2p).fallbacks["p2p-unmatched"] >= 1


def test_fallback_is_deterministic_and_scales():
    """2,000 lanes of 10 tasks with a cycle between lanes 0 and 1: one fallback, quickly."""
    tasks = [T(r, r, 3, name=f"t{r}_{i}") for r in range(2000) for i in range(10)]
    g = graph(tasks, edges=[(9, 19), (19, 9)])
    t0 = time.perf_counter()
    a = _fallback(g)
    assert time.perf_counter() - t0 < 30
    b = _fallback(g)
    assert dict(a.fallbacks) == {"dep": 1}
    assert (a.start_ns == b.start_ns).all() and (a.end_ns == b.end_ns).all()


def test_graph_meta_chooses_and_the_argument_overrides():
    g = graph([T(0, 0, 5, name="a")], edges=[(0, 0)])
    with pytest.raises(ReplayError):
        replay(g)
    fb = g.replace(meta={"on_stall": "fallback"})
    assert dict(replay(fb).fallbacks) == {"dep": 1}
    with pytest.raises(ReplayError):
        replay(fb, on_stall="error")
    with pytest.raises(ValueError, match="on_stall"):
        replay(g, on_stall="ignore")
    # nothing stalls: nothing is counted, either way
    ok = graph([T(0, 0, 5, name="a"), T(0, 1, 5, name="b")], edges=[(0, 1)])
    assert dict(replay(ok).fallbacks) == {} and replay(ok).fallback_summary() == ""


def test_fallback_with_a_network_model():
    """A collective whose members never arrive runs alone for its recorded duration, also
    when a communication model times the others."""
    from tracesim.catalog import load_cluster
    from tracesim.network.model import NetworkModel

    g = graph([T(0, 0, 5, "coll", "ar", match_key="x", group=0, collective="all_reduce",
                 msg_bytes=1 << 20),
               T(0, 0, 5, "coll", "ar2", match_key="y", group=1, collective="all_reduce",
                 msg_bytes=1 << 20),
               T(1, 1, 5, "coll", "ar2", match_key="y", group=1, collective="all_reduce",
                 msg_bytes=1 << 20)],
              lanes=[(0, "compute", "gpu"), (1, "compute", "gpu")], groups=[(0, 1, 2, 3), (0, 1)])
    r = replay(g, NetworkModel(load_cluster("h100x8")), on_stall="fallback")
    assert dict(r.fallbacks) == {"collective-unmatched": 1}
    assert r.end_ns[0] - r.start_ns[0] == 5
    # rank 0's second all-reduce meets rank 1's (waiting since 0) and the network times it
    assert r.start_ns[1] == 5 and r.start_ns[2] == 0 and r.end_ns[1] == r.end_ns[2] > 5
