"""Symmetric replay: simulate one representative rank per class and stand in for the rest.

When the builder emits only one rank per pipeline stage
(``build_graph(..., representatives=True)``), a collective of the representative has one
present member. :class:`SymmetricComm` wraps the real communication model and hands it the
full group instead (the group of that kind that holds the representative: the builder keeps
it in the task column ``sym_group`` and sets ``group`` to -1 so that the engine does not wait
for the absent members), so the network sees a collective over all members: the absent ranks are
symmetric copies that arrive at the same time. Point-to-point transfers pass through.

With a flow-level model (an inner model with ``collective_images`` / ``p2p_images``, such
as :class:`tracesim.network.model.NetworkModel`) the absent ranks' traffic is not dropped:
a rank class is all ranks of the representative's pipeline stage (translations of the TP,
CP and DP coordinates map the representative to each of them, and its program to theirs),
so when the representative starts a collective every class member starts the same one on
its own group at the same instant, and each pipeline / ring transfer has one copy per
member. Those copies run as one batch of flows on the shared network, so they load the
links they share (spine uplinks, NICs) as in the full replay; the operation ends when the
last copy has. ``images=False`` (or a graph without the builder's ``parallel`` metadata)
runs the representative's operation alone.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd
import simpy

from tracesim.engine.comm import CommModel
from tracesim.errors import InputError
from tracesim.graph.taskgraph import TaskGraph, column_codes
from tracesim.specs.placement import GROUP_KINDS, Placement

#: from this many GPUs up a replay simulates one representative rank per pipeline stage
SYMMETRY_MIN_GPUS = 64
#: ... and so does a smaller job from this many layer passes up (:func:`reduces`): a node's
#: worth of GPUs with many micro-batches (gradient accumulation) builds a full graph as large
#: as a thousand GPUs' (Llama 3 70B on 8 GPUs with 1,024 micro-batches: 25 million tasks)
SYMMETRY_MIN_PASSES = 32_768


#: peak memory per simulated layer pass (one rank's forward and backward of one transformer
#: layer for one micro-batch), a low estimate, so that only replays that cannot fit are
#: refused: the benchmark's S4 with every rank simulated (GPT-3 175B on 1,024 A100, 1.18
#: million passes, 5.0 GiB) took 4.4 KiB per pass, Llama 3 70B with TP 8 on one DGX H100
#: and 1,024 micro-batches 13.5 KiB with every rank and 21.6 KiB with one
#: (docs/performance.md, "Symmetry reduction")
BYTES_PER_LAYER_PASS = 4 * 1024
#: the same for a symmetry-reduced replay, whose simulated passes carry their copies' network
#: batches and the builder's per-stage programs: Llama 3 70B on 1,024 H100 (TP 8, PP 8) with
#: 160,000 sequences, 800,000 passes in 12.7 GB, 16 KiB each (the lower of the two measured)
BYTES_PER_REDUCED_PASS = 16 * 1024


def check_graph_memory(passes: int, limit: int | None = None, reduced: bool = False) -> None:
    """Raise :class:`InputError` (on ``--global-batch``) when a replay of ``passes`` layer
    passes (symmetry-``reduced`` or not) would need more memory than this machine has
    (``limit`` bytes; default: its physical memory, where the platform says it), instead of
    building until it is killed."""
    if limit is None:
        try:
            limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):  # no sysconf (Windows): no check
            return
    need = passes * (BYTES_PER_REDUCED_PASS if reduced else BYTES_PER_LAYER_PASS)
    if need > limit:
        raise InputError(
            f"the replay would simulate {passes:,} layer passes (ranks x micro-batches per "
            f"pipeline x layers per stage) and need at least {need / 2**30:,.0f} GiB, more than "
            f"this machine's {limit / 2**30:,.1f} GiB: give fewer micro-batches per pipeline "
            "(a smaller --global-batch or a larger --micro-batch; the steady state's time per "
            "micro-batch does not change with their number)", "--global-batch")


def reduces(world: int, micro_batches: int, layers_per_stage: int) -> bool:
    """Whether a replay of ``world`` ranks, each running ``layers_per_stage`` transformer
    layers for each of ``micro_batches`` micro-batches, simulates one representative rank per
    pipeline stage: from :data:`SYMMETRY_MIN_GPUS` GPUs up, or from
    :data:`SYMMETRY_MIN_PASSES` layer passes (``world x micro_batches x layers_per_stage``,
    what the full graph's size follows) up. The two replays give the same times
    (tests/test_symmetry_agreement.py); the full one keeps every rank in its outputs."""
    return world >= SYMMETRY_MIN_GPUS or (
        world > 1 and world * max(1, micro_batches) * max(1, layers_per_stage) >= SYMMETRY_MIN_PASSES)


class SymmetricComm:
    """A :class:`~tracesim.engine.comm.CommModel` that expands single-member collectives.

    The lookup key is (rank, group kind, collective, message bytes); if two different groups
    share a key, the larger one is used (``ambiguous`` counts such keys).
    """

    def __init__(self, inner: CommModel, graph: TaskGraph, *, images: bool = True):
        self.inner = inner
        self.placement = _placement(graph) if images and hasattr(inner, "collective_images") else None
        self._group_images: dict[Any, tuple] = {}  # (rep, group) -> copies of the group
        self._pair_images: dict[Any, tuple] = {}  # (src, dst) -> copies of the transfer
        self._expanded: dict[tuple, tuple] = {}  # collective()'s arguments -> what it runs
        t = graph.tasks
        coll = np.flatnonzero(_kind_is(t["kind"], "coll"))
        ranks = t["rank"].to_numpy()[coll]
        kinds = _strings_at(t["group_kind"], coll)
        names = _strings_at(t["collective"], coll)
        msgs = t["msg_bytes"].to_numpy()[coll]
        groups = t["sym_group" if "sym_group" in t else "group"].to_numpy()[coll]
        chunks = (t["chunks"].to_numpy()[coll].tolist() if "chunks" in t else [1] * len(coll))
        algos = (_strings_at(t["algorithm"], coll).tolist() if "algorithm" in t
                 else [""] * len(coll))
        found: dict[tuple, set[int]] = defaultdict(set)
        #: the size of one operation of a key's tasks (``msg_bytes / chunks``) and the
        #: algorithm they ask for: what picks the algorithm whose links :meth:`_prune` follows
        self._part: dict[tuple, int] = {}
        self._asked: dict[tuple, str] = {}
        for r, k, c, m, g, ch, al in zip(ranks.tolist(), kinds.tolist(), names.tolist(),
                                         msgs.tolist(), groups.tolist(), chunks, algos, strict=True):
            if g >= 0:
                found[(r, k, c, m)].add(g)
                if ch > 1:
                    self._part[(r, k, c, m)] = m // ch
                if al:
                    self._asked[(r, k, c, m)] = al
        self.ambiguous = sum(1 for v in found.values() if len(v) > 1)
        self.lookup = {
            key: max((graph.groups[g] for g in gs), key=len) for key, gs in found.items()
        }
        #: copies simulated / copies in the classes (after pruning, see :meth:`_prune`)
        self.copies = (0, 0)
        if self.placement is not None and hasattr(inner, "links_of"):
            self._prune(graph)

    def _prune(self, graph: TaskGraph) -> None:
        """Drop the copies that cannot influence the representatives.

        Starting from the links the representatives' own operations cross, a copy is kept
        when it crosses a link already reached, and then its links are reached too, until
        nothing changes. A copy left out never shares a link with anything kept -- not with
        the representatives, nor with a copy that does -- so leaving it out changes no time
        of the representatives (copies on links of their own, such as the TP all-reduces of
        other replicas inside their own nodes, are the common case)."""
        inner: Any = self.inner
        ops: list[tuple[Any, tuple, list[np.ndarray]]] = []
        own: list[np.ndarray] = []  # links of the representatives' own operations
        seen: dict[tuple, np.ndarray] = {}  # (collective, group, algorithm) -> its links

        def links_of(c: str, g: tuple, m: int, algo: str) -> np.ndarray:
            key = (c, tuple(g), algo)  # the links follow from the algorithm, not the size
            got = seen.get(key)
            if got is None:
                got = seen[key] = inner.links_of(c, g, m, algo)
            return got

        for (rep, _gk, coll, msg), full in self.lookup.items():
            imgs = self.group_images(rep, full)
            c, m = ("all_reduce", 0) if coll == "barrier" else (
                coll, self._part.get((rep, _gk, coll, msg), msg))
            if len(full) <= 1:
                continue
            asked = self._asked.get((rep, _gk, coll, msg), "")
            algo = inner.compiled(c, tuple(full), m, asked).algorithm
            own.append(links_of(c, full, m, algo))
            if len(imgs) > 1:
                # a copy runs what its own group takes where the representative's algorithm
                # depends on where the group sits (dedup: the same local GPUs on every node;
                # a copy straddling two NVL72 racks does not), as the network runs it
                per_copy = algo.startswith("dedup")
                ops.append(((rep, full), imgs, [own[-1]] + [
                    links_of(c, g, m, inner.compiled(c, tuple(g), m, asked).algorithm
                             if per_copy else algo) for g in imgs[1:]]))
        t = graph.tasks
        send = _kind_is(t["kind"], "send")
        p2p = np.flatnonzero(send | _kind_is(t["kind"], "recv"))
        rk, pr = t["rank"].to_numpy()[p2p].tolist(), t["peer"].to_numpy()[p2p].tolist()
        pairs = {(r, q) if k else (q, r) for r, q, k in zip(rk, pr, send[p2p].tolist(), strict=True)}
        for a, b in sorted(pairs):
            if a < 0 or b < 0:
                continue
            imgs = self.pair_images(a, b)
            own.append(inner.links_of_p2p(a, b))
            if len(imgs) > 1:
                ops.append(((a, b), imgs, [own[-1]] + [inner.links_of_p2p(x, y) for x, y in imgs[1:]]))
        reached = np.zeros(len(inner.topology.capacity), dtype=bool)
        for lk in own:
            reached[lk] = True
        kept = [{0} for _ in ops]
        changed = True
        while changed:
            changed = False
            for k, (_, imgs, links) in enumerate(ops):
                for i in range(1, len(imgs)):
                    if i not in kept[k] and reached[links[i]].any():
                        kept[k].add(i)
                        reached[links[i]] = True
                        changed = True
        for k, (key, imgs, _) in enumerate(ops):
            keep = tuple(imgs[i] for i in sorted(kept[k]))
            if isinstance(key[1], tuple):
                self._group_images[key] = keep
            else:
                self._pair_images[key] = keep
        self.copies = (sum(len(x) for x in kept), sum(len(imgs) for _, imgs, _ in ops))

    def attach(self, env: simpy.Environment) -> None:
        self.inner.attach(env)

    def collective(
        self, collective: str, ranks: tuple[int, ...], msg_bytes: int, group_kind: str = "",
        algorithm: str = "", chunks: int = 1,
    ) -> simpy.Event:
        more: dict[str, Any] = {"algorithm": algorithm} if algorithm else {}
        if chunks > 1:
            more["chunks"] = chunks
        if type(ranks) is not tuple:
            ranks = tuple(ranks)
        key = (ranks, group_kind, collective, msg_bytes)
        hit = self._expanded.get(key)
        if hit is None:
            hit = self._expanded[key] = self._expand(collective, ranks, msg_bytes, group_kind)
        if hit[0] is not None:
            return self.inner.collective_images(  # type: ignore[attr-defined]
                collective, hit[0], msg_bytes, group_kind, **more)
        return self.inner.collective(collective, hit[1], msg_bytes, group_kind, **more)

    def _expand(self, collective: str, ranks: tuple[int, ...], msg_bytes: int,
                group_kind: str) -> tuple[tuple[tuple[int, ...], ...] | None, tuple[int, ...]]:
        """What :meth:`collective` runs for these arguments: the copies' groups (None: no
        copies) and the ranks of the operation (cached per argument tuple)."""
        rep = int(ranks[0])
        full = self.lookup.get((rep, group_kind, collective, int(msg_bytes)))
        # one present member (the others are absent copies), or a group made only of
        # representatives (the tied-embedding group of the first and last stage)
        if full is not None and (len(ranks) == 1 or tuple(ranks) == tuple(full)):
            ranks = full
            if self.placement is not None:
                imgs = self.group_images(rep, full)
                if len(imgs) > 1:
                    return imgs, tuple(ranks)
        return None, tuple(ranks)

    def p2p(self, src: int, dst: int, nbytes: int, group_kind: str = "") -> simpy.Event:
        if self.placement is not None:
            pairs = self.pair_images(int(src), int(dst))
            if len(pairs) > 1:
                return self.inner.p2p_images(pairs, nbytes, group_kind)  # type: ignore[attr-defined]
        return self.inner.p2p(src, dst, nbytes, group_kind)

    def group_images(self, rep: int, group: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """The groups on which the members of ``rep``'s class run the collective that ``rep``
        runs on ``group`` (``group`` first, then the others in ascending order)."""
        key = (rep, group)
        hit = self._group_images.get(key)
        if hit is None:
            pl = self.placement
            assert pl is not None
            hit = (group,)
            for kind in GROUP_KINDS:
                if pl.group_of(kind, rep) == tuple(group):
                    stage = pl.stage_ranks(int(pl.stage_of(np.array([rep]))[0]))
                    idx = np.unique(pl.group_index(kind)[stage])
                    others = sorted(g for g in (pl.groups(kind)[int(i)] for i in idx) if g != tuple(group))
                    hit = (tuple(group), *others)
                    break
            self._group_images[key] = hit
        return hit

    def pair_images(self, src: int, dst: int) -> tuple[tuple[int, int], ...]:
        """The transfers of the class members that mirror ``src -> dst`` (translations of
        the TP, CP and DP coordinates; ``(src, dst)`` first)."""
        key = (src, dst)
        hit = self._pair_images.get(key)
        if hit is None:
            pl = self.placement
            assert pl is not None
            p = pl.par
            dt, dc, dd = np.meshgrid(np.arange(p.tp), np.arange(p.cp), np.arange(p.dp), indexing="ij")

            def moved(r: int) -> np.ndarray:
                c = pl.coord(r)
                return (((c.tp + dt) % p.tp) + p.tp * (((c.cp + dc) % p.cp)
                        + p.cp * (((c.dp + dd) % p.dp) + p.dp * c.pp))).reshape(-1)

            a, b = moved(src), moved(dst)
            hit = tuple(zip(a.tolist(), b.tolist(), strict=True))
            self._pair_images[key] = hit
        return hit


class EstimateComm:
    """A communication model that charges each collective its uncongested time.

    It asks the network model for the time a collective (or point-to-point transfer) of that
    size takes on those ranks alone (``NetworkModel.estimate_ns``: the chosen algorithm's
    latency plus bytes over its bottleneck bandwidth) and does not simulate flows, so
    concurrent transfers do not slow each other down. Orders of magnitude faster than the
    flow simulation; right when groups use disjoint links (TP inside a node, rail-aligned
    DP / PP across nodes).
    """

    def __init__(self, net: object):
        self.net = net
        self.env: simpy.Environment | None = None
        self._cache: dict[tuple, int] = {}

    def attach(self, env: simpy.Environment) -> None:
        self.env = env

    def _time(self, collective: str, ranks: tuple[int, ...], nbytes: float, algorithm: str = "",
              kind: str = "") -> int:
        key = (collective, ranks, nbytes, algorithm, kind)
        if key not in self._cache:
            more = {"algorithm": algorithm} if algorithm else {}
            if kind:
                more["group_kind"] = kind
            self._cache[key] = (int(round(self.net.estimate_ns(collective, ranks, nbytes, **more)))  # type: ignore[attr-defined]
                                if len(ranks) > 1 else 0)
        return self._cache[key]

    def collective(
        self, collective: str, ranks: tuple[int, ...], msg_bytes: int, group_kind: str = "",
        algorithm: str = "", chunks: int = 1,
    ) -> simpy.Event:
        assert self.env is not None
        if collective == "barrier":
            collective, msg_bytes = "all_reduce", 0
        if chunks > 1:  # back to back, each one chunk's time
            part = int(msg_bytes) // chunks if int(msg_bytes) % chunks == 0 else int(msg_bytes) / chunks
            return self.env.timeout(chunks * self._time(collective, tuple(ranks), part, algorithm,
                                                        group_kind))
        return self.env.timeout(self._time(collective, tuple(ranks), int(msg_bytes), algorithm,
                                           group_kind))

    def p2p(self, src: int, dst: int, nbytes: int, group_kind: str = "") -> simpy.Event:
        assert self.env is not None
        return self.env.timeout(self._time("send_recv", (src, dst), int(nbytes), "", group_kind))


def _kind_is(col: pd.Series, name: str) -> np.ndarray:
    """Which rows of the string column ``col`` equal ``name`` (compared by code, without a
    Python string per row when the column is a Categorical)."""
    codes, names = column_codes(col)
    return codes == names.index(name) if name in names else np.zeros(len(codes), dtype=bool)


def _strings_at(col: pd.Series, rows: np.ndarray) -> np.ndarray:
    """The strings of column ``col`` at ``rows`` (an object array)."""
    codes, names = column_codes(col)
    return np.array(names + [None], dtype=object)[codes[rows]]


def _placement(graph: TaskGraph) -> Placement | None:
    """The layout's placement from the builder's ``parallel`` metadata (None without it)."""
    from tracesim.specs.parallel import ParallelSpec

    par = graph.meta.get("parallel") if graph.meta else None
    if not isinstance(par, dict) or not graph.meta.get("representatives"):
        return None
    try:
        spec = ParallelSpec(tp=int(par["tp"]), pp=int(par["pp"]), dp=int(par["dp"]),
                            cp=int(par["cp"]), ep=int(par["ep"]), etp=int(par.get("etp") or 0))
    except (KeyError, TypeError, ValueError):
        return None
    return Placement(spec)
