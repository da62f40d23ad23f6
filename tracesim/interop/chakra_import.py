"""Reading Chakra execution traces into a tracesim task graph (see :mod:`tracesim.interop.chakra`).

Files tracesim wrote carry ``tracesim.*`` attributes and come back exactly (same tasks in the
same order, lanes, groups, match keys, nanosecond durations). For other files: durations are
``duration_micros`` x 1000; COMP nodes run on lane ``cpu`` or ``compute`` by ``is_cpu_op``
(absent: GPU, as ASTRA-sim reads it), collectives on ``comm:pg<name>``, sends / receives on
``send`` / ``recv``, other node types (metadata, memory) on ``other``; tasks are ordered
topologically (smallest node id first among the ready ones); collectives on one
communicator match across ranks by their order, sends and receives by (src, dst, tag,
order); a collective's ranks come from the communicator-group JSON (``pg_name`` empty or
``0``: all ranks).

The files are read in bulk: every distinct node message is decoded once
(:mod:`tracesim.interop.chakra_decode`), and each rank's tasks, lanes, groups, match keys
and edges are computed with array operations over the decoded rows (:class:`_Ranks`); the
task table keeps its strings as Categoricals, as the builder's graphs do.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tracesim.engine.symmetry import SYMMETRY_MIN_GPUS
from tracesim.errors import InputError
from tracesim.graph.taskgraph import TaskGraph
from tracesim.interop import chakra_schema as pb
from tracesim.interop.chakra_decode import NodeTable
from tracesim.interop.chakra_ranks import Ranks
from tracesim.interop.chakra_scan import Scanner
from tracesim.interop.chakra_symmetry import NotSymmetric, Symmetry, placement_of
from tracesim.trace.kineto import load_json_file
from tracesim.trace.sources import gc_paused

_ET_NAME = re.compile(r"^(?P<stem>.+)\.(?P<rank>\d+)\.et$")


def find_et_files(prefix: str | Path) -> tuple[Path, dict[int, Path]]:
    """The prefix and the ``{rank: file}`` of a set of ET files.

    ``prefix`` may be the prefix itself (``run/workload``), one of the files
    (``run/workload.0.et``) or a directory holding the files of exactly one prefix.
    """
    p = Path(prefix)
    if p.is_dir():
        stems = {m.group("stem") for f in p.glob("*.et") if (m := _ET_NAME.match(f.name))}
        if len(stems) != 1:
            raise InputError(f"expected the ET files of one prefix (<prefix>.<rank>.et), found "
                             f"{len(stems)} prefixes", p)
        p = p / stems.pop()
    elif (m := _ET_NAME.match(p.name)) is not None:
        p = p.parent / m.group("stem")
    files = {}
    parent = p.parent if str(p.parent) else Path(".")
    if parent.is_dir():
        for f in parent.iterdir():
            m = _ET_NAME.match(f.name)
            if m and m.group("stem") == p.name:
                files[int(m.group("rank"))] = f
    if not files:
        raise InputError("no Chakra ET files <prefix>.<rank>.et found", p)
    return p, dict(sorted(files.items()))


def read_et(path: Path) -> tuple[Any, list[Any]]:
    """The GlobalMetadata message and the Node messages of one ET file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", path) from None
    nodes = []
    meta = None
    try:
        for off, body in pb.iter_delimited(data):
            msg = pb.GlobalMetadata() if meta is None else pb.Node()
            try:
                msg.ParseFromString(body)
            except Exception as exc:  # protobuf DecodeError
                raise InputError(f"not a Chakra ET message ({exc})", path, f"byte {off}") from None
            if meta is None:
                meta = msg
            else:
                nodes.append(msg)
    except ValueError as exc:
        raise InputError(f"truncated ET file: {exc}", path) from None
    if meta is None:
        raise InputError("empty ET file (no GlobalMetadata)", path)
    return meta, nodes


def load_comm_groups(path: str | Path | None) -> dict[str, tuple[int, ...]]:
    """Read an ASTRA-sim communicator-group JSON (``{"<id>": [ranks]}``)."""
    if path is None:
        return {}
    p = Path(path)
    data = load_json_file(p, expected="a JSON file")
    if not isinstance(data, dict):
        raise InputError("expected a mapping of group id -> list of ranks", p)
    out = {}
    for k, v in data.items():
        if not isinstance(v, list) or not all(isinstance(r, int) and r >= 0 for r in v) or not v:
            raise InputError(f"expected a non-empty list of ranks, got {v!r}", p, str(k))
        out[str(k)] = tuple(sorted(v))
    return out


