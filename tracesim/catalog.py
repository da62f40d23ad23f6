"""What ships with tracesim, and how a name or a path becomes a spec.

A cluster is named by a YAML path or by the name of a shipped spec (``topologies/``); a
file in ASTRA-sim's analytical network format is converted
(:mod:`tracesim.interop.astrasim_network`). Loading checks the spec strictly
(:func:`tracesim.specs.cluster.cluster_from_dict`) and the collective algorithms it names
against the network layer's registry (:func:`tracesim.network.collectives.check_collectives`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tracesim.errors import InputError
from tracesim.fileio import read_yaml
from tracesim.network.collectives import check_collectives
from tracesim.specs.cluster import ClusterSpec, cluster_from_dict

TOPOLOGIES_DIR = Path(__file__).resolve().parents[1] / "topologies"


def known_clusters() -> list[str]:
    """Names of the cluster specs shipped in ``topologies/``."""
    return sorted(p.stem for p in TOPOLOGIES_DIR.glob("*.yaml"))


def load_cluster(path_or_name: str | Path | ClusterSpec) -> ClusterSpec:
    """Load a cluster spec from a YAML path, or by name from ``topologies/<name>.yaml``.

    A file in ASTRA-sim's analytical network format (``topology``, ``npus_count``,
    ``bandwidth``, ``latency`` lists) is converted by
    :func:`tracesim.interop.astrasim_network.cluster_from_astrasim_dict`.
    """
    if isinstance(path_or_name, ClusterSpec):
        return path_or_name
    path = Path(path_or_name)
    if not path.suffix and not path.exists():
        candidate = TOPOLOGIES_DIR / f"{path_or_name}.yaml"
        if not candidate.exists():
            raise InputError(
                f"unknown cluster {str(path_or_name)!r} (known: {', '.join(known_clusters())})",
                "--cluster",
            )
        path = candidate
    data = read_yaml(path)
    if isinstance(data, Mapping) and "npus_count" in data:
        from tracesim.interop.astrasim_network import cluster_from_astrasim_dict

        return cluster_from_astrasim_dict(data, file=path, name=path.stem)
    return cluster_mapping(data, path)


def cluster_mapping(data: object, file: str | Path | None = None) -> ClusterSpec:
    """A cluster spec from a mapping (a parsed YAML file), checked like :func:`load_cluster`."""
    spec = cluster_from_dict(data, file)
    check_collectives(spec.collectives, file)
    return spec
