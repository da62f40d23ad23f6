"""Point-to-point: send/recv (one flow per pair).

As a collective (``send_recv``, as nccl-tests' sendrecv) every rank sends the whole buffer
to the next rank of the group and receives from the previous one; the engine's ``p2p`` calls
use the same calibration for a single transfer. Default efficiencies as the ring.
"""

from __future__ import annotations

from tracesim.network.collectives import Algorithm, Group, Phase, register


@register(
    "p2p",
    collectives=("send_recv",),
    efficiency_intra=0.80,
    efficiency_inter=0.94,
    step_latency_us=1.0,
)
class P2P(Algorithm):
    relay_hops_in_flow = False

    def phases(self, group: Group, collective: str) -> list[Phase]:
        order = group.order
        n = len(order)
        ph = Phase(1, 0 if group.single_node else 1)
        for i in range(n):
            ph.add(group.route(order[i], order[(i + 1) % n]), 1.0)
        return [ph]
