"""Local updates of the max-min rates when a few flows come or go beside many others.

A max-min fair allocation is the only feasible one in which every flow has a *bottleneck*:
a saturated link on which no flow has a higher rate (Bertsekas and Gallager, *Data
Networks*, section 6.5.2). The solve (:func:`tracesim.network.maxmin.max_min_bottlenecks`)
records, for every flow, the link at which it froze, which is such a link. When batches
start, or flows end, only the links they cross (``C``) change; every other link keeps its
flows and their rates. So :class:`LocalUpdates` (a part of
:class:`~tracesim.network.flows.FlowNetwork`) tries, before re-solving a whole component:

1. the new flows, and the flows whose recorded bottleneck is in ``C`` (a new flow takes a
   share of that saturated link; an ended flow leaves it short), get the max-min rates of
   the capacity the other flows leave on their links (a solve over these flows alone);
   every other flow keeps its rate;
2. the result is checked on the links of the solved flows alone: each solved flow's link of
   step 1, and each other flow there whose recorded bottleneck is one of them, must be
   saturated with no higher rate on it; a flow whose bottleneck lies elsewhere keeps it
   (nothing there changed). A flow that fails joins the solved set and the check repeats.

When every check holds, the allocation is the max-min one (the same rates the whole solve
gives, to rounding) and the step costs work on those links alone: the flows of the other
batches are neither advanced nor re-solved, and their completion times stand. A flow whose
rate came from a recorded run has no recorded bottleneck and is solved with the others.
When the solved set grows past :data:`LOCAL_MAX_SHARE` of the flows in flight, or the
checks take more than :data:`LOCAL_MAX_ROUNDS` rounds, nothing has changed and the whole
component is solved as before; so it is when another batch of the component takes its next
step within 1 ns (the whole step ends every flow within half a nanosecond of its end, which
a local update does not look at). Either way every flow ends at the same nanosecond. This
is what a pipeline transfer beside a data-parallel all-reduce, each bottlenecked on a
link of its own, costs at thousands of GPUs: a check on a few hundred links instead of a
solve of tens of thousands of flows.
"""

from __future__ import annotations

import numpy as np
import simpy

from tracesim.network.flowstate import Batch, Buf, ranges
from tracesim.network.maxmin import max_min_bottlenecks
from tracesim.network.owners import LinkOwners

#: a local update is tried when the components to re-solve have at least this many
#: flow-link entries (below it a whole solve is as cheap, and stays the reference) ...
LOCAL_MIN_ENTRIES = 8192
#: ... and this many times the flows on the links of the batches that start or end (what the
#: local update looks at first). Below it the local update costs more than the whole solve
#: it saves: measured on the MLPerf GPT-3 11,616-GPU and Llama 3.1 405B 2,496-GPU rows
#: (docs/performance.md)
LOCAL_MIN_RATIO = 6
#: relative tolerance of the bottleneck checks (the solve's own)
CHECK_TOL = 1e-9
#: rounds of growing the free set before the whole component is solved instead
LOCAL_MAX_ROUNDS = 8
#: the whole component is solved instead once the free flows are more than this share of
#: the flows in flight
LOCAL_MAX_SHARE = 0.5


