"""Stragglers and variability: some ranks slower than the rest.

* ``stragglers``: ``(rank, factor)`` pairs; every compute and host task of that rank takes
  ``factor`` times as long (a slow GPU, a throttled clock, a busy host). Communication is
  left to the network model.
* ``jitter``: the coefficient of variation of a per-rank slowdown: each rank draws one
  factor from a log-normal distribution with mean 1 and that CV (``seed`` fixes the draw)
  and all its compute and host tasks are scaled by it. Synchronous training waits for the
  slowest rank at every collective, so what matters for the step is the spread across ranks
  within a step; a per-kernel jitter of the same CV averages out over thousands of kernels.

A perturbed graph has no symmetric copies: every rank is simulated. :func:`gating` reads
back which rank the others waited for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracesim.graph.taskgraph import COMM_KINDS, TaskGraph, column_codes


@dataclass(frozen=True)
class Perturbation:
    """What to slow down (module docstring)."""

    stragglers: tuple[tuple[int, float], ...] = ()
    jitter: float = 0.0
    seed: int = 0

    @property
    def active(self) -> bool:
        return bool(self.stragglers) or self.jitter > 0

    def to_dict(self) -> dict[str, object]:
        return {"stragglers": [[r, f] for r, f in self.stragglers], "jitter": self.jitter,
                "seed": self.seed}


def rank_factors(ranks: Sequence[int], p: Perturbation) -> dict[int, float]:
    """The slowdown of every rank (1.0 for most)."""
    out = {int(r): 1.0 for r in ranks}
    if p.jitter > 0:
        rng = np.random.default_rng(p.seed)
        sigma = float(np.sqrt(np.log1p(p.jitter ** 2)))
        draws = rng.lognormal(-sigma * sigma / 2, sigma, size=len(out))
        out = {r: float(d) for r, d in zip(sorted(out), draws, strict=True)}
    for r, f in p.stragglers:
        if r in out:
            out[r] *= float(f)
    return out


def perturb(graph: TaskGraph, p: Perturbation) -> tuple[TaskGraph, dict[int, float]]:
    """``graph`` with its compute and host tasks slowed per rank; the factors used."""
    t = graph.tasks
    factors = rank_factors(graph.ranks, p)
    rank = t["rank"].to_numpy()
    top = int(rank.max()) + 1 if len(rank) else 0
    table = np.ones(max(top, 1))
    for r, f in factors.items():
        if 0 <= r < top:
            table[r] = f
    scale = table[rank]
    kind, names = column_codes(t["kind"])
    comm = np.isin(np.asarray(names, dtype=object)[kind], COMM_KINDS) if len(t) else np.zeros(0, bool)
    scale = np.where(comm, 1.0, scale)
    dur = np.rint(t["dur_ns"].to_numpy() * scale).astype(np.int64)
    gap = np.rint(t["gap_ns"].to_numpy() * scale).astype(np.int64)
    return graph.replace(tasks=t.assign(dur_ns=dur, gap_ns=gap)), factors


def gating(graph: TaskGraph, start_ns: np.ndarray) -> list[tuple[int, float]]:
    """Ranks the others waited for at collectives: (rank, total wait it caused in s), the
    longest first. The last member to arrive at a collective causes every other member's
    wait from its own arrival until then."""
    t = graph.tasks
    kind = t["kind"].to_numpy()
    sel = np.flatnonzero(np.isin(kind, COMM_KINDS) & (t["match_key"].astype(str).to_numpy() != ""))
    if not len(sel):
        return []
    df = pd.DataFrame({"key": t["match_key"].to_numpy()[sel], "rank": t["rank"].to_numpy()[sel],
                       "start": np.asarray(start_ns)[sel]})
    last = df.groupby("key")["start"].transform("max")
    df["wait"] = last - df["start"]
    idx = df.groupby("key")["start"].idxmax()
    culprit = df.loc[idx, ["key", "rank"]].set_index("key")["rank"]
    caused = df.groupby("key")["wait"].sum()
    per_rank: Mapping[int, float] = caused.groupby(culprit.reindex(caused.index)).sum().to_dict()
    return sorted(((int(r), float(w) / 1e9) for r, w in per_rank.items() if w > 0),
                  key=lambda x: -x[1])
