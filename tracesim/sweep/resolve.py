"""Resolving a sweep point's specs: model and cluster files, cluster variants, digests.

:class:`SpecResolver` loads each model / cluster spec once, builds cluster variants (``gpu``,
``nodes``, ``nic_Gbps``) and hashes template sources, so expanding a space of thousands of
points reads each file once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tracesim.errors import InputError


def canonical_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, no spaces) used for hashing."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def digest(obj: Any) -> str:
    """SHA-256 hex digest of :func:`canonical_json` of ``obj``."""
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


def slug(text: str) -> str:
    """``text`` made safe for a file name (at most 60 characters)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:60]


class SpecResolver:
    """Loads model / cluster specs once per distinct setting and builds cluster variants."""

    def __init__(self, directory: Path, file: str):
        self.directory = directory  # relative paths are looked up here first
        self.file = file  # the space file, named in errors
        self._models: dict[str, Any] = {}
        self._clusters: dict[tuple, Any] = {}
        self._digests: dict[str, str | None] = {}

    def path(self, value: str) -> str:
        """``value`` beside the space file when it looks like a path and exists there."""
        candidate = self.directory / value
        if not Path(value).is_absolute() and (Path(value).suffix or "/" in value) and candidate.exists():
            return str(candidate)
        return value

    def source(self, value: str) -> str:
        """A template source (bundle, trace, workload directory): beside the space file, else
        as given; InputError when it exists in neither place."""
        candidate = self.directory / value
        if not Path(value).is_absolute() and candidate.exists():
            return str(candidate)
        if not Path(value).exists():
            raise InputError(f"source {value!r} not found (looked beside the space file and in "
                             "the current directory)", self.file, "source")
        return value

    def content_digest(self, path: str | Path | None) -> str | None:
        """SHA-256 of a file's bytes, or of a directory's files (relative names and bytes,
        in sorted order); None for None or a missing path. Cached per path."""
        if path is None:
            return None
        key = str(path)
        if key not in self._digests:
            p = Path(path)
            files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
            h = hashlib.sha256()
            for f in files:
                if not f.exists():
                    continue
                h.update(str(f.relative_to(p) if p.is_dir() else f.name).encode() + b"\0")
                with open(f, "rb") as fh:
                    while chunk := fh.read(1 << 20):
                        h.update(chunk)
            self._digests[key] = h.hexdigest() if files and p.exists() else None
        return self._digests[key]

    def template_digest(self, source: str | None, model: Any, settings: Mapping[str, Any]) -> str | None:
        """The content digest of the template the replay will use: the source's, else the
        family's stored default bundle (None for the analytic template)."""
        if source:
            return self.content_digest(source)
        if settings.get("template") == "analytic" or model is None:
            return None
        from tracesim.catalog import default_bundle

        return self.content_digest(default_bundle(model.family))

    def model(self, value: str):
        from tracesim.catalog import load_model

        if value not in self._models:
            resolved = self.path(value)
            self._models[value] = load_model(resolved if Path(resolved).exists() else value)
        return self._models[value]

    def cluster(self, value: str, gpu: str | None, nodes: int | None, nic: float | None):
        from tracesim.catalog import load_cluster
        from tracesim.hardware.device import get_device

        k = (value, gpu, nodes, nic)
        if k in self._clusters:
            return self._clusters[k]
        spec = load_cluster(self.path(value))
        suffix = []
        f = self.file
        if gpu is not None:
            dev = self.path(gpu)  # a profile YAML beside the space file, else a name
            get_device(dev, file=f, where="gpu")
            spec = spec.replace(device=dev)
            suffix.append(Path(gpu).stem if dev != gpu or Path(gpu).suffix else gpu)
        if nodes is not None:
            if nodes > 1 and spec.inter_node is None:
                raise InputError(f"cluster {spec.name!r} has no inter_node section, so it cannot "
                                 f"have {nodes} nodes", f, "nodes")
            spec = spec.replace(nodes=nodes)
            suffix.append(f"{nodes}n")
        if nic is not None:
            if spec.inter_node is None:
                raise InputError(f"cluster {spec.name!r} has no inter_node section to set "
                                 "nic_Gbps on", f, "nic_Gbps")
            spec = spec.with_nic_Gbps(float(nic))
            suffix.append(f"nic{nic:g}G")
        if suffix:
            spec = spec.replace(name="-".join([spec.name, *suffix]))
        self._clusters[k] = spec
        return spec
