"""Which flow batches hold each link of the flow network, kept in arrays.

:class:`LinkOwners` answers what :class:`~tracesim.network.flows.FlowNetwork` asks of a link:
is it free, which one batch holds it (``owner``: NONE, the batch's gid, or SHARED), and, for
the connected components of the max-min solve (:func:`component`), which batches share it.
A batch of a large collective crosses thousands of links (the rings of every data-parallel
group in one batch, on the leaf and spine links), and two such batches share most of them,
so entering and leaving a batch work on whole link arrays: a count per link, the XOR of the
gids on it and one of them (``first``) name both batches of a link held by two; only links
held by three or more keep a dict of their gids.
"""

from __future__ import annotations

import numpy as np

#: link owner codes (a link with exactly one batch holds that batch's gid)
NONE, SHARED = -1, -2


class LinkOwners:
    """The batches on each of ``n_links`` links (module docstring).

    ``owner[link]``: NONE (no batch), the gid of its only batch, or SHARED (two or more);
    ``count[link]``: how many batches; ``xor[link]``: the XOR of their gids; ``first[link]``:
    one of them (with two batches, the other is ``xor ^ first``); ``many[link]``: the gids of
    a link held by three or more, in the order they came."""

    __slots__ = ("owner", "count", "xor", "first", "many", "comps")

    def __init__(self, n_links: int):
        self.owner = np.full(n_links, NONE, dtype=np.int64)
        self.count = np.zeros(n_links, dtype=np.int64)
        self.xor = np.zeros(n_links, dtype=np.int64)
        self.first = np.full(n_links, NONE, dtype=np.int64)
        self.many: dict[int, dict[int, None]] = {}
        #: the components :func:`component` found, by member gid; valid until a batch comes
        #: onto a held link or leaves (add and remove clear it; a claim of free links makes
        #: a component of its own)
        self.comps: dict[int, list[int]] = {}

    def claim(self, gid: int, links: np.ndarray) -> None:
        """Batch ``gid`` takes ``links`` (distinct, all free: no other component changes)."""
        self.owner[links] = gid
        self.count[links] = 1
        self.xor[links] = gid
        self.first[links] = gid

    def add(self, gid: int, links: np.ndarray) -> None:
        """Batch ``gid`` comes onto ``links`` (distinct; some may be held by others)."""
        if self.comps:
            self.comps.clear()
        c = self.count[links]
        if not c.any():
            self.claim(gid, links)
            return
        free = links[c == 0]
        self.owner[free] = gid
        self.first[free] = gid
        self.owner[links[c == 1]] = SHARED  # ``first`` stays the batch already there
        many, first, xor = self.many, self.first, self.xor
        for lk in links[c == 2].tolist():
            a = int(first[lk])
            many[lk] = {a: None, int(xor[lk]) ^ a: None, gid: None}
        for lk in links[c >= 3].tolist():
            many[lk][gid] = None
        self.count[links] += 1
        self.xor[links] ^= gid

    def remove(self, gid: int, links: np.ndarray) -> None:
        """Batch ``gid`` leaves ``links`` (the links it came onto)."""
        if self.comps:
            self.comps.clear()
        c = self.count[links]
        self.count[links] -= 1
        self.xor[links] ^= gid
        gone = links[c == 1]
        self.owner[gone] = NONE
        self.first[gone] = NONE
        last = links[c == 2]  # one batch left: it is the XOR of what remains
        left = self.xor[last]
        self.owner[last] = left
        self.first[last] = left
        many, first = self.many, self.first
        for lk in links[c == 3].tolist():  # two left: back to first / xor
            d = many.pop(lk)
            del d[gid]
            first[lk] = next(iter(d))
        for lk in links[c >= 4].tolist():
            del many[lk][gid]

    def sharing(self, links: np.ndarray) -> list[int]:
        """The gids of the batches on ``links`` (links held by two or more), each once from
        the links held by two (the others' may repeat them)."""
        c = self.count[links]
        two = links[c == 2]
        a = self.first[two]
        out = _distinct(np.concatenate([a, self.xor[two] ^ a]))
        for lk in links[c >= 3].tolist():
            out.extend(self.many[lk])
        return out

    def on(self, links: np.ndarray) -> list[int]:
        """The gids of the batches on ``links`` (distinct link ids), sorted."""
        own = self.owner[links]
        out = set(own[own >= 0].tolist())
        if (own == SHARED).any():
            out.update(self.sharing(links[own == SHARED]))
        return sorted(out)


#: distinct values taken one by one before :func:`_distinct` hashes the rest
_FEW = 8


def _distinct(x: np.ndarray) -> list[int]:
    """The distinct values of ``x`` in ascending order. Shared links are mostly held by the
    same two or three batches, so taking the values one at a time (a comparison pass each)
    beats hashing thousands of entries; past :data:`_FEW` values the rest is hashed."""
    out: list[int] = []
    while len(x) and len(out) < _FEW:
        v = x.min()
        out.append(int(v))
        x = x[x != v]
    if len(x):
        out.extend(np.unique(x).tolist())
    return out


def component(gid: int, seen: set[int], owners: LinkOwners, batches: dict,
              visited: np.ndarray) -> list[int]:
    """Batches connected to batch ``gid`` through shared links; adds them to ``seen``
    (``visited``: all-False scratch over the links, left all False). Each shared link is
    looked at once per search; the order of the list is not meaningful (the solve sorts).
    A component stays in ``owners.comps`` until a batch comes or leaves: the instants at
    which only some flows of a batch end find it there."""
    known = owners.comps.get(gid)
    if known is not None:
        seen.update(known)
        return known
    comp = [gid]
    seen.add(gid)
    stack = [gid]
    total = len(batches)
    marked: list[np.ndarray] = []
    count = owners.count
    while stack and len(comp) < total:
        u = batches[stack.pop()].links
        sl = u[count[u] >= 2]
        if not len(sl):
            continue
        sl = sl[~visited[sl]]
        if not len(sl):
            continue
        visited[sl] = True
        marked.append(sl)
        for g in owners.sharing(sl):
            if g not in seen:
                seen.add(g)
                comp.append(g)
                stack.append(g)
    for sl in marked:
        visited[sl] = False
    comps = owners.comps
    for g in comp:
        comps[g] = comp
    return comp
