"""Instantiate stage programs for global ranks: lanes, groups, peers and match keys.

Every rank of a pipeline stage runs its stage's program (built once by the builder); only
the rank id, lane ids, group indices, peers and match keys differ. Match keys make the
engine pair the tasks of one collective (``<gkind><group>|<instance>|<local>``, equal on
all members because they run the same program), of one pipeline transfer
(``pp<pipe>|f|<chunk>|<mb>``) and of one ring-attention step (``cp<group>|<instance>|<local>|
<source cp index>``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracesim.graph.taskgraph import (
    EDGE_COLUMNS,
    TASK_COLUMNS,
    TaskGraph,
    categorical,
    code_dtype,
    make_lanes,
)
from tracesim.specs.placement import Placement
from tracesim.template.resolve import Resolved

REPORT_KIND = {"tp": "tp", "etp": "tp", "cp": "cp", "ep": "ep", "dpcp": "dp", "edp": "dp", "emb": "pp", "pp": "pp",
               "stage": "dp", "tpcp": "tp"}


def _factor(values: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Codes of ``str(v)`` for each of ``values`` and the distinct strings, in order of
    first appearance (by hashing: one Python object per distinct value, not per row)."""
    ids, uniq = pd.factorize(values)
    distinct = uniq.tolist() if isinstance(uniq, np.ndarray) else list(uniq)
    if (len(ids) and ids.min() < 0) or not all(type(v) is str for v in distinct):
        # missing values, or non-strings (equal ones may print apart): one by one
        index: dict[str, int] = {}
        codes = np.array([index.setdefault(str(v), len(index)) for v in values.tolist()],
                         dtype=np.int64)
        return codes, list(index)
    return ids.astype(np.int64, copy=False), distinct


