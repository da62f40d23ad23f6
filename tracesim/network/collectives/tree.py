"""Double binary tree all-reduce (NCCL's tree algorithm).

Across nodes, two binary trees over the nodes carry half of the buffer each; the second tree
is the first mirrored (even node count) or shifted by one (odd), so that each node is an
inner node in at most one tree. Inside a node the local ranks form a chain ending at the
rank that talks to the network. Reduction flows up and broadcast flows down at the same
time (pipelined), as one aggregate phase of 2(h + g - 1) steps for tree height h and g ranks
per node. With one rank per node, m = 2^k >= 4 nodes and per-rank bandwidth B, an inner node
sends four half-buffers (to its parent and two children in one tree, to its parent in the
other), so the uncongested time is 2 log2(m) a + 2 S / B.

Trees are built per rail (one per NIC channel), rail-aligned like the ring's channels.

The flows carry the tree's true byte counts, so with two or three nodes a tree moves fewer
bytes per NIC than a ring of all the ranks does. NCCL's tuner does not credit that: it rates a
tree's bandwidth at 0.92 (n-1)/n of the ring's, so real jobs run rings for large messages and
trees only where latency wins. ``auto`` selection follows NCCL here (see
:meth:`Tree.selection_ns`), because it must predict what NCCL will run.
Default calibration: the ring's efficiencies times 0.92 (0.74 / 0.86), the factor NCCL's own
tuning model (src/graph/tuning.cc) applies to tree all-reduce bandwidth; the reference data
has no tree measurement. Groups within one node do not use trees.
"""

from __future__ import annotations

from collections.abc import Mapping

from tracesim.network.collectives import Algorithm, Group, Phase, register

#: NCCL's tuner rates tree all-reduce bandwidth at 0.92 x its bus bandwidth, with
#: algbw = busbw / 2 (src/graph/tuning.cc); against a ring's algbw = busbw n / (2(n-1)) that
#: is 0.92 (n-1) / n of the ring's algorithm bandwidth.
NCCL_TREE_FACTOR = 0.92


def btree_parents(m: int) -> list[int]:
    """Parents of positions 0..m-1 in NCCL-style in-order binary tree (-1 for the root).

    Position p (1-based) with lowest set bit l has parent p+l or p-l (whichever has the
    next bit set); parents beyond m are skipped by climbing. The root is the largest power
    of two <= m; leaves are the odd positions.
    """
    if m <= 0:
        return []
    root = 1 << (m.bit_length() - 1)
    parents = []
    for p in range(1, m + 1):
        if p == root:
            parents.append(-1)
            continue
        q = p
        while True:
            low = q & -q
            q = q + low if not q & (low << 1) else q - low
            if q <= m:
                break
        parents.append(q - 1)
    return parents


def double_tree(m: int) -> tuple[list[int], list[int]]:
    """Parent lists (by node index) of the two trees of a double binary tree on m nodes."""
    t1 = btree_parents(m)
    if m % 2 == 0:
        pos = [m - 1 - i for i in range(m)]  # mirror
    else:
        pos = [(i + 1) % m for i in range(m)]  # shift
    inv = {p: i for i, p in enumerate(pos)}
    t2 = [(-1 if t1[pos[i]] < 0 else inv[t1[pos[i]]]) for i in range(m)]
    return t1, t2


def tree_height(parents: list[int]) -> int:
    """Longest root-to-leaf path (edges)."""
    best = 0
    for i in range(len(parents)):
        d, j = 0, i
        while parents[j] >= 0:
            j = parents[j]
            d += 1
        best = max(best, d)
    return best


@register(
    "tree",
    collectives=("all_reduce",),
    efficiency_intra=0.74,
    efficiency_inter=0.86,
    step_latency_us=0.0,
)
class Tree(Algorithm):
    relay_hops_in_flow = False

    def check(self, group: Group, collective: str) -> str | None:
        why = super().check(group, collective)
        if why:
            return why
        if group.single_node:
            return "tree applies to groups spanning nodes (within a node NCCL uses ring / NVLS)"
        return None

    def selection_ns(
        self, group: Group, fixed_ns: float, ns_per_byte: float, msg_bytes: float,
        others: Mapping[str, tuple[float, float]],
    ) -> float:
        """Isolated time, with the bandwidth term no better than NCCL's tuner rates it."""
        if "ring" in others and group.n > 1:
            ring_per_byte = others["ring"][1]
            ns_per_byte = max(ns_per_byte, ring_per_byte * group.n / (NCCL_TREE_FACTOR * (group.n - 1)))
        return fixed_ns + ns_per_byte * msg_bytes

    def phases(self, group: Group, collective: str) -> list[Phase]:
        if group.uniform:
            chans = group.channels()
            per = group.per_node
            m = len(group.nodes)
        else:  # no common shape: every rank is its own "node"
            chans = [(list(group.ranks), None)]
            per = 1
            m = group.n
        trees = double_tree(m)
        height = max(tree_height(t) for t in trees)
        ph = Phase(2 * (height + per - 1), 2 * height)
        w = 1.0 / (2 * len(chans))
        for order, rail in chans:
            seqs = [order[x * per : (x + 1) * per] for x in range(m)]
            for parents in trees:
                for seq in seqs:
                    for i in range(1, per):
                        ph.add(group.edge_route(seq[i], seq[i - 1], rail), w)
                        ph.add(group.edge_route(seq[i - 1], seq[i], rail), w)
                for x, p in enumerate(parents):
                    if p >= 0:
                        ph.add(group.edge_route(seqs[x][0], seqs[p][0], rail), w)
                        ph.add(group.edge_route(seqs[p][0], seqs[x][0], rail), w)
        return [ph]
