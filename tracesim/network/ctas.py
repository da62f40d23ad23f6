"""NCCL's CTA cap per communicator: fewer channels, less bandwidth.

Every NCCL channel is one CTA (thread block) on one SM. A communicator created with
``maxCTAs = k`` (Megatron-Core's per-communicator ``max_ctas``, ``NCCL_MAX_CTAS``) runs
its collectives and its send / receive on at most ``k`` channels
(``src/graph/connect.cc``: ``nChannels = min(..., config.maxCTAs)``; ``src/graph/paths.cc``:
``p2pnChannels = min(nChannels, ...)``). MLPerf's NeMo submissions cap the data-parallel
communicators at 8 CTAs, pipeline at 2 and context parallelism at 1, leaving the SMs to the
GEMMs they overlap.

The model (``collectives.max_ctas`` of a cluster spec, docs/network.md "CTA caps"): an
operation on a capped communicator moves at most ``k x B`` bytes/s of bus bandwidth per
rank, ``B`` the most one channel of the Simple protocol carries in NCCL's own tuner
(``perChMaxTreeBws`` of ``src/graph/tuning.cc``, by GPU generation and by one node / two
nodes / more): where the operation alone would be faster, its wire bytes are scaled up to
that rate (its latency is kept). Transfers that bypass NCCL (Transformer Engine's
userbuffers, the DeepEP / HybridEP dispatch kernels) are not capped.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tracesim.network.running import CompiledCollective

#: perChMaxTreeBws (GB/s per channel, Simple protocol), by 1 node / 2 nodes / more
#: (NVIDIA/nccl master 5067397c, src/graph/tuning.cc, ncclTunerConstantsDefaults)
SIMPLE_PER_CHANNEL = {
    "volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8),
    "hopper": (38.7, 41.4, 36.0), "blackwell": (70.0, 42.8, 24.0),
}
#: algorithms that are not NCCL's (no CTA cap applies)
UNCAPPED = ("userbuffers", "dedup")


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' busbw / algbw ratio for ``collective`` on ``n`` ranks."""
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def channel_busbw(generation: str, nodes: int) -> float:
    """What one channel carries (GB/s of bus bandwidth) on a communicator over ``nodes``
    nodes (NVLink domains)."""
    row = SIMPLE_PER_CHANNEL.get(generation, SIMPLE_PER_CHANNEL["hopper"])
    return row[0] if nodes <= 1 else row[1] if nodes == 2 else row[2]


def alone_busbw(cc: CompiledCollective, collective: str, n: int, capacity: np.ndarray,
                chunks: int = 1) -> float:
    """The bus bandwidth (GB/s) of ``cc`` alone on its links (``chunks`` operations back to
    back, :func:`tracesim.network.running.repeated`): from its per-byte time, or, for a
    transfer compiled without one (point-to-point), from its route's slowest link."""
    if cc.ns_per_byte > 0:
        return bus_factor(collective, n) * chunks / cc.ns_per_byte
    ph = cc.phases[0]
    if not len(ph.e_link):
        return 0.0
    return float(capacity[ph.e_link].min() / ph.wire_per_byte.max())


def capped(cc: CompiledCollective, ctas: int, generation: str, nodes: int, collective: str,
           n: int, capacity: np.ndarray, chunks: int = 1) -> CompiledCollective:
    """``cc`` (``chunks`` operations back to back) on a communicator of ``ctas`` channels:
    wire bytes scaled so that, alone, it moves at most ``ctas x`` :func:`channel_busbw`
    (unchanged when it is slower anyway)."""
    if cc.algorithm in UNCAPPED:
        return cc
    bus = alone_busbw(cc, collective, n, capacity, chunks)
    cap = ctas * channel_busbw(generation, nodes)
    if bus <= cap or cap <= 0:
        return cc
    f = bus / cap
    phases = tuple(dataclasses.replace(ph, wire_per_byte=ph.wire_per_byte * f) for ph in cc.phases)
    return dataclasses.replace(cc, phases=phases, ns_per_byte=cc.ns_per_byte * f)
