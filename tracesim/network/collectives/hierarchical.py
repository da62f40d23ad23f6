"""Hierarchical all-reduce: reduce-scatter in each node, all-reduce per rail, all-gather.

Three phases run one after another: a ring reduce-scatter among the g local ranks of each
node (every node at once), then for each local index j a ring all-reduce of S/g bytes among
the j-th ranks of all m nodes (rail-aligned: rank j's NIC), then a ring all-gather in each
node. Uncongested: (g-1)(a_i + S/(g B_i)) + 2(m-1)(a_n + S/(g m B_n)) + (g-1)(a_i + S/(g B_i)).
Needs a multi-node group with the same local ranks on every node and more than one of them.
On full-mesh nodes the in-node rings spread over every link (:meth:`Group.add_node_ring`).
Default calibration as the ring. Not considered by automatic selection (NCCL does not use
it); choose it explicitly.
"""

from __future__ import annotations

from tracesim.network.collectives import Algorithm, Group, Phase, register


@register(
    "hierarchical",
    collectives=("all_reduce",),
    efficiency_intra=0.80,
    efficiency_inter=0.94,
    step_latency_us=0.5,
    auto=(),
)
class Hierarchical(Algorithm):
    def check(self, group: Group, collective: str) -> str | None:
        why = super().check(group, collective)
        if why:
            return why
        if group.single_node or not group.uniform or group.per_node < 2:
            return "hierarchical needs >= 2 nodes with the same >= 2 local ranks each"
        return None

    def phases(self, group: Group, collective: str) -> list[Phase]:
        g = group.per_node
        m = len(group.nodes)
        intra_w = (g - 1) / g
        rs = Phase(g - 1)
        ag = Phase(g - 1)
        for seq in group.by_node:
            group.add_node_ring(rs, seq, intra_w)
            group.add_node_ring(ag, seq, intra_w)
        ar = Phase(2 * (m - 1), 2 * (m - 1))
        w = 2 * (m - 1) / (m * g)
        for j in range(g):
            col = [seq[j] for seq in group.by_node]
            for x in range(m):
                ar.add(group.route(col[x], col[(x + 1) % m]), w)
        return [rs, ar, ag]
