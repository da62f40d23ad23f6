"""Symmetric replay: simulate one representative rank per class and stand in for the rest.

When the builder emits only one rank per pipeline stage
(``build_graph(..., representatives=True)``), a collective of the representative has one
present member. :class:`SymmetricComm` wraps the real communication model and hands it the
full group instead (the group of that kind that holds the representative: the builder keeps
it in the task column ``sym_group`` and sets ``group`` to -1 so that the engine does not wait
for the absent members), so the network sees a collective over all members: the absent ranks are
symmetric copies that arrive at the same time. Point-to-point transfers pass through.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import simpy

from tracesim.engine.comm import CommModel
from tracesim.workload.graph import TaskGraph


class SymmetricComm:
    """A :class:`~tracesim.engine.comm.CommModel` that expands single-member collectives.

    The lookup key is (rank, group kind, collective, message bytes); if two different groups
    share a key, the larger one is used (``ambiguous`` counts such keys).
    """

    def __init__(self, inner: CommModel, graph: TaskGraph):
        self.inner = inner
        t = graph.tasks
        coll = np.flatnonzero(t["kind"].to_numpy() == "coll")
        ranks = t["rank"].to_numpy()[coll]
        kinds = t["group_kind"].to_numpy()[coll]
        names = t["collective"].to_numpy()[coll]
        msgs = t["msg_bytes"].to_numpy()[coll]
        groups = t["sym_group" if "sym_group" in t else "group"].to_numpy()[coll]
        found: dict[tuple, set[int]] = defaultdict(set)
        for r, k, c, m, g in zip(ranks.tolist(), kinds.tolist(), names.tolist(), msgs.tolist(),
                                 groups.tolist(), strict=True):
            if g >= 0:
                found[(r, k, c, m)].add(g)
        self.ambiguous = sum(1 for v in found.values() if len(v) > 1)
        self.lookup = {
            key: max((graph.groups[g] for g in gs), key=len) for key, gs in found.items()
        }

    def attach(self, env: simpy.Environment) -> None:
        self.inner.attach(env)

    def collective(
        self, collective: str, ranks: tuple[int, ...], msg_bytes: int, group_kind: str = ""
    ) -> simpy.Event:
        if len(ranks) == 1:
            full = self.lookup.get((int(ranks[0]), group_kind, collective, int(msg_bytes)))
            if full is not None:
                ranks = full
        return self.inner.collective(collective, tuple(ranks), msg_bytes, group_kind)

    def p2p(self, src: int, dst: int, nbytes: int) -> simpy.Event:
        return self.inner.p2p(src, dst, nbytes)


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

    def _time(self, collective: str, ranks: tuple[int, ...], nbytes: int) -> int:
        key = (collective, ranks, nbytes)
        if key not in self._cache:
            self._cache[key] = int(round(self.net.estimate_ns(collective, ranks, nbytes))) if len(ranks) > 1 else 0  # type: ignore[attr-defined]
        return self._cache[key]

    def collective(
        self, collective: str, ranks: tuple[int, ...], msg_bytes: int, group_kind: str = ""
    ) -> simpy.Event:
        assert self.env is not None
        if collective == "barrier":
            collective, msg_bytes = "all_reduce", 0
        return self.env.timeout(self._time(collective, tuple(ranks), int(msg_bytes)))

    def p2p(self, src: int, dst: int, nbytes: int) -> simpy.Event:
        assert self.env is not None
        return self.env.timeout(self._time("send_recv", (src, dst), int(nbytes)))
