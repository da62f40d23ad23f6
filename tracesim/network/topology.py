"""The cluster as a graph of directed links with capacities and latencies.

Vertices: GPUs, one NVSwitch (or PCIe switch) per node, NICs, leaf / spine / core switches.
Every physical connection is two directed links (one per direction), each with its own
capacity (bytes/ns, numerically GB/s) and latency (ns). Links live in numpy arrays indexed
by link id; structural index arrays (``gpu_up``, ``nic_up``, ``leaf_up``, ...) give the link
ids a router needs, so routes are computed arithmetically instead of by graph search, while
:meth:`Topology.to_networkx` exports the same graph for inspection and for checking that the
routes are shortest paths.

Fabric construction (``inter_node``), with D = ``nics_per_leaf`` and o = ``oversubscription``:

* a leaf has D NIC ports and U = ceil(D / o) uplinks of ``D * nic / (o * U)`` each, so its
  uplink capacity is exactly its NIC capacity over o;
* ``fat_tree`` / ``spine_leaf``: NICs fill leaves in order (a node's NICs are consecutive);
  ``rail_optimized``: the leaf of NIC r of node n is ``(n // D) * nics_per_node + r`` (a
  scalable unit of D nodes has one leaf per rail);
* ``levels: 1``: one switch (``rail_optimized``: one switch per rail); ``levels: 2``: spine j
  joins uplink j of every leaf; ``levels: 3``: pods of D leaves with U spines each (spine j
  of a pod joins uplink j of the pod's leaves), spines have D uplinks, core (j, m) joins
  uplink m of spine j of every pod (a folded Clos, non-blocking above the leaves);
* ``routing: adaptive`` (the default) bundles parallel equal-cost links: a leaf's U uplinks
  become one link of their total capacity to one spine vertex (per pod with three levels,
  whose spines' uplinks likewise become one link to one core vertex). Adaptive routing
  (InfiniBand's, which NCCL enables) or packet spraying spreads every flow over all the
  uplinks, so they act as one pipe and no flow is stuck behind a hash collision.
  ``routing: ecmp`` keeps every uplink and spine and pins each flow to one by a hash.

Degraded and failed links (a cluster's ``degraded_links``) and steady background loads
scale ``capacity`` and clear ``alive`` (:mod:`tracesim.network.faults`).

GPU to NIC attachment: with k NICs and g GPUs per node, GPU a owns NICs
``[a*k/g, (a+1)*k/g)`` when k >= g, else shares NIC ``a // (g/k)``. The PCIe hop between a
GPU and its NIC is not a capacity constraint (the NIC port is).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracesim.network.faults import apply_fabric
from tracesim.specs.cluster import ClusterSpec

#: link kinds
KIND_INTRA = 0  # NVLink / NVSwitch port / PCIe switch port inside a node
KIND_NIC = 1  # NIC <-> leaf switch
KIND_FABRIC = 2  # switch <-> switch
KIND_NAMES = ("intra", "nic", "fabric")


class Topology:
    """Directed links of a cluster and the index arrays that locate them.

    Attributes (all numpy arrays indexed by link id unless said otherwise):
        capacity: bytes/ns (== GB/s). latency_ns: float ns. kind: KIND_* codes.
        src, dst: vertex ids; ``vertex_name(v)`` names them.
        gpu_up[g], gpu_down[g]: GPU g's port to / from its node's switch (nvswitch, pcie).
        pair[node, a, b]: direct link local GPU a -> b (nvlink_mesh, nvlink_ring), -1 if none.
        nic_up[i], nic_down[i]: NIC i's port to / from its leaf.
        leaf_of_nic[i]; leaf_up[l, j], leaf_down[l, j]; spine_up[s, m], spine_down[s, m]
        (one column each when ``bundled``: adaptive routing, see the module docstring).
        uplinks: physical uplinks per leaf.
        alive: False for a failed link (no route crosses it); healthy_capacity: before faults.
    """

    def __init__(self, cluster: ClusterSpec):
        self._nics: dict[int, tuple[int, ...]] = {}  # nics_of_gpu, per GPU asked
        self.cluster = cluster
        c = cluster
        g = c.gpus_per_node
        n_gpu = c.gpus
        self.n_gpus = n_gpu
        src: list[int] = []
        dst: list[int] = []
        cap: list[float] = []
        lat: list[float] = []
        kind: list[int] = []
        self._vertex_kinds: list[tuple[str, int, int]] = [("gpu", 0, n_gpu)]
        n_vert = n_gpu

        def add(s: int, d: int, capacity: float, latency_ns: float, k: int) -> int:
            src.append(s)
            dst.append(d)
            cap.append(capacity)
            lat.append(latency_ns)
            kind.append(k)
            return len(src) - 1

        intra = c.intra_node
        bw = intra.bandwidth_GBps
        ilat = intra.latency_us * 1000.0
        self.gpu_up = np.full(n_gpu, -1, dtype=np.int64)
        self.gpu_down = np.full(n_gpu, -1, dtype=np.int64)
        self.pair = np.full((c.nodes, g, g), -1, dtype=np.int64)
        self.switch_vertex0 = n_vert
        if g > 1 and intra.kind in ("nvswitch", "pcie"):
            self._vertex_kinds.append(("nvswitch" if intra.kind == "nvswitch" else "pcie", n_vert, c.nodes))
            for gpu in range(n_gpu):
                sw = n_vert + gpu // g
                self.gpu_up[gpu] = add(gpu, sw, bw, ilat / 2, KIND_INTRA)
                self.gpu_down[gpu] = add(sw, gpu, bw, ilat / 2, KIND_INTRA)
            n_vert += c.nodes
        elif g > 1 and intra.kind == "nvlink_mesh":
            per = bw / (g - 1)
            for node in range(c.nodes):
                for a in range(g):
                    for b in range(g):
                        if a != b:
                            self.pair[node, a, b] = add(node * g + a, node * g + b, per, ilat, KIND_INTRA)
        elif g > 1 and intra.kind == "nvlink_ring":
            per = bw if g == 2 else bw / 2
            for node in range(c.nodes):
                for a in range(g):
                    for b in {(a + 1) % g, (a - 1) % g}:
                        if a != b and self.pair[node, a, b] < 0:
                            self.pair[node, a, b] = add(node * g + a, node * g + b, per, ilat, KIND_INTRA)

        inter = c.inter_node
        self.nics_per_node = inter.nics_per_node if inter else 0
        k = self.nics_per_node
        n_nic = c.nodes * k
        self.nic_up = np.full(n_nic, -1, dtype=np.int64)
        self.nic_down = np.full(n_nic, -1, dtype=np.int64)
        self.leaf_of_nic = np.full(n_nic, -1, dtype=np.int64)
        self.leaf_up = np.zeros((0, 0), dtype=np.int64)
        self.leaf_down = np.zeros((0, 0), dtype=np.int64)
        self.spine_up = np.zeros((0, 0), dtype=np.int64)
        self.spine_down = np.zeros((0, 0), dtype=np.int64)
        self.levels = 0
        self.uplinks = 0  # physical uplinks per leaf (leaf_up has 1 column when bundled)
        self.bundled = False
        self.leaves_per_pod = 1
        self.n_leaves = 0
        self.rail_optimized = False
        if inter is not None and c.nodes > 1:
            self._build_fabric(c, add, n_vert)
        elif inter is not None:
            # a single node: NICs exist but lead nowhere we simulate
            pass
        self.src = np.asarray(src, dtype=np.int64)
        self.dst = np.asarray(dst, dtype=np.int64)
        self.capacity = np.asarray(cap, dtype=np.float64)
        self.latency_ns = np.asarray(lat, dtype=np.float64)
        self.kind = np.asarray(kind, dtype=np.int8)
        #: capacities before degraded links and steady loads; False: a failed link
        self.healthy_capacity = self.capacity
        self.alive = np.ones(len(self.capacity), dtype=bool)
        apply_fabric(self)

    # ------------------------------------------------------------------ fabric

    def _build_fabric(self, c: ClusterSpec, add: Any, n_vert: int) -> None:
        inter = c.inter_node
        assert inter is not None
        k = inter.nics_per_node
        n_nic = c.nodes * k
        nic_bw = inter.nic_GBps
        half = inter.latency_us * 1000.0 / 2
        hop = inter.switch_latency_us * 1000.0
        d_ports = inter.nics_per_leaf
        self.levels = inter.levels
        self.rail_optimized = inter.topology == "rail_optimized"
        nic_v0 = n_vert
        self._vertex_kinds.append(("nic", nic_v0, n_nic))
        n_vert += n_nic
        nic = np.arange(n_nic)
        node, rail = nic // k, nic % k
        if self.rail_optimized:
            leaf = rail if self.levels == 1 else (node // d_ports) * k + rail
        else:
            leaf = np.zeros(n_nic, dtype=np.int64) if self.levels == 1 else nic // d_ports
        self.leaf_of_nic = leaf.astype(np.int64)
        self.n_leaves = int(leaf.max()) + 1
        leaf_v0 = n_vert
        self._vertex_kinds.append(("leaf", leaf_v0, self.n_leaves))
        n_vert += self.n_leaves
        for i in range(n_nic):
            self.nic_up[i] = add(nic_v0 + i, leaf_v0 + int(leaf[i]), nic_bw, half, KIND_NIC)
            self.nic_down[i] = add(leaf_v0 + int(leaf[i]), nic_v0 + i, nic_bw, half, KIND_NIC)
        if self.levels < 2:
            return
        phys = max(1, math.ceil(d_ports / inter.oversubscription - 1e-9))
        self.uplinks = phys
        self.bundled = inter.routing == "adaptive"
        u = 1 if self.bundled else phys  # uplinks modelled per leaf (spines per pod)
        up_bw = d_ports * nic_bw / (inter.oversubscription * u)
        n_leaf = self.n_leaves
        self.leaf_up = np.full((n_leaf, u), -1, dtype=np.int64)
        self.leaf_down = np.full((n_leaf, u), -1, dtype=np.int64)
        if self.levels == 2:
            self.leaves_per_pod = n_leaf
            spine_v0 = n_vert
            self._vertex_kinds.append(("spine", spine_v0, u))
            n_vert += u
            for lf in range(n_leaf):
                for j in range(u):
                    self.leaf_up[lf, j] = add(leaf_v0 + lf, spine_v0 + j, up_bw, hop, KIND_FABRIC)
                    self.leaf_down[lf, j] = add(spine_v0 + j, leaf_v0 + lf, up_bw, hop, KIND_FABRIC)
            return
        p = d_ports
        self.leaves_per_pod = p
        pm = 1 if self.bundled else p  # spine uplinks modelled per spine
        core_bw = up_bw * p / pm
        n_pods = math.ceil(n_leaf / p)
        n_spine = n_pods * u
        spine_v0 = n_vert
        self._vertex_kinds.append(("spine", spine_v0, n_spine))
        n_vert += n_spine
        core_v0 = n_vert
        self._vertex_kinds.append(("core", core_v0, u * pm))
        n_vert += u * pm
        for lf in range(n_leaf):
            pod = lf // p
            for j in range(u):
                sv = spine_v0 + pod * u + j
                self.leaf_up[lf, j] = add(leaf_v0 + lf, sv, up_bw, hop, KIND_FABRIC)
                self.leaf_down[lf, j] = add(sv, leaf_v0 + lf, up_bw, hop, KIND_FABRIC)
        self.spine_up = np.full((n_spine, pm), -1, dtype=np.int64)
        self.spine_down = np.full((n_spine, pm), -1, dtype=np.int64)
        for s in range(n_spine):
            j = s % u
            for m in range(pm):
                cv = core_v0 + j * pm + m
                self.spine_up[s, m] = add(spine_v0 + s, cv, core_bw, hop, KIND_FABRIC)
                self.spine_down[s, m] = add(cv, spine_v0 + s, core_bw, hop, KIND_FABRIC)

    # ------------------------------------------------------------------ queries

    @property
    def n_links(self) -> int:
        return len(self.capacity)

    def nics_of_gpu(self, gpu: int) -> tuple[int, ...]:
        """Global ids of the NICs GPU ``gpu`` is attached to (empty on a single node)."""
        got = self._nics.get(gpu)
        if got is None:
            got = self._nics[gpu] = self._attached_nics(gpu)
        return got

    def _attached_nics(self, gpu: int) -> tuple[int, ...]:
        c = self.cluster
        k, g = self.nics_per_node, c.gpus_per_node
        if k == 0 or c.inter_node is None or c.nodes == 1:
            return ()
        node, a = divmod(gpu, g)
        if k >= g:
            per = k // g
            return tuple(node * k + a * per + i for i in range(per))
        return (node * k + a // (g // k),)

    def gpu_of_nic(self, nic: int) -> int:
        """The first GPU attached to NIC ``nic`` (the relay for rail-aligned traffic)."""
        c = self.cluster
        k, g = self.nics_per_node, c.gpus_per_node
        node, r = divmod(nic, k)
        a = r // (k // g) if k >= g else r * (g // k)
        return node * g + a

    def rail_of_gpu(self, gpu: int) -> int:
        """The local index of GPU ``gpu``'s first NIC (its rail)."""
        nics = self.nics_of_gpu(gpu)
        return nics[0] % self.nics_per_node if nics else 0

    def vertex_name(self, v: int) -> str:
        for name, v0, count in self._vertex_kinds:
            if v0 <= v < v0 + count:
                return f"{name}{v - v0}"
        raise IndexError(v)

    def link_name(self, link: int) -> str:
        return f"{self.vertex_name(int(self.src[link]))}->{self.vertex_name(int(self.dst[link]))}"

    def to_networkx(self) -> Any:
        """The topology as a ``networkx.DiGraph``: vertex names, one edge per link.

        Edge attributes: ``link`` (id), ``capacity_GBps``, ``latency_us``, ``kind``. GPU-NIC
        attachments appear as edges of kind ``pcie`` with ``link`` -1 (not a constraint).
        """
        import networkx as nx

        graph = nx.DiGraph()
        for name, v0, count in self._vertex_kinds:
            for i in range(count):
                graph.add_node(f"{name}{i}", kind=name, index=i, vertex=v0 + i)
        for lk in range(self.n_links):
            graph.add_edge(
                self.vertex_name(int(self.src[lk])),
                self.vertex_name(int(self.dst[lk])),
                link=lk,
                capacity_GBps=float(self.capacity[lk]),
                latency_us=float(self.latency_ns[lk]) / 1000.0,
                kind=KIND_NAMES[int(self.kind[lk])],
            )
        if len(self.nic_up) and self.nic_up[0] >= 0:
            for gpu in range(self.n_gpus):
                for nic in self.nics_of_gpu(gpu):
                    for a, b in ((f"gpu{gpu}", f"nic{nic}"), (f"nic{nic}", f"gpu{gpu}")):
                        graph.add_edge(a, b, link=-1, capacity_GBps=float("inf"),
                                       latency_us=0.0, kind="pcie")
        return graph
