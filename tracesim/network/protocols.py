"""NCCL's protocols (LL, LL128, Simple), channels and chunk pipelines.

NCCL moves data with one of three protocols, and its tuner picks the (algorithm, protocol)
pair with the lowest predicted time for each message size:

* **LL** (low latency): 8-byte lines of 4 data bytes and a 4-byte flag, so the receiver polls
  the flag instead of waiting for a fence: the lowest latency, half the bandwidth.
* **LL128**: 128-byte lines of 120 data bytes and an 8-byte flag (NVLink keeps 128-byte
  stores in order): 120/128 of the bandwidth, latency between LL and Simple.
* **Simple**: plain copies with a fence and a flag per step: full bandwidth, the highest
  latency.

Every constant below is NCCL's own, from NVIDIA/nccl (master ``5067397c``): the tuner's
tables in ``src/graph/tuning.cc`` (``ncclTunerConstantsDefaults``, ``ncclTopoTuneModel``,
``ncclTopoGetAlgoTime``), the channel and thread choice in ``src/enqueue.cc``
(``topoGetAlgoInfo``), chunk sizes in ``src/enqueue.cc`` (``calcCollChunking``),
``src/init.cc`` (buffer sizes), ``src/include/device.h`` and ``src/include/collectives.h``.
None was fitted to measurements here. How tracesim uses them (docs/network.md, "Protocols"):

* The cluster spec's efficiencies are Simple's (large messages run Simple); a protocol
  scales the wire bytes of every flow by ``simple_algbw / protocol_algbw`` where the
  protocol's bandwidth is Simple's times NCCL's factor, capped as NCCL caps it.
* Latency: NCCL's base latency of (algorithm, protocol) once, and per step the path latency
  (the spec's ``latency_us``, which are NCCL's ring/LL hardware latencies) plus the
  protocol's extra hardware latency over ring/LL.
* Channels: a message smaller than ``nChannels x threads x threshold`` runs on fewer
  channels (``topoGetAlgoInfo``), at a proportional share of the bandwidth.
* Chunk pipeline: with Simple a pipelined chain (tree, ring broadcast / reduce) of ``K`` hops
  pays ``K - 1`` chunk times to fill and drain, with chunk = min(Simple chunk, bytes per
  channel), since a hop forwards a chunk once its one flag is set. LL and LL128 carry a flag
  in every line, so a hop forwards line by line and the chain's depth costs only the
  per-hop latency. A ring all-reduce / all-gather / reduce-scatter keeps every link busy
  from its first step to its last, so it has no fill term.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tracesim.specs.collectives import PROTOCOLS, parse_protocols

__all__ = ["PROTOCOLS", "parse_protocols", "terms", "Shape", "Terms"]

#: algorithms that have the three protocols (NVLS runs Simple only, as in NCCL; direct,
#: hierarchical and p2p are not NCCL tuner algorithms and are modelled as Simple)
PROTOCOL_ALGORITHMS = ("ring", "tree")

# --- src/graph/tuning.cc, ncclTunerConstantsDefaults (LL, LL128, Simple) ------------------
#: baseLatencies (us), paid once per collective
BASE_LATENCY_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
#: hwLatencies (us) per step, by link kind (NVLINK, PCI, NET) and algorithm
HW_LATENCY_US = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)},
}
#: hwLatencies[NVLINK][NVLS][Simple]: a single-node NVLS all-reduce's whole latency (us)
NVLS_LATENCY_US = 25.0
#: llMaxBws (GB/s of bus bandwidth): one node by GPU generation; several nodes by node count
#: (the Intel-CPU row: 2 nodes, more)
LL_MAX_BUSBW_ONE_NODE = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
LL_MAX_BUSBW_NODES = (39.0, 20.4)
#: perChMaxRingLL128Bws (GB/s per channel)
LL128_RING_PER_CHANNEL = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 40.0}
#: perChMaxTreeLL128Bws (GB/s per channel), by 1 node / 2 nodes / more
LL128_TREE_PER_CHANNEL = {
    "volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0),
    "hopper": (36.7, 36.7, 29.0), "blackwell": (55.6, 31.67, 20.0),
}
# --- src/graph/tuning.cc, ncclTopoTuneModel: bandwidth factors of LL / LL128 over Simple ---
#: ring: LL busBw x 0.5 (4 data bytes per 8-byte line); LL128 x 0.92 (the code's stand-in
#: for 120/128 = 0.9375)
RING_FACTOR = (0.5, 0.92, 1.0)
#: tree (all-reduce across nodes): LL x 1/3.8, LL128 x 120/128
TREE_FACTOR = (1.0 / 3.8, 120.0 / 128.0, 1.0)
#: getNetOverhead: 1 us per inter-node ring step on x86 (Intel / default), x3 for Simple
NET_OVERHEAD_US = 1.0
#: ncclTopoGetAlgoTime: ring Simple all-reduce across nodes, latency x 1.4 once every
#: channel's share of every rank is >= 64 bytes ("plateau effect of ring", compCap >= 80)
RING_SIMPLE_PLATEAU = 1.4
#: ncclTopoGetAlgoTime: treeCorrectionFactor[protocol][log2(bytes / 64)], 64 B .. 256 MiB
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)
# --- channels and threads: src/include/device.h, src/include/comm.h, src/enqueue.cc --------
#: NCCL_LL_MAX_NTHREADS, NCCL_LL128_MAX_NTHREADS, NCCL_SIMPLE_MAX_NTHREADS
MAX_THREADS = (512, 640, 512)
#: NCCL_LL_THREAD_THRESHOLD (x nRanks for rings), NCCL_LL128_THREAD_THRESHOLD,
#: NCCL_SIMPLE_THREAD_THRESHOLD: bytes per thread before another channel is used
THREAD_THRESHOLD = (8, 8, 64)
#: channels of a collective when the spec does not say (``collectives.channels``): the
#: "16 coll channels" NCCL logs for 8 Hopper GPUs on NVSwitch (NVIDIA/nccl issue 892)
DEFAULT_CHANNELS = 16
# --- chunks: src/init.cc (DEFAULT_*BUFFSIZE), src/enqueue.cc (calcCollChunking) -----------
#: data bytes of one chunk: LL: 8 lines x 512 threads x 8 steps x 16 B / 8 steps / 2;
#: LL128: 120 x 640 x 8 steps x 8 B / 8 steps x 15/16; Simple: 4 MiB / 8 steps (x 4 chunk
#: steps for rings: ALLREDUCE_CHUNKSTEPS = NCCL_STEPS / 2)
CHUNK_BYTES = (32768, 576000, 524288)
RING_SIMPLE_CHUNK_STEPS = 4


def protocol_index(name: str) -> int:
    return PROTOCOLS.index(name)


def generation(device: object) -> str:
    """NCCL's compute-capability class of a device profile name (Hopper when unknown)."""
    name = device.lower() if isinstance(device, str) else ""
    if "v100" in name:
        return "volta"
    if "a100" in name or "a800" in name:
        return "ampere"
    if any(k in name for k in ("b200", "b300", "gb200", "gb300")):
        return "blackwell"
    return "hopper"


