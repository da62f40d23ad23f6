"""A second job's collectives on the same fabric (a cluster's ``background`` collectives).

Each background job (:class:`~tracesim.specs.fabric.BackgroundJob`) runs its collective on
the network model like any of the replayed job's operations: the algorithm the model would
choose for that group and size, its flows on the shared flow network, so where they meet the
job's flows on a link, max-min fairness splits the link between them while both run (a link
carrying one flow of each gives each half). An instance is due at ``start_ns`` and then every
``every_ns``; one due while the previous instance still runs starts when that one ends (due
times it missed are not made up); ``every_ns == 0``: back to back.

The background stops when the replayed job has nothing left in flight (the engine tells the
model through :meth:`BackgroundTraffic.bind`): then the job has finished, or is stalled and
the engine's stall handling takes over without it. Without a binding (a lone collective
timed with ``collective_time_ns``) it runs for as long as the simulation does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import simpy

from tracesim.specs.fabric import BackgroundJob


class _Job:
    """One background job's state and counters."""

    __slots__ = ("spec", "running", "late", "instances", "busy_ns", "started_ns")

    def __init__(self, spec: BackgroundJob):
        self.spec = spec
        self.running = self.late = False
        self.instances = 0
        self.busy_ns = 0
        self.started_ns = 0


class BackgroundTraffic:
    """Runs background jobs' collectives on ``model`` (a NetworkModel) in ``env``."""

    def __init__(self, model: Any, env: simpy.Environment, jobs: Sequence[BackgroundJob]):
        self.model, self.env = model, env
        self.jobs = [_Job(j) for j in jobs if not j.is_load]
        self.active: Callable[[], bool] = lambda: True
        self.stopped = False
        for job in self.jobs:
            env.timeout(job.spec.start_ns).callbacks.append(self._due_cb(job))

    def bind(self, active: Callable[[], bool]) -> None:
        """``active()``: whether the replayed job has anything in flight."""
        self.active = active

    def _alive(self) -> bool:
        if not self.stopped and not self.active():
            self.stopped = True
        return not self.stopped

    def _due_cb(self, job: _Job) -> Callable[[Any], None]:
        def due(_ev: Any) -> None:
            if not self._alive():
                return
            if job.running:
                job.late = True
            else:
                self._launch(job)
            if job.spec.every_ns > 0:
                self.env.timeout(job.spec.every_ns).callbacks.append(due)

        return due

    def _launch(self, job: _Job) -> None:
        s = job.spec
        job.running = True
        job.started_ns = int(self.env.now)
        ev = self.model.collective(s.collective, s.ranks, s.msg_bytes, "background")
        ev.callbacks.append(lambda _ev: self._done(job))

    def _done(self, job: _Job) -> None:
        job.running = False
        job.instances += 1
        job.busy_ns += int(self.env.now) - job.started_ns
        if (job.late or job.spec.every_ns == 0) and self._alive():
            job.late = False
            self._launch(job)

    def report(self) -> list[dict[str, Any]]:
        """Per job: its spec, finished instances, their mean time and the time one takes
        alone on the same fabric (simulated without the replayed job), in s."""
        alone_on = dataclasses.replace(self.model.cluster, background=())
        out = []
        for job in self.jobs:
            s = job.spec
            env = simpy.Environment()
            lone = type(self.model)(alone_on, self.model.algo)  # the same model, no job
            lone.attach(env)
            env.run(until=lone.collective(s.collective, s.ranks, s.msg_bytes))
            alone = int(env.now)
            out.append({"spec": s.spec, "instances": job.instances,
                        "mean_time_s": job.busy_ns / job.instances * 1e-9 if job.instances else 0.0,
                        "alone_time_s": alone * 1e-9})
        return out
