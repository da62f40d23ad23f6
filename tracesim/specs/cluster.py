"""Cluster specs: where a job runs (house style rule 1: what / where / how are separate).

A cluster spec is a YAML mapping (see ``topologies/*.yaml`` and ``docs/network.md``)::

    name: h100x128
    nodes: 16                  # or `gpus: 128` (must fill whole nodes), or both (must agree)
    gpus_per_node: 8
    device: h100               # a shipped profile's name or alias, a profile YAML path
                               # (relative: to this file's folder), or an inline profile
    intra_node:
      kind: nvswitch           # nvswitch | nvlink_mesh | nvlink_ring | pcie
      bandwidth_GBps: 450      # per GPU, per direction
      latency_us: 0.6          # one-way GPU to GPU
      nvls: true               # optional: NVSwitch in-network reduction (NVLink SHARP)
    inter_node:                # required when nodes > 1
      nics_per_node: 8
      nic_Gbps: 400            # per NIC, per direction
      topology: rail_optimized # fat_tree | rail_optimized | spine_leaf
      latency_us: 2.5          # one-way NIC to NIC through one switch
      levels: 2                # optional (default 2): switch levels above the NICs
      oversubscription: 1      # optional (default 1): leaf down / up capacity ratio
      nics_per_leaf: 32        # optional (default 32): NIC ports per leaf switch
      switch_latency_us: 0.25  # optional (default 0.25): each switch-to-switch hop
      routing: adaptive        # optional (default adaptive): adaptive | ecmp (see below)
    collectives:               # optional
      select: {all_reduce: [nvls, ring]}          # per collective: auto or preference list
      algorithms:
        ring: {efficiency: {intra: 0.80, inter: 0.94}, step_latency_us: 0.5}
      max_ctas: {dp_cp: 8, cp: 1, pp: 2}          # optional: NCCL CTAs per communicator
    host_link: {d2h_GBps: 183, h2d_GBps: 172}  # optional: GPU <-> host memory copies, per GPU
                               # per direction with every GPU of the node copying (activation
                               # offloading, --cpu-offload-layers)
    degraded_links: [nic3:0.5]  # optional: links below their capacity (tracesim/specs/fabric.py)
    background: []             # optional: traffic from outside the job (same module)

Unknown keys, non-positive bandwidths, GPUs that do not fill the nodes and NIC counts that do
not divide the GPUs raise :class:`~tracesim.errors.InputError` naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.hardware.contention import HostContention, contention_from_dict
from tracesim.hardware.device import get_device
from tracesim.specs.collectives import (
    MEGATRON_NAME,
    CollectivesSpec,
    collectives_from_dict,
)
from tracesim.specs.fabric import BackgroundJob, LinkFault, parse_background, parse_link_faults
from tracesim.strict import check_keys, get_number, get_str

INTRA_KINDS = ("nvswitch", "nvlink_mesh", "nvlink_ring", "pcie")
FABRICS = ("fat_tree", "rail_optimized", "spine_leaf")
#: how flows use equal-cost uplinks: spread evenly over all of them (adaptive routing,
#: InfiniBand's default with NCCL) or pinned to one by a per-flow hash (static ECMP)
ROUTINGS = ("adaptive", "ecmp")
DEFAULT_LEVELS = 2
DEFAULT_OVERSUBSCRIPTION = 1.0
DEFAULT_NICS_PER_LEAF = 32
DEFAULT_SWITCH_LATENCY_US = 0.25
#: the largest NVLink domain and the largest cluster a spec may describe (beyond any machine
#: built; larger values are typos, not clusters)
MAX_GPUS_PER_NODE = 1024
MAX_GPUS = 1 << 20
#: NIC ports per GPU a node may have (scale-out nodes have 1 or 2; each port is a fabric link)
MAX_NICS_PER_GPU = 8


@dataclass(frozen=True)
class HostLink:
    """Copies between a GPU and host memory by its copy engines (PCIe, or NVLink-C2C on
    Grace-Blackwell): achieved GB/s per GPU and per direction while every GPU of the node
    copies at once (what activation offloading does)."""

    d2h_GBps: float
    h2d_GBps: float


@dataclass(frozen=True)
class HostCPU:
    """The CPU that issues each GPU's kernels (one process per GPU): ``speed`` is its rate on
    the host work of a training step (Python, PyTorch's dispatcher, library calls) relative
    to the x86 server CPUs the host launch times were measured on (tracesim/build/host.py);
    the per-launch host times are divided by it."""

    name: str
    speed: float


@dataclass(frozen=True)
class IntraNodeSpec:
    """The scale-up fabric inside a node.

    ``bandwidth_GBps`` is per GPU and per direction (all of a GPU's NVLinks together);
    ``latency_us`` is the one-way GPU-to-GPU latency; ``nvls`` says whether the NVSwitch can
    reduce in the network (NVLink SHARP, H100 and later).
    """

    kind: str
    bandwidth_GBps: float
    latency_us: float
    nvls: bool = False


@dataclass(frozen=True)
class InterNodeSpec:
    """The scale-out fabric between nodes.

    ``nic_Gbps`` is per NIC and per direction, in gigabits per second. ``latency_us`` is the
    one-way NIC-to-NIC latency through one switch; every further switch-to-switch hop adds
    ``switch_latency_us``. ``levels`` counts switch levels (1: one switch, or one per rail;
    2: leaf + spine; 3: leaf + spine + core). ``oversubscription`` is a leaf's NIC-facing
    capacity over its uplink capacity. ``nics_per_leaf`` is the NIC ports of a leaf (for a
    rail-optimised fabric: the nodes whose NICs of one rail share a leaf). ``routing``:
    ``adaptive`` spreads every flow over all equal-cost uplinks (adaptive routing or packet
    spraying: a leaf's uplinks act as one bundle); ``ecmp`` pins each flow to one uplink by a
    hash of its endpoints (static ECMP, where a few large flows can collide).
    """

    nics_per_node: int
    nic_Gbps: float
    topology: str
    latency_us: float
    levels: int = DEFAULT_LEVELS
    oversubscription: float = DEFAULT_OVERSUBSCRIPTION
    nics_per_leaf: int = DEFAULT_NICS_PER_LEAF
    switch_latency_us: float = DEFAULT_SWITCH_LATENCY_US
    routing: str = "adaptive"

    @property
    def nic_GBps(self) -> float:
        """NIC bandwidth per direction in gigabytes per second."""
        return self.nic_Gbps / 8.0


@dataclass(frozen=True)
class ClusterSpec:
    """A target cluster: GPUs, their device profile and the network joining them.

    Global rank ``r`` runs on GPU ``r``, which sits in node ``r // gpus_per_node``.
    ``device`` is a profile name or an inline profile mapping as given, or the absolute path
    of a profile YAML (given relative to the cluster file's folder).
    """

    name: str
    nodes: int
    gpus_per_node: int
    device: str | Mapping[str, Any]
    intra_node: IntraNodeSpec
    inter_node: InterNodeSpec | None = None
    collectives: CollectivesSpec = field(default_factory=CollectivesSpec)
    description: str = ""
    sources: tuple[str, ...] = ()
    #: co-located ranks slowing each other (CPU hosts; tracesim/hardware/contention.py)
    host_contention: HostContention | None = None
    #: degraded or failed links and traffic from outside the job (tracesim/specs/fabric.py)
    degraded_links: tuple[LinkFault, ...] = ()
    background: tuple[BackgroundJob, ...] = ()
    host_link: HostLink | None = None
    #: the CPU that launches the kernels (None: an x86 server CPU, speed 1)
    host_cpu: HostCPU | None = None

    @property
    def gpus(self) -> int:
        """Total number of GPUs."""
        return self.nodes * self.gpus_per_node

    def node_of(self, rank: int) -> int:
        """The node global rank ``rank`` runs on."""
        return rank // self.gpus_per_node

    def replace(self, **changes: Any) -> ClusterSpec:
        """A validated copy with ``changes`` applied (``dataclasses.replace``).

        The result is checked like a loaded spec (InputError, file ``ClusterSpec.replace``).
        """
        new = dataclasses.replace(self, **changes)
        checked = cluster_from_dict(new.to_dict(), "ClusterSpec.replace")
        return checked

    @property
    def healthy(self) -> ClusterSpec:
        """This cluster with no degraded links and no background traffic."""
        if not self.degraded_links and not self.background:
            return self
        return dataclasses.replace(self, degraded_links=(), background=())

    def with_fabric(self, degraded_links: tuple[LinkFault, ...] = (),
                    background: tuple[BackgroundJob, ...] = ()) -> ClusterSpec:
        """A copy with ``degraded_links`` and ``background`` added to the spec's own."""
        return dataclasses.replace(self, degraded_links=self.degraded_links + tuple(degraded_links),
                                   background=self.background + tuple(background))

    def with_nic_Gbps(self, nic_Gbps: float) -> ClusterSpec:
        """A copy whose NICs run at ``nic_Gbps`` (for bandwidth sweeps); InputError when the
        cluster has no inter-node fabric or the bandwidth is not a number > 0."""
        if self.inter_node is None:
            raise InputError(f"cluster {self.name!r} has no inter_node section to set nic_Gbps on",
                             "ClusterSpec.with_nic_Gbps", "inter_node")
        if isinstance(nic_Gbps, bool) or not isinstance(nic_Gbps, (int, float)) \
                or not 0 < nic_Gbps < float("inf"):
            raise InputError(f"expected a bandwidth > 0 in Gb/s, got {nic_Gbps!r}",
                             "ClusterSpec.with_nic_Gbps", "nic_Gbps")
        return self.replace(inter_node=dataclasses.replace(self.inter_node, nic_Gbps=nic_Gbps))

    def with_inter_node(self, **changes: Any) -> ClusterSpec:
        """A copy with fields of ``inter_node`` changed (``oversubscription=2``, ...)."""
        if self.inter_node is None:
            raise InputError(f"cluster {self.name!r} has no inter_node section",
                             "ClusterSpec.with_inter_node", "inter_node")
        return self.replace(inter_node=dataclasses.replace(self.inter_node, **changes))

    def to_dict(self) -> dict[str, Any]:
        """The spec as a YAML-ready mapping (loads back to an equal spec)."""
        d: dict[str, Any] = {"name": self.name, "nodes": self.nodes}
        d["gpus_per_node"] = self.gpus_per_node
        d["device"] = self.device if isinstance(self.device, str) else dict(self.device)
        d["intra_node"] = dataclasses.asdict(self.intra_node)
        if self.inter_node is not None:
            d["inter_node"] = dataclasses.asdict(self.inter_node)
        coll: dict[str, Any] = {}
        if self.collectives.select:
            coll["select"] = {k: list(v) for k, v in self.collectives.select}
        if self.collectives.algorithms:
            algos: dict[str, Any] = {}
            for name, p in self.collectives.algorithms:
                entry: dict[str, Any] = {}
                if p.efficiency_intra is not None or p.efficiency_inter is not None:
                    entry["efficiency"] = {
                        k: v
                        for k, v in (("intra", p.efficiency_intra), ("inter", p.efficiency_inter))
                        if v is not None
                    }
                if p.step_latency_us is not None:
                    entry["step_latency_us"] = p.step_latency_us
                algos[name] = entry
            coll["algorithms"] = algos
        if self.collectives.protocol:
            coll["protocol"] = ",".join(self.collectives.protocol)
        if self.collectives.channels is not None:
            coll["channels"] = self.collectives.channels
        if self.collectives.max_ctas:  # as group kinds, read back by their Megatron names
            coll["max_ctas"] = {MEGATRON_NAME[k]: n for k, n in self.collectives.max_ctas}
        if coll:
            d["collectives"] = coll
        if self.description:
            d["description"] = self.description
        if self.sources:
            d["sources"] = list(self.sources)
        if self.host_contention is not None:
            d["host_contention"] = self.host_contention.to_dict()
        if self.host_link is not None:
            d["host_link"] = dataclasses.asdict(self.host_link)
        if self.host_cpu is not None:
            d["host_cpu"] = dataclasses.asdict(self.host_cpu)
        if self.degraded_links:
            d["degraded_links"] = [f.text() for f in self.degraded_links]
        if self.background:
            d["background"] = [b.spec for b in self.background]
        return d

    def key(self) -> str:
        """A canonical string identifying the spec (used as a cache key)."""
        return json.dumps(self.to_dict(), sort_keys=True, default=str)


# ----------------------------------------------------------------------------- validation

_TOP_REQUIRED = ("name", "gpus_per_node", "device", "intra_node")
_TOP_OPTIONAL = ("nodes", "gpus", "inter_node", "collectives", "description", "sources",
                 "host_contention", "degraded_links", "background", "host_link", "host_cpu")
_INTRA_REQUIRED = ("kind", "bandwidth_GBps", "latency_us")
_INTER_REQUIRED = ("nics_per_node", "nic_Gbps", "topology", "latency_us")
_INTER_OPTIONAL = ("levels", "oversubscription", "nics_per_leaf", "switch_latency_us", "routing")


def _get_bool(data: Mapping[str, Any], key: str, *, file: Any, where: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise InputError(f"expected true or false, got {value!r}", file, f"{where}.{key}")
    return value


def _intra_from_dict(data: Any, file: Any) -> IntraNodeSpec:
    w = "intra_node"
    check_keys(data, _INTRA_REQUIRED, ("nvls",), file=file, where=w)
    kind = get_str(data, "kind", file=file, where=w, choices=INTRA_KINDS)
    bw = get_number(data, "bandwidth_GBps", file=file, where=w)
    lat = get_number(data, "latency_us", file=file, where=w, allow_zero=True)
    nvls = _get_bool(data, "nvls", file=file, where=w)
    if nvls and kind != "nvswitch":
        raise InputError(f"nvls needs kind nvswitch, not {kind!r}", file, f"{w}.nvls")
    return IntraNodeSpec(kind=kind, bandwidth_GBps=bw, latency_us=lat, nvls=nvls)


def _inter_from_dict(data: Any, gpus_per_node: int, nodes: int, file: Any) -> InterNodeSpec:
    w = "inter_node"
    check_keys(data, _INTER_REQUIRED, _INTER_OPTIONAL, file=file, where=w)
    nics = get_number(data, "nics_per_node", file=file, where=w, kind=int)
    if nics > MAX_NICS_PER_GPU * gpus_per_node:
        raise InputError(f"{nics} NICs per node is more than {MAX_NICS_PER_GPU} per GPU "
                         f"({gpus_per_node} GPUs per node)", file, f"{w}.nics_per_node")
    if gpus_per_node % nics and nics % gpus_per_node:
        raise InputError(
            f"{nics} NICs per node neither divide nor are a multiple of "
            f"{gpus_per_node} GPUs per node",
            file,
            f"{w}.nics_per_node",
        )
    topo = get_str(data, "topology", file=file, where=w, choices=FABRICS)
    levels = get_number(data, "levels", file=file, where=w, kind=int, default=DEFAULT_LEVELS)
    allowed = {"fat_tree": (1, 2, 3), "rail_optimized": (1, 2, 3), "spine_leaf": (2,)}[topo]
    if levels not in allowed:
        raise InputError(
            f"{topo} supports levels {', '.join(map(str, allowed))}, got {levels}",
            file,
            f"{w}.levels",
        )
    return InterNodeSpec(
        nics_per_node=nics,
        nic_Gbps=get_number(data, "nic_Gbps", file=file, where=w),
        topology=topo,
        latency_us=get_number(data, "latency_us", file=file, where=w, allow_zero=True),
        levels=levels,
        oversubscription=get_number(
            data, "oversubscription", file=file, where=w, default=DEFAULT_OVERSUBSCRIPTION
        ),
        nics_per_leaf=get_number(
            data, "nics_per_leaf", file=file, where=w, kind=int, default=DEFAULT_NICS_PER_LEAF
        ),
        switch_latency_us=get_number(
            data, "switch_latency_us", file=file, where=w, allow_zero=True,
            default=DEFAULT_SWITCH_LATENCY_US,
        ),
        routing=get_str(data, "routing", file=file, where=w, choices=ROUTINGS, default="adaptive"),
    )


def _check_device(device: Any, file: Any) -> str | dict[str, Any]:
    """``device`` checked (a profile YAML path made absolute: relative to the folder of the
    cluster file, else the current directory); the value the spec keeps."""
    if not isinstance(device, (str, Mapping)):
        raise InputError(f"expected a device name or mapping, got {device!r}", file, "device")
    if isinstance(device, Mapping):
        get_device(device, file=file, where="device")
        return dict(device)
    path = _profile_path(device, file)
    if device.endswith((".yaml", ".yml")) or ("/" in device and Path(path).is_file()):
        if not Path(path).is_file():
            raise InputError(f"device profile {device!r} not found (no file {path})", file, "device")
        device = path
    get_device(device, file=file, where="device")
    return device


def _profile_path(device: str, file: Any) -> str:
    """``device`` as a path: ``~`` expanded, a relative one joined to the folder of the
    cluster file ``file`` (when that is a file; else the current directory), absolute."""
    p = Path(device).expanduser()
    if not p.is_absolute() and file is not None and Path(str(file)).is_file():
        p = Path(str(file)).parent / p
    return str(p.absolute())


def cluster_from_dict(data: Any, file: str | Path | None = None) -> ClusterSpec:
    """Validate a cluster-spec mapping strictly and return a :class:`ClusterSpec`."""
    check_keys(data, _TOP_REQUIRED, _TOP_OPTIONAL, file=file)
    name = get_str(data, "name", file=file)
    gpn = get_number(data, "gpus_per_node", file=file, kind=int)
    if "nodes" not in data and "gpus" not in data:
        raise InputError("missing required key (or give `gpus`)", file, "nodes")
    nodes = get_number(data, "nodes", file=file, kind=int) if "nodes" in data else None
    if "gpus" in data:
        gpus = get_number(data, "gpus", file=file, kind=int)
        if gpus % gpn:
            raise InputError(
                f"{gpus} GPUs do not fill nodes of {gpn} GPUs (gpus_per_node)", file, "gpus"
            )
        if nodes is not None and nodes * gpn != gpus:
            raise InputError(
                f"{gpus} GPUs != nodes {nodes} x gpus_per_node {gpn}", file, "gpus"
            )
        nodes = gpus // gpn
    assert nodes is not None
    if gpn > MAX_GPUS_PER_NODE:
        raise InputError(f"{gpn} GPUs per node is more than {MAX_GPUS_PER_NODE}", file, "gpus_per_node")
    if nodes * gpn > MAX_GPUS:
        raise InputError(f"{nodes} nodes x {gpn} GPUs is more than {MAX_GPUS:,} GPUs", file, "nodes")
    device = _check_device(data["device"], file)
    intra = _intra_from_dict(data["intra_node"], file)
    inter = None
    if data.get("inter_node") is not None:
        inter = _inter_from_dict(data["inter_node"], gpn, nodes, file)
    elif nodes > 1:
        raise InputError(f"missing required key (the cluster has {nodes} nodes)", file, "inter_node")
    coll = CollectivesSpec()
    if data.get("collectives") is not None:
        coll = collectives_from_dict(data["collectives"], file)
    sources: tuple[str, ...] = ()
    if "sources" in data:
        s = data["sources"]
        s = [s] if isinstance(s, str) else s
        if not isinstance(s, list) or not all(isinstance(x, str) for x in s):
            raise InputError(f"expected a string or a list of strings, got {s!r}", file, "sources")
        sources = tuple(s)
    return ClusterSpec(
        name=name,
        nodes=nodes,
        gpus_per_node=gpn,
        device=device,
        intra_node=intra,
        inter_node=inter,
        collectives=coll,
        description=get_str(data, "description", file=file) if "description" in data else "",
        sources=sources,
        host_contention=(contention_from_dict(data["host_contention"], file)
                         if data.get("host_contention") is not None else None),
        degraded_links=tuple(f for i, text in enumerate(_strings(data, "degraded_links", file))
                             for f in parse_link_faults(text, file, f"degraded_links[{i}]")),
        background=tuple(parse_background(text, gpn, nodes * gpn, file, f"background[{i}]")
                         for i, text in enumerate(_strings(data, "background", file))),
        host_link=_host_link(data["host_link"], file) if data.get("host_link") is not None else None,
        host_cpu=_host_cpu(data["host_cpu"], file) if data.get("host_cpu") is not None else None,
    )


def _host_link(data: Any, file: Any) -> HostLink:
    check_keys(data, ("d2h_GBps", "h2d_GBps"), (), file=file, where="host_link")
    return HostLink(*(get_number(data, k, file=file, where="host_link") for k in ("d2h_GBps", "h2d_GBps")))


def _host_cpu(data: Any, file: Any) -> HostCPU:
    check_keys(data, ("name", "speed"), (), file=file, where="host_cpu")
    return HostCPU(get_str(data, "name", file=file, where="host_cpu"),
                   float(get_number(data, "speed", file=file, where="host_cpu")))


def _strings(data: Mapping[str, Any], key: str, file: Any) -> list[str]:
    """The list of strings under ``key`` (absent: empty)."""
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise InputError(f"expected a list of strings, got {value!r}", file, key)
    return value
