"""Workload formats: read any supported source as a task graph, write a graph in any format.

Formats (a registry, :data:`FORMATS`, filled by :func:`register_format`):

* ``tracesim``: a workload directory (``graph.yaml`` + Parquet tables,
  :mod:`tracesim.graph.io`); also readable: a bundle or Kineto trace, extracted.
* ``chakra``: ``<prefix>.<rank>.et`` + ``<prefix>.json`` (:mod:`tracesim.interop.chakra`).
* ``aicb``: a SimAI / AICB workload ``.txt`` (:mod:`tracesim.interop.aicb`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.graph.taskgraph import TaskGraph


@dataclass(frozen=True)
class Format:
    """A workload format: how to recognise, read and write it.

    ``detect(path) -> bool``; ``read(path, options) -> TaskGraph``;
    ``write(graph, path, options) -> (written paths, warnings)``; ``write_parts(parts, meta,
    path, options) -> (written paths, tasks per rank)``: the same from a workload given as
    graphs of a few ranks each (``parts()`` yields them, and yields them again when called
    again; ``meta``: the workload's), for a format written rank by rank.
    """

    name: str
    detect: Callable[[Path], bool]
    read: Callable[[Path, Mapping[str, Any]], TaskGraph] | None
    write: Callable[[TaskGraph, Path, Mapping[str, Any]], tuple[list[Path], list[str]]] | None
    write_parts: Callable[..., tuple[list[Path], dict[int, int]]] | None = None


FORMATS: dict[str, Format] = {}


def register_format(name: str, detect: Callable[[Path], bool]) -> Callable:
    """Decorator on a class with optional static ``read`` / ``write``: registers the format."""
    def deco(cls: Any) -> Any:
        FORMATS[name] = Format(name, detect, getattr(cls, "read", None), getattr(cls, "write", None),
                               getattr(cls, "write_parts", None))
        return cls

    return deco


def _is_workload(p: Path) -> bool:
    return p.is_dir() and (p / "graph.yaml").exists()


def _is_recorded(p: Path) -> bool:
    """A bundle, a trace file, or a folder of per-rank traces (as ``replay`` reads them;
    not a folder of Chakra ET files, whose communicator file is JSON too)."""
    if p.is_dir():
        if (p / "meta.yaml").exists():
            return True
        from tracesim.trace.folders import has_trace_files

        return not (p / "graph.yaml").exists() and not any(p.glob("*.et")) and has_trace_files(p)
    return p.name.lower().endswith((".json", ".json.gz"))


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

        return import_chakra(path, opts.get("comm_groups"), plain=bool(opts.get("plain")),
                             symmetric=opts.get("symmetric", False))

    @staticmethod
    def write(graph: TaskGraph, path: Path, opts: Mapping[str, Any]) -> tuple[list[Path], list[str]]:
        from tracesim.interop.chakra import export_chakra

        prefix = path / "workload" if path.is_dir() else path
        ex = export_chakra(graph, prefix)
        return list(ex.et_files) + [ex.comm_group_file], []

    @staticmethod
    def write_parts(parts: Callable[[], Iterable[TaskGraph]], meta: Mapping[str, Any], path: Path,
                    opts: Mapping[str, Any]) -> tuple[list[Path], dict[int, int]]:
        from tracesim.interop.chakra import export_chakra_parts

        prefix = path / "workload" if path.is_dir() else path
        ex = export_chakra_parts(parts, prefix, meta)
        return list(ex.et_files) + [ex.comm_group_file], ex.nodes_per_rank


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


def save_workload_parts(parts: Callable[[], Iterable[TaskGraph]], meta: Mapping[str, Any],
                        path: str | Path, fmt: str) -> tuple[list[Path], dict[int, int]] | None:
    """Write a workload given as graphs of a few ranks each (``parts()`` yields them, each
    time it is called) as ``fmt``; returns (written paths, tasks per rank), or None when
    ``fmt`` is not written rank by rank (then :func:`save_workload` needs the whole graph)."""
    f = FORMATS.get(fmt)
    if f is None or f.write_parts is None:
        return None
    return f.write_parts(parts, meta, Path(path), {})
