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
Default calibration: the ring's efficiencies times 0.92 (0.74 / 0.86), the factor NCCL's own
tuning model (src/graph/tuning.cc) applies to tree all-reduce bandwidth; the reference data
has no tree measurement. Groups within one node do not use trees.
"""

from __future__ import annotations

from tracesim.network.collectives import Algorithm, Group, Phase, register


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
    step_latency_us=0.5,
)
class Tree(Algorithm):
    def check(self, group: Group, collective: str) -> str | None:
        why = super().check(group, collective)
        if why:
            return why
        if group.single_node:
            return "tree applies to groups spanning nodes (within a node NCCL uses ring / NVLS)"
        return None

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
