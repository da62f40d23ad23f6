"""Small builders for hand-made task graphs used by several tests."""

from __future__ import annotations

from typing import Any

from tracesim.api import replay
from tracesim.build.builder import BuildResult, build_graph
from tracesim.graph.taskgraph import TASK_DEFAULTS, TaskGraph, make_edges, make_lanes, make_tasks
from tracesim.options import ReplayOptions
from tracesim.report.result import Prediction
from tracesim.specs.model import ModelSpec
from tracesim.specs.parallel import ParallelSpec
from tracesim.template.analytic import first_principles_template


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


def retarget(opts: dict[str, Any], source: Any = None, *, detail: bool = False) -> Prediction:
    """:func:`tracesim.api.replay` of ``source`` with the options in ``opts`` (a mapping)."""
    return replay(source, ReplayOptions.from_mapping(opts), detail=detail)


def op_time(op_class: str, flops: float, nbytes: float, op: object, units: float = 1.0) -> int:
    """A fixed roofline (100 TFLOP/s, 1 TB/s, 1 us per op): a parameter, not a mock."""
    return int(flops / 100e12 * 1e9 + nbytes / 1e12 * 1e9) + 1000


def build(model: ModelSpec, **kw: object) -> BuildResult:
    """``model`` built on the layout ``kw`` (seq_len 128 unless given) from its first-principles
    template, timed by :func:`op_time` (``offload``: passed to the builder)."""
    kw.setdefault("seq_len", 128)
    offload = kw.pop("offload", None)
    par = ParallelSpec(**kw)  # type: ignore[arg-type]
    return build_graph(model, par, first_principles_template(model), op_time,
                       offload=offload)  # type: ignore[arg-type]
