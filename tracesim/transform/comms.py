"""Communication of a recorded graph, re-timed on a network model.

Every collective and point-to-point task of the recording becomes an operation over its
full process group on the target network:

* **matched** (every member rank of the group is in the graph and the extractor matched
  the members' tasks, kinds ``coll`` / ``send`` / ``recv``): the members wait for each
  other in the replay and the network times the operation from the moment the last one
  arrived;
* **lone** (a trace of some ranks of a larger job: the other members were not recorded):
  the task runs alone and the network times the operation over the whole group, as if the
  absent members arrived at the same moment (they run the same program);
* **kept**: no group is known (no ``record_param_comms`` metadata and no world size), or a
  one-rank group: the measured time stays.

The group comes from the graph (``group``), else the op table's ``group_ranks`` of the
task's source event (``record_param_comms``: process group ranks), else ``world`` (the
recorded world size: the default process group). Groups may be grown first
(:func:`grow_groups`, the ``--dp`` what-if).

The engine is told the full group through the task's ``group_kind``, written as
``<kind>@<index>`` into :attr:`NetworkComms.groups`; :class:`GroupComm` (the communication
model handed to the engine) reads it back and asks the inner model for the full group.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import simpy

from tracesim.engine.comm import CommModel
from tracesim.errors import InputError
from tracesim.graph.taskgraph import COMM_KINDS, TaskGraph

#: group kinds a --dp what-if grows (``world``: the default group of a pure data-parallel job)
DP_KINDS = ("dp", "world")


@dataclass(frozen=True)
class NetworkComms:
    """A graph whose communication the network times, and what was done to it.

    Attributes:
        graph: the graph (lone operations turned into single-member ``coll`` tasks).
        groups: the full groups, indexed by the ``@<index>`` of ``group_kind``.
        counts: tasks per outcome: ``matched``, ``lone``, ``kept``.
        kept_ns: recorded time of the kept tasks.
        world: ranks of the (possibly grown) job.
    """

    graph: TaskGraph
    groups: tuple[tuple[int, ...], ...]
    counts: dict[str, int]
    kept_ns: int
    world: int


def comm_tasks(graph: TaskGraph) -> np.ndarray:
    """Indices of the tasks that move data between ranks."""
    t = graph.tasks
    kind = t["kind"].to_numpy()
    cls = t["op_class"].to_numpy()
    coll = t["collective"].to_numpy().astype(str)
    return np.flatnonzero(np.isin(kind, COMM_KINDS) | ((kind == "gpu") & (cls == "comm") & (coll != "")))


def _op_groups(graph: TaskGraph, op_table: pd.DataFrame | None, idx: np.ndarray) -> list[tuple[int, ...] | None]:
    """Group ranks of tasks ``idx`` from the op table's ``group_ranks`` (None where absent)."""
    out: list[tuple[int, ...] | None] = [None] * len(idx)
    t = graph.tasks
    if op_table is None or "src_event" not in t or "group_ranks" not in op_table or not len(idx):
        return out
    ops = op_table.loc[op_table["group_ranks"].astype(str) != "", ["rank", "event_id", "group_ranks"]]
    lookup = {(int(r), int(e)): g for r, e, g in ops.itertuples(index=False, name=None)}
    ranks = t["rank"].to_numpy()[idx]
    events = t["src_event"].to_numpy()[idx]
    cache: dict[str, tuple[int, ...] | None] = {}
    for k, (r, e) in enumerate(zip(ranks.tolist(), events.tolist(), strict=True)):
        text = lookup.get((int(r), int(e)))
        if text is None:
            continue
        if text not in cache:
            try:
                cache[text] = tuple(sorted(int(x) for x in json.loads(text)))
            except (ValueError, TypeError):
                cache[text] = None
        out[k] = cache[text]
    return out


