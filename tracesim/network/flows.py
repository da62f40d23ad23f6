"""The flow-level network: active flows share links by max-min fairness, driven by SimPy.

A *flow* moves a number of bytes over a fixed route (a list of link ids). While flows are
active each gets its max-min fair rate (:mod:`tracesim.network.maxmin`); rates are
recomputed whenever a flow starts or ends. Flows are started in batches; a batch's SimPy
event fires when its last flow has delivered its last byte.

Cost. Max-min allocations decompose over the connected components of the flow-link graph,
so an event (batches starting, flows ending) re-solves only the components it touches, and
only their flows are advanced: every flow keeps the time up to which its remaining bytes are
current. Components are found at the level of batches (each batch is registered on the links
it crosses), the next completions come from a heap of per-batch times (stale entries are
skipped by a version number), and all the components touched at one instant are advanced,
finished and solved together, in one set of numpy passes over just their flows. A batch alone
on its links reuses the rates computed the last time the same route arrays ran alone
(compiled collectives run many times); a batch alone on free links whose run is known --
its flows end together, or the same route ran the same bytes alone before -- takes no step
until its end (:mod:`tracesim.network.lazy`). Flow state lives in numpy arrays (one slot per flow,
one entry per flow-link pair), never one Python object per flow; a batch is one small object.

Simulated time is integer nanoseconds; rates are bytes/ns. A flow ends at the first whole
nanosecond at which it has at most half a nanosecond's worth of bytes left.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np
import simpy

from tracesim.network.flowstate import (
    NEVER,
    Batch,
    Buf,
    FlowRecord,
    FlowRecords,
    Late,
    Route,
    SolveCache,
    cached_route,
    ranges,
    solve_rates,
)
from tracesim.network.lazy import LazyBatches
from tracesim.network.local import LocalUpdates
from tracesim.network.owners import NONE, LinkOwners, component


class FlowNetwork(LocalUpdates, LazyBatches):
    """Max-min fair sharing of link capacities among concurrent flows.

    Args:
        capacity: capacity of every link in bytes/ns (== GB/s), indexed by link id.
        record: keep a :class:`FlowRecord` per finished flow in ``records`` (tests, tools),
            and in ``segments`` the bytes each flow moved over each interval of constant
            rate: arrays (flow ids, interval starts), the end (ns), bytes per flow.
        compact_min: drop the flows of finished batches from the arrays once more than this
            many (and more than half of all) flow slots are theirs (a batch keeps the slots of
            its flows that ended until it ends itself).
        memo: run a batch alone on its links from the recorded run of its route with the same
            bytes (:mod:`tracesim.network.lazy`; never while flows are recorded).
    """

    def __init__(self, capacity: np.ndarray, *, record: bool = False, compact_min: int = 4096,
                 memo: bool = True):
        self.capacity = np.asarray(capacity, dtype=np.float64)
        if (self.capacity <= 0).any():
            raise ValueError("link capacities must be > 0")
        self.env: simpy.Environment | None = None
        self.record = record
        self.memo = memo and not record
        self._tracing = 0  # batches whose run is being recorded
        self._memo_values = 0  # values held by recorded trajectories
        self._traj_live = 0  # lazy batches following a trajectory
        #: batches run from a recorded trajectory so far
        self.memo_runs = 0
        self.records = FlowRecords()
        self.segments: list[tuple[np.ndarray, np.ndarray, int, np.ndarray]] = []
        #: bytes carried by each link by flows that have finished
        self.link_bytes = np.zeros(len(self.capacity))
        #: number of active flows crossing each link
        self.link_flows = np.zeros(len(self.capacity), dtype=np.int64)
        #: max-min solves so far (one per instant at which some component changed)
        self.recomputes = 0
        self.compact_min = compact_min
        # flow slots
        self._rem = Buf(np.float64)
        self._rate = Buf(np.float64)
        self._bytes0 = Buf(np.float64)
        self._sent = Buf(np.float64)
        self._alive = Buf(np.bool_)
        self._t_upd = Buf(np.int64)
        self._bott = Buf(np.int64)  # a bottleneck link of each flow's rate (-1: not known)
        # entries (flow-link incidence), grouped by flow slot
        self._e_flow = Buf(np.int64)
        self._e_link = Buf(np.int64)
        self._n_alive = 0
        self._n_freed = 0  # slots of batches that ended since the last compaction
        self._fresh: set[int] = set()  # batches with flow slots not solved yet
        #: skip the solve at an instant where no batch is new and the flows that ended ran on
        #: links no running flow crosses (the rates of the rest cannot change); False solves
        #: anyway (tests compare the two)
        self.skip_unchanged = True
        self._next_fid = 0
        self._next_group = 0
        self._batches: dict[int, Batch] = {}
        # the batches on each link (tracesim.network.owners); ``_owner``: NONE, the gid of a
        # link's one batch, or SHARED
        self._owners = LinkOwners(len(self.capacity))
        self._owner = self._owners.owner
        self._visited = np.zeros(len(self.capacity), dtype=bool)  # scratch of owners.component
        self._routes: dict[tuple[int, int], Route] = {}
        self._solved = SolveCache()
        self._dirty: dict[int, None] = {}
        self._kick_pending = False
        self._heap: list[tuple[int, int, int, int]] = []  # (time, seq, gid, version)
        self._seq = 0
        self._timer_at: int | None = None
        self._gen = 0
        #: links held by collectives of the fast path (:mod:`tracesim.network.fastpath`);
        #: set by the network model, released into flows when another batch comes
        self.reservations: Any = None

    # ------------------------------------------------------------------ public

    def attach(self, env: simpy.Environment) -> None:
        """Bind to the SimPy environment whose integer ``now`` is nanoseconds."""
        self.env = env

    @property
    def active_flows(self) -> int:
        """Number of flows currently in flight."""
        return self._n_alive

    def start(self, e_ptr: np.ndarray, e_link: np.ndarray, nbytes: np.ndarray) -> simpy.Event:
        """Start a batch of flows now; the returned event fires when all have finished.

        Args:
            e_ptr: CSR offsets, length F+1: flow ``i`` crosses ``e_link[e_ptr[i]:e_ptr[i+1]]``.
            e_link: link ids.
            nbytes: bytes each flow moves (float, >= 0).
        """
        env = self.env
        if env is None:
            raise RuntimeError("FlowNetwork.attach(env) must be called first")
        nb = np.array(nbytes, dtype=np.float64, ndmin=1)
        n_new = len(nb)
        ev = env.event()
        if n_new == 0:
            ev.succeed()
            return ev
        now = int(env.now)
        rt = self.route_data(e_ptr, e_link)
        res = self.reservations
        if res is not None and res.count:
            res.release_on(rt.links, now)  # fast-path collectives there become flows
        free = bool((self._owner[rt.links] == NONE).all())
        if free and rt.iso is not None and self._start_lazy(rt, nb, now, ev) is not None:
            return ev
        if free and self.memo and self._start_memo(rt, nb, now, ev):
            return ev
        lo, elo = self._rem.n, self._e_link.n
        self._rem.extend(nb)
        self._rate.extend(rt.rate0)
        self._bytes0.extend(nb)
        self._sent.fill(0.0, n_new)
        self._alive.fill(True, n_new)
        self._t_upd.fill(now, n_new)
        self._bott.fill(-1, n_new)
        self._e_flow.extend(rt.e_flow + lo)
        self._e_link.extend(rt.e_link)
        self._n_alive += n_new
        self.link_flows[rt.links] += rt.link_count
        gid = self._next_group
        self._next_group += 1
        b = Batch(gid, lo, lo + n_new, elo, elo + len(rt.e_link), rt.links, ev, rt,
                   self._next_fid, now)
        if self.record:
            self._new_fids(b.fid0, rt, nb)
        self._next_fid += n_new
        self._register(b)
        self._batches[gid] = b
        self._dirty[gid] = None
        self._fresh.add(gid)
        if free and self.memo:
            self._trace(b, nb)
        if not self._kick_pending:
            self._kick_pending = True
            Late(env).callbacks.append(self._on_kick)
        return ev

    def busy(self, e_link: np.ndarray) -> bool:
        """Whether any of the links ``e_link`` carries an active flow now."""
        res = self.reservations
        if res is not None and res.count and len(e_link):
            assert self.env is not None
            res.release_on(e_link, int(self.env.now))
        if self._traj_live and len(e_link):
            self._materialize_owners(self._owner[e_link], traj_only=True)
        return bool(len(e_link)) and bool(self.link_flows[e_link].any())

    def idle(self, links: np.ndarray) -> bool:
        """Whether no batch holds any of ``links`` (distinct link ids) now."""
        return not self._batches or not np.count_nonzero(self._owner[links] != NONE)

    # ------------------------------------------------------------------ events

    def _on_kick(self, _ev: simpy.Event) -> None:
        self._kick_pending = False
        gids = list(self._dirty)
        self._dirty.clear()
        self._process(gids)

    def _on_timer(self, gen: int) -> None:
        if gen != self._gen:
            return  # superseded by an earlier timer
        self._timer_at = None
        assert self.env is not None
        now = int(self.env.now)
        heap, batches = self._heap, self._batches
        due: list[int] = []
        lazy: list[Batch] = []
        while heap and heap[0][0] <= now:
            _, _, gid, ver = heapq.heappop(heap)
            b = batches.get(gid)
            if b is not None and b.version == ver:
                if b.lazy is not None:
                    lazy.append(b)
                else:
                    due.append(gid)
        for b in lazy:
            self._finish_lazy(b, now)
        self._process(due)
        for b in lazy:  # in start order (the heap pops equal times in push order)
            b.event.succeed()

    def route_data(self, e_ptr: np.ndarray, e_link: np.ndarray) -> Route:
        """What a batch needs from its route arrays, cached by their identity."""
        return cached_route(self._routes, e_ptr, e_link)

    def _register(self, b: Batch) -> None:
        """Enter batch ``b`` on its links (a lazy batch already there gets its slots first)."""
        own = self._owner[b.links]
        if (own == NONE).all():
            self._owners.claim(b.gid, b.links)
            return
        self._materialize_owners(own)
        self._owners.add(b.gid, b.links)

    def _drop(self, b: Batch) -> None:
        self._owners.remove(b.gid, b.links)
        del self._batches[b.gid]
        self._fresh.discard(b.gid)
        if b.lazy is None:  # its slots are free for the next compaction
            self._n_freed += b.hi - b.lo

    def _process(self, gids: list[int]) -> None:
        """Advance, finish and re-solve the components of ``gids`` at the current time."""
        assert self.env is not None
        now = int(self.env.now)
        seen: set[int] = set()
        comps: list[list[int]] = []
        for gid in gids:
            if gid not in seen and gid in self._batches:
                comps.append(component(gid, seen, self._owners, self._batches, self._visited))
        if comps and self._worth_local(gids, comps):
            fired = self._try_local(gids, comps, now)
            if fired is not None:
                if self._n_freed > max(self.compact_min, self._rem.n // 2):
                    self._compact()
                self._reschedule(now)
                for b in fired:
                    b.event.succeed()
                return
        if comps:
            fired = self._step(comps, now)
            if self._tracing:
                self._trace_steps(comps, fired, now)
            if self._n_freed > max(self.compact_min, self._rem.n // 2):
                self._compact()
            self._reschedule(now)
            for b in fired:  # in start order: deterministic
                b.event.succeed()
        else:
            self._reschedule(now)

    # ------------------------------------------------------------------ one instant

    def _step(self, comps: list[list[int]], now: int) -> list[Batch]:
        batches = self._batches
        order = sorted(comps[0]) if len(comps) == 1 else sorted(g for comp in comps for g in comp)
        bl = [batches[g] for g in order]
        idx = ranges([b.lo for b in bl], [b.hi for b in bl])
        rem, alive = self._rem.a, self._alive.a
        # advance the touched flows to now; finish those that are done
        rm, done, moved, dt = self._advance(idx, now)
        al = alive[idx]
        if self.record:  # what each flow moved since its last update, and the last fraction
            fids = ranges([b.fid0 for b in bl], [b.fid0 + b.hi - b.lo for b in bl])
            self._segment(fids, now - dt, now, moved + np.where(done, rm, 0.0))
        fired: list[Batch] = []
        ended = bool(done.any())
        shared = False  # whether a flow that ended shared a link with a flow still running
        if ended:
            fired, shared = self._finish(bl, idx, done, now)
        live = [b for b in bl if b.n_alive] if ended else bl
        if not live:
            return fired
        # rates: batches alone on their links with all flows alive take cached rates (alone:
        # the only batch of its component left after this step's ends)
        alone = set()
        for c in comps:
            left = [g for g in c if g in batches] if len(c) > 1 else c
            if len(left) == 1:
                alone.add(left[0])
        fresh = self._fresh
        if shared or not self.skip_unchanged or (fresh and any(b.gid in fresh for b in live)) or any(
                b.gid in alone and b.key.iso is None and b.n_alive == b.hi - b.lo for b in live):
            self._rates(live, alone)
        # else no batch is new and every flow that ended ran on links of its own: the max-min
        # rates of the others are the ones they have (to the bit: the solve of the rest
        # computes each link from its own entries), so there is nothing to solve
        # next completion of every live batch
        if ended:
            lidx = ranges([b.lo for b in live], [b.hi for b in live])
            lrem, lal = rem[lidx], alive[lidx]
        else:  # the same flows, none ended
            lidx, lrem, lal = idx, rm, al
        self._push_next(live, lidx, lrem, lal, now)
        return fired

    def _push_next(self, live: list[Batch], lidx: np.ndarray, lrem: np.ndarray,
                   lal: np.ndarray, now: int) -> None:
        """Heap entries at the next completion of each of ``live`` (its flow slots
        ``lidx``, their bytes left ``lrem`` and alive flags ``lal``, all current at ``now``)."""
        lr = self._rate.a[lidx]
        ok = lal & (lr > 0)
        tdone = np.full(len(lidx), np.inf)
        np.divide(lrem, lr, out=tdone, where=ok)
        if len(live) == 1:
            tmin = [float(tdone.min())]
        else:
            firsts, at = [], 0
            for b in live:
                firsts.append(at)
                at += b.hi - b.lo
            tmin = np.minimum.reduceat(tdone, firsts).tolist()
        heap = self._heap
        for b, t in zip(live, tmin, strict=True):
            b.version += 1
            if t == math.inf:
                b.due = NEVER
                continue
            step = max(1, math.ceil(t - 1e-9)) if t > 0 else 0
            self._seq += 1
            b.due = now + step
            heapq.heappush(heap, (now + step, self._seq, b.gid, b.version))

    def _rates(self, live: list[Batch], alone: set[int]) -> None:
        """New rates of the flows of ``live``: cached isolated rates for a batch alone with
        all its flows, one max-min solve for the others."""
        self.recomputes += 1
        rate, bott = self._rate.a, self._bott.a
        solve: list[Batch] = []
        for b in live:
            if b.gid in alone and b.n_alive == b.hi - b.lo and b.key.iso is not None:
                rate[b.lo : b.hi] = b.key.iso
                ib = b.key.iso_bott
                bott[b.lo : b.hi] = -1 if ib is None else ib
            else:
                solve.append(b)
        if solve:
            self._solve(solve)
            for b in solve:
                if b.gid in alone and b.n_alive == b.hi - b.lo:
                    b.key.iso = rate[b.lo : b.hi].copy()
                    b.key.iso_bott = bott[b.lo : b.hi].copy()
        if self._fresh:
            for b in live:
                self._fresh.discard(b.gid)

    def _solve(self, solve: list[Batch]) -> None:
        """One max-min solve over the alive, routed flows of ``solve`` (cached by routes)."""
        solve_rates(solve, self._e_flow.a, self._e_link.a, self._alive.a, self._rate.a,
                    self._bott.a, self.capacity, self._solved)

    def _finish(self, bl: list[Batch], idx: np.ndarray, done: np.ndarray, now: int
                ) -> tuple[list[Batch], bool]:
        """End the flows ``done`` of the batches ``bl`` (slots ``idx``): the batches that
        ended, and whether a flow that ended shared a link with a flow still running."""
        fin = idx[done]
        alive = self._alive.a
        alive[fin] = False
        self._rate.a[fin] = 0.0
        self._n_alive -= len(fin)
        # per batch, its flows that ended now; their entries leave the links
        e_link_a, bytes0 = self._e_link.a, self._bytes0.a
        link_bytes, link_flows = self.link_bytes, self.link_flows
        fired = []
        shared = False
        at = 0
        for b in bl:
            n = b.hi - b.lo
            d = done[at : at + n]
            at += n
            c = int(np.count_nonzero(d))
            if not c:
                continue
            rt = b.key
            if c == n:  # the whole batch at once (no flow of it had ended before)
                np.add.at(link_bytes, e_link_a[b.elo : b.ehi], bytes0[b.lo + rt.e_flow])
                link_flows[rt.links] -= rt.link_count
                shared = shared or bool(link_flows[rt.links].any())
            else:
                ent = d[rt.e_flow]
                links = e_link_a[b.elo : b.ehi][ent]
                np.add.at(link_bytes, links, bytes0[b.lo + rt.e_flow[ent]])
                np.subtract.at(link_flows, links, 1)
                shared = shared or bool(link_flows[links].any())
                if c < b.n_alive:
                    self._shed(b, links)
            b.n_alive -= c
            if self.record:
                for slot in (b.lo + np.flatnonzero(d)).tolist():
                    self.records.append(FlowRecord(b.fid0 + slot - b.lo, float(bytes0[slot]),
                                                   float(self._sent.a[slot] + self._rem.a[slot]),
                                                   b.t0, now))
            if not b.n_alive:
                self._drop(b)
                fired.append(b)
        # the last fraction of a nanosecond's worth of bytes (rounding to integer ns)
        self._sent.a[fin] += self._rem.a[fin]
        self._rem.a[fin] = 0.0
        return fired, shared

    def _shed(self, b: Batch, ended: np.ndarray) -> None:
        """Batch ``b`` leaves the links among ``ended`` (links its flows that just ended
        crossed) that no flow crosses any more: it stays registered only where it may still
        carry bytes, so a transfer that comes onto those links later finds them free (the
        fast path, a lone batch's known run) and is not made one max-min component with it."""
        lf = self.link_flows[ended]
        if lf.all():
            return
        gone = np.unique(ended[lf == 0])
        self._owners.remove(b.gid, gone)
        mark = self._visited  # scratch, all False between uses
        mark[gone] = True
        b.links = b.links[~mark[b.links]]
        mark[gone] = False

    def _compact(self) -> None:
        """Drop the slots and entries of finished batches; renumber the live ones."""
        live = sorted((b for b in self._batches.values() if b.lazy is None), key=lambda b: b.lo)
        keep = ranges([b.lo for b in live], [b.hi for b in live])
        ekeep = ranges([b.elo for b in live], [b.ehi for b in live])
        new_index = np.full(self._rem.n, -1, dtype=np.int64)
        new_index[keep] = np.arange(len(keep))
        for buf in (self._rem, self._rate, self._bytes0, self._sent, self._alive, self._t_upd,
                    self._bott):
            buf.set(buf.v[keep])
        self._e_link.set(self._e_link.v[ekeep])
        self._e_flow.set(new_index[self._e_flow.v[ekeep]])
        lo = elo = 0
        for b in live:
            n, ne = b.hi - b.lo, b.ehi - b.elo
            b.lo, b.hi, b.elo, b.ehi = lo, lo + n, elo, elo + ne
            lo += n
            elo += ne
        self._n_freed = 0

    def _reschedule(self, now: int) -> None:
        """Keep one SimPy timer at the earliest valid heap entry."""
        heap, batches = self._heap, self._batches
        while heap:
            _, _, gid, ver = heap[0]
            b = batches.get(gid)
            if b is not None and b.version == ver:
                break
            heapq.heappop(heap)
        if not heap:
            return
        t = heap[0][0]
        if self._timer_at is not None and self._timer_at <= t:
            return
        assert self.env is not None
        self._gen += 1
        self._timer_at = t
        gen = self._gen
        self.env.timeout(max(0, t - now)).callbacks.append(lambda _e: self._on_timer(gen))
