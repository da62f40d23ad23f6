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
import simpy

from tracesim.network.flows import FlowNetwork

#: columns of links.parquet
LINK_COLUMNS = ("link", "name", "kind", "capacity_GBps", "bin", "t0_ns", "t1_ns", "bytes",
                "utilisation")


class LinkRecorder(FlowNetwork):
    """A flow network that remembers each flow's links and bytes (see the module docstring)."""

    def __init__(self, capacity: np.ndarray):
        super().__init__(capacity, record=True)
        self._linkrec_batches: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []

    @classmethod
    def install(cls, net: Any) -> LinkRecorder:
        """Replace ``net.flows`` (a NetworkModel's flow network, before the replay attaches
        it) by a recorder over the same links; returns the recorder."""
        rec = cls(net.flows.capacity)
        net.flows = rec
        return rec

    def start(self, e_ptr: np.ndarray, e_link: np.ndarray, nbytes: np.ndarray) -> simpy.Event:
        fid0 = self._next_fid
        ev = super().start(e_ptr, e_link, nbytes)
        n = len(np.asarray(nbytes))
        if n:
            self._linkrec_batches.append((fid0, np.asarray(e_ptr, dtype=np.int64).copy(),
                                  np.asarray(e_link, dtype=np.int64).copy(),
                                  np.asarray(nbytes, dtype=np.float64).copy()))
        return ev

    def entries(self) -> pd.DataFrame:
        """One row per (flow, interval of constant rate, link) of the flows that finished:
        ``link``, ``bytes``, ``start_ns``, ``end_ns``."""
        if not self._linkrec_batches or not self.records or not self.segments:
            return pd.DataFrame({"link": np.zeros(0, np.int64), "bytes": np.zeros(0),
                                 "start_ns": np.zeros(0, np.int64), "end_ns": np.zeros(0, np.int64)})
        rec_fid = np.fromiter((r.flow_id for r in self.records), np.int64, len(self.records))
        n_fid = max(int(rec_fid.max()), max(f0 + len(e_ptr) - 1 for f0, e_ptr, _, _ in
                                            self._linkrec_batches)) + 1
        finished = np.zeros(n_fid, dtype=bool)
        finished[rec_fid] = True
        # the links of every flow, CSR by flow id
        n_links = np.zeros(n_fid, dtype=np.int64)
        for fid0, e_ptr, _, _ in self._linkrec_batches:
            n_links[fid0 : fid0 + len(e_ptr) - 1] = np.diff(e_ptr)
        ptr = np.r_[0, np.cumsum(n_links)]
        link_of = np.zeros(int(ptr[-1]), dtype=np.int64)
        for fid0, _, e_link, _ in self._linkrec_batches:
            link_of[ptr[fid0] : ptr[fid0] + len(e_link)] = e_link
        fid = np.concatenate([s[0] for s in self.segments])
        t0 = np.concatenate([s[1] for s in self.segments])
        t1 = np.concatenate([np.full(len(s[0]), s[2], dtype=np.int64) for s in self.segments])
        by = np.concatenate([s[3] for s in self.segments])
        ok = finished[fid]
        fid, t0, t1, by = fid[ok], t0[ok], t1[ok], by[ok]
        cnt = n_links[fid]
        row = np.repeat(np.arange(len(fid)), cnt)
        first = np.repeat(ptr[fid], cnt)
        pos = first + np.arange(len(row)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        return pd.DataFrame({"link": link_of[pos], "bytes": by[row], "start_ns": t0[row],
                             "end_ns": t1[row]})


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
    ent = recorder.entries()
    if ent.empty:
        return empty
    edges = np.linspace(0, makespan_ns, bins + 1)
    width = np.diff(edges)
    parts = []
    kinds = getattr(topology, "kind", None)
    for link, g in ent.groupby("link", sort=True):
        s = g["start_ns"].to_numpy(np.float64)
        e = g["end_ns"].to_numpy(np.float64)
        b = g["bytes"].to_numpy(np.float64)
        cum = _cumulative(s, e, b, edges)
        per_bin = np.diff(cum)
        cap = float(topology.capacity[int(link)])  # bytes/ns == GB/s
        parts.append(pd.DataFrame({
            "link": np.full(bins, int(link), dtype=np.int64),
            "name": topology.link_name(int(link)),
            "kind": _kind_name(kinds[int(link)]) if kinds is not None else "",
            "capacity_GBps": cap,
            "bin": np.arange(bins, dtype=np.int32),
            "t0_ns": edges[:-1].round().astype(np.int64),
            "t1_ns": edges[1:].round().astype(np.int64),
            "bytes": per_bin,
            "utilisation": np.clip(per_bin / (cap * width), 0.0, None),
        }))
    return pd.concat(parts, ignore_index=True)


def _cumulative(s: np.ndarray, e: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Bytes delivered by time ``t`` when each flow moves ``b`` evenly over [s, e)."""
    inst = e <= s  # zero-length flows: all bytes at s
    rate = np.where(inst, 0.0, b / np.where(inst, 1.0, e - s))
    o_s, o_e = np.argsort(s), np.argsort(e)
    cr_s = np.concatenate([[0.0], np.cumsum(rate[o_s])])
    crs_s = np.concatenate([[0.0], np.cumsum((rate * s)[o_s])])
    cr_e = np.concatenate([[0.0], np.cumsum(rate[o_e])])
    cre_e = np.concatenate([[0.0], np.cumsum((rate * e)[o_e])])
    ks = np.searchsorted(s[o_s], t, side="left")
    ke = np.searchsorted(e[o_e], t, side="left")
    out = (t * cr_s[ks] - crs_s[ks]) - (t * cr_e[ke] - cre_e[ke])
    if inst.any():
        si = np.sort(s[inst])
        cb = np.concatenate([[0.0], np.cumsum(b[inst][np.argsort(s[inst])])])
        out = out + cb[np.searchsorted(si, t, side="right")]
    return out


def _kind_name(code: Any) -> str:
    from tracesim.network.topology import KIND_NAMES

    return KIND_NAMES[int(code)] if 0 <= int(code) < len(KIND_NAMES) else str(code)
