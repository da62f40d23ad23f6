"""NVLS: all-reduce reduced inside the NVSwitch (NVLink SHARP, H100 and later).

Each GPU pushes its whole buffer into the switch, which reduces it, and receives the reduced
buffer back (multimem load-reduce / store), both directions at once: S bytes up and S bytes
down per GPU, two steps of latency. Uncongested: 2a + S / (e B), so algbw = e B and
busbw = 2(n-1)/n e B, where a ring's algbw is only n/(2(n-1)) e B.

Default calibration: efficiency 0.61, fitted to the ~476-480 GB/s busbw nccl-tests shows
for 8 x H100 (450 GB/s per direction): 0.61 * 450 * 1.75 = 480. It stands for the switch's
reduction throughput and multimem overheads, which this model does not resolve. Step latency
8 us: NVLS setup costs more than a ring step, so rings win for small messages, as in NCCL.
Single-node groups only (NVLS across nodes needs NVLink-network or SHARP, not modelled).
"""

from __future__ import annotations

import numpy as np

from tracesim.network.collectives import Algorithm, Group, Phase, register


@register(
    "nvls",
    collectives=("all_reduce",),
    efficiency_intra=0.61,
    efficiency_inter=1.0,
    step_latency_us=12.2,
)
class Nvls(Algorithm):
    def check(self, group: Group, collective: str) -> str | None:
        why = super().check(group, collective)
        if why:
            return why
        intra = group.topo.cluster.intra_node
        if not (intra.kind == "nvswitch" and intra.nvls):
            return "nvls needs an NVSwitch with nvls: true"
        if not group.single_node:
            return "nvls applies to groups within one node"
        if group.n < 2:
            return "nvls needs at least 2 ranks"
        return None

    def phases(self, group: Group, collective: str) -> list[Phase]:
        t = group.topo
        ph = Phase(2)
        for r in group.ranks:
            ph.add(np.array([t.gpu_up[r]], dtype=np.int64), 1.0)
            ph.add(np.array([t.gpu_down[r]], dtype=np.int64), 1.0)
        return [ph]
