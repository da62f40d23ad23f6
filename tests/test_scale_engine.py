"""The engine's replay-time coarsening and typed-array state against a reference recurrence.

On graphs without communication every task's times follow from one pass in task id order
(edges and lane order both point from lower to higher ids): start = max(end of the previous
task on the lane + gap, end of every predecessor); end = start + dur. The engine, which times
runs of tasks that nothing can interleave with in one step, must give exactly these times,
report every task to its observers exactly once, and wake up once per run, not once per task.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import graph
from tracesim.engine.replay import replay


def reference(tasks: list[dict], edges: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    start, end = [0] * len(tasks), [0] * len(tasks)
    lane_free: dict[int, int] = {}
    preds: dict[int, list[int]] = {}
    for a, b in edges:
        preds.setdefault(b, []).append(a)
    for i, t in enumerate(tasks):
        s = lane_free.get(t["lane"], 0) + t.get("gap_ns", 0)
        for p in preds.get(i, []):
            s = max(s, end[p])
        start[i], end[i] = s, s + t["dur_ns"]
        lane_free[t["lane"]] = end[i]
    return start, end


@st.composite
def graphs(draw):
    n_lanes = draw(st.integers(1, 4))
    n = draw(st.integers(1, 40))
    tasks = []
    for _ in range(n):
        lane = draw(st.integers(0, n_lanes - 1))
        tasks.append({"rank": lane // 2, "lane": lane, "kind": draw(st.sampled_from(["cpu", "gpu"])),
                      "name": "op", "dur_ns": draw(st.integers(0, 50)),
                      "gap_ns": draw(st.sampled_from([0, 0, 0, 3]))})
    pairs = [(a, b) for b in range(n) for a in range(b)]
    edges = draw(st.lists(st.sampled_from(pairs), max_size=min(len(pairs), 25), unique=True)) if pairs else []
    # lanes must exist for every index up to the largest used, each on its rank
    lanes = [(ln // 2, f"l{ln}", "cpu") for ln in range(n_lanes)]
    return tasks, edges, lanes


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_times_match_the_reference_recurrence(case) -> None:
    tasks, edges, lanes = case
    seen: list[tuple[int, int, int]] = []
    r = replay(graph(tasks, edges=edges, lanes=lanes), observers=[lambda t, s, e: seen.append((t, s, e))])
    ref_s, ref_e = reference(tasks, edges)
    assert r.start_ns.tolist() == ref_s
    assert r.end_ns.tolist() == ref_e
    assert sorted(seen) == [(i, ref_s[i], ref_e[i]) for i in range(len(tasks))]
    assert r.makespan_ns == max(ref_e)


def test_a_run_of_independent_tasks_is_one_wake_up() -> None:
    rng = np.random.default_rng(3)
    durs = rng.integers(1, 100, 2000).tolist()
    tasks = [{"rank": 0, "lane": 0, "kind": "gpu", "name": "k", "dur_ns": d} for d in durs]
    r = replay(graph(tasks))
    assert r.makespan_ns == sum(durs)
    assert r.events == 1  # one timeout ends the whole run
    # a successor on another lane cuts the run: the task it waits for ends in its own wake-up
    tasks.append({"rank": 0, "lane": 1, "kind": "gpu", "name": "waiter", "dur_ns": 5})
    r = replay(graph(tasks, edges=[(999, 2000)]))
    assert r.start_ns[2000] == sum(durs[:1000])
    assert r.events == 4  # run up to 999, run 1000.., the waiter resumed, the waiter's timeout


def test_tasks_whose_predecessors_are_pending_are_not_coarsened() -> None:
    # lane 0: a (10) then b (10); b also waits for c on lane 1 (30): b starts at 30, not 10
    tasks = [{"rank": 0, "lane": 0, "kind": "gpu", "name": "a", "dur_ns": 10},
             {"rank": 0, "lane": 0, "kind": "gpu", "name": "b", "dur_ns": 10},
             {"rank": 0, "lane": 1, "kind": "gpu", "name": "c", "dur_ns": 30}]
    r = replay(graph(tasks, edges=[(2, 1)]))
    assert r.start_ns.tolist() == [0, 30, 0]
    assert r.end_ns.tolist() == [10, 40, 30]