def log2i(x: int) -> int:
    return x.bit_length() - 1 if x > 0 else -1


@dataclass(frozen=True)
class Shape:
    """What the protocol terms need of a collective on a group."""

    algorithm: str  # "ring" | "tree"
    collective: str
    n: int  # ranks
    nodes: int
    gen: str  # NCCL generation (``generation``)
    hw_intra: str  # "nvlink" | "pci"
    channels: int  # NCCL nChannels


@dataclass(frozen=True)
class Terms:
    """How protocol ``p`` changes an algorithm's Simple-calibrated compiled collective."""

    wire_factor: float  # wire bytes x this (bandwidth factor, caps, channels in use)
    base_ns: float  # once, before the first phase
    intra_extra_ns: float  # added to every intra-node step's path latency
    inter_extra_ns: float  # added to every inter-node step's path latency
    intra_floor_ns: float  # an intra-node step takes at least this (net overhead)
    latency_scale: float  # the whole latency x this (ring Simple plateau)
    fill_ns: float  # pipeline fill / drain of a chain
    channels_used: int


def _nccl_steps(s: Shape) -> int:
    if s.collective == "all_reduce":
        return 2 * (s.n - 1)
    if s.collective in ("all_gather", "reduce_scatter"):
        return s.n - 1
    return s.n


