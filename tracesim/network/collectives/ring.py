"""Ring: all-reduce, all-gather, reduce-scatter, and pipelined-chain broadcast / reduce.

All-reduce on n ranks is 2(n-1) steps (n-1 of reduce-scatter, n-1 of all-gather), each rank
sending S/n bytes to its successor per step; all-gather and reduce-scatter are n-1 such
steps. Uncongested, with per-rank bandwidth B and step latency a, all-reduce therefore takes
2(n-1)(a + S/(nB)) and all-gather / reduce-scatter (n-1)(a + S/(nB)). Across nodes the data
is split over one ring per rail (NCCL's channels), each rail-aligned. Broadcast and reduce
pipeline the whole buffer along the ring from (to) the root: (n-1) a + S/B.

On a full-mesh node (``nvlink_mesh``: direct links, no switch) a single ring would use one
link per GPU. RCCL runs many rings there, chosen so that together they load every link
alike: on 8 x MI300X its 14 rings (``rome_model_79`` in ROCm/rccl
``src/graph/rome_models.cc``, run twice over for 28 channels) use each of the 56 directed
xGMI links exactly twice. Inside one node the ring's steps therefore spread each rank's
bytes evenly over its n-1 links: the phase carries every ordered pair at steps / (n (n-1))
bytes per byte, with the ring's step count (its latency is the ring's). Across nodes the
channels follow RCCL's NIC-per-GPU rings (:meth:`Group.channels`).

Default calibration (docs/network.md): efficiency 0.80 inside a node (NVLink), fitted
between the 8-GPU A100 (232.5 GB/s busbw of 300) and H100 (~370 of 450) nccl-tests figures;
0.94 across nodes, from 46-48 GB/s busbw per 400 Gb/s NIC and 24 per 200 Gb/s.
"""

from __future__ import annotations

from tracesim.network.collectives import Algorithm, Group, Phase, register


@register(
    "ring",
    collectives=("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"),
    efficiency_intra=0.80,
    efficiency_inter=0.94,
    step_latency_us=0.0,
)
class Ring(Algorithm):
    relay_hops_in_flow = False

    def phases(self, group: Group, collective: str) -> list[Phase]:
        n = group.n
        chans = group.channels()
        c = len(chans)
        if collective in ("all_reduce", "all_gather", "reduce_scatter"):
            steps = 2 * (n - 1) if collective == "all_reduce" else n - 1
            weight = steps / (n * c)
            m = len(group.nodes)
            ph = Phase(steps, (2 * (m - 1) if collective == "all_reduce" else m - 1))
            if group.single_node and group.full_mesh:
                group.add_node_ring(ph, group.ranks, steps / n)
                return [ph]
            for order, rail in chans:
                for i in range(n):
                    ph.add(group.edge_route(order[i], order[(i + 1) % n], rail), weight)
            return [ph]
        root = group.order[0]
        ph = Phase(n - 1, len(group.nodes) - 1)
        for order, rail in chans:
            i0 = order.index(root)
            chain = order[i0:] + order[:i0]
            for i in range(n - 1):
                a, b = chain[i], chain[i + 1]
                if collective == "reduce":
                    a, b = b, a
                ph.add(group.edge_route(a, b, rail), 1.0 / c)
        return [ph]
