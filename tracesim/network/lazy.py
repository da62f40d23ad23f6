"""Batches of the flow network whose end is known when they start (lazy batches).

A batch alone on its links runs the same way every time its route carries the same bytes:
its flows get the rates they had alone, end, and the survivors are re-solved, step after
step. :class:`LazyBatches` (a part of :class:`~tracesim.network.flows.FlowNetwork`) skips
those steps in two cases:

* **ends together**: every flow ends within half a nanosecond of the others at the rates the
  route had alone (``Route.iso``): one heap entry at the end, no flow slots, no solve;
* **memoised trajectory**: the flows end at different times (an all-to-all whose flows
  inside a node finish before those crossing the network). The first run of a route with
  given bytes that stays alone from start to end is recorded step by step
  (:class:`~tracesim.network.flowstate.Trajectory`: after each step, the time since the
  start, the bytes left, the rates, which flows are alive, the bytes sent); later runs of the
  same route with the same bytes, started on free links, take one heap entry at the recorded
  end.

Either kind takes flow slots only when another batch comes onto one of its links, or a
collective asks whether one is busy, before it ends (:meth:`LazyBatches._materialize`): it
gets the state the step-by-step run had at that instant (for a trajectory, the state after
its last step at or before now, with its next step on the heap), and from there everything
runs as if it had never been lazy: the times are the same either way
(``tests/test_network_memo.py``, ``tests/test_network_fastpath.py``).
"""

from __future__ import annotations

import bisect
import heapq

import numpy as np
import simpy

from tracesim.network.flowstate import Batch, Buf, FlowRecords, Route, Trajectory, lazy_step
from tracesim.network.owners import LinkOwners

#: bound on the float64 values held by the recorded trajectories of one network (64 MiB);
#: past it every trajectory is dropped and recording starts over
MEMO_MAX_VALUES = 8 << 20
#: at most this many trajectories per route (distinct byte vectors)
MEMO_PER_ROUTE = 32


