"""Chakra execution traces <-> tracesim task graphs.

Export (:func:`export_chakra`) writes one ``<prefix>.<rank>.et`` file per rank (a
``GlobalMetadata`` message, then one ``Node`` per task of that rank, in task order) and the
communicator-group JSON ASTRA-sim takes with ``--comm-group-configuration``
(``<prefix>.json``: ``{"<group id>": [ranks...]}``, ids from 1; ASTRA-sim reserves ``0`` /
empty for "all ranks"). Import (:func:`tracesim.interop.chakra_import.import_chakra`) reads such files back into a
:class:`~tracesim.graph.taskgraph.TaskGraph` the engine replays.

Mapping (task -> node):

* kind ``cpu`` / ``gpu`` -> ``COMP_NODE`` (``is_cpu_op`` true for cpu), ``num_ops`` = flops,
  ``tensor_size`` = bytes; ``coll`` -> ``COMM_COLL_NODE`` with ``comm_type``, ``comm_size``
  (= ``msg_bytes``, nccl-tests convention), ``pg_name`` (the group id in the JSON) and
  ``involved_dim``; ``send`` / ``recv`` -> ``COMM_SEND_NODE`` / ``COMM_RECV_NODE`` with
  ``comm_src``, ``comm_dst``, ``comm_tag`` (one tag per matched pair), ``comm_size``.
  Attribute value kinds are the ones ASTRA-sim's feeder reads (``comm_size`` int64,
  ``tensor_size`` uint64, ``comm_src/dst/tag`` int32, ``is_cpu_op`` bool, ...).
* ``duration_micros`` = ``dur_ns`` rounded to whole microseconds (the format's unit).
* ``data_deps``: the task's explicit predecessors plus the previous task on its lane
  (ASTRA-sim has no lanes, so program order has to be a dependency); ``ctrl_deps``: the
  lane predecessor alone.
* What the format has no field for is kept in attributes named ``tracesim.*`` that other
  tools ignore: exact ``dur_ns`` / ``gap_ns``, lane name and kind, op class, phase, layer,
  step, group kind, match key, float flops / bytes; and the graph's meta (JSON) in the
  global metadata. With them, graph -> ET -> graph replays to the same nanosecond.

The files are encoded rank by rank (:mod:`tracesim.interop.chakra_write`): each rank's file
is written and dropped, and :func:`export_chakra_parts` takes the workload as graphs of a
few ranks each, so that a workload too large to hold at once can be written.
Import lives in :mod:`tracesim.interop.chakra_import`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.graph.chunks import expand_chunks
from tracesim.graph.taskgraph import TaskGraph
from tracesim.interop.chakra_write import ET_VERSION, write_ranks

__all__ = ["ET_VERSION", "ChakraExport", "export_chakra", "export_chakra_parts"]


@dataclass(frozen=True)
class ChakraExport:
    """What :func:`export_chakra` wrote: the per-rank files and the communicator JSON."""

    et_files: tuple[Path, ...]
    comm_group_file: Path
    comm_groups: dict[str, list[int]]
    nodes_per_rank: dict[int, int]


def export_chakra(graph: TaskGraph, prefix: str | Path, *, involved_dims: int = 4) -> ChakraExport:
    """Write ``graph`` as Chakra ET files ``<prefix>.<rank>.et`` plus ``<prefix>.json``.

    Args:
        graph: a task graph holding every rank (not a symmetry-reduced one).
        prefix: path prefix of the output files (its directory is created).
        involved_dims: length of the all-true ``involved_dim`` list put on collectives
            (ASTRA-sim's default when the attribute is absent is 4).

    Raises:
        InputError: the graph is symmetry-reduced, or has an edge between ranks, or a
            collective whose members disagree on its kind.
    """
    return export_chakra_parts(lambda: [graph], prefix, graph.meta, involved_dims=involved_dims)


def export_chakra_parts(parts: Callable[[], Iterable[TaskGraph]], prefix: str | Path,
                        meta: Mapping[str, Any], *, involved_dims: int = 4) -> ChakraExport:
    """:func:`export_chakra` of a workload given as graphs of whole ranks.

    ``parts()`` yields the graphs (each rank in one of them; ranks in ascending order across
    them give the files a single graph of every rank would); it is called twice, and the
    second time must yield the same graphs. ``meta``: the workload's graph meta (written to
    every file's global metadata).
    """
    if meta.get("representatives"):
        raise InputError("the graph holds one representative rank per stage; rebuild it with "
                         "every rank (no symmetry reduction) to export it", "graph", "meta")

    def ops() -> Iterable[TaskGraph]:  # one node per communication operation
        return (expand_chunks(g) for g in parts())

    files, cg, groups, counts = write_ranks(ops(), ops(), prefix, meta,
                                            involved_dims=involved_dims)
    return ChakraExport(tuple(files), cg, groups, counts)
