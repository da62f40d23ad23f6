"""A compiled collective run with one NCCL protocol at one message size.

:class:`~tracesim.network.model.NetworkModel` compiles each (algorithm, collective, group)
once with the spec's Simple calibration (:mod:`tracesim.network.model`); this module derives
the LL / LL128 / Simple variant of it for a message size from the terms of
:mod:`tracesim.network.protocols`: the same routes, wire bytes scaled by the protocol's
bandwidth factor and the channels in use, and the latency rebuilt from NCCL's base and
per-step latencies. Algorithms other than ring and tree run as compiled (Simple).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tracesim.network.protocols import (
    DEFAULT_CHANNELS,
    PROTOCOL_ALGORITHMS,
    PROTOCOLS,
    Shape,
    Terms,
    generation,
    terms,
)
from tracesim.network.running import CompiledCollective, CompiledPhase
from tracesim.specs.cluster import ClusterSpec


@dataclass(frozen=True)
class PhaseLatency:
    """A compiled phase's latency parts: steps inside nodes and across, their path
    latencies (ns) and the algorithm's own step latency (ns)."""

    intra_steps: int
    inter_steps: int
    intra_path_ns: float
    inter_path_ns: float
    step_ns: float

    def total(self, t: Terms | None = None) -> float:
        if t is None:
            return (self.intra_steps * (self.step_ns + self.intra_path_ns)
                    + self.inter_steps * (self.step_ns + self.inter_path_ns))
        intra = max(self.step_ns + self.intra_path_ns + t.intra_extra_ns, t.intra_floor_ns)
        inter = self.step_ns + self.inter_path_ns + t.inter_extra_ns
        return self.intra_steps * intra + self.inter_steps * inter


def protocols_for(algorithm: str, allowed: Sequence[str]) -> tuple[str, ...]:
    """The protocols ``algorithm`` may run with ``allowed`` (empty = all): ring and tree
    any of them; NVLS Simple only (none if Simple is excluded, as in NCCL); the others are
    not NCCL tuner algorithms and always run as compiled ("Simple")."""
    if algorithm in PROTOCOL_ALGORITHMS:
        return tuple(allowed) if allowed else PROTOCOLS
    if algorithm == "nvls" and allowed and "Simple" not in allowed:
        return ()
    return ("Simple",)


def shape(cluster: ClusterSpec, algorithm: str, collective: str, n: int, nodes: int) -> Shape:
    return Shape(
        algorithm=algorithm, collective=collective, n=n, nodes=nodes,
        gen=generation(cluster.device),
        hw_intra="pci" if cluster.intra_node.kind == "pcie" else "nvlink",
        channels=cluster.collectives.channels or DEFAULT_CHANNELS,
    )


def chain_hops(algorithm: str, collective: str, phases: Sequence[CompiledPhase]) -> int:
    """Hops of the pipelined chain whose fill and drain a message pays (0: none)."""
    if algorithm == "tree" or collective in ("broadcast", "reduce"):
        return max((ph.steps for ph in phases), default=0)
    return 0


def protocol_terms(base: CompiledCollective, s: Shape, proto: str, msg_bytes: float,
                   *, for_selection: bool) -> Terms | None:
    """The terms of ``proto`` for ``base`` (None when the collective moves no bytes)."""
    if base.ns_per_byte <= 0:
        return None
    return terms(s, proto, 1.0 / base.ns_per_byte, msg_bytes,
                 chain_hops(s.algorithm, s.collective, base.phases), for_selection=for_selection)


def _fixed(lats: Sequence[PhaseLatency], t: Terms | None) -> float:
    if t is None:
        return sum(pl.total() for pl in lats)
    return (t.base_ns + t.fill_ns + sum(pl.total(t) for pl in lats)) * t.latency_scale


def predicted(base: CompiledCollective, lats: Sequence[PhaseLatency], s: Shape, proto: str,
              msg_bytes: float) -> tuple[float, float]:
    """(fixed_ns, ns_per_byte) of ``proto`` as NCCL's tuner would rate it (every channel,
    no pipeline fill)."""
    t = protocol_terms(base, s, proto, msg_bytes, for_selection=True)
    wf = 1.0 if t is None else t.wire_factor
    return _fixed(lats, t), base.ns_per_byte * wf


def build(base: CompiledCollective, lats: Sequence[PhaseLatency], s: Shape, proto: str,
          msg_bytes: float) -> CompiledCollective:
    """``base`` run with ``proto`` at ``msg_bytes``: scaled wire bytes, NCCL latencies; the
    protocol's base latency and the chain's fill are paid with the first phase, the ring
    Simple plateau scales every phase's latency."""
    t = protocol_terms(base, s, proto, msg_bytes, for_selection=False)
    wf = 1.0 if t is None else t.wire_factor
    phases = []
    for i, (ph, pl) in enumerate(zip(base.phases, lats, strict=True)):
        if t is None:
            lat = pl.total()
        else:
            lat = pl.total(t) + (t.base_ns + t.fill_ns if i == 0 else 0.0)
            lat *= t.latency_scale
        phases.append(CompiledPhase(ph.e_ptr, ph.e_link, ph.wire_per_byte * wf, ph.steps, lat))
    return CompiledCollective(base.algorithm, tuple(phases), sum(p.latency_ns for p in phases),
                              base.ns_per_byte * wf, proto)
