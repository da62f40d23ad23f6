"""Compiled collectives of one cluster spec, shared by every network model of that spec.

A :class:`Compiler` holds the topology and router of a spec and compiles each (algorithm,
collective, group) once into phases of flows (:class:`~tracesim.network.running.CompiledCollective`,
Simple calibration), with the NCCL protocol variants of ring and tree per message size
(:mod:`tracesim.network.variants`). :func:`shared` keeps one per spec (a bounded cache).
"""

from __future__ import annotations

import hashlib

import numpy as np

from tracesim.network.collectives import Algorithm, Group
from tracesim.network.flowstate import ranges
from tracesim.network.maxmin import max_min_sorted
from tracesim.network.routing import Router
from tracesim.network.running import CompiledCollective, CompiledPhase
from tracesim.network.topology import KIND_INTRA, Topology
from tracesim.network.variants import PhaseLatency, build, predicted, shape
from tracesim.specs.cluster import ClusterSpec
from tracesim.specs.collectives import AlgorithmParams


class Compiler:
    """Topology, router and compiled collectives of one cluster spec (shared by models).

    ``relay_hops``: keep every PXN relay hop in its flow. By default a ring / tree edge or a
    point-to-point transfer that leaves its node on a NIC another GPU of the node owns
    (relayed to it over NVLink, as NCCL's PXN does; likewise on the receiving node) is a
    flow over the NICs and the fabric only; the hop still adds its latency. Its rate is at
    most the NIC's (1/9 of an H100 NVLink port, 1/18 of a Blackwell one), so the hop cannot
    slow it unless that many such flows cross one port; what leaving it out drops is that
    share of the port taken from the other transfers there, and with it the coupling of
    every tensor-parallel copy of a stage into one max-min component (docs/network.md,
    "PXN relays"). All-to-alls keep their hops (``Algorithm.relay_hops_in_flow``), and every
    flow keeps them on a cluster with a degraded or failed NVLink / NVSwitch port, whose
    lower rate a relay through it must see.
    """

    def __init__(self, cluster: ClusterSpec, relay_hops: bool = False):
        self.cluster = cluster
        self.topo = Topology(cluster)
        t = self.topo
        intra = t.kind == KIND_INTRA
        self.relay_hops = relay_hops or bool(
            (t.capacity[intra] < t.healthy_capacity[intra]).any() or not t.alive[intra].all())
        self.router = Router(self.topo)
        self.compiled: dict[tuple[str, str, tuple[int, ...]], CompiledCollective] = {}
        self.latencies: dict[tuple[str, str, tuple[int, ...]], tuple[PhaseLatency, ...]] = {}
        self.variants: dict[tuple[str, str, str, tuple[int, ...], int], CompiledCollective] = {}
        self.groups: dict[tuple[int, ...], Group] = {}
        #: isolated ns per byte of a phase by its canonical form (:func:`_canonical`):
        #: symmetric copies of one collective pose the same max-min problem
        self._per_byte: dict[bytes, float] = {}

    def params(self, algo: Algorithm) -> AlgorithmParams:
        """``algo``'s calibration: the spec's overrides, else (efficiencies) those the spec
        gives the algorithm it takes them from (``efficiency_as``), else its defaults. A
        variant (``dedup:128:8``) takes the spec's values for its base name."""
        spec = self.cluster.collectives
        over = spec.params(algo.name.partition(":")[0])
        d = algo.defaults
        if algo.efficiency_as:
            other = spec.params(algo.efficiency_as)
            d = AlgorithmParams(
                d.efficiency_intra if other.efficiency_intra is None else other.efficiency_intra,
                d.efficiency_inter if other.efficiency_inter is None else other.efficiency_inter,
                d.step_latency_us,
            )
        return AlgorithmParams(
            d.efficiency_intra if over.efficiency_intra is None else over.efficiency_intra,
            d.efficiency_inter if over.efficiency_inter is None else over.efficiency_inter,
            d.step_latency_us if over.step_latency_us is None else over.step_latency_us,
        )

    def group(self, ranks: tuple[int, ...]) -> Group:
        grp = self.groups.get(ranks)
        if grp is None:
            grp = Group(self.topo, self.router, ranks)
            self.groups[ranks] = grp
        return grp

    def compile(self, algo: Algorithm, collective: str, ranks: tuple[int, ...]) -> CompiledCollective:
        key = (algo.name, collective, ranks)
        cc = self.compiled.get(key)
        if cc is not None:
            return cc
        grp = self.group(ranks)
        p = self.params(algo)
        assert p.efficiency_intra and p.efficiency_inter and p.step_latency_us is not None
        step_ns = p.step_latency_us * 1000.0
        phases = []
        lat_parts = []
        fixed = 0.0
        per_byte = 0.0
        for ph in algo.phases(grp, collective):
            lens = np.array([len(r) for r in ph.routes], dtype=np.int64)
            e_ptr = np.zeros(len(lens) + 1, dtype=np.int64)
            np.cumsum(lens, out=e_ptr[1:])
            e_link = (np.concatenate(ph.routes) if ph.routes else np.zeros(0)).astype(np.int64)
            inter, lats = self.router.routes_facts(e_ptr, e_link)
            if self.drops_relay_hops(algo) and inter.any():
                e_ptr, e_link = self.router.routes_without_relay_hops(e_ptr, e_link, inter)
            eff = np.where(inter, p.efficiency_inter, p.efficiency_intra)
            wire = np.asarray(ph.weights, dtype=np.float64) / eff
            lat_inter = float(lats[inter].max()) if inter.any() else 0.0
            lat_intra = float(lats[~inter].max()) if (~inter).any() else lat_inter
            n_inter = min(ph.inter_steps, ph.steps)
            pl = PhaseLatency(ph.steps - n_inter, n_inter, lat_intra, lat_inter, step_ns)
            lat_parts.append(pl)
            cp = CompiledPhase(e_ptr, e_link, wire, ph.steps, pl.total())
            phases.append(cp)
            fixed += cp.latency_ns
            per_byte += self._isolated(cp)
        cc = CompiledCollective(algo.name, tuple(phases), fixed, per_byte)
        self.compiled[key] = cc
        self.latencies[key] = tuple(lat_parts)
        return cc

    def links(self, algo: Algorithm, collective: str, ranks: tuple[int, ...]) -> np.ndarray:
        """The distinct link ids ``algo``'s flows of ``collective`` on ``ranks`` cross (from
        the compiled collective: the replay that asks runs it, or a copy of it)."""
        parts = [ph.e_link for ph in self.compile(algo, collective, ranks).phases]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)

    def predicted(self, algo: Algorithm, proto: str, collective: str, ranks: tuple[int, ...],
                  msg_bytes: int) -> tuple[float, float]:
        """(fixed_ns, ns_per_byte) of ``algo`` with ``proto`` as NCCL's tuner rates it."""
        base = self.compile(algo, collective, ranks)
        if algo.name not in ("ring", "tree"):
            return base.fixed_ns, base.ns_per_byte
        grp = self.group(ranks)
        s = shape(self.cluster, algo.name, collective, grp.n, len(grp.nodes))
        return predicted(base, self.latencies[(algo.name, collective, ranks)], s, proto, msg_bytes)

    def variant(self, algo: Algorithm, proto: str, collective: str, ranks: tuple[int, ...],
                msg_bytes: int) -> CompiledCollective:
        """``algo``'s compiled collective run with ``proto`` at ``msg_bytes`` (cached)."""
        base = self.compile(algo, collective, ranks)
        if algo.name not in ("ring", "tree"):
            return base
        key = (algo.name, proto, collective, ranks, int(msg_bytes))
        cc = self.variants.get(key)
        if cc is None:
            if len(self.variants) >= 1 << 16:
                self.variants.clear()
            grp = self.group(ranks)
            s = shape(self.cluster, algo.name, collective, grp.n, len(grp.nodes))
            cc = self.variants[key] = build(base, self.latencies[(algo.name, collective, ranks)],
                                            s, proto, msg_bytes)
        return cc

    def drops_relay_hops(self, algo: Algorithm) -> bool:
        """Whether ``algo``'s node-crossing flows leave their PXN relay hops out (class
        docstring)."""
        return not (algo.relay_hops_in_flow or self.relay_hops)

    def _isolated(self, cp: CompiledPhase) -> float:
        """:func:`_isolated_ns_per_byte` of ``cp``, solved once per canonical form."""
        key = _canonical(cp, self.topo.capacity)
        v = self._per_byte.get(key)
        if v is None:
            if len(self._per_byte) >= 1 << 12:
                self._per_byte.clear()
            v = self._per_byte[key] = _isolated_ns_per_byte(cp, self.topo.capacity)
        return v


