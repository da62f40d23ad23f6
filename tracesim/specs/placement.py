"""Group-to-rank placement, as Megatron-LM orders it: TP innermost, then CP, DP, PP.

Global rank ``r`` of a layout with degrees ``tp, cp, dp, pp`` has coordinates
``r = t + tp * (c + cp * (d + dp * p))``, so a TP group is ``tp`` consecutive ranks (inside
one node whenever ``tp`` divides the GPUs per node, where NVLink / NVSwitch serves it),
then CP, then DP replicas, and pipeline stages are outermost (they exchange the least data
and cross nodes). Expert parallelism is carved out of DP (Megatron-core's
``tp-cp-ep-dp-pp`` order): an EP group is ``ep`` consecutive DP indices. With an expert
tensor-parallel degree given (``ParallelSpec.etp``, MoE parallel folding), the MoE layers
re-split the ``tp * cp * dp`` ranks of each pipeline stage as Megatron-Core's expert rank
generator does (``RankGenerator(tp=etp, ep=ep, dp=edp, cp=1, order="tp-cp-ep-dp-pp")`` in
megatron/core/parallel_state.py): stage-local rank ``l = e_t + etp * (e_e + ep * e_d)``, ETP
fastest, then EP, then EDP. With ``cp == 1`` and ``etp == tp`` both orders give the same
groups.

Group kinds (:data:`GROUP_KINDS`):

* ``tp``, ``cp``, ``dp``, ``pp``, ``ep``: vary one coordinate, keep the others;
* ``etp``: the routed experts' tensor-parallel group (the TP group without ``etp``);
* ``dpcp``: DP and CP together, where dense gradients are reduced (CP ranks hold the same
  weights but see different tokens);
* ``edp``: expert data parallel, where expert gradients are reduced (same EP index, all
  DP blocks and CP ranks; folded: same ETP and EP index);
* ``emb``: first and last pipeline stage with the same (t, c, d), where the word-embedding
  gradients are all-reduced (tied embeddings, or the copy multi-token prediction keeps on the
  last stage).

Besides them, ``stage`` (:data:`STAGE_KIND`) is every rank of one pipeline stage (TP x DP x
CP) and ``tpcp`` (:data:`TPCP_KIND`) the TP x CP ranks of one data-parallel replica of it:
Megatron-Core's amax reduction groups of delayed FP8 scaling (the second with
``--tp-only-amax-red``), timed on the compute stream (:mod:`tracesim.build.fp8_delayed`),
not communicators the network simulates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from tracesim.specs.parallel import ParallelSpec

GROUP_KINDS = ("tp", "cp", "dp", "pp", "ep", "dpcp", "edp", "emb", "etp")
#: every rank of a pipeline stage, and its TP x CP ranks (module docstring); not in GROUP_KINDS
STAGE_KIND = "stage"
TPCP_KIND = "tpcp"


@dataclass(frozen=True)
class Coord:
    """Coordinates of one rank in the layout (0-based indices)."""

    tp: int
    cp: int
    dp: int
    pp: int
    ep: int = 0  # index inside the expert-parallel group (dp % ep; folded: (l // etp) % ep)


@dataclass(frozen=True)
class Placement:
    """Maps global ranks to layout coordinates and lists the communication groups."""

    par: ParallelSpec
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @cached_property
    def grid(self) -> np.ndarray:
        """``grid[p, d, c, t]`` = global rank (int64 array of shape (pp, dp, cp, tp))."""
        p = self.par
        return np.arange(p.world, dtype=np.int64).reshape(p.pp, p.dp, p.cp, p.tp)

    def rank(self, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
        p = self.par
        return tp + p.tp * (cp + p.cp * (dp + p.dp * pp))

    def coord(self, rank: int) -> Coord:
        p = self.par
        if not 0 <= rank < p.world:
            raise ValueError(f"rank {rank} outside 0..{p.world - 1}")
        t = rank % p.tp
        c = (rank // p.tp) % p.cp
        d = (rank // (p.tp * p.cp)) % p.dp
        s = rank // (p.tp * p.cp * p.dp)
        e = (rank % (p.tp * p.cp * p.dp)) // p.etp % p.ep if p.etp else d % p.ep
        return Coord(t, c, d, s, e)

    def stage_of(self, ranks: np.ndarray) -> np.ndarray:
        """Pipeline stage of each rank (vectorised)."""
        p = self.par
        return np.asarray(ranks) // (p.tp * p.cp * p.dp)

    def groups(self, kind: str) -> list[tuple[int, ...]]:
        """All groups of ``kind`` (each a sorted tuple of global ranks), deterministic order."""
        if kind in self._cache:
            return self._cache[kind]
        g = self.grid  # (pp, dp, cp, tp)
        p = self.par
        if kind == "tp":
            arr = g.reshape(-1, p.tp)
        elif kind == "cp":
            arr = g.transpose(0, 1, 3, 2).reshape(-1, p.cp)
        elif kind == "dp":
            arr = g.transpose(0, 2, 3, 1).reshape(-1, p.dp)
        elif kind == "pp":
            arr = g.transpose(1, 2, 3, 0).reshape(-1, p.pp)
        elif kind == "dpcp":
            arr = g.transpose(0, 3, 1, 2).reshape(-1, p.dp * p.cp)
        elif p.etp and kind in ("ep", "edp", "etp"):
            arr = self._folded(kind)
        elif kind == "etp":
            arr = g.reshape(-1, p.tp)
        elif kind == "ep":
            e = p.ep
            # (pp, dp/e, e, cp, tp) -> groups over the e axis
            arr = g.reshape(p.pp, p.dp // e, e, p.cp, p.tp).transpose(0, 1, 3, 4, 2).reshape(-1, e)
        elif kind == "edp":
            e = p.ep
            arr = (
                g.reshape(p.pp, p.dp // e, e, p.cp, p.tp)
                .transpose(0, 2, 4, 1, 3)
                .reshape(-1, (p.dp // e) * p.cp)
            )
        elif kind == STAGE_KIND:
            arr = g.reshape(p.pp, -1)
        elif kind == TPCP_KIND:
            arr = g.reshape(-1, p.cp * p.tp)
        elif kind == "emb":
            arr = np.stack([g[0].reshape(-1), g[-1].reshape(-1)], axis=1) if p.pp > 1 else g.reshape(-1, 1)
        else:
            raise ValueError(f"unknown group kind {kind!r} (known: {', '.join(GROUP_KINDS)})")
        out = [tuple(int(x) for x in sorted(row)) for row in arr]
        self._cache[kind] = out
        return out

    def _folded(self, kind: str) -> np.ndarray:
        """Rows of the ``ep`` / ``edp`` / ``etp`` groups of a folded layout (module docstring)."""
        p = self.par
        g = self.grid.reshape(p.pp, p.edp, p.ep, p.etp)
        if kind == "ep":
            return g.transpose(0, 1, 3, 2).reshape(-1, p.ep)
        if kind == "edp":
            return g.transpose(0, 2, 3, 1).reshape(-1, p.edp)
        return g.reshape(-1, p.etp)

    def group_index(self, kind: str) -> np.ndarray:
        """``idx[rank]`` = index into :meth:`groups` of the ``kind`` group holding ``rank``."""
        key = ("idx", kind)
        if key not in self._cache:
            idx = np.full(self.par.world, -1, dtype=np.int64)
            for i, grp in enumerate(self.groups(kind)):
                idx[list(grp)] = i
            self._cache[key] = idx
        return self._cache[key]

    def group_of(self, kind: str, rank: int) -> tuple[int, ...]:
        """The ``kind`` group that contains ``rank``."""
        return self.groups(kind)[int(self.group_index(kind)[rank])]

    def stage_ranks(self, stage: int) -> np.ndarray:
        """All global ranks of pipeline stage ``stage`` (ascending)."""
        return self.grid[stage].reshape(-1)

    def representatives(self) -> list[int]:
        """One rank per pipeline stage (TP, CP and DP index 0): ranks with identical graphs
        up to renaming form one class per stage when the network is symmetric."""
        return [int(self.grid[s, 0, 0, 0]) for s in range(self.par.pp)]

    def next_stage_rank(self, rank: int) -> int:
        """Rank of the same (t, c, d) on the next pipeline stage (wrapping around)."""
        c = self.coord(rank)
        return self.rank(c.tp, c.cp, c.dp, (c.pp + 1) % self.par.pp)

    def prev_stage_rank(self, rank: int) -> int:
        c = self.coord(rank)
        return self.rank(c.tp, c.cp, c.dp, (c.pp - 1) % self.par.pp)
