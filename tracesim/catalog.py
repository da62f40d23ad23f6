"""What ships with tracesim, and how a name or a path becomes a spec.

The shipped model specs and stored template bundles (``workloads/``, installed as
``tracesim.workloads``), cluster specs (``topologies/``, installed as ``tracesim.topologies``)
and device profiles (``tracesim/hardware/devices``) are package data, read through
:mod:`importlib.resources`: they resolve by name from any directory after ``pip install``.
A user's own file is accepted wherever a name is: a path to a YAML file (or, for a cluster,
a file in ASTRA-sim's analytical network format, converted by
:mod:`tracesim.interop.astrasim_network`). Loading checks a spec strictly and a cluster's
collective algorithms against the network layer's registry
(:func:`tracesim.network.collectives.check_collectives`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tracesim.errors import InputError
from tracesim.fileio import read_json, read_yaml
from tracesim.hardware.device import DeviceProfile, get_device, known_devices
from tracesim.network.collectives import check_collectives
from tracesim.specs.cluster import ClusterSpec, cluster_from_dict
from tracesim.specs.hf_config import config_error, is_hf_config, spec_from_hf_config
from tracesim.specs.model import ModelSpec, model_from_dict

KINDS = ("models", "clusters", "devices", "stacks")


def _data_dir(package: str) -> Path:
    return Path(str(resources.files(package)))


def models_dir() -> Path:
    """Folder of the shipped model specs (``<name>.yaml``) and stored bundles (``bundles/``)."""
    return _data_dir("tracesim.workloads")


def clusters_dir() -> Path:
    """Folder of the shipped cluster specs (``<name>.yaml``)."""
    return _data_dir("tracesim.topologies")


def known_models() -> list[str]:
    """Names of the shipped model specs."""
    return sorted(p.stem for p in models_dir().glob("*.yaml"))


def known_clusters() -> list[str]:
    """Names of the shipped cluster specs."""
    return sorted(p.stem for p in clusters_dir().glob("*.yaml"))


def _named(name_or_path: str | Path, folder: Path, known: list[str], what: str,
           flag: str) -> Path:
    """The file a name or path stands for: an existing path, a ``.yaml`` path, or a shipped
    name (names may contain dots, ``gpt3-1.7b``, so a name is tried before a missing path),
    also spelt with other case and separators where that matches one shipped name only."""
    text = str(name_or_path)
    path = Path(text)
    if path.is_file() or (path.is_dir() and (path / "config.json").is_file()):
        return path
    shipped = folder / f"{text}.yaml"
    if "/" not in text and shipped.is_file():
        # a shipped name wins over a directory of that name here (a bundle written with
        # `collect --workload gpt-tiny -o gpt-tiny`)
        return shipped
    if path.exists():  # a directory given as a path: its reader says what is wrong
        return path
    if path.suffix in (".yaml", ".yml") or "/" in text:
        raise InputError("file not found", path)
    loose = [k for k in known if _loose(k) == _loose(text)]
    if len(loose) == 1:  # another spelling of one shipped name: "DeepSeekV3", "LLAMA3_70B"
        return folder / f"{loose[0]}.yaml"
    raise InputError(f"unknown {what} {text!r} (known: {', '.join(known)}; or give a YAML path)",
                     flag)


def _loose(name: str) -> str:
    """A name's letters and digits, lower case (``GPT OSS 120B`` and ``gpt-oss-120b`` agree)."""
    return "".join(ch for ch in name.lower() if ch.isalnum())


def model_path(name_or_path: str | Path, flag: str = "--model") -> Path:
    """The YAML file of a model name (shipped) or path."""
    return _named(name_or_path, models_dir(), known_models(), "model", flag)


def model_name(name_or_path: str) -> str:
    """The shipped name a model name stands for (``LLAMA3_70B``: ``llama3-70b``); a path or
    an unknown name as given."""
    try:
        path = model_path(name_or_path)
    except InputError:
        return name_or_path
    return path.stem if path.parent == models_dir() else name_or_path


