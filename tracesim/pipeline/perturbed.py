"""The straggler and jitter step of a replay (``--straggler``, ``--jitter``, ``--seed``).

The graph is replayed once as it is (the reference), then with its ranks slowed
(:mod:`tracesim.transform.perturb`); the result's ``perturbation`` detail gives the impact on
the iteration, the slowest ranks and the ranks the others waited for at collectives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracesim.engine.replay import ReplayResult, replay
from tracesim.errors import InputError
from tracesim.graph.taskgraph import TaskGraph
from tracesim.options import ReplayOptions


class Perturbed:
    """A perturbed replay's reference: the same graph unperturbed, and the factors used."""

    def __init__(self, p: Any, baseline_s: float, factors: dict[int, float]):
        self.p, self.baseline_s, self.factors = p, baseline_s, factors

    def report(self, graph: TaskGraph, result: ReplayResult,
               iteration_s: float | None = None) -> dict[str, Any]:
        """The ``perturbation`` detail: options, the unperturbed iteration, the impact, the
        slowest ranks and the ranks the others waited for at collectives."""
        from tracesim.transform.perturb import gating

        it = result.makespan_ns * 1e-9 if iteration_s is None else iteration_s
        base = self.baseline_s
        slow = sorted(self.factors.items(), key=lambda x: -x[1])[:5]
        return {**self.p.to_dict(), "unperturbed_iteration_time_s": base,
                "impact_s": it - base, "impact": it / base - 1 if base else 0.0,
                "slowest_ranks": [[r, round(f, 4)] for r, f in slow],
                "waited_for": [[r, round(w, 6)] for r, w in gating(graph, result.start_ns)[:5]]}


def perturbation_step(graph: TaskGraph, opts: ReplayOptions, make_comm: Callable[[], Any],
                      iteration_s: Callable[[ReplayResult], float] | None = None,
                      ) -> tuple[TaskGraph, Perturbed | None]:
    """Stragglers and jitter (``opts.straggler`` / ``jitter`` / ``seed``): the graph with its
    ranks slowed, after an unperturbed replay of it as the reference (None: nothing asked).
    ``iteration_s`` reads the iteration time off a replay (default: its makespan)."""
    from tracesim.transform.perturb import Perturbation, perturb

    p = Perturbation(opts.straggler or (), opts.jitter or 0.0, opts.seed or 0)
    if not p.active:
        return graph, None
    if graph.meta.get("representatives"):
        raise InputError("stragglers and jitter need every rank simulated", "--full")
    base = replay(graph, make_comm())
    slowed, factors = perturb(graph, p)
    it = iteration_s(base) if iteration_s is not None else base.makespan_ns * 1e-9
    return slowed, Perturbed(p, it, factors)
