"""Degraded and failed links, and steady background loads, on a :class:`Topology`.

A cluster spec's ``degraded_links`` and ``load`` background entries
(:mod:`tracesim.specs.fabric`) name physical links. A physical link is one modelled link, or
one member of a bundle: with adaptive routing a leaf's U uplinks are one link of U times the
capacity (:mod:`tracesim.network.topology`), so uplink J of that leaf is member J of U, and
degrading it by a factor f takes (1 - f) / U of the bundle away (adaptive routing spreads
the flows over what is left). A link named twice takes the smaller factor.

* capacity: healthy capacity x (1 - sum over members of (1 - f_member) / members); a steady
  load of fraction F (constant-rate traffic, which takes its share whatever the job does)
  multiplies what is left of its links by 1 - F;
* ``alive``: False for a link with nothing left (a failed link, or a bundle whose members all
  failed); routes avoid it (:mod:`tracesim.network.routing`), and its capacity entry keeps
  the healthy value so that the flow model's capacities stay positive (no flow crosses it).
"""

from __future__ import annotations

import re
from typing import Protocol

import numpy as np

from tracesim.errors import InputError
from tracesim.specs.cluster import ClusterSpec
from tracesim.specs.fabric import LINK_FORMS


class Fabric(Protocol):
    """What this module reads and changes of a :class:`tracesim.network.topology.Topology`
    (that module applies the cluster's faults while building one, so it imports this one)."""

    cluster: ClusterSpec
    capacity: np.ndarray
    healthy_capacity: np.ndarray
    alive: np.ndarray
    kind: np.ndarray
    n_gpus: int
    gpu_up: np.ndarray
    gpu_down: np.ndarray
    pair: np.ndarray
    nics_per_node: int
    nic_up: np.ndarray
    nic_down: np.ndarray
    leaf_up: np.ndarray
    leaf_down: np.ndarray
    spine_up: np.ndarray
    spine_down: np.ndarray
    levels: int
    uplinks: int
    bundled: bool
    leaves_per_pod: int
    n_leaves: int

    def nics_of_gpu(self, gpu: int) -> tuple[int, ...]: ...

#: (link id, member index, members of the link)
Member = tuple[int, int, int]
FLAG = "--degrade-link"


def apply_fabric(topo: Fabric) -> None:
    """Set ``topo.capacity`` and ``topo.alive`` from its cluster's degraded links and steady
    loads (module docstring); ``topo.healthy_capacity`` keeps the healthy values."""
    c = topo.cluster
    healthy = topo.capacity
    topo.healthy_capacity = healthy
    topo.alive = np.ones(len(healthy), dtype=bool)
    loads = [b for b in c.background if b.is_load]
    if not c.degraded_links and not loads:
        return
    member_f: dict[tuple[int, int], float] = {}
    n_members: dict[int, int] = {}

    def put(members: list[Member], f: float, combine: str) -> None:
        for lk, m, n in members:
            key = (lk, m)
            old = member_f.get(key, 1.0)
            member_f[key] = min(old, f) if combine == "min" else old * f
            n_members[lk] = n

    for fault in c.degraded_links:
        put(link_members(topo, fault.link, FLAG), fault.factor, "min")
    tiers = []
    for b in loads:
        if len(b.on) == 1 and b.on[0] in TIER_KINDS:
            tiers.append(b)
        else:
            for name in b.on:
                put(link_members(topo, name, "--background"), 1.0 - b.fraction, "mul")
    scale = np.ones(len(healthy))
    for (lk, _m), f in sorted(member_f.items()):
        scale[lk] -= (1.0 - f) / n_members[lk]
    for b in tiers:
        scale[topo.kind == TIER_KINDS[b.on[0]]] *= 1.0 - b.fraction
    alive = scale > 1e-9
    topo.alive = alive
    topo.capacity = healthy * np.where(alive, scale, 1.0)


#: a steady load's tiers -> link kinds (tracesim.network.topology KIND_*)
TIER_KINDS = {"intra": 0, "nic": 1, "fabric": 2}


def link_members(topo: Fabric, name: str, flag: str = FLAG) -> list[Member]:
    """The modelled links (both directions) and bundle members a link name stands for;
    InputError naming ``flag`` and the names this cluster has, if it has no such link."""
    m = re.fullmatch(r"gpu(\d+)-gpu(\d+)|gpu(\d+)|nic(\d+)|leaf(\d+)\.up(\d*)|spine(\d+)(\.up(\d*))?",
                     name)
    out: list[Member] = []
    if m is not None:
        g = m.groups()
        if g[0] is not None:
            out = _pair(topo, int(g[0]), int(g[1]))
        elif g[2] is not None:
            out = _gpu(topo, int(g[2]))
        elif g[3] is not None:
            out = _nic(topo, int(g[3]))
        elif g[4] is not None:
            out = _leaf_up(topo, int(g[4]), None if g[5] == "" else int(g[5]))
        else:
            s = int(g[6])
            if g[7] is None:
                out = _spine(topo, s)
            else:
                out = _spine_up(topo, s, None if g[8] == "" else int(g[8]))
    if not out:
        raise InputError(f"no link {name!r} on cluster {topo.cluster.name}; its links: "
                         f"{valid_names(topo)}", flag)
    return out


