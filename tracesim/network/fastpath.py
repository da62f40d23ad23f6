"""The flow model's fast path: a collective alone on its links, timed without flows.

Most operations of a replay run with no other traffic on their links (tensor-parallel
all-reduces inside a node, rail-aligned rings, pipeline transfers). For such an operation
the flow model's answer is known when it starts: each phase pays its latency, then its flows
run at the rates they get alone (cached per route) and end together. So
:class:`~tracesim.network.model.NetworkModel` runs it as one timeout (:class:`FastRun`) and
*reserves* the links of all its phases in :class:`Reservations`.

If another batch of flows comes onto a reserved link, or a collective asks whether one is
busy, before the operation ends, the reservation is released into the state the flow model
would be in at that instant: the operation's :class:`~tracesim.network.running.Runner` at
its current phase, with either the rest of that phase's latency still to wait or its flows
running as a lazy batch that started when the latency ended
(:meth:`~tracesim.network.flows.FlowNetwork.resume_lazy`). From there on everything runs as
if the fast path had never been taken, so the times are the same either way
(``tests/test_network_fastpath.py``); a lone operation costs one timeout instead of a runner,
a latency timeout, a batch and a flow timer.

The fast path applies to operations whose every phase's flows end within half a nanosecond
of each other when alone (rings, NVLS, direct, point-to-point; not trees with unequal
branches), in the ``auto`` and ``aggregate`` phase modes. While the flow network records flows (the
per-link traffic of a result directory), an operation that ends on the fast path hands its
phases' flows to the record as they ran (:meth:`FastRun._played`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from tracesim.network.flowstate import Route, lazy_step
from tracesim.network.maxmin import max_min_sorted
from tracesim.network.running import CommRecord, CompiledCollective, Runner


@dataclass(frozen=True)
class Plan:
    """When each phase of ``cc`` (for one message size) starts its latency and its flows,
    in ns from the operation's start, if it runs alone; its links and flows."""

    cc: CompiledCollective
    links: np.ndarray
    routes: tuple[Route, ...]
    nbytes: tuple[np.ndarray, ...]
    bounds: tuple[tuple[int, int], ...]
    total_ns: int


def isolated_rates(rt: Route, capacity: np.ndarray) -> np.ndarray:
    """The max-min rates of a route's flows alone on the network (what a solve of that batch
    alone gives: flows without links are unlimited)."""
    iso = rt.rate0.copy()
    ef = rt.e_flow
    if len(ef):
        starts = np.r_[True, ef[1:] != ef[:-1]]
        iso[ef[starts]] = max_min_sorted(np.cumsum(starts) - 1, rt.e_link, capacity)
    return iso


def make_plan(flows: Any, cc: CompiledCollective, msg_bytes: float) -> Plan | None:
    """The plan of ``cc`` for ``msg_bytes`` on ``flows`` (a FlowNetwork), or None when a
    phase's flows would not end together (then the operation always runs as flows)."""
    t = 0
    routes, nbytes, bounds, parts = [], [], [], []
    for ph in cc.phases:
        k = max(1, ph.steps)
        lat = int(round(ph.latency_ns * k / k))  # as Runner._round computes it
        nb = ph.wire_per_byte * (msg_bytes * k / k)
        rt = flows.route_data(ph.e_ptr, ph.e_link)
        step = 0
        if len(nb):
            if rt.iso is None:
                rt.iso = isolated_rates(rt, flows.capacity)
            got = lazy_step(nb, rt.iso)
            if got is None:
                return None
            step = got
        routes.append(rt)
        nbytes.append(nb)
        parts.append(rt.links)
        bounds.append((t, t + lat))
        t += lat + step
    links = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
    return Plan(cc, links, tuple(routes), tuple(nbytes), tuple(bounds), t)


