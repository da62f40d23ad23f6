"""The flow-level network: active flows share links by max-min fairness, driven by SimPy.

A *flow* moves a number of bytes over a fixed route (a list of link ids). While flows are
active each gets its max-min fair rate (:mod:`tracesim.network.maxmin`); rates are
recomputed whenever a flow starts or ends, and only for the flows that the change can
affect (the connected component, through shared links, of the flows that started or
ended). Flows are started in batches; a batch's SimPy event fires when its last flow has
delivered its last byte.

Everything is kept in numpy arrays (one slot per flow, one entry per flow-link pair), never
one Python object per flow. Simulated time is integer nanoseconds; rates are bytes/ns.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import simpy

from tracesim.network.maxmin import max_min_sorted


class _Buf:
    """A growable 1-D numpy array (amortised doubling)."""

    def __init__(self, dtype: type, size: int = 1024):
        self.a: np.ndarray = np.zeros(size, dtype=dtype)
        self.n = 0

    def extend(self, values: np.ndarray) -> None:
        need = self.n + len(values)
        if need > len(self.a):
            new = np.zeros(max(need, 2 * len(self.a)), dtype=self.a.dtype)
            new[: self.n] = self.a[: self.n]
            self.a = new
        self.a[self.n : need] = values
        self.n = need

    @property
    def v(self) -> np.ndarray:
        return self.a[: self.n]

    def set(self, values: np.ndarray) -> None:
        self.n = 0
        self.extend(values)


@dataclass(frozen=True)
class FlowRecord:
    """A finished flow (kept only when ``record=True``): bytes asked, bytes delivered by its
    integrated rate (short of ``nbytes`` by at most half a nanosecond's worth: completion
    times are rounded to whole ns), start and end times in ns."""

    flow_id: int
    nbytes: float
    delivered: float
    start_ns: int
    end_ns: int


class FlowNetwork:
    """Max-min fair sharing of link capacities among concurrent flows.

    Args:
        capacity: capacity of every link in bytes/ns (== GB/s), indexed by link id.
        record: keep a :class:`FlowRecord` per finished flow in ``records`` (tests, tools).
        compact_min: drop finished flows from the arrays once more than this many (and more
            than half of all) flow-link entries are dead.
    """

    def __init__(self, capacity: np.ndarray, *, record: bool = False, compact_min: int = 4096):
        self.capacity = np.asarray(capacity, dtype=np.float64)
        if (self.capacity <= 0).any():
            raise ValueError("link capacities must be > 0")
        self.env: simpy.Environment | None = None
        self.record = record
        self.records: list[FlowRecord] = []
        #: bytes carried by each link by flows that have finished
        self.link_bytes = np.zeros(len(self.capacity))
        #: number of active flows crossing each link
        self.link_flows = np.zeros(len(self.capacity), dtype=np.int64)
        self.recomputes = 0
        self.compact_min = compact_min
        # flow slots
        self._rem = _Buf(np.float64)
        self._rate = _Buf(np.float64)
        self._bytes0 = _Buf(np.float64)
        self._sent = _Buf(np.float64)
        self._alive = _Buf(np.bool_)
        self._group = _Buf(np.int64)
        self._fid = _Buf(np.int64)
        self._t0 = _Buf(np.int64)
        # entries (flow-link incidence), grouped by flow slot
        self._e_flow = _Buf(np.int64)
        self._e_link = _Buf(np.int64)
        self._n_dead_entries = 0
        self._n_alive = 0
        self._next_fid = 0
        # completion groups
        self._group_left: dict[int, int] = {}
        self._group_event: dict[int, simpy.Event] = {}
        self._next_group = 0
        # scheduling
        self._t_last = 0
        self._dirty = np.zeros(len(self.capacity), dtype=bool)
        self._any_dirty = False
        self._gen = 0
        self._pending_now = False

    # ------------------------------------------------------------------ public

    def attach(self, env: simpy.Environment) -> None:
        """Bind to the SimPy environment whose integer ``now`` is nanoseconds."""
        self.env = env
        self._t_last = int(env.now)

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
        nbytes = np.asarray(nbytes, dtype=np.float64)
        n_new = len(nbytes)
        ev = env.event()
        if n_new == 0:
            ev.succeed()
            return ev
        self._advance(int(env.now))
        gid = self._next_group
        self._next_group += 1
        self._group_left[gid] = n_new
        self._group_event[gid] = ev
        base = self._rem.n
        lens: np.ndarray = np.diff(np.asarray(e_ptr, dtype=np.int64))
        e_link = np.asarray(e_link, dtype=np.int64)
        self._rem.extend(nbytes)
        self._rate.extend(np.zeros(n_new))
        self._bytes0.extend(nbytes)
        self._sent.extend(np.zeros(n_new))
        self._alive.extend(np.ones(n_new, dtype=bool))
        self._group.extend(np.full(n_new, gid))
        self._fid.extend(np.arange(self._next_fid, self._next_fid + n_new))
        self._t0.extend(np.full(n_new, int(env.now)))
        self._next_fid += n_new
        self._e_flow.extend(np.repeat(np.arange(base, base + n_new), lens))
        self._e_link.extend(e_link)
        self._n_alive += n_new
        empty = lens == 0
        if empty.any():  # nothing limits them: they finish at once
            self._rate.v[base:][empty] = np.inf
        self._dirty[e_link] = True
        self._any_dirty = True
        self.link_flows += np.bincount(e_link, minlength=len(self.capacity))
        self._kick()
        return ev

    def busy(self, e_link: np.ndarray) -> bool:
        """Whether any of the links ``e_link`` carries an active flow now."""
        return bool(len(e_link)) and bool(self.link_flows[e_link].any())

    # ------------------------------------------------------------------ internals

    def _kick(self) -> None:
        """Make sure a step runs at the current time (after the events already queued)."""
        if self._pending_now:
            return
        assert self.env is not None
        self._pending_now = True
        self._gen += 1
        gen = self._gen
        t = self.env.timeout(0)
        t.callbacks.append(self._timer_callback(gen))

    def _timer_callback(self, gen: int) -> Callable[[simpy.Event], None]:
        def callback(_event: simpy.Event) -> None:
            self._on_timer(gen)

        return callback

    def _on_timer(self, gen: int) -> None:
        if gen != self._gen:
            return  # superseded
        self._pending_now = False
        assert self.env is not None
        now = int(self.env.now)
        self._advance(now)
        self._finish(now)
        if self._any_dirty:
            self._recompute()
        self._schedule(now)

    def _advance(self, now: int) -> None:
        dt = now - self._t_last
        if dt > 0 and self._n_alive:
            alive = self._alive.v
            moved = np.where(alive, np.minimum(self._rate.v * dt, self._rem.v), 0.0)
            moved = np.nan_to_num(moved, nan=0.0, posinf=0.0)
            self._rem.v[:] -= moved
            self._sent.v[:] += moved
        self._t_last = now

    def _finish(self, now: int) -> None:
        if not self._n_alive:
            return
        alive = self._alive.v
        rem = self._rem.v
        rate = self._rate.v
        done = alive & ((rem <= rate * 0.5) | (rem <= 1e-9))
        if not done.any():
            return
        idx = np.flatnonzero(done)
        alive[idx] = False
        rate[idx] = 0.0
        self._n_alive -= len(idx)
        e_flow = self._e_flow.v
        ent = done[e_flow]
        links = self._e_link.v[ent]
        self._dirty[links] = True
        self._any_dirty = True
        self.link_bytes += np.bincount(
            links, weights=self._bytes0.v[e_flow[ent]], minlength=len(self.capacity)
        )
        self.link_flows -= np.bincount(links, minlength=len(self.capacity))
        self._n_dead_entries += int(ent.sum())
        if self.record:
            for i in idx:
                self.records.append(
                    FlowRecord(
                        int(self._fid.v[i]), float(self._bytes0.v[i]), float(self._sent.v[i]),
                        int(self._t0.v[i]), now,
                    )
                )
        # the last fraction of a nanosecond's worth of bytes (rounding to integer ns)
        self._sent.v[idx] += rem[idx]
        rem[idx] = 0.0
        groups, counts = np.unique(self._group.v[idx], return_counts=True)
        fired = []
        for g, c in zip(groups.tolist(), counts.tolist(), strict=True):
            left = self._group_left[g] - c
            if left:
                self._group_left[g] = left
            else:
                del self._group_left[g]
                fired.append(self._group_event.pop(g))
        if self._n_dead_entries > max(self.compact_min, len(e_flow) // 2):
            self._compact()
        for ev in fired:  # in group (start) order: deterministic
            ev.succeed()

    def _compact(self) -> None:
        alive = self._alive.v.copy()  # the buffers below are rewritten in place
        keep = np.flatnonzero(alive)
        new_index = np.full(len(alive), -1, dtype=np.int64)
        new_index[keep] = np.arange(len(keep))
        for buf in (self._rem, self._rate, self._bytes0, self._sent, self._group, self._fid, self._t0):
            buf.set(buf.v[keep])
        self._alive.set(np.ones(len(keep), dtype=bool))
        e_flow = self._e_flow.v
        ent = alive[e_flow]
        self._e_link.set(self._e_link.v[ent])
        self._e_flow.set(new_index[e_flow[ent]])
        self._n_dead_entries = 0

    def _recompute(self) -> None:
        """Recompute rates of the flows connected (through links) to the dirty links.

        Max-min allocations decompose over connected components of the flow-link graph,
        so only the component(s) of the flows that started or ended are re-solved; when the
        search reaches most flows it stops and re-solves them all. (Restricting the search
        to saturated links was tried: it re-solves fewer flows per event but costs more in
        bookkeeping than it saves on the benchmarks of scripts/bench_network.py.)
        """
        self._any_dirty = False
        dirty = self._dirty
        self._dirty = np.zeros(len(self.capacity), dtype=bool)
        if not self._n_alive:
            return
        alive = self._alive.v
        e_flow = self._e_flow.v
        e_link = self._e_link.v
        e_alive = alive[e_flow]
        e_flow_a = e_flow[e_alive]
        e_link_a = e_link[e_alive]
        lm = dirty
        fm = np.zeros(len(alive), dtype=bool)
        n_marked = 0
        while True:
            hit = lm[e_link_a]
            newf = np.zeros(len(alive), dtype=bool)
            newf[e_flow_a[hit]] = True
            grow = newf & ~fm
            n_grow = int(grow.sum())
            if not n_grow:
                break
            fm |= newf
            n_marked += n_grow
            if 2 * n_marked > self._n_alive:  # most flows: stop searching, take them all
                fm = alive.copy()
                break
            lm[e_link_a[grow[e_flow_a]]] = True
        if not fm.any():
            return
        if fm is alive or fm.sum() == self._n_alive:
            ef, el = e_flow_a, e_link_a
        else:
            sel = fm[e_flow_a]
            ef = e_flow_a[sel]
            el = e_link_a[sel]
        starts = np.r_[True, ef[1:] != ef[:-1]]
        local = np.cumsum(starts) - 1
        self._rate.v[ef[starts]] = max_min_sorted(local, el, self.capacity)
        self.recomputes += 1

    def _schedule(self, now: int) -> None:
        if not self._n_alive:
            return
        alive = self._alive.v
        rate = self._rate.v
        ok = alive & (rate > 0)
        if not ok.any():
            return
        with np.errstate(divide="ignore", invalid="ignore"):
            dt = float(np.min(self._rem.v[ok] / rate[ok]))
        step = max(1, math.ceil(dt - 1e-9)) if dt > 0 else 0
        assert self.env is not None
        self._gen += 1
        gen = self._gen
        self._pending_now = step == 0
        t = self.env.timeout(step)
        t.callbacks.append(self._timer_callback(gen))