class LazyBatches:
    """Lazy batches and recorded trajectories of :class:`~tracesim.network.flows.FlowNetwork`
    (the state below is the flow network's own)."""

    env: simpy.Environment | None
    record: bool
    memo: bool
    records: FlowRecords
    segments: list[tuple[np.ndarray, np.ndarray, int, np.ndarray]]
    link_bytes: np.ndarray
    link_flows: np.ndarray
    _rem: Buf
    _rate: Buf
    _bytes0: Buf
    _sent: Buf
    _alive: Buf
    _t_upd: Buf
    _bott: Buf
    _e_flow: Buf
    _e_link: Buf
    _n_alive: int
    _next_fid: int
    _next_group: int
    _batches: dict[int, Batch]
    _owner: np.ndarray
    _owners: LinkOwners
    _routes: dict[tuple[int, int], Route]
    _heap: list[tuple[int, int, int, int]]
    _seq: int
    _tracing: int
    _memo_values: int
    _traj_live: int
    memo_runs: int

    def _reschedule(self, now: int) -> None:
        raise NotImplementedError

    def _drop(self, b: Batch) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ starting

    def resume_lazy(self, rt: Route, nb: np.ndarray, t_start: int) -> simpy.Event:
        """Start now a batch that has run alone since ``t_start`` (a fast-path collective,
        :mod:`tracesim.network.fastpath`): ``rt.iso`` set, links free, flows end together."""
        assert self.env is not None
        ev = self.env.event()
        if not len(nb):
            ev.succeed()
            return ev
        b = self._start_lazy(rt, nb, int(self.env.now), ev, t_start)
        assert b is not None
        return ev

    def _start_lazy(self, rt: Route, nb: np.ndarray, now: int, ev: simpy.Event,
                    t0: int | None = None) -> Batch | None:
        """A batch alone on its links whose flows all end at the same nanosecond at the rates
        they had the last time they ran alone: its end is known now, so it takes no flow slots
        and no solve -- unless another batch comes onto one of its links before it ends
        (then :meth:`_materialize` gives it slots with the bytes it has left). ``t0``: when
        its flows started (default now)."""
        iso = rt.iso
        assert iso is not None
        step = lazy_step(nb, iso)
        if step is None:
            return None
        t0 = now if t0 is None else t0
        b = self._lazy_batch(rt, nb, ev, t0, t0 + step)
        self._reschedule(now)
        return b

    def _start_memo(self, rt: Route, nb: np.ndarray, now: int, ev: simpy.Event) -> bool:
        """Start a batch on free links from the recorded trajectory of its route with these
        bytes, if there is one."""
        tj = rt.traj.get(nb.tobytes()) if rt.traj else None
        if tj is None:
            return False
        b = self._lazy_batch(rt, nb, ev, now, now + tj.end)
        b.traj = tj
        self._traj_live += 1
        self.memo_runs += 1
        self._reschedule(now)
        return True

    def _lazy_batch(self, rt: Route, nb: np.ndarray, ev: simpy.Event, t0: int, end: int) -> Batch:
        n = len(nb)
        gid = self._next_group
        self._next_group += 1
        b = Batch(gid, -1, -1, -1, -1, rt.links, ev, rt, self._next_fid, t0)
        if self.record:
            self._new_fids(b.fid0, rt, nb)
        b.n_alive = n
        b.lazy = nb
        self._next_fid += n
        self._n_alive += n
        self.link_flows[rt.links] += rt.link_count
        self._owners.claim(gid, rt.links)
        self._batches[gid] = b
        self._seq += 1
        b.due = end
        heapq.heappush(self._heap, (end, self._seq, gid, b.version))
        return b

    def _new_fids(self, fid0: int, rt: Route, nb: np.ndarray) -> None:
        """Flows ``fid0 .. fid0 + len(nb) - 1`` of route ``rt`` begin (called while flows are
        recorded; a link recorder keeps their links)."""

    def played(self, rt: Route, nb: np.ndarray, t0: int, t1: int) -> None:
        """Record a batch of route ``rt`` that ran alone at its isolated rates from ``t0`` to
        ``t1`` without entering the network (a phase of a fast-path collective,
        :mod:`tracesim.network.fastpath`), as :meth:`_finish_lazy` records a lazy batch that
        ended: flow ids, bytes per link, one segment, a record per flow."""
        n = len(nb)
        if not n:
            return
        fid0 = self._next_fid
        self._next_fid += n
        self._new_fids(fid0, rt, nb)
        np.add.at(self.link_bytes, rt.e_link, nb[rt.e_flow])
        self._record_run(fid0, nb, t0, t1)

    def _record_run(self, fid0: int, nb: np.ndarray, t0: int, t1: int) -> None:
        """Flows ``fid0 ..`` that moved ``nb`` bytes each, all from ``t0`` to ``t1``: one
        segment and one run of records."""
        self._segment(np.arange(fid0, fid0 + len(nb)), np.full(len(nb), t0), t1, nb)
        self.records.add_run(fid0, nb, t0, t1)

    def _segment(self, fids: np.ndarray, t_from: np.ndarray, now: int, nbytes: np.ndarray) -> None:
        keep = nbytes > 0
        self.segments.append((fids[keep], t_from[keep], now, nbytes[keep]))

    # ------------------------------------------------------------------ slots on demand

    def _materialize(self, b: Batch, now: int) -> None:
        """Give a lazy batch its flow slots, with the state its flows have at ``now``."""
        nb, rt = b.lazy, b.key
        assert nb is not None
        tj = b.traj
        n = len(nb)
        lo, elo = self._rem.n, self._e_link.n
        if tj is not None:
            k = bisect.bisect_right(tj.times, now - b.t0) - 1
            rem, rate, alive, sent = tj.rem[k], tj.rate[k], tj.alive[k], tj.sent[k]
            t_upd = b.t0 + tj.times[k]
        else:
            assert rt.iso is not None
            sent = np.minimum(np.where(np.isinf(rt.iso), nb, rt.iso * (now - b.t0)), nb)
            if self.record:
                self._segment(np.arange(b.fid0, b.fid0 + n), np.full(n, b.t0), now, sent)
            rem, rate, alive, t_upd = nb - sent, rt.iso, np.ones(n, dtype=bool), now
        self._rem.extend(rem)
        self._rate.extend(rate)
        self._bytes0.extend(nb)
        self._sent.extend(sent)
        self._alive.extend(alive)
        self._t_upd.fill(t_upd, n)
        self._bott.fill(-1, n)
        self._e_flow.extend(rt.e_flow + lo)
        self._e_link.extend(rt.e_link)
        b.lo, b.hi, b.elo, b.ehi = lo, lo + n, elo, elo + len(rt.e_link)
        b.lazy = None
        b.version += 1  # its heap entry is stale (the next solve, or the next step, below)
        if tj is None:
            return
        b.traj = None
        self._traj_live -= 1
        dead = ~alive
        nd = int(dead.sum())
        if nd:  # the flows that ended in the recorded steps, as _finish ended them
            ent = dead[rt.e_flow]
            links = rt.e_link[ent]
            np.add.at(self.link_bytes, links, nb[rt.e_flow[ent]])
            np.subtract.at(self.link_flows, links, 1)
            self._n_alive -= nd
            b.n_alive = n - nd
        nxt = tj.times[k + 1] if k + 1 < len(tj.times) else tj.end
        self._seq += 1
        b.due = b.t0 + nxt
        heapq.heappush(self._heap, (b.t0 + nxt, self._seq, b.gid, b.version))
        self._reschedule(now)

    def _materialize_owners(self, own: np.ndarray, *, traj_only: bool = False) -> None:
        """Give the lazy batches among the link owners ``own`` their slots (``traj_only``:
        only those following a trajectory, whose step-by-step state says which of their
        flows still cross the links)."""
        assert self.env is not None
        for o in set(own[own >= 0].tolist()):
            b = self._batches[o]
            if b.lazy is not None and (b.traj is not None or not traj_only):
                self._materialize(b, int(self.env.now))

    def _finish_lazy(self, b: Batch, now: int) -> None:
        nb, rt = b.lazy, b.key
        assert nb is not None
        if b.traj is not None:
            b.traj = None
            self._traj_live -= 1
        np.add.at(self.link_bytes, rt.e_link, nb[rt.e_flow])
        self.link_flows[rt.links] -= rt.link_count
        self._n_alive -= len(nb)
        if self.record:
            self._record_run(b.fid0, nb, b.t0, now)
        b.n_alive = 0
        self._drop(b)

    # ------------------------------------------------------------------ recording

    def _trace(self, b: Batch, nb: np.ndarray) -> None:
        """Record the steps of batch ``b`` (started now on free links, bytes ``nb``)."""
        b.trace = Trajectory(nb.tobytes())
        self._tracing += 1

    def _trace_steps(self, comps: list[list[int]], fired: list[Batch], now: int) -> None:
        """After a step: each recorded batch alone in its component keeps its state; one
        that met another batch stops recording; one that ended stores its trajectory."""
        ended = {b.gid: b for b in fired}
        rem, rate, alive, sent = self._rem.a, self._rate.a, self._alive.a, self._sent.a
        for comp in comps:
            for g in comp:
                b = self._batches.get(g) or ended.get(g)
                if b is None or b.trace is None:
                    continue
                tj = b.trace
                if len(comp) > 1:
                    b.trace = None
                    self._tracing -= 1
                elif not b.n_alive:
                    b.trace = None
                    self._tracing -= 1
                    tj.end = now - b.t0
                    if tj.usable():
                        self._keep(b.key, tj)
                else:
                    lo, hi = b.lo, b.hi
                    tj.add(now - b.t0, rem[lo:hi].copy(), rate[lo:hi].copy(),
                           alive[lo:hi].copy(), sent[lo:hi].copy())

    def _keep(self, rt: Route, tj: Trajectory) -> None:
        size = tj.size()
        if self._memo_values + size > MEMO_MAX_VALUES:
            for r in self._routes.values():
                r.traj = None
            self._memo_values = 0
        if rt.traj is None:
            rt.traj = {}
        elif len(rt.traj) >= MEMO_PER_ROUTE:
            self._memo_values -= sum(t.size() for t in rt.traj.values())
            rt.traj.clear()
        rt.traj[tj.key] = tj
        self._memo_values += size
