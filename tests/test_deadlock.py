"""Deadlocks end with ReplayError naming the blocked tasks and ranks; the replay never hangs.

tests/test_engine.py covers a two-lane cycle, a collective with a missing member and an
unmatched send; these add the deadlocks that need several ranks to see (send/recv and
collectives issued in different orders), cycles through program order, self loops, a
deadlock inside a large graph (bounded message, bounded time), one behind an earlier
blocked task on the same lane, and the command-line contract (exit 2, one line).
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
