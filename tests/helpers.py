"""Small builders for hand-made task graphs used by several tests."""

from __future__ import annotations

from tracesim.graph.taskgraph import TASK_DEFAULTS, TaskGraph, make_edges, make_lanes, make_tasks


def graph(tasks: list[dict], edges: list[tuple[int, int]] = (), lanes: list[tuple[int, str, str]] | None = None,
          groups=()) -> TaskGraph:
    """tasks: dicts with rank, lane, kind, name, dur_ns (+ optional columns)."""
    if lanes is None:
        seen = sorted({(t["rank"], t["lane"]) for t in tasks}, key=lambda x: x[1])
        lanes = [(r, f"lane{ln}", "cpu") for r, ln in seen]
    lt = make_lanes({"rank": [x[0] for x in lanes], "name": [x[1] for x in lanes],
                     "kind": [x[2] for x in lanes]})
    keys = sorted({k for t in tasks for k in t})
    cols = {k: [t.get(k, TASK_DEFAULTS.get(k)) for t in tasks] for k in keys}
    tt = make_tasks(cols)
    et = make_edges([e[0] for e in edges], [e[1] for e in edges], "dep")
    return TaskGraph(tt, et, lt, tuple(tuple(g) for g in groups))
