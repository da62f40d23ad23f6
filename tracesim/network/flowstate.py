"""Flow-network state helpers: growable arrays, per-route data, batches, the late event.

Used by :mod:`tracesim.network.flows`; see its docstring for how they fit together.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy
from simpy.events import EventPriority

from tracesim.network.maxmin import max_min_bottlenecks

#: bound on the cache of route data (keyed by the identity of the caller's route arrays)
ROUTE_CACHE_MAX = 1 << 16
#: bound on the rates held by the cache of solves (32 MiB of float64); past it, it starts over
SOLVE_CACHE_MAX_VALUES = 4 << 20


#: :attr:`Batch.due` of a batch none of whose flows moves
NEVER = 1 << 62

#: SimPy priority of :class:`Late` (NORMAL is 1, URGENT 0; lower runs first)
LATE_PRIORITY = EventPriority(2)


class Late(simpy.Event):
    """An event processed after every other event of the current instant (its priority
    comes after SimPy's NORMAL), so that all the batches started at one instant -- including
    those started by processes that other events of that instant wake up -- are solved
    together once."""

    def __init__(self, env: simpy.Environment):
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, LATE_PRIORITY, 0)




class Buf:
    """A growable 1-D numpy array (amortised doubling)."""

    def __init__(self, dtype: type, size: int = 1024):
        self.a: np.ndarray = np.zeros(size, dtype=dtype)
        self.n = 0

    def _grow(self, need: int) -> None:
        if need > len(self.a):
            new = np.zeros(max(need, 2 * len(self.a)), dtype=self.a.dtype)
            new[: self.n] = self.a[: self.n]
            self.a = new

    def extend(self, values: np.ndarray) -> None:
        need = self.n + len(values)
        self._grow(need)
        self.a[self.n : need] = values
        self.n = need

    @property
    def v(self) -> np.ndarray:
        return self.a[: self.n]

    def fill(self, value: float, n: int) -> None:
        """Append ``n`` copies of ``value``."""
        need = self.n + n
        self._grow(need)
        self.a[self.n : need] = value
        self.n = need

    def set(self, values: np.ndarray) -> None:
        self.n = 0
        self.extend(values)


class Route:
    """Per-route-array data: flow of each entry, distinct links (and the entries on each),
    initial rates, and the rates of the flows when the batch runs alone (filled on first
    use)."""

    __slots__ = ("ptr_in", "link_in", "e_link", "e_flow", "ptr", "links", "link_count", "rate0",
                 "iso", "iso_bott", "traj", "_by_link")

    def __init__(self, e_ptr: np.ndarray, e_link: np.ndarray):
        self.ptr_in, self.link_in = e_ptr, e_link
        self.e_link = np.asarray(e_link, dtype=np.int64)
        #: entries of flow ``i``: ``ptr[i]:ptr[i + 1]``
        self.ptr = np.asarray(e_ptr, dtype=np.int64)
        lens = np.diff(self.ptr)
        self.e_flow = np.repeat(np.arange(len(lens), dtype=np.int64), lens)
        self.links, self.link_count = np.unique(self.e_link, return_counts=True)
        self.rate0 = np.where(lens == 0, np.inf, 0.0)  # nothing limits an empty route
        self.iso: np.ndarray | None = None
        #: the bottleneck links of ``iso`` when a solve of the batch alone set it (else None)
        self.iso_bott: np.ndarray | None = None
        #: recorded runs alone, by the bytes of their flows (``nbytes.tobytes()``)
        self.traj: dict[bytes, Trajectory] | None = None
        self._by_link: tuple[np.ndarray, np.ndarray] | None = None

    def on_links(self, links: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The entries on ``links`` (sorted, distinct): entry indices and, for each, the
        position of its link in ``links``."""
        if self._by_link is None:
            order = np.argsort(self.e_link, kind="stable")
            self._by_link = (order, self.e_link[order])
        order, sorted_link = self._by_link
        lo = np.searchsorted(sorted_link, links, "left")
        hi = np.searchsorted(sorted_link, links, "right")
        n = hi - lo
        return order[ranges(lo, hi)], np.repeat(np.arange(len(links)), n)


class Trajectory:
    """How a batch of one route with given bytes ran alone, from its start to its end: after
    each of its steps but the last, the time since its start (ns) and its flows' bytes left,
    rates, alive flags and bytes sent; ``end``: the time of its last step, when its last flow
    ended (see :mod:`tracesim.network.lazy`)."""

    __slots__ = ("key", "times", "rem", "rate", "alive", "sent", "end")

    def __init__(self, key: bytes):
        self.key = key
        self.times: list[int] = []
        self.rem: list[np.ndarray] = []
        self.rate: list[np.ndarray] = []
        self.alive: list[np.ndarray] = []
        self.sent: list[np.ndarray] = []
        self.end = -1

    def add(self, t: int, rem: np.ndarray, rate: np.ndarray, alive: np.ndarray,
            sent: np.ndarray) -> None:
        self.times.append(t)
        self.rem.append(rem)
        self.rate.append(rate)
        self.alive.append(alive)
        self.sent.append(sent)

    def usable(self) -> bool:
        """Recorded from the batch's first step (at its start) to its end."""
        return bool(self.times) and self.times[0] == 0 and self.end >= self.times[-1]

    def size(self) -> int:
        """Values held (for the memory bound)."""
        return 4 * sum(len(r) for r in self.rem)


class Batch:
    """Flows started together: slots ``lo:hi``, entries ``elo:ehi``, the links they cross."""

    __slots__ = ("gid", "lo", "hi", "elo", "ehi", "links", "n_alive", "event", "version",
                 "key", "fid0", "t0", "lazy", "traj", "trace", "due")

    def __init__(self, gid: int, lo: int, hi: int, elo: int, ehi: int, links: np.ndarray,
                 event: simpy.Event, key: Route, fid0: int, t0: int):
        self.gid, self.lo, self.hi, self.elo, self.ehi = gid, lo, hi, elo, ehi
        self.links = links
        self.n_alive = hi - lo
        self.event = event
        self.version = 0
        self.key = key  # route data (shared by the batches of the same route arrays)
        self.fid0, self.t0 = fid0, t0
        #: bytes per flow while the batch runs alone at its cached rates without flow slots
        #: (see FlowNetwork._start_lazy); None once it has slots
        self.lazy: np.ndarray | None = None
        #: the recorded run a lazy batch follows (it ends at ``t0 + traj.end``)
        self.traj: Trajectory | None = None
        #: this batch's run being recorded (started alone; dropped if it meets another)
        self.trace: Trajectory | None = None
        #: the time (ns) of its heap entry: its next step (-1 before its first solve,
        #: ``NEVER`` when none of its flows moves)
        self.due = -1


def cached_route(routes: dict[tuple[int, int], Route], e_ptr: np.ndarray,
                 e_link: np.ndarray) -> Route:
    """The :class:`Route` of the arrays ``e_ptr``, ``e_link`` from ``routes`` (keyed by
    their identity, bounded by ROUTE_CACHE_MAX), made if missing."""
    key = (id(e_ptr), id(e_link))
    rt = routes.get(key)
    if rt is None or rt.ptr_in is not e_ptr or rt.link_in is not e_link:
        if len(routes) >= ROUTE_CACHE_MAX:
            routes.clear()
        rt = routes[key] = Route(e_ptr, e_link)
    return rt


def lazy_step(nb: np.ndarray, iso: np.ndarray) -> int | None:
    """Whole nanoseconds until flows of ``nb`` bytes at rates ``iso`` all end, when they end
    within half a nanosecond of each other (None otherwise: they need slots and solves)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        dt = np.where(iso > 0, nb / iso, np.inf)
    dt[np.isinf(iso)] = 0.0
    lo_dt, hi_dt = float(dt.min()), float(dt.max())
    if not hi_dt - lo_dt <= 0.5 or not math.isfinite(hi_dt):
        return None
    return max(1, math.ceil(lo_dt - 1e-9)) if lo_dt > 0 else 0


class SolveCache(dict[Any, tuple[tuple[Route, ...], np.ndarray, np.ndarray]]):
    """Rates and bottleneck links of past solves (see :func:`solve_rates`) and how many
    values they hold."""

    def __init__(self) -> None:
        super().__init__()
        self.held = 0

    def keep(self, key: Any, routes: tuple[Route, ...], rates: np.ndarray,
             bott: np.ndarray) -> None:
        if len(self) >= ROUTE_CACHE_MAX or self.held + 2 * len(rates) > SOLVE_CACHE_MAX_VALUES:
            self.clear()
            self.held = 0
        self[key] = (routes, rates, bott)
        self.held += 2 * len(rates)


def solve_rates(solve: list[Batch], e_flow: np.ndarray, e_link: np.ndarray, alive: np.ndarray,
                rate: np.ndarray, bott: np.ndarray, capacity: np.ndarray,
                cache: SolveCache) -> None:
    """Max-min rates of the alive, routed flows of the batches ``solve`` into ``rate`` (flow
    slots; ``e_flow``, ``e_link``: the entries), and a bottleneck link of each into ``bott``
    (-1 for a flow without links). The rates depend only on the batches'
    routes, in order, and on which of their flows are alive: they are kept in ``cache``, so
    the same batches of the same routes meeting again in the same state (a forward and a
    backward pipeline transfer on one NIC; two all-to-alls of a periodic schedule) take the
    rates of the last solve."""
    idx = ranges([b.lo for b in solve], [b.hi for b in solve])
    routes = tuple(id(b.key) for b in solve)
    full = all(b.n_alive == b.hi - b.lo for b in solve)
    key: Any = routes if full else (routes, alive[idx].tobytes())
    hit = cache.get(key)
    if hit is not None and all(r is b.key for r, b in zip(hit[0], solve, strict=True)):
        rate[idx] = hit[1]
        bott[idx] = hit[2]
        return
    eidx = ranges([b.elo for b in solve], [b.ehi for b in solve])
    ef = e_flow[eidx]
    keep = alive[ef]
    ef, el = ef[keep], e_link[eidx][keep]
    bott[idx] = -1
    if len(ef):
        starts = np.r_[True, ef[1:] != ef[:-1]]
        slots = ef[starts]
        rate[slots], bott[slots] = max_min_bottlenecks(np.cumsum(starts) - 1, el, capacity)
    cache.keep(key, tuple(b.key for b in solve), rate[idx].copy(), bott[idx].copy())


def ranges(los: Sequence[int] | np.ndarray, his: Sequence[int] | np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(lo, hi)`` over the pairs (vectorised; a few pairs, the
    usual case, are cheaper concatenated)."""
    if len(los) == 1:
        return np.arange(los[0], his[0], dtype=np.int64)
    if len(los) == 2 and his[0] == los[1]:  # adjacent slots
        return np.arange(los[0], his[1], dtype=np.int64)
    if 1 < len(los) <= 8:
        return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in zip(los, his, strict=True)])
    lo = np.asarray(los, dtype=np.int64)
    ln = np.asarray(his, dtype=np.int64) - lo
    total = int(ln.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.cumsum(ln) - ln
    return np.repeat(lo - starts, ln) + np.arange(total, dtype=np.int64)


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


class FlowRecords:
    """The :class:`FlowRecord` of every finished flow of a recording network, in the order
    they finished. A batch whose flows all ran from one instant to another (a lazy batch, a
    fast-path phase) is kept as one run (:meth:`add_run`) and its records made when read."""

    def __init__(self) -> None:
        self._items: list[FlowRecord | tuple[int, np.ndarray, int, int]] = []
        self._n = 0

    def append(self, rec: FlowRecord) -> None:
        self._items.append(rec)
        self._n += 1

    def add_run(self, fid0: int, nbytes: np.ndarray, t0: int, t1: int) -> None:
        """Flows ``fid0 ..`` that moved ``nbytes`` each (all delivered) from ``t0`` to ``t1``."""
        self._items.append((fid0, nbytes, t0, t1))
        self._n += len(nbytes)

    def flow_ids(self) -> np.ndarray:
        """The flow id of every record (as ``[r.flow_id for r in self]``, without the records)."""
        first = np.fromiter((it.flow_id if isinstance(it, FlowRecord) else it[0]
                             for it in self._items), np.int64, len(self._items))
        n = np.fromiter((1 if isinstance(it, FlowRecord) else len(it[1]) for it in self._items),
                        np.int64, len(self._items))
        return ranges(first, first + n)

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[FlowRecord]:
        for it in self._items:
            if isinstance(it, FlowRecord):
                yield it
            else:
                fid0, nb, t0, t1 = it
                for i, x in enumerate(nb.tolist()):
                    yield FlowRecord(fid0 + i, x, x, t0, t1)