def valid_names(topo: Fabric) -> str:
    """The link names of a topology, as ranges (for error messages and docs)."""
    names = []
    c = topo.cluster
    if (topo.gpu_up >= 0).any() or (topo.pair >= 0).any():
        names.append(f"gpu0..gpu{topo.n_gpus - 1}")
        if (topo.pair >= 0).any():
            names.append("gpuA-gpuB (same node)")
    if len(topo.nic_up) and topo.nic_up[0] >= 0:
        names.append(f"nic0..nic{len(topo.nic_up) - 1} ({topo.nics_per_node} per node)")
    if topo.levels >= 2:
        names.append(f"leaf0..leaf{topo.n_leaves - 1} .up or .up0...up{topo.uplinks - 1}")
        n_spines = topo.uplinks * (1 if topo.levels == 2 else -(-topo.n_leaves // topo.leaves_per_pod))
        names.append(f"spine0..spine{n_spines - 1}")
        if topo.levels == 3:
            names.append(f"spineS.up or .up0...up{topo.leaves_per_pod - 1}")
    if not names:
        return f"none ({c.name} has one GPU per node and one node)"
    return ", ".join(names) + f" (forms: {LINK_FORMS})"


def _both(up: int, down: int, m: int = 0, n: int = 1) -> list[Member]:
    return [(int(up), m, n), (int(down), m, n)]


def _gpu(topo: Fabric, gpu: int) -> list[Member]:
    if not 0 <= gpu < topo.n_gpus:
        return []
    if topo.gpu_up[gpu] >= 0:
        return _both(topo.gpu_up[gpu], topo.gpu_down[gpu])
    g = topo.cluster.gpus_per_node
    node, a = divmod(gpu, g)
    row, col = topo.pair[node, a], topo.pair[node, :, a]
    return [(int(x), 0, 1) for x in np.r_[row[row >= 0], col[col >= 0]]]


def _pair(topo: Fabric, a: int, b: int) -> list[Member]:
    g = topo.cluster.gpus_per_node
    if not (0 <= a < topo.n_gpus and 0 <= b < topo.n_gpus) or a // g != b // g or a == b:
        return []
    node = a // g
    ab, ba = topo.pair[node, a % g, b % g], topo.pair[node, b % g, a % g]
    return [(int(x), 0, 1) for x in (ab, ba) if x >= 0]


def _nic(topo: Fabric, nic: int) -> list[Member]:
    if not 0 <= nic < len(topo.nic_up) or topo.nic_up[nic] < 0:
        return []
    return _both(topo.nic_up[nic], topo.nic_down[nic])


def _leaf_up(topo: Fabric, leaf: int, j: int | None) -> list[Member]:
    u = topo.uplinks
    if topo.levels < 2 or not 0 <= leaf < topo.n_leaves or (j is not None and not 0 <= j < u):
        return []
    out: list[Member] = []
    for jj in range(u) if j is None else (j,):
        if topo.bundled:
            out += _both(topo.leaf_up[leaf, 0], topo.leaf_down[leaf, 0], jj, u)
        else:
            out += _both(topo.leaf_up[leaf, jj], topo.leaf_down[leaf, jj])
    return out


def _spine(topo: Fabric, s: int) -> list[Member]:
    """Physical spine ``s``: uplink ``s % U`` of every leaf of its pod, and its own uplinks."""
    u, p = topo.uplinks, topo.leaves_per_pod
    if topo.levels < 2 or s < 0:
        return []
    pod, j = divmod(s, u)
    leaves = range(topo.n_leaves) if topo.levels == 2 else range(pod * p, min((pod + 1) * p, topo.n_leaves))
    if not len(leaves) or (topo.levels == 2 and pod > 0):
        return []
    out = [m for lf in leaves for m in _leaf_up(topo, lf, j)]
    return out + (_spine_up(topo, s, None) if topo.levels == 3 else [])


def _spine_up(topo: Fabric, s: int, m: int | None) -> list[Member]:
    u, p = topo.uplinks, topo.leaves_per_pod
    n_spines = u * -(-topo.n_leaves // p)
    if topo.levels != 3 or not 0 <= s < n_spines or (m is not None and not 0 <= m < p):
        return []
    pod, j = divmod(s, u)
    out: list[Member] = []
    for mm in range(p) if m is None else (m,):
        if topo.bundled:
            out += _both(topo.spine_up[pod, 0], topo.spine_down[pod, 0], j * p + mm, u * p)
        else:
            out += _both(topo.spine_up[s, mm], topo.spine_down[s, mm])
    return out


def ranks_behind(topo: Fabric, name: str) -> list[int]:
    """The GPUs whose own port a link name is (``gpuN``, ``gpuA-gpuB``, ``nicN``: the GPUs
    attached to the NIC); empty for switch-to-switch links."""
    m = re.fullmatch(r"gpu(\d+)-gpu(\d+)|gpu(\d+)|nic(\d+)", name)
    if m is None:
        return []
    a, b, gpu, nic = m.groups()
    if nic is not None:
        g = topo.cluster.gpus_per_node
        node = int(nic) // max(topo.nics_per_node, 1)
        return [r for r in range(node * g, (node + 1) * g) if int(nic) in topo.nics_of_gpu(r)]
    return [int(gpu)] if gpu is not None else [int(a), int(b)]