class Reservations:
    """Links held by operations on the fast path.

    Plans are registered once (:meth:`register`: an id, the ids of the plans sharing a link
    with it, the plans on each link); at most one operation of a plan runs at a time (its own
    links are not free), so admission is a set test against the plans running now."""

    def __init__(self, n_links: int):
        self.n_links = n_links
        self.count = 0
        self._next = 0
        self._overlap: list[set[int]] = []  # plan id -> ids of the plans sharing a link
        self._link_plans: dict[int, list[int]] = {}
        self._plan_links: list[np.ndarray] = []  # plan id -> its links
        self._active: dict[int, FastRun] = {}  # plan id -> its operation holding links now
        self._mark = np.zeros(n_links, dtype=bool)  # scratch of release_on, left all False

    def register(self, links: np.ndarray) -> int:
        """An id for a plan over ``links`` (distinct link ids)."""
        pid = len(self._overlap)
        conf = {pid}
        for lk in links.tolist():
            lst = self._link_plans.setdefault(lk, [])
            conf.update(lst)
            lst.append(pid)
        for q in conf - {pid}:
            self._overlap[q].add(pid)
        self._overlap.append(conf)
        self._plan_links.append(links)
        return pid

    def free(self, pid: int) -> bool:
        """Whether no running operation holds a link of plan ``pid``."""
        return not self.count or self._overlap[pid].isdisjoint(self._active)

    def hold(self, run: FastRun) -> int:
        rid = self._next
        self._next += 1
        self._active[run.pid] = run
        self.count += 1
        return rid

    def drop(self, run: FastRun) -> None:
        del self._active[run.pid]
        self.count -= 1

    def release_on(self, links: np.ndarray, now: int) -> None:
        """Hand the operations holding any of ``links`` over to the flow model (in the
        order they started). Only the running plans are looked at: a handful, where the
        plans registered on ``links`` can be dozens of thousands-link rings."""
        if not self.count:
            return
        mark, plan_links = self._mark, self._plan_links
        mark[links] = True
        hit = [run for pid, run in self._active.items() if mark[plan_links[pid]].any()]
        mark[links] = False
        for run in sorted(hit, key=lambda r: r.rid):
            self.drop(run)
            run.release(now)


class FastRun:
    """One operation on the fast path (module docstring); ``done`` fires when it ends."""

    __slots__ = ("model", "plan", "pid", "collective", "kind", "n", "msg", "t0", "done", "live",
                 "rid")

    def __init__(self, model: Any, plan: Plan, pid: int, collective: str, kind: str, n: int,
                 msg_bytes: float, res: Reservations):
        env: simpy.Environment = model._env()
        self.model, self.plan, self.collective, self.kind, self.n = model, plan, collective, kind, n
        self.pid = pid
        self.msg = msg_bytes
        self.t0 = int(env.now)
        self.done = env.event()
        self.live = True
        self.rid = res.hold(self)
        env.timeout(plan.total_ns).callbacks.append(self._end)

    def _end(self, _ev: Any) -> None:
        if not self.live:
            return
        m = self.model
        m.flows.reservations.drop(self)
        if m.flows.record:
            self._played(len(self.plan.bounds))
        if m.keep_records:
            m.records.append(CommRecord(self.collective, self.kind, self.n, int(self.msg),
                                        self.plan.cc.algorithm, self.t0, self.t0 + self.plan.total_ns))
        self.done.succeed()

    def release(self, now: int) -> None:
        """Continue as the flow model would from ``now`` (the reservation is dropped)."""
        self.live = False
        p, m = self.plan, self.model
        off = now - self.t0
        i = max(j for j, (lat0, _) in enumerate(p.bounds) if lat0 <= off) if p.bounds else 0
        if m.flows.record:
            self._played(i)
        r = Runner(m, p.cc, self.collective, self.kind, self.n, self.msg,
                   resume=(self.t0, i, self.done))
        if not p.bounds:
            r._round()
            return
        f0 = p.bounds[i][1]
        if off < f0:  # in the phase's latency
            m._env().timeout(f0 - off).callbacks.append(r._start)
        else:  # its flows have run alone since t0 + f0
            m.flows.resume_lazy(p.routes[i], p.nbytes[i], self.t0 + f0).callbacks.append(r._after)

    def _played(self, upto: int) -> None:
        """Record the flows of phases ``0 .. upto - 1``, run alone on the fast path, with the
        flow network (while it records flows: per-link traffic of a result directory)."""
        p, fl = self.plan, self.model.flows
        for j in range(upto):
            end = p.bounds[j + 1][0] if j + 1 < len(p.bounds) else p.total_ns
            fl.played(p.routes[j], p.nbytes[j], self.t0 + p.bounds[j][1], self.t0 + end)