def network_comms(graph: TaskGraph, *, op_table: pd.DataFrame | None = None,
                  world: int | None = None, dp: int | None = None) -> NetworkComms:
    """Hand the graph's communication to the network (module docstring).

    Args:
        graph: an extracted (or imported) graph.
        op_table: the source's op table (group ranks of each comm op), if any.
        world: the recorded world size (the default group's size), if known.
        dp: grow the data-parallel groups to this many ranks (:func:`grow_groups`).
    """
    t = graph.tasks.copy()
    idx = comm_tasks(graph)
    kind = t["kind"].to_numpy()
    group = t["group"].to_numpy()
    rank = t["rank"].to_numpy()
    coll = t["collective"].to_numpy().astype(str)
    peer = t["peer"].to_numpy()
    gkind = t["group_kind"].to_numpy().astype(str)
    from_ops = _op_groups(graph, op_table, idx)
    full: list[tuple[int, ...] | None] = []
    for k, i in enumerate(idx.tolist()):
        g: tuple[int, ...] | None = None
        if coll[i] in ("send", "recv") and peer[i] >= 0:
            g = (int(rank[i]), int(peer[i])) if coll[i] == "send" else (int(peer[i]), int(rank[i]))
        elif 0 <= group[i] < len(graph.groups) and len(graph.groups[group[i]]) > 1:
            g = tuple(sorted(int(x) for x in graph.groups[group[i]]))
        elif from_ops[k] is not None:
            g = from_ops[k]
        elif world and world > 1:
            g = tuple(range(world))
        full.append(g if g is not None and len(g) > 1 else None)
    job = max([world or 0, len(graph.ranks) and max(graph.ranks) + 1]
              + [max(g) + 1 for g in full if g])
    kinds = [_kind_of(gkind[i], g, job) for i, g in zip(idx.tolist(), full, strict=True)]
    if dp is not None:
        full, job = grow_groups(full, kinds, job, dp)
    table: dict[tuple[int, ...], int] = {}
    new_kind = t["kind"].to_numpy().copy()
    new_gk = gkind.astype(object).copy()
    new_coll = coll.astype(object).copy()
    new_group = group.copy()
    keys = t["match_key"].to_numpy().astype(object).copy()
    counts = {"matched": 0, "lone": 0, "kept": 0}
    kept_ns = 0
    dur = t["dur_ns"].to_numpy()
    for i, g, gk in zip(idx.tolist(), full, kinds, strict=True):
        if g is None:
            counts["kept"] += 1
            kept_ns += int(dur[i])
            if kind[i] != "gpu":  # a matched task with no usable group: the recorded time
                new_kind[i] = "gpu"
            continue
        j = table.setdefault(g, len(table))
        new_gk[i] = f"{gk}@{j}"
        if kind[i] in COMM_KINDS and keys[i]:
            counts["matched"] += 1
            continue
        counts["lone"] += 1
        new_kind[i] = "coll"
        new_group[i] = -1
        keys[i] = f"lone#{i}"
        if coll[i] in ("send", "recv"):
            new_coll[i] = "send_recv"
    t["kind"] = new_kind
    t["group_kind"] = new_gk
    t["collective"] = new_coll
    t["group"] = new_group.astype(np.int32)
    t["match_key"] = keys
    groups = tuple(sorted(table, key=table.__getitem__))
    return NetworkComms(graph.replace(tasks=t), groups, counts, kept_ns, job)


def _kind_of(recorded: str, group: tuple[int, ...] | None, job: int) -> str:
    """The parallel dimension of a group: the recorded kind, else ``world`` for the default
    group (every rank of the job), else ``pg``."""
    base = recorded.split("@")[0]
    if base:
        return base
    if group is not None and len(group) == job:
        return "world"
    return "pg"


def grow_groups(groups: Sequence[tuple[int, ...] | None], kinds: Sequence[str], job: int,
                dp: int) -> tuple[list[tuple[int, ...] | None], int]:
    """Data-parallel groups grown to ``dp`` ranks (Lumos' data-parallel what-if).

    The job of ``job`` ranks is repeated ``dp / d`` times (``d``: the recorded data-parallel
    degree); copy ``j`` holds ranks ``r + j * job``. Every data-parallel group takes in its
    members' copies; other groups stay within their copy. Returns the new groups and the new
    job size. A recording without data-parallel collectives has degree 1: ``dp`` 1 leaves it
    as it is, more is an error (no gradient reduction to grow).
    """
    dp_sizes = {len(g) for g, k in zip(groups, kinds, strict=True) if g and k in DP_KINDS}
    if not dp_sizes and dp == 1:  # the degree a job without data parallelism has: unchanged
        return list(groups), job
    if not dp_sizes:
        raise InputError("the recording has no data-parallel collective to grow (no group "
                         "named data-parallel and no collective over every rank)", "--dp")
    if len(dp_sizes) > 1:
        raise InputError(f"the recording's data-parallel groups differ in size "
                         f"({sorted(dp_sizes)}); cannot tell the degree to grow", "--dp")
    d = dp_sizes.pop()
    if dp % d:
        raise InputError(f"must be a multiple of the recorded data-parallel degree {d}", "--dp")
    k = dp // d
    out: list[tuple[int, ...] | None] = []
    for g, kind in zip(groups, kinds, strict=True):
        if g is not None and kind in DP_KINDS:
            g = tuple(sorted(r + j * job for r in g for j in range(k)))
        out.append(g)
    return out, job * k


class GroupComm:
    """The engine's communication model for a graph from :func:`network_comms`: an
    operation tagged ``<kind>@<index>`` runs over ``groups[index]`` on the inner model."""

    def __init__(self, inner: CommModel, groups: Sequence[tuple[int, ...]]):
        self.inner = inner
        self.groups = tuple(groups)

    def attach(self, env: simpy.Environment) -> None:
        self.inner.attach(env)

    def collective(self, collective: str, ranks: tuple[int, ...], msg_bytes: int,
                   group_kind: str = "", algorithm: str = "", chunks: int = 1) -> simpy.Event:
        base, at, index = group_kind.partition("@")
        if at:
            ranks = self.groups[int(index)]
        if collective == "send_recv":
            return self.inner.p2p(ranks[0], ranks[1], msg_bytes, base)
        more: dict[str, Any] = {"algorithm": algorithm} if algorithm else {}
        if chunks > 1:
            more["chunks"] = chunks
        return self.inner.collective(collective, tuple(ranks), msg_bytes, base, **more)

    def p2p(self, src: int, dst: int, nbytes: int, group_kind: str = "") -> simpy.Event:
        return self.inner.p2p(src, dst, nbytes, group_kind.partition("@")[0])

    def __getattr__(self, name: str) -> Any:  # records, topology: the inner model's
        return getattr(self.inner, name)
