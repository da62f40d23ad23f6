"""Per-link traffic of a flow-level replay, and its utilisation over time.

:class:`LinkRecorder` is a :class:`~tracesim.network.flows.FlowNetwork` that also keeps, for
every flow, the links it crossed, the bytes it moved and (through the network's own
``record=True`` flow records) when it started and ended. :func:`link_utilisation` turns that
into ``links.parquet``: for each link that carried traffic and each of ``bins`` equal time
bins of the iteration, the bytes carried and the utilisation (bytes over capacity x bin
length). The network records the bytes each flow moved over each interval at one max-min
rate (``FlowNetwork.segments``), so the figure is exact: a bin's bytes are what the flows
moved in it, and no link exceeds its capacity (up to the rounding of completion times to
whole nanoseconds).

Only a flow-level replay has flows: with the ``estimate`` network there is nothing to
record and the table is empty.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracesim.network.flows import FlowNetwork
from tracesim.network.flowstate import Route, ranges

#: columns of links.parquet
LINK_COLUMNS = ("link", "name", "kind", "capacity_GBps", "bin", "t0_ns", "t1_ns", "bytes",
                "utilisation")


class LinkRecorder(FlowNetwork):
    """A flow network that remembers each flow's links and bytes (see the module docstring)."""

    def __init__(self, capacity: np.ndarray):
        super().__init__(capacity, record=True)
        self._linkrec_batches: list[tuple[int, Route]] = []

    @classmethod
    def install(cls, net: Any) -> LinkRecorder:
        """Replace ``net.flows`` (a NetworkModel's flow network, before the replay attaches
        it) by a recorder over the same links; returns the recorder."""
        rec = cls(net.flows.capacity)
        net.flows = rec
        return rec

    def _new_fids(self, fid0: int, rt: Route, nb: np.ndarray) -> None:
        if len(nb):
            self._linkrec_batches.append((fid0, rt))

    def traffic(self, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bytes the finished flows moved over each link in each time bin ``[edges[j],
        edges[j + 1])``: (the links that carried any, ascending; bytes, one row per such link,
        one column per bin). A flow moves its bytes of each interval of constant rate evenly
        over it; bytes outside ``[edges[0], edges[-1]]`` are left out."""
        n_bins = len(edges) - 1
        none = (np.zeros(0, np.int64), np.zeros((0, n_bins)))
        if not self._linkrec_batches or not self.records or not self.segments:
            return none
        # the links of every flow, CSR by flow id: the batches, in the order their ids were
        # given, cover the ids without gaps
        batches = self._linkrec_batches
        lens: dict[int, np.ndarray] = {}
        for _, rt in batches:
            if id(rt) not in lens:
                lens[id(rt)] = np.bincount(rt.e_flow, minlength=len(rt.rate0)).astype(np.int64)
        fid0 = np.fromiter((f for f, _ in batches), np.int64, len(batches))
        n_links = np.concatenate([lens[id(rt)] for _, rt in batches])
        link_of = np.concatenate([rt.e_link for _, rt in batches])
        n_flows = np.fromiter((len(lens[id(rt)]) for _, rt in batches), np.int64, len(fid0))
        if fid0[0] != 0 or (np.diff(fid0) != n_flows[:-1]).any():
            raise RuntimeError("flow ids of the recorded batches are not contiguous")
        rec_fid = self.records.flow_ids()
        n_fid = max(int(rec_fid.max()) + 1, len(n_links))
        n_links = np.r_[n_links, np.zeros(n_fid - len(n_links), np.int64)]
        finished = np.zeros(n_fid, dtype=bool)
        finished[rec_fid] = True
        ptr = np.r_[0, np.cumsum(n_links)]
        seg = self.segments
        fid = np.concatenate([x[0] for x in seg])
        t0 = np.concatenate([x[1] for x in seg]).astype(np.float64)
        t1 = np.repeat(np.fromiter((x[2] for x in seg), np.float64, len(seg)),
                       np.fromiter((len(x[0]) for x in seg), np.int64, len(seg)))
        by = np.concatenate([x[3] for x in seg])
        ok = finished[fid]
        fid, t0, t1, by = fid[ok], t0[ok], t1[ok], by[ok]
        row, col, part = _binned(t0, t1, by, edges)  # per interval: bins and bytes
        f = fid[row]
        cnt = n_links[f]
        link = link_of[ranges(ptr[f], ptr[f] + cnt)]
        used = np.zeros(int(link.max()) + 1 if len(link) else 0, dtype=bool)
        used[link] = True
        links = np.flatnonzero(used)
        local = (np.cumsum(used) - 1)[link]
        flat = np.bincount(local * n_bins + np.repeat(col, cnt), weights=np.repeat(part, cnt),
                           minlength=len(links) * n_bins)
        return links.astype(np.int64), flat.reshape(len(links), n_bins)


def link_utilisation(recorder: LinkRecorder | None, topology: Any, makespan_ns: int,
                     bins: int = 200) -> pd.DataFrame:
    """``links.parquet``: bytes and utilisation per link and time bin (module docstring).

    Args:
        recorder: the recorder of the replay, or None (then the table is empty).
        topology: the :class:`~tracesim.network.topology.Topology` (names, capacities).
        makespan_ns: the iteration time; bins cover [0, makespan_ns).
        bins: number of equal time bins.
    """
    empty = pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(
        LINK_COLUMNS, ("int64", "str", "str", "float64", "int32", "int64", "int64", "float64",
                       "float64"), strict=True)})
    if recorder is None or makespan_ns <= 0:
        return empty
    edges = np.linspace(0, makespan_ns, bins + 1)
    links, per_bin = recorder.traffic(edges)
    if not len(links):
        return empty
    width = np.diff(edges)
    cap = np.asarray(topology.capacity, dtype=np.float64)[links]  # bytes/ns == GB/s
    kinds = getattr(topology, "kind", None)
    names = [topology.link_name(int(x)) for x in links.tolist()]
    kind_names = ([_kind_name(kinds[int(x)]) for x in links.tolist()] if kinds is not None
                  else [""] * len(links))
    return pd.DataFrame({
        "link": np.repeat(links, bins),
        "name": np.repeat(np.asarray(names, dtype=object), bins),
        "kind": np.repeat(np.asarray(kind_names, dtype=object), bins),
        "capacity_GBps": np.repeat(cap, bins),
        "bin": np.tile(np.arange(bins, dtype=np.int32), len(links)),
        "t0_ns": np.tile(edges[:-1].round().astype(np.int64), len(links)),
        "t1_ns": np.tile(edges[1:].round().astype(np.int64), len(links)),
        "bytes": per_bin.ravel(),
        "utilisation": np.clip(per_bin / (cap[:, None] * width), 0.0, None).ravel(),
    })


def _binned(s: np.ndarray, e: np.ndarray, b: np.ndarray,
            edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How intervals that move ``b`` bytes evenly over ``[s, e)`` fill the bins ``[edges[j],
    edges[j + 1])``: (interval, bin, bytes) for each pair that overlaps. An interval of no
    length puts its bytes in the bin holding ``s`` (the last bin holds its end too)."""
    n_bins = len(edges) - 1
    inst = e <= s
    lo = np.searchsorted(edges, s, side="right") - 1
    hi = np.where(inst, lo, np.searchsorted(edges, e, side="left") - 1)
    lo_c, hi_c = np.clip(lo, 0, n_bins - 1), np.clip(hi, 0, n_bins - 1)
    span = np.where(hi_c >= lo_c, hi_c - lo_c + 1, 0)
    row = np.repeat(np.arange(len(s)), span)
    col = ranges(lo_c, lo_c + span)
    a = np.maximum(s[row], edges[col])
    z = np.minimum(e[row], edges[col + 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        part = np.where(inst[row], b[row] * ((s[row] >= edges[0]) & (s[row] <= edges[-1])),
                        b[row] * np.clip(z - a, 0.0, None) / (e[row] - s[row]))
    return row, col, part


def _kind_name(code: Any) -> str:
    from tracesim.network.topology import KIND_NAMES

    return KIND_NAMES[int(code)] if 0 <= int(code) < len(KIND_NAMES) else str(code)