def _canonical(cp: CompiledPhase, capacity: np.ndarray) -> bytes:
    """A phase's max-min problem up to the names of its links, as a 32-byte BLAKE2b digest
    of: its flows' routes with the links numbered in the order of their ids, those links'
    capacities and the flows' wire bytes per message byte. Two phases with the same form
    pose the same problem with the links in the same order, so the solve gives them the
    same rates to the bit."""
    u, inv = np.unique(np.asarray(cp.e_link), return_inverse=True)
    h = hashlib.blake2b(digest_size=32)
    for part in (np.asarray(cp.e_ptr, dtype=np.int64), inv.astype(np.int64), capacity[u],
                 np.asarray(cp.wire_per_byte, dtype=np.float64)):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part.tobytes())
    return h.digest()


def _isolated_ns_per_byte(cp: CompiledPhase, capacity: np.ndarray) -> float:
    """Time per message byte of a phase running alone, from its flows' max-min rates."""
    lens = np.diff(cp.e_ptr)
    nz = np.flatnonzero((lens > 0) & (cp.wire_per_byte > 0))
    if len(nz) == 0:
        return 0.0
    e_flow = np.repeat(np.arange(len(nz)), lens[nz])
    if len(nz) == len(lens):  # every flow: its entries as they are
        e_link = np.asarray(cp.e_link)
    else:
        e_link = np.asarray(cp.e_link)[ranges(cp.e_ptr[nz], cp.e_ptr[nz + 1])]
    rates = max_min_sorted(e_flow, e_link, capacity)
    return float(np.max(cp.wire_per_byte[nz] / rates))


_SHARED: dict[tuple[str, bool], Compiler] = {}
_SHARED_MAX = 16


def shared(cluster: ClusterSpec, relay_hops: bool = False) -> Compiler:
    """The shared topology / routes / compiled collectives of a spec (bounded cache)."""
    key = (cluster.key(), relay_hops)
    sh = _SHARED.get(key)
    if sh is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.pop(next(iter(_SHARED)))
        sh = _SHARED[key] = Compiler(cluster, relay_hops)
    return sh