class LocalUpdates:
    """Local max-min updates of :class:`~tracesim.network.flows.FlowNetwork` (the state
    below is the flow network's own)."""

    env: simpy.Environment | None
    record: bool
    skip_unchanged: bool
    capacity: np.ndarray
    link_flows: np.ndarray
    _rem: Buf
    _rate: Buf
    _sent: Buf
    _alive: Buf
    _t_upd: Buf
    _bott: Buf
    _n_alive: int
    _e_link: Buf
    _batches: dict[int, Batch]
    _owners: LinkOwners
    _fresh: set[int]

    #: try local updates (False: always solve whole components; tests compare the two)
    local = True
    #: steps taken by a local update
    local_updates = 0

    def _finish(self, bl: list[Batch], idx: np.ndarray, done: np.ndarray, now: int
                ) -> tuple[list[Batch], bool]:
        raise NotImplementedError

    def _push_next(self, live: list[Batch], lidx: np.ndarray, lrem: np.ndarray,
                   lal: np.ndarray, now: int) -> None:
        raise NotImplementedError

    def _worth_local(self, gids: list[int], comps: list[list[int]]) -> bool:
        """Whether a local update may pay for the batches ``gids`` in components ``comps``:
        the components' entries against the flows on the links of ``gids``."""
        if not self.local or self.record or not self.skip_unchanged:
            return False
        batches = self._batches
        entries = sum(len(batches[g].key.e_link) for c in comps for g in c if g in batches)
        if entries < LOCAL_MIN_ENTRIES:
            return False
        flows = self.link_flows
        near = sum(int(flows[batches[g].links].sum()) for g in gids if g in batches)
        return entries >= LOCAL_MIN_RATIO * near

    def _try_local(self, gids: list[int], comps: list[list[int]], now: int
                   ) -> list[Batch] | None:
        """Step the batches ``gids`` (all new, or all due now; in components ``comps``) by a
        local update: the batches that ended, or None when it does not apply or gives up
        (then only the flows of ``gids`` have been advanced to ``now``, which the whole step
        repeats harmlessly). It does not apply when another batch of the components may
        have a flow within half a nanosecond of its end (its next step is at most 1 ns
        away): the whole step ends such flows now."""
        batches = self._batches
        tb = [batches[g] for g in sorted(gids) if g in batches]
        if not tb or any(b.lazy is not None or b.trace is not None for b in tb):
            return None
        mine = {b.gid for b in tb}
        soon = now + 1
        if any(batches[g].due <= soon for c in comps for g in c if g not in mine and g in batches):
            return None
        fresh = self._fresh
        new = [b.gid in fresh for b in tb]
        idx = ranges([b.lo for b in tb], [b.hi for b in tb])
        done = self._advance(idx, now)[1]
        al = self._alive.a[idx]
        # the changed links (those of the flows that end) and the new flows that do not end
        e_link = self._e_link.a
        parts, free, at = [], [], 0
        for b, nw in zip(tb, new, strict=True):
            n = b.hi - b.lo
            d = done[at : at + n]
            if nw:
                go = al[at : at + n] & ~d & (b.key.ptr[1:] > b.key.ptr[:-1])
                free.append(b.lo + np.flatnonzero(go))
            at += n
            if d.any():
                parts.append(e_link[b.elo : b.ehi][d[b.key.e_flow]])
        f0 = np.concatenate(free) if free else np.zeros(0, dtype=np.int64)
        c0 = _distinct(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
        fin = idx[done]
        alive = self._alive.a
        alive[fin] = False  # as after the step (restored below)
        got = self._local_solve(tb, f0, c0)
        alive[fin] = True
        if got is None:
            return None
        slots, rates, bl, touched = got
        fired, _ = self._finish(tb, idx, done, now)
        moved = [b for b in touched if b.gid not in mine]
        if moved:
            self._advance(ranges([b.lo for b in moved], [b.hi for b in moved]), now)
        self._rate.a[slots] = rates
        self._bott.a[slots] = bl
        for b, nw in zip(tb, new, strict=True):
            if nw:
                fresh.discard(b.gid)
        live = sorted((b for b in [*tb, *moved] if b.n_alive), key=lambda b: b.gid)
        if live:
            lidx = ranges([b.lo for b in live], [b.hi for b in live])
            self._push_next(live, lidx, self._rem.a[lidx], alive[lidx], now)
        self.local_updates += 1
        return fired

    def _advance(self, idx: np.ndarray, now: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Move the flows of slots ``idx`` to ``now`` at their rates (a finished flow's rate
        is 0: it moves nothing): their bytes left, which of them are done (within half a
        nanosecond's worth of bytes), the bytes each moved and over how many ns."""
        rem, rate, t_upd = self._rem.a, self._rate.a, self._t_upd.a
        dt = now - t_upd[idx]
        r = rate[idx]
        rm0 = rem[idx]
        moved = np.minimum(np.where(dt > 0, r, 0.0) * dt, rm0)  # no inf rate x 0 ns
        rm = rm0 - moved
        rem[idx] = rm
        self._sent.a[idx] += moved
        t_upd[idx] = now
        done = self._alive.a[idx] & ((rm <= r * 0.5) | (rm <= 1e-9))
        return rm, done, moved, dt

    def _local_solve(self, tb: list[Batch], free: np.ndarray, changed: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Batch]] | None:
        """Rates of the flows whose max-min rate changes when the flows ``free`` (slots)
        come and the links ``changed`` lose flows (``alive`` already says which): the free
        flows' slots, rates, bottleneck links and batches, the free set grown until every
        flow on the links it crosses passes the checks (module docstring). None when it
        grows past :data:`LOCAL_MAX_SHARE` of the flows in flight or takes more than
        :data:`LOCAL_MAX_ROUNDS` rounds."""
        batches = self._batches
        rate, bott = self._rate.a, self._bott.a
        lo_tol = 1.0 - CHECK_TOL
        free = _distinct(free)
        c_links = _distinct(np.concatenate([changed, self._links_of(tb, free)]))
        if not len(c_links):
            return free, np.zeros(0), np.zeros(0, dtype=np.int64), []
        # the entries on the links gathered so far (slots, global links), grown each round
        near: dict[int, Batch] = {}
        got_f: list[np.ndarray] = []
        got_l: list[np.ndarray] = []
        done_links = np.zeros(0, dtype=np.int64)
        seeded = False
        for _ in range(LOCAL_MAX_ROUNDS):
            if len(free) > LOCAL_MAX_SHARE * self._n_alive:
                return None
            fresh_links = c_links[~_member(c_links, done_links)]
            if len(fresh_links):
                more_b = [batches[g] for g in self._owners.on(fresh_links)]
                if any(b.lazy is not None or b.trace is not None for b in more_b):
                    return None
                for b in more_b:
                    near[b.gid] = b
                f, w = self._entries_on(more_b, fresh_links)
                got_f.append(f)
                got_l.append(fresh_links[w])
                done_links = c_links
            e_f = np.concatenate(got_f)
            e_l = np.searchsorted(c_links, np.concatenate(got_l))
            n_c = len(c_links)
            is_free = _member(e_f, free)
            fixed = ~is_free
            of = e_f[fixed]  # a flow on several of the links is looked at on each
            ob = bott[of]
            pos = np.minimum(np.searchsorted(c_links, ob), n_c - 1)
            here = (c_links[pos] == ob) & (ob >= 0)
            if not seeded:
                # the flows bottlenecked where flows come or go change rate (a new flow
                # takes a share of their saturated link, an ended one leaves it short):
                # they join at once, as do flows with no recorded bottleneck
                seeded = True
                seed = of[here | (ob < 0)]
                if len(seed):
                    seed = _distinct(seed)
                    free = _distinct(np.concatenate([free, seed]))
                    c_links = _distinct(np.concatenate(
                        [c_links, self._links_of(list(near.values()), seed)]))
                    continue
            cap = self.capacity[c_links]
            residual = np.maximum(
                cap - np.bincount(e_l[fixed], weights=rate[of], minlength=n_c), 0.0)
            order = np.flatnonzero(is_free)
            order = order[np.argsort(e_f[order], kind="stable")]
            ff, fl = e_f[order], e_l[order]
            if len(ff):
                first = np.r_[True, ff[1:] != ff[:-1]]
                seg = np.cumsum(first) - 1
                rates, bl = max_min_bottlenecks(seg, fl, residual)
            else:
                seg, rates, bl = ff, np.zeros(0), ff
            r_e = rate[e_f]
            r_e[order] = rates[seg]
            load = np.bincount(e_l, weights=r_e, minlength=n_c)
            top = np.zeros(n_c)
            np.maximum.at(top, e_l, r_e)
            full = load >= cap * lo_tol
            grow: list[np.ndarray] = []
            bad = ~(full[bl] & (rates >= top[bl] * lo_tol))
            if bad.any():  # a flow already there runs faster on a new flow's link
                hot = np.zeros(n_c, dtype=bool)
                hot[bl[bad]] = True
                grow.append(e_f[fixed & hot[e_l]])
            ok = ~here | (full[pos] & (rate[of] >= top[pos] * lo_tol))
            ok &= ob >= 0
            if not ok.all():  # lost its bottleneck, or never had one recorded
                grow.append(of[~ok])
            if not grow:
                touched = [b for b in near.values() if len(free) and _holds(b, free)]
                return free, rates, c_links[bl], touched
            more = _distinct(np.concatenate(grow))
            free = _distinct(np.concatenate([free, more]))
            c_links = _distinct(np.concatenate(
                [c_links, self._links_of(list(near.values()), more)]))
        return None

    def _entries_on(self, near: list[Batch], links: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """The alive entries of the batches ``near`` on ``links`` (sorted, distinct): the
        slot of each and the position of its link in ``links``."""
        alive = self._alive.a
        fs, ls = [], []
        for b in near:
            e, where = b.key.on_links(links)
            if not len(e):
                continue
            slot = b.lo + b.key.e_flow[e]
            keep = alive[slot]
            fs.append(slot[keep])
            ls.append(where[keep])
        if not fs:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(fs), np.concatenate(ls)

    @staticmethod
    def _links_of(bs: list[Batch], slots: np.ndarray) -> np.ndarray:
        """The links the flows ``slots`` (sorted) of the batches ``bs`` cross."""
        out = []
        for b in bs:
            a, z = np.searchsorted(slots, [b.lo, b.hi])
            if z > a:
                rt = b.key
                f = slots[a:z] - b.lo
                out.append(rt.e_link[ranges(rt.ptr[f], rt.ptr[f + 1])])
        return _distinct(np.concatenate(out)) if out else np.zeros(0, dtype=np.int64)


def _distinct(x: np.ndarray) -> np.ndarray:
    """The distinct values of the integer array ``x``, sorted (a sort: cheaper than
    ``np.unique``'s hash for the few thousand ids of a local update)."""
    x = np.sort(x)
    if len(x) > 1:
        x = x[np.r_[True, x[1:] != x[:-1]]]
    return x


def _member(x: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Which values of ``x`` are in the sorted, distinct array ``sorted_set``."""
    if not len(sorted_set):
        return np.zeros(len(x), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_set, x), len(sorted_set) - 1)
    return sorted_set[pos] == x


def _holds(b: Batch, slots: np.ndarray) -> bool:
    """Whether batch ``b`` holds any of the sorted ``slots``."""
    a, z = np.searchsorted(slots, [b.lo, b.hi])
    return bool(z > a)
