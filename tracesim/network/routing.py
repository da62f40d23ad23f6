"""Routes between GPUs: shortest paths with deterministic ECMP hashing, rail-aligned.

* Same node: through the node's switch (``nvswitch`` / ``pcie``: GPU up-port, then the
  destination's down-port), over the direct link (``nvlink_mesh``), or along the shorter way
  round (``nvlink_ring``; ties go forward).
* Different nodes: source NIC -> leaf -> (spine -> (core -> spine ->)) leaf -> destination
  NIC, going only as high as the two leaves' lowest common level. Where several equal-cost
  uplinks exist, one is chosen by a fixed integer hash of (source GPU, destination GPU), as
  a switch hashing a flow's header would: deterministic, spread, and the same on every run
  (``routing: ecmp``). With adaptive routing (the default) the topology bundles those
  uplinks into one link, so there is nothing to choose.
* Rail alignment (``rail_optimized`` fabrics): traffic leaves the source node on the NIC of
  the destination's rail, relayed over NVLink to the GPU owning that NIC when needed (what
  NCCL's PXN does), so it never has to cross rails in the fabric. A caller (a ring channel)
  may also pin the rail explicitly.

Routes are numpy arrays of link ids, cached per (source, destination, rail).
"""

from __future__ import annotations

import numpy as np

from tracesim.network.topology import KIND_NIC, Topology

_MASK = (1 << 64) - 1


def ecmp_hash(*keys: int) -> int:
    """A deterministic 64-bit mix of integer keys (splitmix64 finaliser per key)."""
    x = 0x9E3779B97F4A7C15
    for k in keys:
        x = (x ^ (int(k) & _MASK)) & _MASK
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
        x ^= x >> 31
    return x


class Router:
    """Computes and caches routes on a :class:`Topology`."""

    def __init__(self, topology: Topology):
        self.topo = topology
        self._cache: dict[tuple[int, int, int], np.ndarray] = {}
        self._lat_cache: dict[tuple[int, int, int], float] = {}

    def route(self, src: int, dst: int, rail: int | None = None) -> np.ndarray:
        """Link ids from GPU ``src`` to GPU ``dst`` (empty when equal).

        ``rail`` pins the NIC index used on both nodes for inter-node traffic.
        """
        key = (src, dst, -1 if rail is None else rail)
        r = self._cache.get(key)
        if r is None:
            r = np.asarray(self._compute(src, dst, rail), dtype=np.int64)
            self._cache[key] = r
        return r

    def latency_ns(self, route: np.ndarray) -> float:
        """One-way latency of a route: the sum of its links' latencies."""
        return float(self.topo.latency_ns[route].sum()) if len(route) else 0.0

    def crosses_nic(self, route: np.ndarray) -> bool:
        """Whether a route leaves its node (then the inter-node efficiency applies)."""
        return bool(len(route)) and bool((self.topo.kind[route] == KIND_NIC).any())

    # ------------------------------------------------------------------ internals

    def _compute(self, src: int, dst: int, rail: int | None) -> list[int]:
        t = self.topo
        c = t.cluster
        n = c.gpus
        if not (0 <= src < n and 0 <= dst < n):
            raise ValueError(f"GPU out of range 0..{n - 1}: {src} -> {dst}")
        if src == dst:
            return []
        g = c.gpus_per_node
        if src // g == dst // g:
            return self._intra(src, dst)
        k = t.nics_per_node
        h = ecmp_hash(src, dst)
        if rail is not None:
            if not 0 <= rail < k:
                raise ValueError(f"rail {rail} out of range 0..{k - 1}")
            s_nic = (src // g) * k + rail
            d_nic = (dst // g) * k + rail
        else:
            d_nics = t.nics_of_gpu(dst)
            d_nic = d_nics[h % len(d_nics)]
            if t.rail_optimized:
                s_nic = (src // g) * k + d_nic % k
            else:
                s_nics = t.nics_of_gpu(src)
                s_nic = s_nics[(h >> 8) % len(s_nics)]
        path: list[int] = []
        relay = t.gpu_of_nic(s_nic)
        if s_nic not in t.nics_of_gpu(src):
            path += self._intra(src, relay)
        path.append(int(t.nic_up[s_nic]))
        path += self._fabric(int(t.leaf_of_nic[s_nic]), int(t.leaf_of_nic[d_nic]), h)
        path.append(int(t.nic_down[d_nic]))
        if d_nic not in t.nics_of_gpu(dst):
            path += self._intra(t.gpu_of_nic(d_nic), dst)
        return path

    def _intra(self, src: int, dst: int) -> list[int]:
        t = self.topo
        if src == dst:
            return []
        kind = t.cluster.intra_node.kind
        if kind in ("nvswitch", "pcie"):
            return [int(t.gpu_up[src]), int(t.gpu_down[dst])]
        g = t.cluster.gpus_per_node
        node, a = divmod(src, g)
        b = dst % g
        if kind == "nvlink_mesh":
            return [int(t.pair[node, a, b])]
        fwd = (b - a) % g
        step = 1 if fwd <= g - fwd else -1
        path = []
        while a != b:
            nxt = (a + step) % g
            path.append(int(t.pair[node, a, nxt]))
            a = nxt
        return path

    def _fabric(self, la: int, lb: int, h: int) -> list[int]:
        t = self.topo
        if la == lb or t.levels < 2:
            return []
        u = t.leaf_up.shape[1]  # 1 when adaptive routing bundles the uplinks
        j = h % u
        if t.levels == 2 or la // t.leaves_per_pod == lb // t.leaves_per_pod:
            return [int(t.leaf_up[la, j]), int(t.leaf_down[lb, j])]
        p = t.leaves_per_pod
        m = (h // u) % t.spine_up.shape[1]
        sa = (la // p) * u + j
        sb = (lb // p) * u + j
        return [int(t.leaf_up[la, j]), int(t.spine_up[sa, m]), int(t.spine_down[sb, m]),
                int(t.leaf_down[lb, j])]
