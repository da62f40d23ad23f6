"""Deduplicated all-to-all: MoE token dispatch and combine as DeepEP and HybridEP run them.

Megatron-Core's ``alltoall`` token dispatcher sends every routed copy of a token: a token
whose ``k`` experts sit on one rank crosses the wire ``k`` times. The flex dispatcher's
backends (DeepEP, HybridEP; ``--moe-flex-dispatcher-backend``) send a token once per
destination rank (DeepEP ``get_dispatch_layout``: ``is_token_in_rank``), and across nodes
once per destination node: the copy crosses the network to the GPU of the same local index
(the same rail) on that node, which forwards it over NVLink to the node's ranks that hold
its experts (DeepEP's "normal" kernels, NVLink and RDMA forwarding; deepseek-ai/DeepEP,
docs/legacy.md). Combine is the reverse (the forwarding GPU sums the node's partial
outputs before they cross back), so both directions load the links alike. A "node" is the
cluster spec's node: the NVLink domain (a GB200 NVL72 rack is one).

How much is left depends on the routing, so the algorithm is named with it:
``dedup:E:K`` for ``E`` routed experts and top-``K`` routing (the builder writes it on the
dispatch and combine tasks of ``--moe-dispatcher deepep`` / ``hybridep``). With the experts
spread evenly over ``P`` parts (ranks or nodes) and balanced routing (``K`` distinct experts
drawn uniformly: Megatron's forced load balancing), a token reaches on average
``P (1 - C(E - E/P, K) / C(E, K))`` distinct parts, so a share

    f(P) = P / K * (1 - C(E - E/P, K) / C(E, K))

of its ``K`` copies remains (Qwen3 30B-A3B, E 128, K 8 on EP 8: 0.67; on 4 nodes: 0.45).
The all-to-all's ``msg_bytes`` stays the ``K`` copies (the template's size, nccl-tests
convention). One phase, per byte of it, on a group of ``n`` ranks on ``N`` nodes of ``p``:

* rank to rank inside a node: ``f(n) / n`` (its own tokens) plus ``(N - 1) f(n) / n``
  forwarded for the ranks of the same local index on the other nodes;
* rank to the same local index on every other node: ``f(N) / N``.

Everything runs at once (DeepEP pipelines the forwarding with the network transfers).
Efficiencies: the spec's ``direct`` ones (the same links; no separate calibration), step
latency as ``direct``. Kernel-level check: DeepEP's normal kernels reach 43-58 GB/s of
deduplicated RDMA traffic per H800 on 400 Gb/s CX7 NICs (50 GB/s) at EP 16-64 (docs/
legacy.md), i.e. the NIC's rate, which this phase gives (0.94 x 50 GB/s). A group spread
unevenly over nodes takes the plain ``direct`` all-to-all (the model's fallback).
"""

from __future__ import annotations

from tracesim.network.collectives import Algorithm, Group, Phase, register

NAME = "dedup"


def kept_share(experts: float, top_k: int, parts: float) -> float:
    """Share of a token's ``top_k`` routed copies left when copies to the same part (one of
    ``parts`` equal shares of ``experts``) are sent once (module docstring)."""
    if top_k <= 0:
        return 1.0
    per = experts / parts
    miss = 1.0
    for i in range(top_k):  # C(E - E/P, K) / C(E, K) as a product (E/P may be fractional)
        miss *= max(experts - per - i, 0.0) / (experts - i)
    return parts / top_k * (1.0 - miss)


def algorithm_name(experts: int, top_k: int) -> str:
    """The network algorithm of a deduplicated dispatch for ``experts`` routed top-``top_k``."""
    return f"{NAME}:{experts}:{top_k}"


@register(
    NAME,
    collectives=("all_to_all",),
    efficiency_intra=0.80,
    efficiency_inter=0.94,
    step_latency_us=1.0,
    auto=(),
)
class Dedup(Algorithm):
    efficiency_as = "direct"
    experts = 0
    top_k = 0

    def check(self, group: Group, collective: str) -> str | None:
        why = super().check(group, collective)
        if why is None and self.top_k <= 0:
            why = f"{NAME} needs its routing in the name ({NAME}:EXPERTS:TOP_K)"
        if why is None and not group.single_node and not group.uniform:
            why = f"{NAME} needs the same local ranks on every node of the group"
        return why

    def phases(self, group: Group, collective: str) -> list[Phase]:
        n, nodes = group.n, len(group.nodes)
        f_rank = kept_share(self.experts, self.top_k, n)
        f_node = kept_share(self.experts, self.top_k, nodes)
        ph = Phase(1, 0 if group.single_node else 1)
        for rs in group.by_node:
            for a in rs:
                for b in rs:
                    if a != b:
                        ph.add(group.route(a, b), nodes * f_rank / n)
        g = group.topo.cluster.gpus_per_node
        for i, rs in enumerate(group.by_node):
            for j, peers in enumerate(group.by_node):
                if i == j:
                    continue
                peer_of = {r % g: r for r in peers}
                for a in rs:
                    ph.add(group.route(a, peer_of[a % g]), f_node / nodes)
        return [ph]


    def with_args(self, args: str) -> Algorithm | None:
        """``dedup:E:K`` (``args`` = ``E:K``), None unless ``1 <= K <= E``."""
        try:
            experts, top_k = (int(x) for x in args.split(":"))
        except ValueError:
            return None
        if experts < 1 or not 1 <= top_k <= experts:
            return None
        algo = Dedup()
        algo.name, algo.experts, algo.top_k = algorithm_name(experts, top_k), experts, top_k
        return algo

