"""Direct: every rank sends to every other rank at once (NCCL's all-to-all pattern).

All-to-all of S bytes per rank on n ranks: one phase in which each rank sends S/n to each of
the n-1 others; uncongested on a switch with per-rank bandwidth B: a + (n-1) S / (n B).
All-gather and reduce-scatter move the same bytes; all-reduce is a direct reduce-scatter
followed by a direct all-gather. Default efficiencies as the ring (no separate measurement).
Automatic selection considers it for all-to-all only (NCCL has no direct all-reduce /
all-gather); name it explicitly for the others.
"""

from __future__ import annotations

from tracesim.network.collectives import Algorithm, Group, Phase, register


def _all_pairs(group: Group, weight: float) -> Phase:
    ph = Phase(1, 0 if group.single_node else 1)
    for a in group.ranks:
        for b in group.ranks:
            if a != b:
                ph.add(group.route(a, b), weight)
    return ph


@register(
    "direct",
    collectives=("all_to_all", "all_gather", "reduce_scatter", "all_reduce"),
    efficiency_intra=0.80,
    efficiency_inter=0.94,
    step_latency_us=1.0,
    auto=("all_to_all",),
)
class Direct(Algorithm):
    def phases(self, group: Group, collective: str) -> list[Phase]:
        w = 1.0 / group.n
        if collective == "all_reduce":
            return [_all_pairs(group, w), _all_pairs(group, w)]
        return [_all_pairs(group, w)]
