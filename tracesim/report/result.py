"""The result of a replay: :class:`Prediction`, with the ``replay --json`` object as ``to_dict()``.

The fields every result has are typed (DESIGN.md, "Interfaces that are contracts"); what a
kind of replay adds (a retarget's memory estimate and template, a self-replay's measured
steps, an imported workload's format) is in ``details`` and comes out flat in
:meth:`Prediction.to_dict`. The replayed graph and its simulated times ride along for result
directories, notebooks and tests, but are not part of the dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracesim.graph.taskgraph import TaskGraph

#: what ``mode`` says about how the graph was made
MODES = ("retarget", "self-replay", "replay-trace", "replay-workload")


@dataclass(frozen=True)
class Prediction:
    """One replayed training iteration.

    Attributes:
        mode: ``retarget`` (built from a layer template for a model and layout),
            ``self-replay`` (a recorded run with its own durations), ``replay-trace`` (a
            recorded run -- bundle, trace, op table or a workload directory written by
            ``extract`` -- replayed on another device, host or cluster: docs/replay-trace.md)
            or ``replay-workload`` (an imported task graph -- Chakra, AICB, or a workload
            directory converted from them -- on a cluster's network).
        iteration_time_s: simulated time of one iteration (self-replay: the median of the
            steady steps' predictions).
        gpus: GPUs of the layout (or ranks of the recording).
        cluster: the cluster's name (``recorded`` for a self-replay).
        device: the device profile's name (or the recorded device).
        breakdown: mean over the simulated ranks, seconds: ``compute_s``,
            ``exposed_comm_s`` per group kind, ``host_s``, ``bubble_s``, ``idle_s``
            (:mod:`tracesim.report.breakdown`); they sum to the iteration time.
        tokens_per_s, tflops_per_gpu, mfu: throughput; model FLOPs only (no recomputation),
            MFU against the device's dense peak for the dtype its GEMMs run in (NVFP4: the
            FP4 peak); None when not known.
        model, parallel: the model spec and layout (mappings), where known.
        memory_gib_per_gpu: estimated peak memory of the worst pipeline stage (GiB).
        warnings: what the user should know about this result.
        details: the rest of the ``--json`` object, by key.
        makespan_ns: the replay's span in integer ns (the makespan of the graph).
        graph, start_ns, end_ns: the replayed task graph and each task's simulated start and
            end (ns), when kept.
        methods: per task, how its duration was obtained (``measured``, ``scaled``, ``model``,
            ``flow``, ``estimate``), when known.
        per_rank: breakdown of every simulated rank.
        links, topology: per-link traffic recorder and the network's topology (flow-level
            replays that recorded links).
    """

    mode: str
    iteration_time_s: float
    gpus: int
    cluster: str
    device: str
    breakdown: Mapping[str, Any]
    tokens_per_s: float | None = None
    tflops_per_gpu: float | None = None
    mfu: float | None = None
    model: Any = None
    parallel: Mapping[str, Any] | None = None
    memory_gib_per_gpu: float | None = None
    warnings: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)
    makespan_ns: int | None = field(default=None, repr=False, compare=False)
    graph: TaskGraph | None = field(default=None, repr=False, compare=False)
    start_ns: np.ndarray | None = field(default=None, repr=False, compare=False)
    end_ns: np.ndarray | None = field(default=None, repr=False, compare=False)
    methods: np.ndarray | None = field(default=None, repr=False, compare=False)
    per_rank: Mapping[int, Mapping[str, Any]] = field(default_factory=dict, repr=False,
                                                      compare=False)
    links: Any = field(default=None, repr=False, compare=False)
    topology: Any = field(default=None, repr=False, compare=False)

    def to_dict(self, critical_path: bool = False, top: int = 10) -> dict[str, Any]:
        """The ``replay --json`` object. ``critical_path``: also the top contributors of the
        critical path and every rank's breakdown (``per_rank_breakdown``), as the CLI prints
        them (needs the graph)."""
        out: dict[str, Any] = {
            "mode": self.mode,
            "iteration_time_s": self.iteration_time_s,
            "tokens_per_s": self.tokens_per_s,
            "tflops_per_gpu": self.tflops_per_gpu,
            "mfu": self.mfu,
            "gpus": self.gpus,
            "model": self.model,
            "parallel": self.parallel,
            "cluster": self.cluster,
            "device": self.device,
            "breakdown": self.breakdown,
            "memory_gib_per_gpu": self.memory_gib_per_gpu,
            **self.details,
            "warnings": list(self.warnings),
        }
        if critical_path and self.graph is not None and self.start_ns is not None \
                and self.end_ns is not None:
            from tracesim.report.critical import critical_summary

            out["critical_path"], out["critical_path_span_s"] = critical_summary(
                self.graph, self.start_ns, self.end_ns, top=top)
            if self.per_rank:
                out["per_rank_breakdown"] = {str(k): v for k, v in sorted(self.per_rank.items())}
        return out

    def with_warning(self, message: str) -> Prediction:
        """This prediction with one more warning."""
        import dataclasses

        return dataclasses.replace(self, warnings=(*self.warnings, message))
