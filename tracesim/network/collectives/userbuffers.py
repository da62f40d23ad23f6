"""Userbuffers: Transformer Engine's tensor-parallel transfers overlapped with GEMMs.

Transformer Engine's ``tp_comm_overlap`` (userbuffers) does not call NCCL. Each TP rank maps
its peers' buffers over CUDA IPC; ring exchange moves a shard to the next rank with one
``cudaMemcpyAsync`` on a copy engine followed by a one-thread kernel that raises the peer's
flag, the receiver waiting on that flag (``userbuffers_send`` / ``userbuffers_recv``), and
the bulk and pipelined overlaps run userbuffers' own SM kernels that read and write the
peers' memory over NVLink (``allgather2_userbuff_inplace``,
``reducescatter2_userbuff_strided``); NVIDIA/TransformerEngine,
``transformer_engine/common/comm_gemm_overlap/userbuffers/userbuffers.cu``. So no NCCL
protocol, channel count or base latency applies.

The builder marks the chunks of these overlaps (:mod:`tracesim.build.overlap`) with this
algorithm; automatic selection never picks it. A chunk on n ranks is one step: every rank
sends its ``(n-1)/n`` share of the chunk to the next rank of the ring (the bytes a ring
all-gather / reduce-scatter moves; an all-reduce is a reduce-scatter step then an
all-gather step), paying once the step latency below plus the path latency of the spec's
NVLink. Efficiencies: the spec's ring efficiencies (NCCL Simple on the same links;
:attr:`~tracesim.network.collectives.Algorithm.efficiency_as`), so the bandwidth is a
large NCCL ring's and flows share links as every other flow does.

``step_latency_us`` 2.0 is an assumption, not a measurement: the device-side time of one
copy-engine transfer and its flag (copy-engine start, the flag kernel, the receiver's
poll), a few microseconds, against NCCL's 8.4 us Simple base latency plus 3.4 us per NVLink
step (tracesim.network.protocols).
"""

from __future__ import annotations

from tracesim.network.collectives import Algorithm, Group, Phase, register


def _ring_step(group: Group, weight: float) -> Phase:
    ph = Phase(1, 0)
    order = list(group.ranks)
    n = len(order)
    for i in range(n):
        ph.add(group.route(order[i], order[(i + 1) % n]), weight)
    return ph


@register(
    "userbuffers",
    collectives=("all_gather", "reduce_scatter", "all_reduce"),
    efficiency_intra=0.80,
    efficiency_inter=0.94,
    step_latency_us=2.0,
    auto=(),
)
class Userbuffers(Algorithm):
    efficiency_as = "ring"

    def check(self, group: Group, collective: str) -> str | None:
        why = super().check(group, collective)
        if why is None and not group.single_node:
            why = "userbuffers needs the group inside one node's NVLink domain"
        return why

    def phases(self, group: Group, collective: str) -> list[Phase]:
        w = (group.n - 1) / group.n
        if collective == "all_reduce":
            return [_ring_step(group, w), _ring_step(group, w)]
        return [_ring_step(group, w)]
