"""Running one compiled collective on the flow network, and the record it leaves.

:class:`Runner` is what :meth:`tracesim.network.model.NetworkModel.collective` starts: the
collective's phases run one after another, each round paying its share of the phase's
latency before starting its flows; in ``auto`` mode the steps of a phase are aggregated
unless a link of the phase carries other traffic, and then run in at most ``MAX_ROUNDS``
rounds. Callbacks drive it, not a SimPy process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import simpy

#: the most rounds an ``auto`` phase of k steps takes while other traffic shares its links:
#: ``ceil(k / MAX_ROUNDS)`` steps a round (a 2-rank ring's two steps still one by one). Each
#: round ends with its slowest flow, as a step does; grouping steps leaves the bytes and the
#: latency the same and moves where the coupling falls. Every published row of
#: docs/accuracy.md is within 0.7% of step by step with 2 rounds (0.6% with 8), in half the
#: time on the slowest (docs/network.md, "Collective algorithms")
MAX_ROUNDS = 2


class FlowModel(Protocol):
    """What a :class:`Runner` needs of the network model (:class:`tracesim.network.model.NetworkModel`)."""

    keep_records: bool
    records: list[CommRecord]
    phases: str
    max_rounds: int
    flows: Any

    def _env(self) -> simpy.Environment: ...


@dataclass(frozen=True)
class CompiledPhase:
    """A phase ready to run: CSR routes, wire bytes per message byte, latency in ns."""

    e_ptr: np.ndarray
    e_link: np.ndarray
    wire_per_byte: np.ndarray
    steps: int
    latency_ns: float


@dataclass(frozen=True)
class CompiledCollective:
    """A collective on one group with one algorithm; isolated time = fixed_ns + ns_per_byte x S."""

    algorithm: str
    phases: tuple[CompiledPhase, ...]
    fixed_ns: float
    ns_per_byte: float
    protocol: str = "Simple"

    def estimate_ns(self, msg_bytes: float) -> float:
        return self.fixed_ns + self.ns_per_byte * msg_bytes


@dataclass(frozen=True)
class CommRecord:
    """One finished operation (``NetworkModel.records``): what, where, when (ns)."""

    collective: str
    group_kind: str
    ranks: int
    msg_bytes: int
    algorithm: str
    start_ns: int
    end_ns: int


class Runner:
    """One running collective: its phases (and, in ``auto`` mode, their steps) one after
    another, driven by callbacks (no SimPy process). Each round pays its share of the
    phase's latency, then starts its flows; ``auto`` aggregates the steps left unless a link
    of the phase carries other traffic, then runs ``ceil(k / max_rounds)`` steps and looks
    again.

    The chunks of a :func:`repeated` collective run one by one while their links carry
    nothing else (each ends as it does alone, to the ns); where another flow shares the
    links, ``auto`` runs the chunks left as one transfer of their bytes after their
    latencies (the same bytes and link time; only where the latency gaps fall moves), so
    that two chunked operations sharing links cost a few flow events, not a few per chunk."""

    __slots__ = ("model", "cc", "collective", "kind", "n", "msg", "t0", "i", "left", "now", "done",
                 "span")

    def __init__(self, model: FlowModel, cc: CompiledCollective, collective: str, kind: str,
                 n: int, msg_bytes: float, *, resume: tuple[int, int, simpy.Event] | None = None):
        env = model._env()
        self.model, self.cc, self.collective, self.kind, self.n = model, cc, collective, kind, n
        self.msg = msg_bytes
        self.i = 0
        self.left = -1
        self.now = 0
        self.span = 1  # phases this round runs: the chunks left of a repeated collective
        if resume is None:
            self.t0 = int(env.now)
            self.done = env.event()
            self._round()
        else:
            # taken over from the fast path (tracesim.network.fastpath): phase i, all its
            # steps in one round, the caller starts its latency or its flows
            self.t0, self.i, self.done = resume
            self.left = self.now = max(1, cc.phases[self.i].steps)

    def _round(self) -> None:
        m, cc = self.model, self.cc
        env = m._env()
        if self.i >= len(cc.phases):
            if m.keep_records:
                m.records.append(CommRecord(self.collective, self.kind, self.n, int(self.msg),
                                            cc.algorithm, self.t0, int(env.now)))
            self.done.succeed()
            return
        ph = cc.phases[self.i]
        k = max(1, ph.steps)
        if self.left < 0:
            self.left = k
        left = self.left
        if m.phases == "aggregate" or k == 1:
            self.now = left
        elif m.phases == "steps":
            self.now = 1
        else:  # auto: aggregate what is left unless another flow shares the links
            self.now = min(left, -(-k // m.max_rounds)) if m.flows.busy(ph.e_link) else left
        self.span = 1
        if (k == 1 and m.phases == "auto" and self.i + 1 < len(cc.phases)
                and cc.phases[self.i + 1] is ph and m.flows.busy(ph.e_link)):
            j = self.i + 1
            while j < len(cc.phases) and cc.phases[j] is ph:
                j += 1
            self.span = j - self.i
        lat_ns = int(round(ph.latency_ns * self.now / k)) * self.span
        if lat_ns > 0:
            env.timeout(lat_ns).callbacks.append(self._start)
        else:
            self._start(None)

    def _start(self, _ev: Any) -> None:
        ph = self.cc.phases[self.i]
        k = max(1, ph.steps)
        ev = self.model.flows.start(ph.e_ptr, ph.e_link,
                                    ph.wire_per_byte * (self.msg * self.now / k * self.span))
        ev.callbacks.append(self._after)

    def _after(self, _ev: Any) -> None:
        self.left -= self.now
        if self.left == 0:
            self.i += self.span
            self.left = -1
            self.span = 1
        self._round()


def chunk_bytes(msg_bytes: int, chunks: int) -> float:
    """The size of one of ``chunks`` equal pieces of ``msg_bytes`` (an int when it divides)."""
    if chunks <= 1:
        return msg_bytes
    return msg_bytes // chunks if msg_bytes % chunks == 0 else msg_bytes / chunks


def repeated(cc: CompiledCollective, chunks: int) -> CompiledCollective:
    """``cc`` run ``chunks`` times back to back (its phases ``chunks`` times over, each
    with the latency it has alone): a communication task that stands for ``chunks``
    operations of one chunk each (the engine's ``chunks`` column). Run it with the size of
    one chunk; alone on its links it lasts ``chunks`` times ``cc``'s time, to the ns."""
    if chunks <= 1:
        return cc
    return CompiledCollective(cc.algorithm, cc.phases * chunks, cc.fixed_ns * chunks,
                              cc.ns_per_byte * chunks, cc.protocol)


def merge_compiled(parts: Sequence[CompiledCollective]) -> CompiledCollective | None:
    """One compiled collective whose phase i holds the flows of phase i of every part (None
    when the parts differ in their phases' number or steps); latency: the largest."""
    first = parts[0]
    if any(len(p.phases) != len(first.phases) for p in parts):
        return None
    phases = []
    for i, ph in enumerate(first.phases):
        ps = [p.phases[i] for p in parts]
        if any(q.steps != ph.steps for q in ps):
            return None
        lens = np.concatenate([np.diff(q.e_ptr) for q in ps])
        e_ptr = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=e_ptr[1:])
        phases.append(CompiledPhase(e_ptr, np.concatenate([q.e_link for q in ps]).astype(np.int64),
                                    np.concatenate([q.wire_per_byte for q in ps]), ph.steps,
                                    max(q.latency_ns for q in ps)))
    return CompiledCollective(first.algorithm, tuple(phases), max(p.fixed_ns for p in parts),
                              max(p.ns_per_byte for p in parts), first.protocol)