def load_model(name_or_path: str | Path | ModelSpec, flag: str = "--model") -> ModelSpec:
    """A model spec from a shipped name, a YAML path, or a Hugging Face ``config.json`` (or
    the checkpoint folder holding one: :mod:`tracesim.specs.hf_config`), checked strictly."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    path = model_path(name_or_path, flag)
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    data = read_json(path) if path.suffix == ".json" else read_yaml(path)
    if is_hf_config(data):
        spec = spec_from_hf_config(data, path)
        try:
            return model_from_dict(spec, path)
        except InputError as exc:
            raise config_error(exc, path) from None
    return model_from_dict(data, path)


def load_cluster(name_or_path: str | Path | ClusterSpec) -> ClusterSpec:
    """A cluster spec from a shipped name or a YAML path; an ASTRA-sim analytical network
    config (``topology``, ``npus_count``, ``bandwidth``, ``latency`` lists) is converted by
    :func:`tracesim.interop.astrasim_network.cluster_from_astrasim_dict`."""
    if isinstance(name_or_path, ClusterSpec):
        return name_or_path
    path = _named(name_or_path, clusters_dir(), known_clusters(), "cluster", "--cluster")
    data = read_yaml(path)
    if isinstance(data, Mapping) and "npus_count" in data:
        from tracesim.interop.astrasim_network import cluster_from_astrasim_dict

        return cluster_from_astrasim_dict(data, file=path, name=path.stem)
    return cluster_mapping(data, path)


def cluster_with_nodes(name_or_path: str | Path, gpus: int,
                       gpus_used_per_node: int | None = None) -> ClusterSpec:
    """A shipped (or YAML) cluster spec with as many nodes as ``gpus`` GPUs need (its
    ``nodes`` replaced; node count is what the shipped specs are meant to be scaled by).

    ``gpus_used_per_node``: the job uses only that many GPUs of each node (NVLink domain),
    e.g. 64 of an NVL72 rack's 72 when a scheduler places it in segments of 16 trays: the
    spec then describes the GPUs in use (``gpus_per_node`` = that count, the NICs of the
    unused GPUs left out where the spec has one per GPU), so rank ``r`` sits in domain
    ``r // gpus_used_per_node``."""
    path = _named(name_or_path, clusters_dir(), known_clusters(), "cluster", "--cluster")
    data = read_yaml(path)
    if not isinstance(data, Mapping) or "gpus_per_node" not in data:
        raise InputError("not a tracesim cluster spec (no gpus_per_node)", path)
    gpn = int(data["gpus_per_node"])
    out = {k: v for k, v in data.items() if k != "gpus"}
    if gpus_used_per_node is not None and gpus_used_per_node != gpn:
        if not 1 <= gpus_used_per_node < gpn:
            raise InputError(f"{gpus_used_per_node} GPUs used per node: the node has {gpn}",
                             path, "gpus_per_node")
        inter = out.get("inter_node")
        if isinstance(inter, Mapping) and inter.get("nics_per_node") == gpn:
            out["inter_node"] = {**inter, "nics_per_node": gpus_used_per_node}
        out["gpus_per_node"] = gpn = gpus_used_per_node
    out["nodes"] = max(1, -(-int(gpus) // gpn))
    return cluster_mapping(out, path)


def cluster_mapping(data: object, file: str | Path | None = None) -> ClusterSpec:
    """A cluster spec from a mapping (a parsed YAML file), checked like :func:`load_cluster`."""
    spec = cluster_from_dict(data, file)
    check_collectives(spec.collectives, file)
    return spec


def default_bundle(family: str) -> Path | None:
    """The stored CPU bundle whose template is the default of model ``family``, if shipped."""
    p = models_dir() / "bundles" / f"{family}-tiny"
    return p if (p / "meta.yaml").is_file() else None


@dataclass(frozen=True)
class Entry:
    """One shipped item for ``tracesim list``: its name and a one-line description."""

    name: str
    summary: str


def shipped(kind: str) -> list[Entry]:
    """What ships, by kind (``models``, ``clusters`` or ``devices``)."""
    if kind == "models":
        out = []
        for name in known_models():
            m = load_model(models_dir() / f"{name}.yaml")
            moe = f", {m.experts} experts top-{m.top_k}" if m.experts else ""
            moe += f" + {m.shared_experts} shared" if m.shared_experts else ""
            active = f" ({m.active_params() / 1e9:.3g} B active)" if m.experts else ""
            heads = f"{m.heads} heads ({'MLA' if m.is_mla else f'{m.kv_heads} kv'})"
            heads += f", window {m.sliding_window}" if m.sliding_window else ""
            heads += ", q/k norm" if m.qk_norm else ""
            heads += f", {m.rope_scaling} rotary" if m.rope_scaling else ""
            moe += " (biased)" if m.expert_bias else ""
            moe += f", SwiGLU clamped at {m.glu_clamp:g}" if m.glu_clamp else ""
            moe += f", latent {m.moe_latent}" if m.moe_latent else ""
            kinds = ""
            if m.is_hybrid:  # the pattern's layers by kind
                n = {c: m.hybrid_pattern.count(c) for c in "M*-E"}
                kinds = (f" ({n['M']} Mamba-2 of {m.mamba_heads}x{m.mamba_head_dim}, "
                         f"{n['*']} attention, {n['E']} MoE, {n['-']} MLP)")
            out.append(Entry(name, f"{m.family}: {m.layers} layers{kinds}, hidden {m.hidden}, "
                                   f"{heads}, ffn {m.ffn_hidden}"
                                   f"{moe}, {m.params() / 1e9:.3g} B parameters{active}"))
        return out
    if kind == "clusters":
        out = []
        for name in known_clusters():
            c = load_cluster(clusters_dir() / f"{name}.yaml")
            net = (f"{c.inter_node.nics_per_node} x {c.inter_node.nic_Gbps:g} Gb/s NICs per node, "
                   f"{c.inter_node.topology}" if c.inter_node else "one node")
            host = f"; host {c.host_cpu.name}, speed {c.host_cpu.speed:g}" if c.host_cpu else ""
            out.append(Entry(name, f"{c.gpus} x {get_device(c.device).name} ({c.nodes} nodes of "
                                   f"{c.gpus_per_node}; {c.intra_node.kind} "
                                   f"{c.intra_node.bandwidth_GBps:g} GB/s per GPU); {net}{host}"))
        return out
    if kind == "devices":
        out = []
        for name in known_devices():
            d = get_device(name)
            peaks = ", ".join(f"{k} {v:g}" for k, v in d.peak_tflops.items() if v)
            out.append(Entry(name, f"{d.kind}: peak TFLOP/s {peaks}; memory {d.hbm_GBps:g} GB/s"
                                   + (f", {d.hbm_GiB:g} GiB" if d.hbm_GiB else "")
                                   + _clock(d)
                                   + ("; --attention flash2" if d.with_flash2() is not None
                                      else "") + _cudnn_fits(d)))
        return out
    if kind == "stacks":
        from tracesim.template.stacks import STACKS

        return [Entry(name, f"{st.summary}; FP8 recipes: {', '.join(st.fp8_recipes) or 'none'}")
                for name, st in STACKS.items()]
    raise InputError(f"expected one of {', '.join(KINDS)}, got {kind!r}", "KIND")


def _cudnn_fits(d: DeviceProfile) -> str:
    """The listing's cuDNN part: the attention's own version, then the others' (``--cudnn``)."""
    att = d.shape_model.attention if d.shape_model is not None else None
    if att is None or not att.cudnn:
        return ""
    return f"; attention cuDNN {att.cudnn} (--cudnn {', '.join(sorted(att.cudnn_versions))})"


def _clock(d: DeviceProfile) -> str:
    """The listing's sustained-clock part: the default ratio, then each dtype's own."""
    if not d.throttles:
        return ""
    own = "".join(f", {k} {v:g}" for k, v in d.sustained_dtype.items())
    slow = (f"; the slowest of 8 / 1,024 GPUs {d.fleet_factor(8):.3f} / {d.fleet_factor(1024):.3f}"
            if d.fleet is not None else "")
    return f"; sustained clock {d.sustained_clock:g}{own} of the burst rate{slow}"
