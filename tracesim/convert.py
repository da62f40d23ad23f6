"""Glue for ``tracesim convert``: load any supported source as a task graph, write it in any
supported format, build a model's per-rank workload, and replay a graph on a cluster.

Formats (a registry, :data:`FORMATS`, filled by :func:`register_format`):

* ``tracesim``: a workload directory (``graph.yaml`` + Parquet tables,
  :mod:`tracesim.graph.io`); also readable: a bundle or Kineto trace, extracted.
* ``chakra``: ``<prefix>.<rank>.et`` + ``<prefix>.json`` (:mod:`tracesim.interop.chakra`).
* ``aicb``: a SimAI / AICB workload ``.txt`` (:mod:`tracesim.interop.aicb`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tracesim.catalog import load_cluster
from tracesim.errors import InputError
from tracesim.graph.taskgraph import TaskGraph
from tracesim.specs.cluster import ClusterSpec


@dataclass(frozen=True)
class Format:
    """A workload format: how to recognise, read and write it.

    ``detect(path) -> bool``; ``read(path, options) -> TaskGraph``;
    ``write(graph, path, options) -> (written paths, warnings)``.
    """

    name: str
    detect: Callable[[Path], bool]
    read: Callable[[Path, Mapping[str, Any]], TaskGraph] | None
    write: Callable[[TaskGraph, Path, Mapping[str, Any]], tuple[list[Path], list[str]]] | None


FORMATS: dict[str, Format] = {}


def register_format(name: str, detect: Callable[[Path], bool]) -> Callable:
    """Decorator on a class with optional static ``read`` / ``write``: registers the format."""
    def deco(cls: Any) -> Any:
        FORMATS[name] = Format(name, detect, getattr(cls, "read", None), getattr(cls, "write", None))
        return cls

    return deco


def _is_workload(p: Path) -> bool:
    return p.is_dir() and (p / "graph.yaml").exists()


def _is_recorded(p: Path) -> bool:
    return (p.is_dir() and (p / "meta.yaml").exists()) or p.name.lower().endswith((".json", ".json.gz"))


def _is_chakra(p: Path) -> bool:
    if p.name.endswith(".et") or Path(f"{p}.0.et").exists():
        return True
    return p.is_dir() and any(p.glob("*.et"))


@register_format("tracesim", _is_workload)
class _Tracesim:
    @staticmethod
    def read(path: Path, opts: Mapping[str, Any]) -> TaskGraph:
        from tracesim.graph.io import load_graph

        return load_graph(path)

    @staticmethod
    def write(graph: TaskGraph, path: Path, opts: Mapping[str, Any]) -> tuple[list[Path], list[str]]:
        from tracesim.graph.io import save_graph

        _check_out_dir(path)
        save_graph(graph, path)
        return [path], []


@register_format("trace", _is_recorded)
class _Recorded:
    @staticmethod
    def read(path: Path, opts: Mapping[str, Any]) -> TaskGraph:
        from tracesim.trace.extract import extract_source
        from tracesim.trace.sources import load_source

        src = load_source(path)
        graph = extract_source(src)
        return graph.replace(meta={**graph.meta, "source": str(path), "device": src.device})


@register_format("chakra", _is_chakra)
class _Chakra:
    @staticmethod
    def read(path: Path, opts: Mapping[str, Any]) -> TaskGraph:
        from tracesim.interop.chakra_import import import_chakra

        return import_chakra(path, opts.get("comm_groups"), plain=bool(opts.get("plain")))

    @staticmethod
    def write(graph: TaskGraph, path: Path, opts: Mapping[str, Any]) -> tuple[list[Path], list[str]]:
        from tracesim.interop.chakra import export_chakra

        prefix = path / "workload" if path.is_dir() else path
        ex = export_chakra(graph, prefix)
        return list(ex.et_files) + [ex.comm_group_file], []


@register_format("aicb", lambda p: p.suffix == ".txt" and p.is_file())
class _Aicb:
    @staticmethod
    def read(path: Path, opts: Mapping[str, Any]) -> TaskGraph:
        from tracesim.interop.aicb import read_aicb
        from tracesim.interop.aicb_graph import aicb_to_graph

        return aicb_to_graph(read_aicb(path), path, one_rank=bool(opts.get("one_rank")))

    @staticmethod
    def write(graph: TaskGraph, path: Path, opts: Mapping[str, Any]) -> tuple[list[Path], list[str]]:
        from tracesim.interop.aicb import write_aicb
        from tracesim.interop.aicb_export import graph_to_aicb

        w, warnings = graph_to_aicb(graph, opts.get("rank"))
        return [write_aicb(w, path)], warnings


def _check_out_dir(path: Path) -> None:
    ok = {"tasks.parquet", "edges.parquet", "lanes.parquet", "graph.yaml", "ops.parquet"}
    if path.exists() and (not path.is_dir() or any(p.name not in ok for p in path.iterdir())):
        raise InputError("exists and is not a workload directory; refusing to overwrite it", path)


def detect_format(path: str | Path) -> str:
    """The name of the format of ``path`` (InputError when none matches)."""
    p = Path(path)
    for name in ("tracesim", "trace", "chakra", "aicb"):
        if FORMATS[name].detect(p):
            return name
    if not p.exists() and not p.parent.exists():
        raise InputError("file not found", p)
    raise InputError("not a recognised workload: expected a workload directory (graph.yaml), a "
                     "bundle or trace, Chakra ET files (<prefix>.<rank>.et) or an AICB .txt", p)


def load_workload(path: str | Path, fmt: str = "auto", **opts: Any) -> tuple[TaskGraph, str]:
    """Read ``path`` as a task graph; returns (graph, format name)."""
    p = Path(path)
    name = detect_format(p) if fmt == "auto" else fmt
    if name not in FORMATS or FORMATS[name].read is None:
        raise InputError(f"cannot read format {name!r}", "--from")
    reader = FORMATS[name].read
    assert reader is not None
    return reader(p, opts), name


def save_workload(graph: TaskGraph, path: str | Path, fmt: str, **opts: Any) -> tuple[list[Path], list[str]]:
    """Write ``graph`` as ``fmt``; returns (written paths, warnings about what was lost)."""
    if fmt not in FORMATS or FORMATS[fmt].write is None:
        raise InputError(f"cannot write format {fmt!r} (writable: "
                         f"{', '.join(k for k, f in FORMATS.items() if f.write)})", "--to")
    writer = FORMATS[fmt].write
    assert writer is not None
    return writer(graph, Path(path), opts)


def build_workload(opts: Mapping[str, Any]) -> TaskGraph:
    """The built per-rank task graph (every rank) of ``--model`` on ``--cluster`` and a layout.

    ``opts`` are ``tracesim replay``'s retargeting flags (model, cluster, tp, pp, dp, ...).
    Mirrors :func:`tracesim.pipeline.run_retarget` up to the graph, without the symmetry
    reduction (an exported workload needs every rank).
    """
    from tracesim.build.builder import build_graph
    from tracesim.catalog import load_model
    from tracesim.hardware.device import get_device
    from tracesim.pipeline import choose_template
    from tracesim.specs.parallel import parallel_from_options
    from tracesim.template.durations import make_op_time

    if not opts.get("model") or not opts.get("cluster"):
        raise InputError("building a workload needs --model and --cluster (or give a SOURCE)",
                         "--model")
    model = load_model(str(opts["model"]))
    cluster = load_cluster(str(opts["cluster"]))
    device = get_device(cluster.device)
    par = parallel_from_options(opts, model, cluster.gpus)
    template, _ = choose_template(None, model, opts)
    op_time, _ = make_op_time(template, device, par.dtype)
    if par.world > cluster.gpus:
        raise InputError(f"the layout needs {par.world} GPUs, cluster {cluster.name} has {cluster.gpus}",
                         "--cluster")
    built = build_graph(model, par, template, op_time)
    return built.graph.replace(meta={**built.graph.meta, "cluster": cluster.name,
                                     "device": device.name})


def replay_workload(graph: TaskGraph, cluster: str | Path | ClusterSpec,
                    system: str | Path | None = None) -> dict[str, Any]:
    """Replay ``graph`` on ``cluster`` (flow-level network model) and report it.

    ``system``: an ASTRA-sim system JSON whose collective choices and device settings are
    applied to the cluster first (:mod:`tracesim.interop.astrasim_system`).

    Returns ``iteration_time_s``, ``gpus``, ``cluster``, ``device``, ``breakdown`` (as
    ``tracesim replay --json``), ``tasks``, ``events``, ``replay_wall_s``, ``source_format``,
    ``warnings``; for an AICB workload with pp > 1 also ``pp_bubble_s_simai_formula``.
    """
    from tracesim.engine.replay import replay
    from tracesim.hardware.device import get_device
    from tracesim.network.model import NetworkModel
    from tracesim.report.breakdown import mean_breakdown, rank_breakdowns

    spec = load_cluster(cluster) if not isinstance(cluster, ClusterSpec) else cluster
    warnings: list[str] = []
    if system is not None:
        from tracesim.interop.astrasim_system import apply_system, load_astrasim_system

        mapping = load_astrasim_system(system)
        spec = apply_system(spec, mapping)
        warnings += [f"system configuration: {w}" for w in mapping.warnings]
    ranks = graph.ranks
    needed = max([ranks[-1] + 1 if ranks else 0] + [max(g) + 1 for g in graph.groups])
    if needed > spec.gpus:
        raise InputError(f"the workload uses ranks 0..{needed - 1} but cluster {spec.name} has "
                         f"{spec.gpus} GPUs", "--cluster")
    comm: Any = NetworkModel(spec)
    if graph.meta.get("representatives"):
        from tracesim.engine.symmetry import SymmetricComm

        comm = SymmetricComm(comm, graph)
        warnings.append("symmetric replay: one rank per class simulated; its collectives run "
                        "over their full groups, other groups' traffic is not simulated")
    t0 = time.perf_counter()
    result = replay(graph, comm)
    wall = time.perf_counter() - t0
    per_rank = rank_breakdowns(graph, result.start_ns, result.end_ns, result.makespan_ns)
    imported = graph.meta.get("imported_from")
    fmt = graph.meta.get("source_format") or (imported.get("format") if isinstance(imported, dict) else "tracesim")
    out: dict[str, Any] = {
        "mode": "replay-workload",
        "iteration_time_s": result.makespan_ns * 1e-9,
        "gpus": (int(graph.meta["aicb"]["all_gpus"]) if isinstance(graph.meta.get("aicb"), dict)
                 else len(ranks)),
        "model": (graph.meta["model"].get("name") if isinstance(graph.meta.get("model"), dict)
                  else f"({fmt} workload)"),
        "parallel": graph.meta.get("parallel"),
        "cluster": spec.name,
        "device": get_device(spec.device).name,
        "breakdown": mean_breakdown(per_rank),
        "tasks": graph.n_tasks,
        "events": result.events,
        "replay_wall_s": round(wall, 3),
        "source_format": fmt,
        "warnings": warnings,
    }
    aicb = graph.meta.get("aicb")
    if fmt == "aicb" and isinstance(aicb, dict) and int(aicb.get("pp", 1)) > 1:
        out["pp_bubble_s_simai_formula"] = _simai_bubble_s(graph, result, aicb)
        warnings.append("pp > 1: AICB rows are one pipeline stage's program; stages were replayed "
                        "side by side without activation transfers. SimAI's own estimate of the "
                        "pipeline bubble is in pp_bubble_s_simai_formula (not included in "
                        "iteration_time_s)")
    return out


def _simai_bubble_s(graph: TaskGraph, result: Any, aicb: Mapping[str, Any]) -> float:
    """SimAI's bubble formula: (pp - 1) / (ga x vpp) x the non-embedding rows' forward,
    input-gradient and weight-gradient compute plus their blocking communication (rank 0)."""
    t = graph.tasks
    r0 = t["rank"].to_numpy() == graph.ranks[0]
    names = t["name"].to_numpy().astype(str)
    lanes = graph.lanes["name"].to_numpy().astype(str)[t["lane"].to_numpy()]
    dur = result.end_ns - result.start_ns
    keep = r0 & ~np.char.startswith(names, "embedding_layer.") & ~np.char.startswith(names, "recompute:")
    keep &= ~(lanes == "comm:dp")  # weight-gradient collectives are not blocking
    total_ns = float(dur[keep].sum())
    pp, ga, vpp = int(aicb["pp"]), int(aicb["ga"]), int(aicb["vpp"])
    return total_ns * 1e-9 * (pp - 1) / (ga * vpp)

