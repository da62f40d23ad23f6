"""Import an ASTRA-sim analytical-backend network config as a tracesim cluster spec.

ASTRA-sim's analytical network (``astra-network-analytical``) reads a YAML like::

    topology: [ Ring, FullyConnected, Switch ]   # per dimension
    npus_count: [ 2, 8, 4 ]                      # NPUs per dimension (product = NPUs)
    bandwidth: [ 200.0, 100.0, 50.0 ]            # GB/s per link and direction
    latency: [ 50.0, 500.0, 2000.0 ]             # ns per link

NPU ids run fastest along dimension 0, so dimension 0 groups consecutive NPUs (a node) and
dimension 1 joins the NPUs with the same dimension-0 index (a rail). The mapping:

* dimension 0 -> ``intra_node``: ``Switch`` -> ``nvswitch`` (bandwidth per GPU = link
  bandwidth), ``FullyConnected`` -> ``nvlink_mesh`` ((n-1) x link bandwidth per GPU),
  ``Ring`` -> ``nvlink_ring`` (2 x link bandwidth per GPU, a link per neighbour);
  ``latency_us`` = links crossed (2 through a switch, else 1) x link latency.
* dimension 1 -> one NIC per GPU at the dimension's per-NPU bandwidth, on a
  ``rail_optimized`` fabric whose rail leaves each hold ``npus_count[1]`` nodes;
  ``latency_us`` = 2 x link latency (NIC -> switch -> NIC).
* dimension 2 -> a spine level (``levels: 2``): oversubscription = dimension-1 over
  dimension-2 per-NPU bandwidth; ``switch_latency_us`` = its link latency.

Dimensions 1 and 2 are modelled as switches whatever their ``topology`` says (a ring or full
mesh between nodes becomes a switch of the same per-NPU bandwidth); more than three
dimensions are refused. The config names no device, so the caller gives one (default h100).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.fileio import read_yaml
from tracesim.specs.cluster import ClusterSpec, cluster_from_dict
from tracesim.strict import check_keys

TOPOLOGIES = ("Ring", "FullyConnected", "Switch")
_INTRA = {"Switch": "nvswitch", "FullyConnected": "nvlink_mesh", "Ring": "nvlink_ring"}


def _list(data: Mapping[str, Any], key: str, file: Any, kind: type) -> list[Any]:
    value = data[key]
    if not isinstance(value, list) or not value:
        raise InputError(f"expected a non-empty list, got {value!r}", file, key)
    out = []
    for i, v in enumerate(value):
        place = f"{key}[{i}]"
        if kind is str:
            if v not in TOPOLOGIES:
                raise InputError(f"{v!r} is not one of {', '.join(TOPOLOGIES)}", file, place)
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise InputError(f"expected a number, got {v!r}", file, place)
        elif kind is int and (v <= 0 or not float(v).is_integer()):
            raise InputError(f"expected a positive integer, got {v!r}", file, place)
        elif key == "bandwidth" and v <= 0:
            raise InputError(f"must be > 0, got {v!r}", file, place)
        elif key == "latency" and v < 0:
            raise InputError(f"must be >= 0, got {v!r}", file, place)
        out.append(int(v) if kind is int else v)
    return out


def cluster_from_astrasim_dict(
    data: Any,
    file: str | Path | None = None,
    *,
    name: str = "astrasim",
    device: str | Mapping[str, Any] = "h100",
) -> ClusterSpec:
    """Convert a parsed ASTRA-sim analytical network config to a :class:`ClusterSpec`."""
    check_keys(data, ("topology", "npus_count", "bandwidth", "latency"), file=file)
    topo = _list(data, "topology", file, str)
    npus = _list(data, "npus_count", file, int)
    bw = [float(x) for x in _list(data, "bandwidth", file, float)]
    lat = [float(x) for x in _list(data, "latency", file, float)]
    dims = len(topo)
    for key, lst in (("npus_count", npus), ("bandwidth", bw), ("latency", lat)):
        if len(lst) != dims:
            raise InputError(f"has {len(lst)} entries but topology has {dims}", file, key)
    if dims > 3:
        raise InputError(
            f"{dims} dimensions: tracesim maps at most 3 (node, rail leaf, spine)", file, "topology"
        )
    g = npus[0]
    per_gpu = {"Switch": 1, "FullyConnected": max(1, g - 1), "Ring": 2 if g > 2 else 1}[topo[0]]
    hops = 2 if topo[0] == "Switch" else 1
    spec: dict[str, Any] = {
        "name": name,
        "nodes": math.prod(npus[1:]),
        "gpus_per_node": g,
        "device": device,
        "intra_node": {
            "kind": _INTRA[topo[0]],
            "bandwidth_GBps": bw[0] * per_gpu,
            "latency_us": hops * lat[0] / 1000.0,
        },
        "description": (
            f"imported from ASTRA-sim analytical network config "
            f"(topology {topo}, npus_count {npus}, bandwidth {bw} GB/s, latency {lat} ns)"
        ),
        "sources": [str(file) if file is not None else "ASTRA-sim analytical network config"],
    }
    if dims >= 2:
        inter: dict[str, Any] = {
            "nics_per_node": g,
            "nic_Gbps": bw[1] * 8.0,
            "topology": "rail_optimized",
            "latency_us": 2 * lat[1] / 1000.0,
            "nics_per_leaf": npus[1],
            "levels": 1,
        }
        if dims == 3:
            inter.update(
                levels=2,
                oversubscription=bw[1] / bw[2],
                switch_latency_us=lat[2] / 1000.0,
            )
        spec["inter_node"] = inter
    return cluster_from_dict(spec, file)


def cluster_from_astrasim(
    path: str | Path, *, device: str | Mapping[str, Any] = "h100", name: str | None = None
) -> ClusterSpec:
    """Load an ASTRA-sim analytical network YAML file as a :class:`ClusterSpec`."""
    path = Path(path)
    return cluster_from_astrasim_dict(
        read_yaml(path), path, name=name or path.stem, device=device
    )
