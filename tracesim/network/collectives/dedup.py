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
Group-limited routing (DeepSeek-V3: the 8 experts of a token from 4 of 8 groups;
``dedup:E:K:G:M``) narrows the parts a token reaches (:func:`kept_share`). Round-robin
routing (``dedup:E:K:rr``: NeMo AutoModel's ``FakeBalancedGate``, which gives a rank's token
``t`` the ``K`` consecutive experts from ``K t`` on, modulo ``E``) sends a token to the one or
two parts its block of experts spans (:func:`kept_share_round_robin`).

Calibration, on the kernels' own benchmarks (not on training runs):

* ``efficiency_intra`` 0.70: HybridEP's dispatch and combine kernels on GB200 with 32 SMs
  (Megatron-Bridge's ``moe_hybridep_num_sms``), 8-36 ranks of one NVL72 domain, 4096 tokens
  of 7168 BF16 values, top 8 of 8 experts per rank, uniform routing (deepseek-ai/DeepEP
  branch hybrid-ep, ``docs/README_Hybrid-EP.md``, "Kernel Only" columns): 764-632 GB/s
  dispatch and 737-597 GB/s combine of received tokens, the own rank's included
  (``tests/test_hybrid_ep.py``: ``dispatched_hidden.numel() * 2 / t``). Over NVLink that is
  ``(n - 1) / n`` of it on 900 GB/s per direction: 0.74-0.68 dispatch, 0.72-0.65 combine,
  mean 0.695. Below NCCL's 0.80 (``direct``): these kernels run on few SMs.
* ``efficiency_inter`` 0.81: the same kernels across 2-8 nodes of 8 H100 with 400 Gb/s
  NICs (50 GB/s), 16-64 ranks, 8 and 16 SMs, 8 experts per rank, "Kernel Only": 76.8-50.0
  GB/s dispatch and 68.0-49.8 combine of "IB" traffic, which counts a token once per node it
  reaches, its own node included (``count_rdma_send_from_routing_map``), so the NIC carries
  ``(N - 1) / N`` of it: 0.63-0.89 of 50 GB/s, mean 0.81 (NCCL's ring: 0.94).
* Checked against data not used above, DeepEP's kernels on H800 (NVLink 200 GB/s per
  direction, 400 Gb/s CX7 NICs), DeepSeek-V3 routing, 4096 tokens of 7168, FP8 dispatch
  (deepseek-ai/DeepEP ``docs/legacy.md``, counted as HybridEP counts): intranode, 8 ranks,
  153 GB/s dispatch and 158 combine, the model 160; internode, EP 32 58 / 57 GB/s and EP 64
  51 / 50, the model 54 and 46 (-5% to -9%); EP 16 43 / 43, the model 57.5 (+34%; the NVLink
  forwarding binds there, in the model at 140 GB/s and in the kernels sooner).

The HybridEP "Torch API" columns of the same tables are 24-35% below the kernels': that
call copies the received tokens out of the communication buffer into a new tensor
(``HybridEPBuffer::dispatch``), about a third of the kernel's time at every size; Megatron
calls ``dispatch_with_permute``, whose permutation reads the buffer instead (the template's
``moe.permute``). A group spread unevenly over nodes takes the plain ``direct`` all-to-all
(the model's fallback; the replay warns).
"""

from __future__ import annotations

import math

from tracesim.network.collectives import Algorithm, Group, Phase, register

NAME = "dedup"


def _miss(pool: float, taken: float, top_k: int) -> float:
    """Chance that ``top_k`` distinct experts drawn from ``pool`` avoid ``taken`` of them:
    C(pool - taken, K) / C(pool, K) as a product (``taken`` may be fractional)."""
    out = 1.0
    for i in range(top_k):
        out *= max(pool - taken - i, 0.0) / (pool - i)
    return out


def kept_share(experts: float, top_k: int, parts: float, groups: int = 1,
               group_topk: int = 1) -> float:
    """Share of a token's ``top_k`` routed copies left when copies to the same part (one of
    ``parts`` equal shares of ``experts``) are sent once (module docstring). With
    group-limited routing (``groups`` > 1) the token's experts come from ``group_topk`` of the
    ``groups`` equal expert groups: a part inside one group is missed when its group is not
    chosen or no expert falls in it; a part of ``c`` whole groups, summed over how many of
    them are chosen. Parts that neither lie inside a group nor hold whole groups are taken
    as without group limits."""
    if top_k <= 0:
        return 1.0
    per = experts / parts
    g_size = experts / groups if groups > 1 else 0.0
    pool = group_topk * g_size
    if groups > 1 and per <= g_size and g_size % per == 0:
        miss = 1.0 - group_topk / groups + group_topk / groups * _miss(pool, per, top_k)
    elif groups > 1 and per > g_size and per % g_size == 0:
        c = int(per // g_size)
        total = math.comb(groups, group_topk)
        miss = sum(math.comb(c, i) * math.comb(groups - c, group_topk - i) / total
                   * _miss(pool, i * g_size, top_k) for i in range(min(c, group_topk) + 1))
    else:
        miss = _miss(experts, per, top_k)
    return parts / top_k * (1.0 - miss)


def kept_share_round_robin(experts: int, top_k: int, parts: float) -> float:
    """:func:`kept_share` for round-robin routing: token ``t`` takes experts ``K t .. K t +
    K - 1`` (modulo ``E``); the distinct parts of each token, averaged over the routing's
    period of ``E / gcd(K, E)`` tokens, over ``K``."""
    per = experts / parts
    period = experts // math.gcd(top_k, experts)
    reached = sum(len({int(((t * top_k + j) % experts) // per) for j in range(top_k)})
                  for t in range(period))
    return reached / period / top_k


def algorithm_name(experts: int, top_k: int, groups: int = 0, group_topk: int = 0,
                   round_robin: bool = False) -> str:
    """The network algorithm of a deduplicated dispatch for ``experts`` routed top-``top_k``
    (``groups``, ``group_topk``: group-limited routing, 0 without; ``round_robin``: the
    round-robin routing of a balanced fake gate, which has no groups)."""
    if round_robin:
        return f"{NAME}:{experts}:{top_k}:rr"
    tail = f":{groups}:{group_topk}" if groups > 1 else ""
    return f"{NAME}:{experts}:{top_k}{tail}"


@register(
    NAME,
    collectives=("all_to_all",),
    efficiency_intra=0.70,
    efficiency_inter=0.81,
    step_latency_us=1.0,
    auto=(),
)
class Dedup(Algorithm):
    experts = 0
    top_k = 0
    groups = 1
    group_topk = 1
    round_robin = False

    def share(self, parts: float) -> float:
        """Share of a token's copies sent to ``parts`` equal parts of the experts."""
        if self.round_robin:
            return kept_share_round_robin(self.experts, self.top_k, parts)
        return kept_share(self.experts, self.top_k, parts, self.groups, self.group_topk)

    def check(self, group: Group, collective: str) -> str | None:
        why = super().check(group, collective)
        if why is None and self.top_k <= 0:
            why = f"{NAME} needs its routing in the name ({NAME}:EXPERTS:TOP_K)"
        if why is None and not group.single_node and not group.uniform:
            why = f"{NAME} needs the same local ranks on every node of the group"
        return why

    def phases(self, group: Group, collective: str) -> list[Phase]:
        n, nodes = group.n, len(group.nodes)
        f_rank, f_node = self.share(n), self.share(nodes)
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

    #: what ``with_args`` takes, for the error a bad variant gets
    args_help = ("dedup:E:K, dedup:E:K:G:M or dedup:E:K:rr, with 1 <= K <= E experts, G groups "
                 "dividing E and M <= G of them holding the top K")

    def with_args(self, args: str) -> Algorithm | None:
        """``dedup:E:K``, ``dedup:E:K:G:M`` or ``dedup:E:K:rr`` (``args`` after the first
        colon), None unless ``1 <= K <= E`` and the groups divide the experts and hold the
        top-k."""
        fields = args.split(":")
        rr = len(fields) == 3 and fields[2] == "rr"
        try:
            nums = [int(x) for x in (fields[:2] if rr else fields)]
        except ValueError:
            return None
        if len(nums) not in (2, 4):
            return None
        experts, top_k, groups, group_topk = (*nums, 1, 1)[:4]
        if experts < 1 or not 1 <= top_k <= experts or groups < 1 or experts % groups:
            return None
        if not 1 <= group_topk <= groups or top_k > group_topk * experts // groups:
            return None
        algo = Dedup()
        algo.name = algorithm_name(experts, top_k, groups, group_topk, rr)
        algo.experts, algo.top_k, algo.groups, algo.group_topk = experts, top_k, groups, group_topk
        algo.round_robin = rr
        return algo