def import_chakra(prefix: str | Path, comm_groups: str | Path | Mapping[str, Any] | None = None,
                  *, plain: bool = False, symmetric: bool | None = False) -> TaskGraph:
    """Read ``<prefix>.<rank>.et`` files (and the communicator-group JSON) as a task graph.

    Args:
        prefix: the ET prefix, one ET file, or a directory with one prefix's files.
        comm_groups: the communicator-group JSON (path or parsed mapping); by default
            ``<prefix>.json`` when it exists.
        plain: ignore the ``tracesim.*`` attributes, reading the files as another tool
            (ASTRA-sim) sees them: microsecond durations, no lanes.
        symmetric: keep one representative rank per pipeline stage when tracesim's files
            of a layout show every other rank running its representative's program
            (:mod:`tracesim.interop.chakra_symmetry`; the graph a symmetry-reduced native
            replay uses, meta ``representatives``, ``world``); else every rank. None: so
            from :data:`~tracesim.engine.symmetry.SYMMETRY_MIN_GPUS` ranks up, as a native
            replay; False: every rank.

    Raises:
        InputError: naming the file and node for undecodable messages, dependencies on
            missing nodes, cycles, unknown communicators or collective types.
    """
    prefix, files = find_et_files(prefix)
    if comm_groups is None:
        default = Path(f"{prefix}.json")
        groups_by_pg = load_comm_groups(default if default.exists() else None)
    elif isinstance(comm_groups, Mapping):
        groups_by_pg = {str(k): tuple(sorted(int(r) for r in v)) for k, v in comm_groups.items()}
    else:
        groups_by_pg = load_comm_groups(comm_groups)
    _check_files(prefix, files, groups_by_pg)
    try:
        return _read(prefix, files, groups_by_pg, plain, symmetric)
    except NotSymmetric:
        return _read(prefix, files, groups_by_pg, plain, False)


def _check_files(prefix: Path, files: Mapping[int, Path],
                 groups_by_pg: Mapping[str, tuple[int, ...]]) -> None:
    """Every rank a communicator group names has its ET file (a missing one would leave its
    partners' collectives waiting forever in the replay)."""
    for pg, members in sorted(groups_by_pg.items()):
        missing = [r for r in members if r not in files]
        if missing:
            raise InputError(f"file not found: rank {missing[0]} is in communicator group {pg!r} "
                             f"but has no ET file (ranks with files: "
                             f"{', '.join(map(str, files))})", f"{prefix}.{missing[0]}.et")


def _read(prefix: Path, files: Mapping[int, Path], groups_by_pg: Mapping[str, tuple[int, ...]],
          plain: bool, symmetric: bool | None) -> TaskGraph:
    all_ranks = tuple(files)
    table = NodeTable(plain, groups_by_pg, all_ranks)
    scanner = Scanner(table)
    ranks = Ranks(table, all_ranks)
    graph_meta: dict[str, Any] = {}
    # the rows, messages and arrays read live on: a full collection would walk them all
    with gc_paused():
        for r, path in files.items():
            scanned = scanner.scan(path)
            if not graph_meta and not plain:
                graph_meta = _graph_meta(scanned.meta)
                ranks.symmetry = _symmetry(table, graph_meta, all_ranks, symmetric)
            table.flush()
            ranks.add(r, path, scanned)
        del scanner, scanned
        table.release()
        graph_meta["imported_from"] = {"format": "chakra", "prefix": str(prefix)}
        if ranks.symmetry is not None:
            graph_meta.update(representatives=True, world=len(all_ranks))
        graph = ranks.graph(graph_meta)
        try:
            ranks.check(graph)
        except ValueError as exc:
            raise InputError(f"the ET files do not form a replayable graph: {exc}", prefix) from None
    if ranks.symmetry is not None:
        # as the builder's representatives: collectives without present partners, their
        # full group kept for tracesim.engine.symmetry.SymmetricComm
        t = graph.tasks
        t["sym_group"] = t["group"].copy()
        coll = (t["kind"] == "coll").to_numpy()
        t["group"] = np.where(coll, -1, t["group"].to_numpy()).astype(t["sym_group"].dtype)
    return graph


def _symmetry(table: NodeTable, meta: dict[str, Any], all_ranks: tuple[int, ...],
              symmetric: bool | None) -> Symmetry | None:
    """The check of a symmetric layout's ranks, when the reduced graph is wanted and the
    files are those of a tracesim layout (every rank 0..world-1)."""
    if symmetric is False or all_ranks != tuple(range(len(all_ranks))):
        return None
    if symmetric is None and len(all_ranks) < SYMMETRY_MIN_GPUS:
        return None
    placement = placement_of(meta, len(all_ranks))
    return None if placement is None else Symmetry(table, placement)


def _graph_meta(gm: Any) -> dict[str, Any]:
    """The graph meta tracesim's exporter put in the GlobalMetadata ({} when absent)."""
    text = None
    for a in gm.attr:
        if a.name == "tracesim.meta_json":
            text = pb.attr_value(a)
    if text is None:
        return {}
    try:
        return dict(json.loads(text))
    except (ValueError, TypeError):
        return {}
