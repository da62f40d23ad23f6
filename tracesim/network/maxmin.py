"""Max-min fair rates by vectorised progressive filling.

Flows are given as an incidence list: entry ``i`` says flow ``e_flow[i]`` crosses link
``e_link[i]``. Rates and capacities are in bytes per nanosecond (numerically equal to GB/s).

Progressive filling raises every unfrozen flow's rate together; a link saturates when its
remaining capacity divided by its unfrozen flows (its *fair share*) is reached, and its flows
freeze. This implementation freezes, in one vectorised round, every link whose fair share is
no larger than the fair share of any link its flows touch (a *local* bottleneck). Such a link
saturates at exactly its current share in the sequential algorithm too, because fair shares
never decrease as flows freeze, so the result is the same max-min allocation in far fewer
rounds (one per bottleneck level that matters, usually a handful).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: relative tolerance when comparing fair shares
REL_TOL = 1e-9
#: entries x this below the network's link count: number the links by sorting the entries
#: (cheaper than a pass over every link of a large network)
SORT_BELOW = 16


def max_min_sorted(e_flow: np.ndarray, e_link: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rates for flows whose entries are grouped by flow (see
    :func:`max_min_bottlenecks`, which also says where each flow froze)."""
    return max_min_bottlenecks(e_flow, e_link, capacity)[0]


def max_min_bottlenecks(e_flow: np.ndarray, e_link: np.ndarray, capacity: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Max-min fair rates for flows whose entries are grouped by flow, and a bottleneck
    link of each flow.

    Args:
        e_flow: local flow index of each entry, ``0..F-1``, non-decreasing, every flow present.
        e_link: global link id of each entry (a flow may not list a link twice).
        capacity: capacity of every link, bytes/ns, indexed by global link id.

    Returns:
        rate per flow (length F), bytes/ns, and per flow the global id of a link at which it
        froze: a link the allocation saturates and on which no flow has a higher rate (the
        certificate that makes an allocation max-min fair; ``tracesim.network.local`` checks
        it when flows come or go).

    Every round is a handful of numpy passes over the entries of the flows not yet frozen
    (gathers, one ``reduceat`` over the flow groups, ``bincount`` over links); nothing is
    sorted, and frozen flows drop out of the arrays.
    """
    n = len(e_flow)
    if n == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    n_flows = int(e_flow[-1]) + 1
    # compact the links used to 0..n_links-1 in link order: by a pass over every link, or,
    # for a few entries on a large network, by sorting the entries (the same numbering)
    if n * SORT_BELOW < len(capacity):
        links, e_l = np.unique(e_link, return_inverse=True)
    else:
        used = np.zeros(len(capacity), dtype=bool)
        used[e_link] = True
        links = np.flatnonzero(used)
        to_local = np.cumsum(used) - 1
        e_l = to_local[e_link]
    n_links = len(links)
    cap = capacity[links].astype(np.float64)
    cnt = np.bincount(e_l, minlength=n_links).astype(np.float64)
    bl = np.zeros(n_flows, dtype=np.int64)  # local link at which each flow froze
    if cnt.max() <= 1.0:  # no link shared: each flow at its slowest link (the rounds' result)
        change = np.r_[True, e_flow[1:] != e_flow[:-1]]
        starts = np.flatnonzero(change)
        e_cap = cap[e_l]
        fmin = np.minimum.reduceat(e_cap, starts)
        at = e_cap <= fmin[np.cumsum(change) - 1]
        bl[e_flow[at]] = e_l[at]
        return fmin, links[bl]
    rate = np.zeros(n_flows)
    ef = e_flow  # entries of the flows not yet frozen (shrinks every round)
    inf = np.inf
    hi = 1.0 - REL_TOL
    while True:
        change = np.r_[True, ef[1:] != ef[:-1]]
        starts = np.flatnonzero(change)
        seg_of_entry = np.cumsum(change) - 1
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(cnt > 0, cap / cnt, inf)
        e_share = share[e_l]
        fmin_seg = np.minimum.reduceat(e_share, starts)
        e_fmin = fmin_seg[seg_of_entry]
        # a link is a local bottleneck when none of its unfrozen flows has a smaller share
        # elsewhere; all its flows then freeze at its share
        below = e_fmin < e_share * hi
        n_below = np.bincount(e_l[below], minlength=n_links)
        bott = (cnt > 0) & (n_below == 0)
        seg_freeze = np.zeros(len(starts), dtype=bool)
        seg_freeze[seg_of_entry[bott[e_l]]] = True
        rate[ef[starts[seg_freeze]]] = fmin_seg[seg_freeze]
        ent = seg_freeze[seg_of_entry]
        at = ent & bott[e_l]
        bl[ef[at]] = e_l[at]
        keep = ~ent
        if not keep.any():  # every flow froze: the links' leftovers are not needed
            return rate, links[bl]
        cap -= np.bincount(e_l[ent], weights=e_fmin[ent], minlength=n_links)
        cnt -= np.bincount(e_l[ent], minlength=n_links)
        np.maximum(cap, 0.0, out=cap)
        ef = ef[keep]
        e_l = e_l[keep]


def max_min_rates(routes: Sequence[Sequence[int]], capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rates of flows given as link lists (a convenience for tests and tools).

    A flow with an empty route gets rate ``inf`` (nothing limits it).
    """
    capacity = np.asarray(capacity, dtype=np.float64)
    lens = np.array([len(r) for r in routes], dtype=np.int64)
    rate = np.full(len(routes), np.inf)
    nz = np.flatnonzero(lens > 0)
    if len(nz) == 0:
        return rate
    e_link = np.concatenate([np.asarray(routes[int(i)], dtype=np.int64) for i in nz])
    e_flow = np.repeat(np.arange(len(nz)), lens[nz])
    rate[nz] = max_min_sorted(e_flow, e_link, capacity)
    return rate