def _comm_durations(prog: dict[str, np.ndarray], placement: Placement,
                    comm_time: Callable[[str, str, int, int], int]) -> np.ndarray:
    dur = prog["dur_ns"].copy()
    comm = np.flatnonzero(prog["kind"] != "gpu")
    if not len(comm):
        return dur
    sizes = {k: len(placement.groups(k)[0]) for k in ("tp", "etp", "cp", "ep", "dpcp", "edp", "emb")}
    sizes["pp"] = 2
    # one call per distinct (collective, group kind, bytes, chunks); a task of k chunks
    # lasts k chunks of msg / k
    c_code, c_names = _factor(prog["collective"][comm])
    g_code, g_names = _factor(prog["gkind"][comm])
    msg = prog["msg_bytes"][comm].astype(np.int64)
    ch = np.maximum(prog["chunks"][comm], 1).astype(np.int64) if "chunks" in prog else np.ones_like(msg)
    triples = np.stack([c_code, g_code, msg, ch], axis=1)
    uniq, inv = np.unique(triples, axis=0, return_inverse=True)
    times = np.array([k * int(comm_time(c_names[c], g_names[g], sizes.get(g_names[g], 2), m // k))
                      for c, g, m, k in uniq.tolist()], dtype=dur.dtype)
    dur[comm] = times[inv.reshape(-1)]
    return dur


def _frame(cols: dict[str, Any], columns: Mapping[str, Any]) -> pd.DataFrame:
    """A DataFrame over ``cols`` (numpy arrays of the right dtypes, or Series) without
    copying them; ``columns`` gives the column order, extra ``cols`` follow."""
    order = list(columns) + [c for c in cols if c not in columns]
    return pd.DataFrame({c: cols[c] if isinstance(cols[c], pd.Series)
                         else pd.Series(cols[c], dtype=cols[c].dtype, copy=False) for c in order},
                        copy=False)


class _Vocab:
    """Codes of the strings of one column, shared by all stage programs."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def codes(self, values: np.ndarray) -> np.ndarray:
        """The code of ``str(v)`` for each of ``values``, new strings numbered in order of
        first appearance: only the distinct values are looked up (:func:`_factor`)."""
        ids, distinct = _factor(values)
        table = np.array([self.index.setdefault(v, len(self.index)) for v in distinct] or [0],
                         dtype=np.int64)
        return table[ids]

    def column(self, codes: np.ndarray) -> pd.Series:
        return categorical(codes, list(self.index))


#: string columns of the task table copied from the stage programs
_STR_COLS = ("kind", "name", "op_class", "phase", "collective", "group_kind", "algorithm", "run")


class _StageCache:
    """What every rank of one pipeline stage shares: lanes, comm-task codes, durations, and
    the codes of its string columns in the vocabularies shared by all stages."""

    def __init__(self, prog: dict[str, np.ndarray], placement: Placement,
                 comm_time: Callable[[str, str, int, int], int], vocab: dict[str, _Vocab],
                 local_keys: _Vocab):
        self.n = len(prog["lane"])
        # the sorted lane names: np.unique over the distinct values only
        lane = prog["lane"]
        ids, uniq = pd.factorize(lane)
        if len(ids) and ids.min() < 0:  # missing values (no factorized code): sort them all
            ids, uniq = np.arange(len(lane)), lane
        self.lanes, inv = np.unique(np.asarray(uniq).astype(str), return_inverse=True)
        self.lane_inv = inv.astype(np.int32)[ids]
        self.comm = np.flatnonzero(prog["kind"] != "gpu")
        gk = prog["gkind"]
        gk_ids, gk_names = _factor(gk)
        report = np.array([REPORT_KIND.get(k, "") for k in gk_names] or [""], dtype=object)[gk_ids]
        blank = np.full(self.n, "", dtype=object)  # a program without a column (``run``)
        self.codes = {c: vocab[c].codes(report if c == "group_kind" else prog.get(c, blank))
                      for c in _STR_COLS}
        self.dur = _comm_durations(prog, placement, comm_time)
        # group kinds of the comm tasks in first-appearance order (group numbering)
        self.kind_code, self.kinds = _factor(gk[self.comm])
        sel_ids, sel_names = _factor(prog["peer_sel"][self.comm])
        self.sel_code = np.array([_SELECTORS.index(x) if x in _SELECTORS else 0 for x in sel_names]
                                 or [0], dtype=np.int64)[sel_ids]
        self.key_code = local_keys.codes(prog["key"][self.comm])
        self.ring = np.flatnonzero(self.sel_code >= 3)  # ring-attention transfers (cp_next / cp_prev)
        self.src = prog["src"]
        self.dst = prog["dst"]


#: peer selectors of the builder's comm tasks, by code
_SELECTORS = ("", "pp_next", "pp_prev", "cp_next", "cp_prev")


def instantiate(
    stage_progs: Sequence[dict[str, np.ndarray]],
    ranks: Sequence[int],
    placement: Placement,
    comm_time: Callable[[str, str, int, int], int],
    representatives: bool,
) -> TaskGraph:
    """One :class:`TaskGraph` holding the programs of ``ranks``.

    Columns are filled per rank with vectorised copies of the stage program into arrays
    allocated once for all ranks (strings are shared, not copied); only a rank's group ids,
    peers and match keys are computed per rank.
    """
    return Instantiator(stage_progs, placement, comm_time, representatives).graph(ranks)


class Instantiator:
    """Makes the task graphs of ranks of one layout (:meth:`graph`), a few ranks at a time
    if need be: the group numbering (groups in order of first use), the string vocabularies
    and the per-stage caches persist from one call to the next, so the graphs of consecutive
    rank ranges hold, rank for rank, what the graph of all of them holds (group ids and
    match keys included; each graph's ``groups`` are the groups numbered so far)."""

    def __init__(self, stage_progs: Sequence[dict[str, np.ndarray]], placement: Placement,
                 comm_time: Callable[[str, str, int, int], int], representatives: bool):
        self.progs = stage_progs
        self.placement = placement
        self.comm_time = comm_time
        self.representatives = representatives
        self.groups: list[tuple[int, ...]] = []
        self.group_ids: dict[tuple[str, int], int] = {}
        self.group_kind: list[str] = []  # the builder's group kind of each global group
        self.caches: dict[int, _StageCache] = {}
        self.vocab = {c: _Vocab() for c in _STR_COLS}
        self.local_keys = _Vocab()

    def _gid(self, kind: str, rank: int) -> int:
        local = int(self.placement.group_index(kind)[rank])
        key = (kind, local)
        if key not in self.group_ids:
            self.group_ids[key] = len(self.groups)
            self.groups.append(self.placement.groups(kind)[local])
        return self.group_ids[key]

    def graph(self, ranks: Sequence[int]) -> TaskGraph:
        """The task graph of ``ranks`` (their programs, in this order)."""
        placement, stage_progs, representatives = self.placement, self.progs, self.representatives
        par = placement.par
        caches, vocab, local_keys, group_kind = self.caches, self.vocab, self.local_keys, self.group_kind
        stage_of = [placement.coord(r).pp for r in ranks]
        for st in sorted(set(stage_of)):
            if st not in caches:
                caches[st] = _StageCache(stage_progs[st], placement, self.comm_time, vocab, local_keys)
        n = sum(caches[st].n for st in stage_of)
        n_e = sum(len(caches[st].src) for st in stage_of)
        n_c = sum(len(caches[st].comm) for st in stage_of)
        n_layers = max((int(p["layer"].max()) + 1 for p in stage_progs if len(p["layer"])), default=0)
        i32 = {c: np.empty(n, dtype=np.int32) for c in ("rank", "lane", "layer", "group", "peer")}
        i64 = {c: np.empty(n, dtype=np.int64) for c in ("dur_ns", "msg_bytes")}
        # the operations each comm task stands for (merged chunks of an overlapped GEMM): a
        # ``chunks`` column only when some task has more than one
        top_chunks = max((int(stage_progs[st]["chunks"][caches[st].comm].max())
                          for st in set(stage_of)
                          if "chunks" in stage_progs[st] and len(caches[st].comm)), default=1)
        chunks = np.ones(n, dtype=code_dtype(top_chunks + 1)) if top_chunks > 1 else None
        f64 = {c: np.empty(n, dtype=np.float64) for c in ("flops", "bytes")}
        codes = {c: np.empty(n, dtype=code_dtype(len(vocab[c].index))) for c in _STR_COLS}
        # a comm task's match key is the triple (global group, local key, ring suffix), packed
        # into one integer; the strings are made once per distinct key, not once per task
        n_keys = max(len(local_keys.index), 1)
        n_sfx = (max(ranks, default=0) + 2) if representatives else par.cp + 1
        key_pos = np.empty(n_c, dtype=np.int64)
        key_num = np.empty(n_c, dtype=np.int64)
        src = np.empty(n_e, dtype=np.int32 if n < 2**31 else np.int64)
        dst = np.empty(n_e, dtype=src.dtype)
        lane_rank: list[int] = []
        lane_name: list[str] = []
        off = eoff = coff = 0
        for rank, stage in zip(ranks, stage_of, strict=True):
            c = placement.coord(rank)
            prog, sc = stage_progs[stage], caches[stage]
            hi = off + sc.n
            lane_base = len(lane_name)
            lane_rank += [rank] * len(sc.lanes)
            lane_name += [str(x) for x in sc.lanes]
            i32["rank"][off:hi] = rank
            i32["lane"][off:hi] = sc.lane_inv + lane_base
            i32["layer"][off:hi] = prog["layer"]
            i32["group"][off:hi] = -1
            i32["peer"][off:hi] = -1
            i64["dur_ns"][off:hi] = sc.dur
            i64["msg_bytes"][off:hi] = prog["msg_bytes"]
            f64["flops"][off:hi] = prog["flops"]
            f64["bytes"][off:hi] = prog["bytes"]
            if chunks is not None:
                chunks[off + sc.comm] = prog["chunks"][sc.comm]
            for col in _STR_COLS:
                codes[col][off:hi] = sc.codes[col]
            if len(sc.comm):
                g_of_kind = np.array([self._gid(k, rank) for k in sc.kinds], dtype=np.int64)
                for k, gi in zip(sc.kinds, g_of_kind.tolist(), strict=True):
                    group_kind += [""] * (gi + 1 - len(group_kind))
                    group_kind[gi] = k
                g = g_of_kind[sc.kind_code]
                cidx = sc.comm + off
                i32["group"][cidx] = g
                cp_next = placement.rank(c.tp, (c.cp + 1) % par.cp, c.dp, c.pp)
                cp_prev = placement.rank(c.tp, (c.cp - 1) % par.cp, c.dp, c.pp)
                peers = np.array([-1, placement.next_stage_rank(rank), placement.prev_stage_rank(rank),
                                  cp_next, cp_prev], dtype=np.int64)
                i32["peer"][cidx] = peers[sc.sel_code]
                sfx = np.zeros(len(sc.comm), dtype=np.int64)
                if len(sc.ring):
                    if representatives:
                        table = np.array([0, 0, 0, rank + 1, rank + 1], dtype=np.int64)
                    else:
                        table = np.array([0, 0, 0, c.cp + 1, (c.cp - 1) % par.cp + 1], dtype=np.int64)
                    sfx[sc.ring] = table[sc.sel_code[sc.ring]]
                ce = coff + len(sc.comm)
                key_pos[coff:ce] = cidx
                key_num[coff:ce] = (g * n_keys + sc.key_code) * n_sfx + sfx
                coff = ce
            ne = len(sc.src)
            src[eoff : eoff + ne] = sc.src + off
            dst[eoff : eoff + ne] = sc.dst + off
            off, eoff = hi, eoff + ne
        # layer, group and peer in 2 bytes when every value fits (-1 .. 32767)
        for col, top in (("layer", n_layers), ("group", len(self.groups)), ("peer", max(ranks, default=0) + 1)):
            if top < 2**15:
                i32[col] = i32[col].astype(np.int16)
        for col in ("dur_ns", "msg_bytes"):  # 4 bytes when every value fits
            if n and int(i64[col].max()) < 2**31 and int(i64[col].min()) >= -(2**31):
                i64[col] = i64[col].astype(np.int32)
        data: dict[str, Any] = {**i32, **i64, **f64}
        if chunks is not None:
            data["chunks"] = chunks
        for col in _STR_COLS:
            data[col] = vocab[col].column(codes[col])
        del codes
        data["match_key"] = _match_keys(n, key_pos, key_num, n_keys, n_sfx, group_kind,
                                        list(local_keys.index), representatives)
        del key_pos, key_num
        data["task_id"] = np.arange(n, dtype=np.int64)
        data["gap_ns"] = np.broadcast_to(np.int64(0), n)  # no gaps: one read-only zero, not n
        data["step"] = categorical(np.zeros(n, dtype=np.int8), [""])
        if representatives:
            # a representative's collective has one present member: the engine must not wait
            # for the absent (symmetric) ones; the full group stays in ``sym_group`` for
            # tracesim.engine.symmetry.SymmetricComm
            data["sym_group"] = data["group"].copy()
            coll = (data["kind"] == "coll").to_numpy()
            data["group"] = np.where(coll, -1, data["group"]).astype(data["sym_group"].dtype)
        tasks = _frame(data, TASK_COLUMNS)
        edges = _frame({"src": src, "dst": dst, "kind": categorical(np.zeros(n_e, dtype=np.int8), ["dep"])},
                       EDGE_COLUMNS)
        lanes = make_lanes({"rank": lane_rank, "name": lane_name, "kind": ["gpu"] * len(lane_name)})
        return TaskGraph(tasks, edges, lanes, tuple(self.groups))


@dataclass(frozen=True)
class StagePrograms:
    """Every pipeline stage's program of a layout, before it is given to ranks."""

    progs: tuple[dict[str, np.ndarray], ...]
    infos: tuple[dict[str, Any], ...]
    placement: Placement
    resolved: Resolved
    comm_time: Callable[[str, str, int, int], int]
    meta: dict[str, Any]

    def rank_graphs(self, ranks_per_graph: int, meta: dict[str, Any] | None = None
                    ) -> Iterator[TaskGraph]:
        """The task graphs of every rank (no symmetry reduction), ``ranks_per_graph``
        consecutive ranks each, in rank order: rank for rank what one graph of every rank
        holds (the same group ids and match keys), with meta ``meta`` (default: the
        builder's)."""
        inst = Instantiator(self.progs, self.placement, self.comm_time, False)
        world = self.placement.par.world
        meta = {**self.meta, "representatives": False} if meta is None else meta
        for lo in range(0, world, max(1, ranks_per_graph)):
            ranks = list(range(lo, min(world, lo + max(1, ranks_per_graph))))
            yield inst.graph(ranks).replace(meta=meta)


def _match_keys(n: int, pos: np.ndarray, num: np.ndarray, n_keys: int, n_sfx: int,
                group_kind: list[str], local: list[str], representatives: bool) -> pd.Series:
    """The ``match_key`` column: ``""`` except at ``pos``, where the packed (group, local key,
    suffix) numbers ``num`` become ``<gkind><group>|<local>[<suffix>]`` (categories in order
    of first appearance after ``""``)."""
    ids, uniq = pd.factorize(num)  # ``pos`` ascends: first appearance in row order
    g, rest = np.divmod(uniq, n_keys * n_sfx)
    lk, sfx = np.divmod(rest, n_sfx)
    mark = "|self" if representatives else "|"
    names = [f"{group_kind[a]}{a}|{local[b]}" + (f"{mark}{s - 1}" if s else "")
             for a, b, s in zip(g.tolist(), lk.tolist(), sfx.tolist(), strict=True)]
    codes = np.zeros(n, dtype=code_dtype(len(names) + 1))
    codes[pos] = ids + 1
    if len(set(names)) < len(names):  # two packed keys spell the same string: merge them
        strings = np.array([""] + names, dtype=object)[codes]
        merged, values = pd.factorize(strings)
        return categorical(merged, [str(v) for v in values])
    return categorical(codes, ["", *names])
