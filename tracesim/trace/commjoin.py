"""Joining communication kernels to the host events that describe them (for :mod:`tracesim.trace.kineto`).

An NCCL / RCCL kernel carries no metadata of its own that every trace has; the host side
does. The kernel is joined to its launch call through its correlation id (CUDA graphs: every
kernel of a graph shares the ``cudaGraphLaunch``'s), and the events enclosing that call
(``nccl:<op>``, ``record_param_comms``, ``c10d::<op>_``) describe the operation. Where no
launch call was traced (RCCL kernels of ROCm traces are launched from calls the profiler
does not record), the ``ac2g`` flow that starts at the launch site says on which thread and
when the launch happened, and the events enclosing that moment are used.
:func:`tracesim.trace.comms.combine` merges what they say; the kernel name is the fallback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tracesim.trace.comms import (
    CommInfo,
    DistInfo,
    combine,
    comm_level,
    group_kind_of,
    resolve_group,
)

#: columns this module fills, with their empty values
COMM_COLUMNS = ("collective", "msg_bytes", "group_ranks", "peer", "dtype", "pg", "comm_seq",
                "group_source", "group_kind", "comm_meta")


def flow_starts(events: list[Any]) -> dict[int, tuple[str, int]]:
    """Launch sites from ``ac2g`` flow starts: correlation id -> (host lane, ts in ns)."""
    out: dict[int, tuple[str, int]] = {}
    for ev in events:
        if (isinstance(ev, dict) and ev.get("ph") == "s" and ev.get("cat") == "ac2g"
                and isinstance(ev.get("id"), int) and isinstance(ev.get("ts"), (int, float))
                and not isinstance(ev.get("ts"), bool) and abs(ev["ts"]) < 2**62 / 1000.0):
            out.setdefault(int(ev["id"]), (f"cpu:{ev.get('tid')}", int(round(float(ev["ts"]) * 1000.0))))
    return out


class Enclosing:
    """The innermost host event of a lane that encloses a moment (lazily indexed)."""

    def __init__(self, lanes: np.ndarray, ts: np.ndarray, end: np.ndarray, host: np.ndarray,
                 parent: np.ndarray, pos_of_event: Mapping[int, int]):
        self.lanes, self.ts, self.end, self.host = lanes, ts, end, host
        self.parent, self.pos = parent, pos_of_event
        self.index: dict[str, tuple[np.ndarray, np.ndarray]] | None = None

    def at(self, lane: str, t: int) -> int:
        """Row of the innermost host event on ``lane`` with ts <= t <= end, -1 if none."""
        if self.index is None:
            self.index = {}
            for ln in np.unique(self.lanes[self.host].astype(str)):
                rows = self.host[self.lanes[self.host] == ln]
                rows = rows[np.lexsort((-self.end[rows], self.ts[rows]))]
                self.index[str(ln)] = (rows, self.ts[rows])
        got = self.index.get(lane)
        if got is None:
            return -1
        rows, starts = got
        k = int(np.searchsorted(starts, t, side="right")) - 1
        if k < 0:
            return -1
        i = int(rows[k])
        for _ in range(64):  # the last event started before t, or one of its parents
            if self.end[i] >= t:
                return i
            p = int(self.parent[i])
            if p < 0 or p not in self.pos:
                return -1
            i = self.pos[p]
        return -1


def fill_comm(cols: dict[str, np.ndarray], infos: Mapping[int, CommInfo],
              chains: Mapping[int, list[CommInfo]], names: np.ndarray, dist: DistInfo,
              rank: int) -> None:
    """Write the communication columns ``cols`` (see :data:`COMM_COLUMNS`): host comm events
    from their own ``infos``, comm kernels from the events around their launch (``chains``,
    innermost first) and their names."""
    for i, info in infos.items():
        if info.collective:
            _write(cols, i, info, comm_level(info), dist, rank)
    for i, chain in chains.items():
        info, level = combine(chain, str(names[i]))
        _write(cols, i, info, level, dist, rank)


def _write(cols: dict[str, np.ndarray], i: int, info: CommInfo, level: str, dist: DistInfo,
           rank: int) -> None:
    ranks, source = resolve_group(info, dist, rank)
    cols["collective"][i] = info.collective
    cols["msg_bytes"][i] = info.msg_bytes
    cols["group_ranks"][i] = ranks
    cols["group_source"][i] = source
    cols["peer"][i] = info.peer
    if info.dtype:
        cols["dtype"][i] = info.dtype
    cols["pg"][i] = info.pg or (next(iter(dist.groups)) if source == "pg_config" else "")
    cols["comm_seq"][i] = info.seq
    desc = info.desc or dist.descs.get(info.pg, "")
    cols["group_kind"][i] = group_kind_of(desc)
    cols["comm_meta"][i] = level
