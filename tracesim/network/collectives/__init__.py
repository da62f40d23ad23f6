"""Collective algorithms: a registry of ways to turn a collective into phases of flows.

An algorithm is a class registered with :func:`register` beside its implementation, one
module per algorithm in this package (every module here is imported on first use, so adding
an algorithm is one new file). Each algorithm says which collectives it implements, whether
it applies to a group (:meth:`Algorithm.check`), its default calibration
(:class:`~tracesim.specs.cluster.AlgorithmParams`, overridable per cluster spec), and
builds a list of :class:`Phase` for a group (:meth:`Algorithm.phases`).

A phase is a set of flows that run concurrently; phases run one after another. A phase that
stands for several identical algorithm steps (a ring all-reduce is one phase of 2(n-1)
steps) carries ``steps``: its latency is ``steps`` times the step latency, and its flows
carry the bytes of all its steps (the *aggregate* form; the network model can also replay
the steps one by one). Flow sizes are weights: bytes per byte of the collective's
``msg_bytes`` (nccl-tests convention), so one compiled phase serves every message size.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tracesim.errors import InputError
from tracesim.network.routing import OWN_NICS, Router
from tracesim.network.topology import Topology
from tracesim.specs.collectives import AlgorithmParams, CollectivesSpec

#: registered algorithms by name, in registration order
ALGORITHMS: dict[str, Algorithm] = {}
_loaded = False


@dataclass
class Phase:
    """Flows that run at the same time: routes (link-id arrays) and weights (bytes per byte).

    ``steps`` algorithm steps are aggregated in this phase; ``inter_steps`` of them cross
    nodes and pay the inter-node path latency, the others the intra-node one (as NCCL's
    tuning model counts them). Each step also pays the algorithm's step latency.
    """

    steps: int
    inter_steps: int = 0
    routes: list[np.ndarray] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)

    def add(self, route: np.ndarray, weight: float) -> None:
        self.routes.append(route)
        self.weights.append(weight)


def zigzag(start: int, k: int) -> list[int]:
    """The path ``start, start+1, start-1, start+2, start-2, ..., start+k/2`` (mod ``k``, ``k``
    even): the paths from ``0 .. k/2-1`` with their reverses use every arc of the complete
    directed graph on ``k`` vertices exactly once, one path starting at each vertex."""
    out = [start % k]
    for j in range(1, k // 2):
        out += [(start + j) % k, (start - j) % k]
    out.append((start + k // 2) % k)
    return out


class Group:
    """A communicator's shape on the cluster: its ranks grouped by node, rails, channels.

    Ranks are sorted by (node, local GPU); ``order`` keeps the caller's order (its first
    rank is the root of broadcast / reduce). ``uniform`` is true when every node holds the
    same local GPU indices of the group. ``rails`` lists the distinct NIC indices the
    group's GPUs own on a node (one ring channel per rail): on every node of a uniform
    group; on the node holding most of an uneven one (ring channels only, see
    :meth:`channels`).
    """

    def __init__(self, topo: Topology, router: Router, ranks: Sequence[int]):
        self.topo = topo
        self.router = router
        self.order = tuple(int(r) for r in ranks)
        self.ranks = tuple(sorted(self.order))
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError(f"duplicate ranks in group {self.order}")
        g = topo.cluster.gpus_per_node
        by_node: dict[int, list[int]] = {}
        for r in self.ranks:
            by_node.setdefault(r // g, []).append(r)
        self.nodes = sorted(by_node)
        self.by_node = [by_node[n] for n in self.nodes]
        local_sets = {tuple(r % g for r in rs) for rs in self.by_node}
        self.uniform = len(local_sets) == 1
        self.per_node = len(self.by_node[0]) if self.uniform else 0
        self.rails: list[int] = []
        if len(self.nodes) > 1 and topo.nics_per_node > 0:
            fullest = max(self.by_node, key=len)  # the first of the fullest nodes
            seen: list[int] = []
            for r in fullest:
                for nic in topo.nics_of_gpu(r):
                    if nic % topo.nics_per_node not in seen:
                        seen.append(nic % topo.nics_per_node)
            self.rails = seen

    @property
    def n(self) -> int:
        return len(self.ranks)

    @property
    def single_node(self) -> bool:
        return len(self.nodes) == 1

    def route(self, src: int, dst: int, rail: int | None = None) -> np.ndarray:
        return self.router.route(src, dst, rail)

    @property
    def full_mesh(self) -> bool:
        """Whether the group's GPUs talk over direct links to each other (``nvlink_mesh``)."""
        return self.topo.cluster.intra_node.kind == "nvlink_mesh"

    def channels(self) -> list[tuple[list[int], int | None]]:
        """Ring channels: (rank order, rail) pairs, rail-aligned across nodes.

        One channel per rail of a multi-node group (:attr:`rails`): on each node the local
        ranks are rotated to start at the GPU owning that rail's NIC, so every node-crossing
        edge enters and leaves on the same rail. On a node of an uneven group that has no
        GPU owning the rail, channel ``c`` starts at its ``c``-th local GPU (mod its count)
        and the edges still cross on the channel's rail: relayed over NVLink to the GPU
        owning that NIC, as NCCL's PXN does (:mod:`tracesim.network.routing`), so the
        channels spread a node's traffic over its NICs however few of the group's GPUs it
        holds. On full-mesh nodes see :meth:`_mesh_channels`. A single-node group: one
        channel in sorted order.
        """
        if not self.rails:
            return [(list(self.ranks), None)]
        mesh = self._mesh_channels()
        if mesh:
            return mesh
        out: list[tuple[list[int], int | None]] = []
        k = self.topo.nics_per_node
        for c, rail in enumerate(self.rails):
            order: list[int] = []
            for rs in self.by_node:
                pos = next((i for i, r in enumerate(rs)
                            if any(nic % k == rail for nic in self.topo.nics_of_gpu(r))),
                           c % len(rs))
                order += [rs[(pos + i) % len(rs)] for i in range(len(rs))]
            out.append((order, rail))
        return out

    def _mesh_channels(self) -> list[tuple[list[int], int | None]]:
        """Ring channels of a multi-node group on full-mesh nodes (RCCL's rings on 8 x MI300X
        with a NIC per GPU, ``rome_model_81`` in ROCm/rccl ``src/graph/rome_models.cc``): one
        per local GPU, entering a node at that GPU's NIC, visiting the node's GPUs along a
        path and leaving from the path's last GPU on its own NIC (:data:`OWN_NICS`), with the
        paths chosen so that together they use every direct link of the node once. The
        paths are zigzags (``p, p+1, p-1, p+2, ...``, and their reverses), which decompose
        the complete directed graph for an even number of GPUs per node; otherwise (an odd
        count, an uneven group, GPUs sharing a NIC) the rail-aligned rotation is kept.
        """
        per = self.per_node
        if not (self.full_mesh and self.uniform and per >= 2 and per % 2 == 0):
            return []
        own = [self.topo.nics_of_gpu(r) for r in self.by_node[0]]
        if any(len(n) != 1 for n in own) or len({n[0] for n in own}) != per \
                or len(self.rails) != per:
            return []
        out: list[tuple[list[int], int | None]] = []
        for start in range(per):
            path = zigzag(start % (per // 2), per)
            if start >= per // 2:
                path = path[::-1]
            out.append(([rs[i] for rs in self.by_node for i in path], OWN_NICS))
        return out

    def add_node_ring(self, ph: Phase, seq: Sequence[int], weight: float) -> None:
        """Add to ``ph`` a ring over the ranks ``seq`` of one node, ``weight`` bytes per byte
        on each ring edge; on a full-mesh node spread over every ordered pair instead (the
        same bytes per rank, ``weight / (len(seq) - 1)`` per pair: RCCL's rings there load
        every link alike, :mod:`tracesim.network.collectives.ring`)."""
        k = len(seq)
        if self.full_mesh and k > 2:
            for a in seq:
                for b in seq:
                    if a != b:
                        ph.add(self.route(a, b), weight / (k - 1))
            return
        for i in range(k):
            ph.add(self.route(seq[i], seq[(i + 1) % k]), weight)

    def edge_route(self, a: int, b: int, rail: int | None) -> np.ndarray:
        """Route of a ring / chain edge: pinned to the channel's rail when it leaves a node
        (or to each end's own NIC: :data:`~tracesim.network.routing.OWN_NICS`)."""
        g = self.topo.cluster.gpus_per_node
        if rail is not None and a // g != b // g:
            return self.router.route(a, b, rail)
        return self.router.route(a, b)


class Algorithm:
    """Base class of collective algorithms (see the module docstring)."""

    name: str = ""
    collectives: frozenset[str] = frozenset()
    #: collectives for which ``auto`` selection considers this algorithm
    auto: frozenset[str] = frozenset()
    defaults: AlgorithmParams = AlgorithmParams(1.0, 1.0, 0.0)
    #: the algorithm whose efficiencies in the cluster spec this one takes when the spec
    #: gives none of its own ("": its own defaults)
    efficiency_as: str = ""
    #: whether a node-crossing flow relayed over NVLink to its rail's NIC (NCCL's PXN)
    #: keeps that hop in its flow: False for ring, tree and point-to-point, whose flows
    #: cross a GPU's port a few at a time, each at most its NIC's rate; all-to-alls keep it
    #: (up to g - 1 relays per port) (:class:`~tracesim.network.compiler.Compiler`)
    relay_hops_in_flow: bool = True

    def check(self, group: Group, collective: str) -> str | None:
        """None if the algorithm applies to ``collective`` on ``group``, else why not."""
        if collective not in self.collectives:
            return f"{self.name} does not implement {collective}"
        return None

    def phases(self, group: Group, collective: str) -> list[Phase]:
        """The phases of ``collective`` on ``group`` (weights in bytes per message byte)."""
        raise NotImplementedError

    def selection_ns(
        self, group: Group, fixed_ns: float, ns_per_byte: float, msg_bytes: float,
        others: Mapping[str, tuple[float, float]],
    ) -> float:
        """Predicted time used by ``auto`` selection (default: the isolated time
        ``fixed_ns + ns_per_byte * msg_bytes``); ``others`` holds the other candidates'
        ``(fixed_ns, ns_per_byte)`` by name, for algorithms that rate themselves as NCCL's
        tuner does, relative to another."""
        return fixed_ns + ns_per_byte * msg_bytes

    def with_args(self, args: str) -> Algorithm | None:
        """The variant of this algorithm that the name ``<name>:<args>`` asks for (an
        algorithm parameterized by what it carries, e.g. ``dedup:128:8``), None if there is
        none (the default) or ``args`` do not parse."""
        return None


def register(
    name: str,
    *,
    collectives: Sequence[str],
    efficiency_intra: float,
    efficiency_inter: float,
    step_latency_us: float,
    auto: Sequence[str] | None = None,
) -> Callable[[type[Algorithm]], type[Algorithm]]:
    """Class decorator: register an algorithm under ``name`` with its default calibration.

    ``auto``: the collectives for which automatic selection considers it (default: all of
    ``collectives``); other uses need an explicit choice.
    """

    def deco(cls: type[Algorithm]) -> type[Algorithm]:
        if name in ALGORITHMS:
            raise ValueError(f"collective algorithm {name!r} registered twice")
        cls.name = name
        cls.collectives = frozenset(collectives)
        cls.auto = frozenset(collectives if auto is None else auto)
        cls.defaults = AlgorithmParams(efficiency_intra, efficiency_inter, step_latency_us)
        ALGORITHMS[name] = cls()
        return cls

    return deco


def find(name: str) -> Algorithm | None:
    """The registered algorithm ``name``, or the variant ``base:args`` of a registered one
    (:meth:`Algorithm.with_args`; registered under its name on first use), else None."""
    algo = ALGORITHMS.get(name)
    if algo is None and ":" in name:
        base = ALGORITHMS.get(name.partition(":")[0])
        algo = base.with_args(name.partition(":")[2]) if base is not None else None
        if algo is not None:
            algo = ALGORITHMS.setdefault(algo.name, algo)
            ALGORITHMS[name] = algo  # also under the spelling asked for
    return algo


def load_algorithms() -> dict[str, Algorithm]:
    """Import every algorithm module of this package (once) and return the registry."""
    global _loaded
    if not _loaded:
        _loaded = True
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            importlib.import_module(f"{__name__}.{info.name}")
    return ALGORITHMS


def check_collectives(spec: CollectivesSpec, file: str | Path | None = None) -> None:
    """InputError (naming ``file`` and the key) unless every algorithm that a cluster spec's
    ``collectives`` block names is registered and implements the collectives it is chosen
    for."""
    algos = load_algorithms()
    known = ", ".join(sorted(algos))
    for coll, names in spec.select:
        place = f"collectives.select.{coll}"
        for n in names:
            if n == "auto":
                continue
            if n not in algos:
                raise InputError(f"unknown algorithm {n!r} (known: auto, {known})", file, place)
            if coll not in algos[n].collectives:
                raise InputError(f"algorithm {n!r} does not implement {coll}", file, place)
    for name, _ in spec.algorithms:
        if name not in algos:
            raise InputError(f"unknown key {name!r} (allowed: {known})", file,
                             f"collectives.algorithms.{name}")


load_algorithms()
