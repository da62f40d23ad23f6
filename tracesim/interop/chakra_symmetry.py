"""Reading the ET of a symmetric layout as the symmetry-reduced graph a native replay uses.

tracesim's own ET files carry the layout (the graph meta's ``parallel``). When every rank
of a pipeline stage runs its stage representative's program (the representative: TP, CP and
DP index 0, :meth:`tracesim.specs.placement.Placement.representatives`), only the
representatives' tasks are kept, as :func:`tracesim.build.builder.build_graph` builds them
with ``representatives=True``: their collectives keep their full group in ``sym_group``
(``group`` -1), and :class:`tracesim.engine.symmetry.SymmetricComm` runs each collective and
transfer of a representative once for every member of its class, on that member's own
group, as the full replay does.

:class:`Symmetry` checks each other rank against its representative as the files are read
(and stores nothing of it):

* the same tasks in the same order -- the node rows' kind, name, classes, durations, gaps,
  sizes, layer and lane -- the same lanes and the same edges;
* each collective runs on the rank's own group of the kind the representative's group is
  (the first kind of :data:`~tracesim.specs.placement.GROUP_KINDS` whose group holds the
  representative);
* the members of a group run its collectives with the same match keys in the same order
  (checked against the group's lowest rank), and no match key is used by two groups;
* each send and receive goes to the rank of the representative's peer's stage with the
  rank's own TP, CP and DP index, and within a pipeline (the ranks that share those
  indices) the transfers' match keys stand one for one for the representative pipeline's.

A rank that fails a check raises :class:`NotSymmetric`; the importer then reads the files
again into the graph of every rank.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracesim.interop.chakra_decode import NodeTable
from tracesim.specs.parallel import ParallelSpec
from tracesim.specs.placement import GROUP_KINDS, Placement

#: node-row columns a rank shares with its representative, task for task
_SAME = ("type", "dur_ns", "gap_ns", "layer", "msg_bytes", "flops", "bytes", "name", "kind",
         "op_class", "phase", "step", "group_kind", "collective", "lane", "lane_kind", "algorithm")


class NotSymmetric(Exception):
    """A rank's program is not its representative's (the reason in the message)."""


def placement_of(meta: Any, world: int) -> Placement | None:
    """The layout's placement from a graph meta's ``parallel`` (None without one, or when
    it does not have ``world`` ranks)."""
    par = meta.get("parallel") if isinstance(meta, dict) else None
    if not isinstance(par, dict) or meta.get("representatives"):
        return None
    try:
        spec = ParallelSpec(tp=int(par["tp"]), pp=int(par["pp"]), dp=int(par["dp"]),
                            cp=int(par["cp"]), ep=int(par["ep"]), etp=int(par.get("etp") or 0))
    except (KeyError, TypeError, ValueError):
        return None
    return Placement(spec) if spec.world == world else None


class Symmetry:
    """Which ranks the reduced graph keeps (:meth:`keep`), checking the others."""

    def __init__(self, table: NodeTable, placement: Placement):
        self.t = table
        self.pl = placement
        self.reps = {r: s for s, r in enumerate(placement.representatives())}
        self.stage_size = placement.par.world // placement.par.pp
        self.rep_rows: dict[int, Any] = {}  # stage -> the representative's RankRows
        self.kinds: dict[int, np.ndarray] = {}  # stage -> GROUP_KINDS index per collective
        self.sequences: dict[tuple[int, int], np.ndarray] = {}  # (lowest rank, group) -> keys
        self.key_group = np.full(0, -1, dtype=np.int32)  # collective key code -> its group's code
        self.pipe_map: dict[int, dict[int, int]] = {}  # pipeline -> its key -> the representative's
        self.key_pipe: dict[int, int] = {}  # transfer key code -> its pipeline

    def keep(self, r: int, rows: Any) -> bool:
        """True for a representative (its rows are kept); checks any other rank against its
        representative and returns False (NotSymmetric when it differs)."""
        stage = self.pl.coord(r).pp
        rep = self.reps.get(r)
        if rep is not None:
            self._representative(r, stage, rows)
        else:
            self._same_program(r, stage, rows)
        self._collectives(r, stage, rows)
        self._transfers(r, stage, rows)
        return rep is not None

    def _representative(self, r: int, stage: int, rows: Any) -> None:
        coll = np.flatnonzero(rows.members >= 0)
        kind_of: dict[int, int] = {}
        for c in np.unique(rows.members[coll]).tolist():
            members = self.t.member_list[c]
            for k, kind in enumerate(GROUP_KINDS):
                if tuple(sorted(self.pl.group_of(kind, r))) == members:
                    kind_of[c] = k
                    break
            else:
                raise NotSymmetric(f"rank {r}: communicator {members} is no group of the layout")
        table = np.zeros(max(kind_of, default=0) + 1, dtype=np.int64)
        for c, k in kind_of.items():
            table[c] = k
        self.kinds[stage] = table[rows.members[coll]]
        peers = rows.peers[rows.peers >= 0]
        if len(peers) and not all(int(q) in self.reps for q in np.unique(peers).tolist()):
            raise NotSymmetric(f"rank {r}: a transfer's peer is not a representative")
        self.rep_rows[stage] = rows

    def _same_program(self, r: int, stage: int, rows: Any) -> None:
        rep = self.rep_rows.get(stage)
        if rep is None or len(rep.uids) != len(rows.uids):
            raise NotSymmetric(f"rank {r}: not as many tasks as its representative")
        if not (np.array_equal(rep.lanes, rows.lanes) and np.array_equal(rep.lane_names, rows.lane_names)
                and np.array_equal(rep.lane_kinds, rows.lane_kinds)
                and np.array_equal(rep.src, rows.src) and np.array_equal(rep.dst, rows.dst)
                and np.array_equal(rep.members >= 0, rows.members >= 0)
                and np.array_equal(rep.peers >= 0, rows.peers >= 0)):
            raise NotSymmetric(f"rank {r}: lanes or dependencies differ from its representative's")
        diff = np.flatnonzero(rep.uids != rows.uids)
        if len(diff):
            a, b = rep.uids[diff], rows.uids[diff]
            for c in _SAME:
                col = self.t.column(c)
                if not np.array_equal(col[a], col[b]):
                    raise NotSymmetric(f"rank {r}: column {c} differs from its representative's")

    def _collectives(self, r: int, stage: int, rows: Any) -> None:
        coll = np.flatnonzero(rows.members >= 0)
        if not len(coll):
            return
        kinds = self.kinds[stage]
        mc = rows.members[coll]
        expect = np.empty(len(coll), dtype=np.int64)
        for k in np.unique(kinds).tolist():
            code = self.t.member_code(tuple(sorted(self.pl.group_of(GROUP_KINDS[k], r))))
            expect[kinds == k] = code
        if not np.array_equal(expect, mc):
            raise NotSymmetric(f"rank {r}: a collective is not on the rank's own group")
        keys = rows.keys[coll]
        for c in np.unique(mc).tolist():
            seq = keys[mc == c]
            lowest = self.t.member_list[c][0]
            if lowest == r:
                self.sequences[(r, c)] = seq
                if len(seq) and int(seq.max()) >= len(self.key_group):
                    grow = max(int(seq.max()) + 1, 2 * len(self.key_group))
                    self.key_group = np.r_[self.key_group,
                                           np.full(grow - len(self.key_group), -1, np.int32)]
                had = self.key_group[seq]
                if np.any((had >= 0) & (had != c)):
                    raise NotSymmetric(f"rank {r}: a match key is used by two groups")
                self.key_group[seq] = c
            elif not np.array_equal(self.sequences.get((lowest, c), np.zeros(0)), seq):
                raise NotSymmetric(f"rank {r}: its collectives' match keys differ from rank "
                                   f"{lowest}'s")

    def _transfers(self, r: int, stage: int, rows: Any) -> None:
        p2p = np.flatnonzero(rows.peers >= 0)
        if not len(p2p):
            return
        rep = self.rep_rows[stage]
        c = self.pl.coord(r)
        want = [self.pl.rank(c.tp, c.cp, c.dp, self.pl.coord(int(q)).pp)
                for q in rep.peers[p2p].tolist()]
        if rows.peers[p2p].tolist() != want:
            raise NotSymmetric(f"rank {r}: a transfer's peer is not its representative's, moved")
        pipe = r % self.stage_size
        phi = self.pipe_map.setdefault(pipe, {})
        for k, kr in zip(rows.keys[p2p].tolist(), rep.keys[p2p].tolist(), strict=True):
            if phi.setdefault(k, kr) != kr or self.key_pipe.setdefault(k, pipe) != pipe:
                raise NotSymmetric(f"rank {r}: its transfers' match keys do not mirror its "
                                   "representative's")