def bus_cap_GBps(s: Shape, p: int) -> float:
    """NCCL's cap on the bus bandwidth of (algorithm, protocol) (inf when none)."""
    idx2 = min(s.nodes, 3) - 1
    cap = math.inf
    if p == 0:
        cap = LL_MAX_BUSBW_ONE_NODE[s.gen] if s.nodes == 1 else LL_MAX_BUSBW_NODES[min(idx2, 2) - 1]
    elif p == 1 and s.algorithm == "ring":
        cap = s.channels * LL128_RING_PER_CHANNEL[s.gen]
    elif p == 1 and s.algorithm == "tree":
        cap = s.channels * LL128_TREE_PER_CHANNEL[s.gen][idx2]
    return cap


def protocol_algbw(s: Shape, p: int, simple_algbw_GBps: float, msg_bytes: float) -> float:
    """Algorithm bandwidth (GB/s) of protocol ``p`` with every channel, from Simple's."""
    factor = (RING_FACTOR if s.algorithm == "ring" else TREE_FACTOR)[p]
    ratio = 0.5 if s.algorithm == "tree" else s.n / _nccl_steps(s)  # busBw -> algbw (NCCL)
    bw = min(simple_algbw_GBps * factor, bus_cap_GBps(s, p) * ratio)
    if s.algorithm == "tree" and s.collective == "all_reduce":
        log_size = log2i(int(msg_bytes) >> 6)
        if 0 <= log_size < 23:
            bw *= TREE_CORRECTION[p][log_size]
    return bw


def channels_used(s: Shape, p: int, msg_bytes: float) -> int:
    """Channels NCCL runs a message on (``topoGetAlgoInfo``: drop channels while
    bytes < channels x threads x threshold)."""
    thr = THREAD_THRESHOLD[p] * (s.n if (p == 0 and s.algorithm == "ring") else 1)
    nc = s.channels
    while nc >= 2 and msg_bytes < nc * MAX_THREADS[p] * thr:
        nc -= 1
    return nc


def chunk_bytes(s: Shape, p: int) -> int:
    """Data bytes of one chunk of protocol ``p`` (``calcCollChunking``)."""
    c = CHUNK_BYTES[p]
    if p == 2 and s.algorithm == "ring" and s.collective not in ("broadcast", "reduce"):
        c *= RING_SIMPLE_CHUNK_STEPS
    return c


def terms(s: Shape, proto: str, simple_algbw_GBps: float, msg_bytes: float, chain_hops: int,
          *, for_selection: bool = False) -> Terms:
    """The terms of protocol ``proto`` for ``msg_bytes``; ``chain_hops``: hops of a pipelined
    chain (0 for a ring all-reduce / all-gather / reduce-scatter). ``for_selection``: as
    NCCL's tuner predicts (every channel, no pipeline fill), else as the run goes."""
    p = protocol_index(proto)
    bw = protocol_algbw(s, p, simple_algbw_GBps, msg_bytes)
    nc = s.channels if for_selection else channels_used(s, p, msg_bytes)
    bw_run = bw * nc / s.channels
    a = s.algorithm
    hw_intra = HW_LATENCY_US[s.hw_intra]
    intra_extra = hw_intra[a][p] - hw_intra["ring"][0]
    net_a = "tree" if (a == "tree" or s.n == s.nodes) else "ring"  # ppn 1: tree's latency
    inter_extra = HW_LATENCY_US["net"][net_a][p] - HW_LATENCY_US["net"]["ring"][0]
    floor = 0.0
    if a == "ring" and s.nodes > 1:
        floor = NET_OVERHEAD_US * (3 if p == 2 else 1)
    scale = 1.0
    if (a == "ring" and p == 2 and s.nodes > 1 and s.collective == "all_reduce"
            and msg_bytes / (s.channels * s.n) >= 64):
        scale = RING_SIMPLE_PLATEAU
    fill = 0.0
    if p == 2 and chain_hops > 1 and not for_selection and msg_bytes > 0:
        chunk = min(chunk_bytes(s, p), msg_bytes / nc)
        fill = (chain_hops - 1) * chunk / (bw_run / nc)
    return Terms(
        wire_factor=simple_algbw_GBps / bw_run,
        base_ns=BASE_LATENCY_US[a][p] * 1000.0,
        intra_extra_ns=intra_extra * 1000.0,
        inter_extra_ns=inter_extra * 1000.0,
        intra_floor_ns=floor * 1000.0,
        latency_scale=scale,
        fill_ns=fill,
        channels_used=nc,
    )
