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
  may also pin the rail explicitly, or ask for each end's own NIC (:data:`OWN_NICS`: the
  ring channels of a full-mesh node, which leave a node from the GPU that ends the channel's
  path there and enter the next at the GPU that starts it, as RCCL's rings do).

* Failed links (a cluster's ``degraded_links`` at factor 0) are routed around: the ECMP
  hash picks among the uplinks / spines left; a failed NIC's traffic leaves on the next
  rail's NIC of the node (over NVLink to the GPU owning it, as PXN); a failed NVLink of a
  mesh or ring takes the fewest-hop detour through other GPUs. Where nothing is left
  (a GPU's only NVSwitch port, every uplink of a leaf), routing raises an InputError.

Routes are numpy arrays of link ids, cached per (source, destination, rail).
"""

from __future__ import annotations

import numpy as np

from tracesim.errors import InputError
from tracesim.network.topology import KIND_INTRA, KIND_NIC, Topology

_MASK = (1 << 64) - 1
#: ``rail`` value of :meth:`Router.route`: leave on the source GPU's own NIC and arrive on the
#: destination GPU's own NIC (no relay; the two may be on different rails)
OWN_NICS = -1


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
        #: some link failed: routes avoid the links that are not ``topology.alive``
        self.faulted = not bool(topology.alive.all())
        self._lat_cache: dict[tuple[int, int, int], float] = {}

    def route(self, src: int, dst: int, rail: int | None = None) -> np.ndarray:
        """Link ids from GPU ``src`` to GPU ``dst`` (empty when equal).

        ``rail`` pins the NIC index used on both nodes for inter-node traffic;
        :data:`OWN_NICS` takes each GPU's own (first) NIC.
        """
        key = (src, dst, -2 if rail is None else rail)
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

    def without_relay_hops(self, route: np.ndarray) -> np.ndarray:
        """A node-crossing route without its NVLink hops (the PXN relays to and from the
        rail's NIC: such a route has no other intra-node links); see
        :class:`~tracesim.network.compiler.Compiler` ``relay_hops``."""
        return route[self.topo.kind[route] != KIND_INTRA]

    def routes_without_relay_hops(self, e_ptr: np.ndarray, e_link: np.ndarray,
                                  inter: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`without_relay_hops` of the routes (CSR, as :meth:`routes_facts`) that
        ``inter`` marks as crossing a NIC; the others as they are."""
        lens = np.diff(e_ptr)
        keep = ~(np.repeat(inter, lens) & (self.topo.kind[e_link] == KIND_INTRA))
        if keep.all():
            return e_ptr, e_link
        owner = np.repeat(np.arange(len(lens)), lens)
        out_ptr = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner[keep], minlength=len(lens)), out=out_ptr[1:])
        return out_ptr, e_link[keep]

    def routes_facts(self, e_ptr: np.ndarray, e_link: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`crosses_nic` and :meth:`latency_ns` of many routes at once (CSR: route
        ``i`` is ``e_link[e_ptr[i]:e_ptr[i + 1]]``): a bool and a float array."""
        n = len(e_ptr) - 1
        inter = np.zeros(n, dtype=bool)
        lats = np.zeros(n)
        nz = e_ptr[1:] > e_ptr[:-1]
        if nz.any():
            starts = e_ptr[:-1][nz]
            inter[nz] = np.logical_or.reduceat(self.topo.kind[e_link] == KIND_NIC, starts)
            lats[nz] = np.add.reduceat(self.topo.latency_ns[e_link], starts)
        return inter, lats

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
        if rail == OWN_NICS and t.nics_of_gpu(src) and t.nics_of_gpu(dst):
            s_nic, d_nic = t.nics_of_gpu(src)[0], t.nics_of_gpu(dst)[0]
        elif rail is not None and rail != OWN_NICS:
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
        if self.faulted:
            s_nic, d_nic = self._live_nics(src, dst, s_nic, d_nic)
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

    def _live_nics(self, src: int, dst: int, s_nic: int, d_nic: int) -> tuple[int, int]:
        """NICs in place of failed ones, on the same nodes: the next rails in order (the
        traffic reaches the NIC over NVLink, as NCCL's PXN does); on a rail-optimised
        fabric both ends move to the same rail, so the traffic stays on one rail."""
        t = self.topo
        k, alive = t.nics_per_node, t.alive
        if alive[t.nic_up[s_nic]] and alive[t.nic_down[d_nic]]:
            return s_nic, d_nic
        s0, d0 = s_nic - s_nic % k, d_nic - d_nic % k
        if t.rail_optimized:
            for i in range(k):
                r = (s_nic + i) % k
                if alive[t.nic_up[s0 + r]] and alive[t.nic_down[d0 + r]]:
                    return s0 + r, d0 + r
        else:
            s_ok = [s0 + (s_nic + i) % k for i in range(k) if alive[t.nic_up[s0 + (s_nic + i) % k]]]
            d_ok = [d0 + (d_nic + i) % k for i in range(k) if alive[t.nic_down[d0 + (d_nic + i) % k]]]
            if s_ok and d_ok:
                return s_ok[0], d_ok[0]
        raise self._no_path(src, dst, "every NIC pair between their nodes has a failed NIC")

    def _no_path(self, src: int, dst: int, why: str) -> InputError:
        return InputError(f"no path from gpu{src} to gpu{dst} on cluster {self.topo.cluster.name}: "
                          f"{why}", "--degrade-link")

    def _intra(self, src: int, dst: int) -> list[int]:
        path = self._intra_default(src, dst)
        if self.faulted and not self.topo.alive[path].all():
            return self._intra_detour(src, dst)
        return path

    def _intra_detour(self, src: int, dst: int) -> list[int]:
        """The fewest-hop path over the node's live links (breadth first, lowest GPU first)."""
        t = self.topo
        if t.cluster.intra_node.kind in ("nvswitch", "pcie"):
            raise self._no_path(src, dst, "a failed port on the node's switch")
        g = t.cluster.gpus_per_node
        node = src // g
        prev = {src % g: -1}
        frontier = [src % g]
        while frontier and dst % g not in prev:
            nxt = []
            for a in frontier:
                for b in range(g):
                    lk = t.pair[node, a, b]
                    if lk >= 0 and t.alive[lk] and b not in prev:
                        prev[b] = a
                        nxt.append(b)
            frontier = nxt
        if dst % g not in prev:
            raise self._no_path(src, dst, "failed NVLinks cut them apart")
        hops, b = [], dst % g
        while prev[b] >= 0:
            hops.append(int(t.pair[node, prev[b], b]))
            b = prev[b]
        return hops[::-1]

    def _intra_default(self, src: int, dst: int) -> list[int]:
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
        one_pod = t.levels == 2 or la // t.leaves_per_pod == lb // t.leaves_per_pod
        if self.faulted:
            return self._fabric_live(la, lb, h, one_pod)
        j = h % u
        if one_pod:
            return [int(t.leaf_up[la, j]), int(t.leaf_down[lb, j])]
        p = t.leaves_per_pod
        m = (h // u) % t.spine_up.shape[1]
        sa = (la // p) * u + j
        sb = (lb // p) * u + j
        return [int(t.leaf_up[la, j]), int(t.spine_up[sa, m]), int(t.spine_down[sb, m]),
                int(t.leaf_down[lb, j])]

    def _fabric_live(self, la: int, lb: int, h: int, one_pod: bool) -> list[int]:
        """:meth:`_fabric` over live links only: the hash picks among the equal-cost choices
        that are left (a switch drops a failed member from its ECMP group); with every link
        alive it picks what :meth:`_fabric` does."""
        t = self.topo
        alive, u, p = t.alive, t.leaf_up.shape[1], t.leaves_per_pod
        options: list[list[int]] = []
        for j in range(u):
            up, down = int(t.leaf_up[la, j]), int(t.leaf_down[lb, j])
            if one_pod:
                options.append([up, down])
                continue
            pm = t.spine_up.shape[1]
            sa, sb = (la // p) * u + j, (lb // p) * u + j
            options += [[up, int(t.spine_up[sa, m]), int(t.spine_down[sb, m]), down]
                        for m in range(pm)]
        live = [o for o in options if alive[o].all()]
        if not live:
            raise InputError(f"no path from leaf{la} to leaf{lb} on cluster {t.cluster.name}: "
                             "their uplinks or spines failed", "--degrade-link")
        if len(live) == len(options):  # as the healthy fabric: j = h % u, m = (h // u) % pm
            j = h % u
            return options[j] if one_pod else options[j * t.spine_up.shape[1] + (h // u) % t.spine_up.shape[1]]
        return live[h % len(live)]
