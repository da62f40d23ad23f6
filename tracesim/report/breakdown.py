"""Where the iteration time goes, per rank: compute, exposed communication, host, bubble, idle.

One definition for every replay (a built retarget, a recorded trace, an imported workload).
A rank's **device lanes** are its GPU lanes (its CPU lanes when it has none, as in a CPU
recording); its **compute** is the time at least one compute task (not communication) runs on
them. Every stretch in which no compute runs (before the first compute task of the window,
between them, and after the last until the end of the window) is attributed to what the next
compute task waited for: its latest-finishing explicit predecessor (for a collective, or the
collective before it on its lane when that finished later), followed back as a chain:

* a collective of kind k (tp, dp, cp, ep; an unlabelled one counts as dp) makes the stretch,
  from the moment the collective could start (its last member arrived), exposed k
  communication; what came before that is charged to whatever that member waited for;
* a pipeline receive makes the transfer's own duration exposed ``pp`` communication and the
  rest of the stretch pipeline bubble (the neighbouring stage was still computing);
* a host task (a CPU op or runtime call of a rank that has GPU lanes) makes the stretch, up to
  the moment the host task ended, ``host`` time: the device waited for the CPU (launch- or
  dispatch-bound steps); on a CPU rank, the untraced time recorded before an op (``gap_ns``:
  Python, dispatch) is ``host`` time too;
* the time between a predecessor's end and the compute task's start, and stretches with no
  waiting predecessor, are ``idle``.

The stretch after the last compute task is charged to the rank's last-finishing communication
task (the gradient all-reduce, the ZeRO all-gather after the optimizer); with pipeline
parallelism the idle rest of that final stretch is bubble (the stage waits for the others to
drain). The parts sum to the window on every rank. The window is the whole replay, or per
rank a given [start, end) (a self-replay reads the last steady step of each rank).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from tracesim.graph.taskgraph import TaskGraph, column_codes

KINDS = ("tp", "dp", "pp", "cp", "ep")


def rank_breakdowns(graph: TaskGraph, start_ns: np.ndarray, end_ns: np.ndarray,
                    makespan_ns: int,
                    windows: Mapping[int, tuple[int, int]] | None = None) -> dict[int, dict[str, Any]]:
    """Breakdown (seconds) of every rank in ``graph``: compute_s, exposed_comm_s, host_s,
    bubble_s, idle_s (module docstring). ``windows``: per rank, the [start, end) ns to break
    down (ranks not named are left out); default: the whole replay on every rank."""
    t = graph.tasks
    n = len(t)
    kind, compute_lane = _task_kinds(graph)
    lane = t["lane"].to_numpy()
    # a CPU rank's compute runs on its threads: the recorded gap before an op is host work
    cpu_lane = graph.lanes["kind"].astype(str).to_numpy() == "cpu"
    host_gap = (np.where(cpu_lane[lane] & compute_lane[lane], t["gap_ns"].to_numpy(), 0)
                if bool((cpu_lane & compute_lane).any()) else None)
    rank = t["rank"].to_numpy()
    gk_code, gk_names = column_codes(t["group_kind"])
    gk = _Kinds(gk_code, [k if k in KINDS else "dp" for k in gk_names])
    bind = _binding_predecessors(graph, end_ns)
    _lane_waits(bind, kind, lane, end_ns)
    # when each communication really began: the latest start among its matched tasks
    key_codes, _ = column_codes(t["match_key"], names=False)
    idx_t = np.int32 if n < 2**31 else np.int64  # task ids in 4 bytes when they fit
    is_comm = (kind == _COMM) | (kind == _P2P)

    def comm_chunks() -> Iterator[np.ndarray]:  # communication task ids, a chunk at a time
        for i in range(0, n, _STEP):
            yield (np.flatnonzero(is_comm[i:i + _STEP]) + i).astype(idx_t)

    has_comm = bool(is_comm.any())
    latest = np.zeros(0, dtype=np.int64)
    if has_comm:
        latest = np.full(int(key_codes.max()) + 1, np.iinfo(np.int64).min)
        for c in comm_chunks():
            np.maximum.at(latest, key_codes[c], start_ns[c])
    launch = _Launch(key_codes, latest)
    t0 = int(min(0, int(start_ns.min()))) if n else 0
    pp_codes = [i for i, k in enumerate(gk_names) if k == "pp"]
    pipelined = bool(pp_codes) and bool(np.isin(gk_code, pp_codes).any())
    # group once (not one scan per rank): compute tasks by (rank, start, task id), and each
    # rank's last-finishing communication task (the lowest task id among equal ends)
    parts = [(np.flatnonzero((kind[i:i + _STEP] == _GPU) & compute_lane[lane[i:i + _STEP]]) + i)
             .astype(idx_t) for i in range(0, n, _STEP)]
    comp = np.concatenate(parts) if parts else np.zeros(0, dtype=idx_t)
    del parts
    if not _ordered(comp, rank, start_ns):  # a replayed builder graph's are in this order
        comp = comp[np.lexsort((start_ns[comp], rank[comp]))]
    n_ranks = int(rank.max()) + 1 if n else 0
    ranks = np.flatnonzero(_count(rank, None, n_ranks))
    pos = np.full(len(ranks) and int(ranks[-1]) + 1, -1, dtype=np.int32)  # rank -> its row
    pos[ranks] = np.arange(len(ranks), dtype=np.int32)
    per_rank = _count(rank, comp, n_ranks)[ranks]
    c_hi = np.cumsum(per_rank)  # comp is grouped by rank, in rank order
    c_lo = c_hi - per_rank
    last_comm = np.full(len(ranks), -1, dtype=np.int64)
    comm_of: dict[int, np.ndarray] = {}
    if has_comm and windows is None:  # two passes over the communication tasks, a chunk at a time
        last_end = np.full(len(ranks), np.iinfo(np.int64).min)
        for c in comm_chunks():
            np.maximum.at(last_end, pos[rank[c]], end_ns[c])
        first = np.full(len(ranks), np.iinfo(np.int64).max)
        for c in comm_chunks():
            slot = pos[rank[c]]
            at_end = end_ns[c] == last_end[slot]
            np.minimum.at(first, slot[at_end], c[at_end])
        last_comm = np.where(first < np.iinfo(np.int64).max, first, -1)
    elif has_comm:  # windows: each rank's communication tasks, to look up the last in its window
        c_all = np.flatnonzero(is_comm)
        c_all = c_all[np.argsort(rank[c_all], kind="stable")]
        bounds = np.searchsorted(rank[c_all], ranks, side="left"), np.searchsorted(rank[c_all], ranks, side="right")
        comm_of = {int(r): c_all[lo:hi] for r, lo, hi in zip(ranks.tolist(), *bounds, strict=True)}
    out: dict[int, dict[str, Any]] = {}
    for j, r in enumerate(ranks.tolist()):
        idx = comp[c_lo[j]:c_hi[j]]
        if windows is None:
            w0, w1 = t0, makespan_ns + t0
        elif r in windows:
            w0, w1 = (int(x) for x in windows[r])
            idx = idx[(end_ns[idx] > w0) & (start_ns[idx] < w1)]
        else:
            continue
        acc = dict.fromkeys(KINDS, 0.0)
        acc["host"] = acc["bubble"] = acc["idle"] = 0.0
        s_idx = np.clip(start_ns[idx], w0, w1)
        e_idx = np.clip(end_ns[idx], w0, w1)
        prev_end = w0
        compute = 0
        for i, gap_end, e in zip(idx.tolist(), s_idx.tolist(), e_idx.tolist(), strict=True):
            if gap_end > prev_end:
                wait_end = gap_end
                if host_gap is not None:  # untraced host work before a CPU op (Python, dispatch)
                    g = min(int(host_gap[i]), gap_end - prev_end)
                    acc["host"] += g
                    wait_end -= g
                _attribute(int(bind[i]), prev_end, wait_end, bind, kind, gk, launch, end_ns, acc)
            if e > prev_end:
                compute += e - max(gap_end, prev_end)
            prev_end = max(prev_end, e)
        if w1 > prev_end:
            last_c = int(last_comm[j]) if windows is None else _last_in(comm_of.get(r), start_ns, end_ns, prev_end, w1)
            before = acc["idle"]
            _attribute(last_c if last_c >= 0 and end_ns[last_c] > prev_end else -1, prev_end,
                       w1, bind, kind, gk, launch, end_ns, acc)
            if pipelined:  # waiting for the other stages to drain the pipeline
                acc["bubble"] += acc["idle"] - before
                acc["idle"] = before
        out[r] = {
            "compute_s": compute * 1e-9,
            "exposed_comm_s": {k: acc[k] * 1e-9 for k in KINDS},
            "host_s": acc["host"] * 1e-9,
            "bubble_s": acc["bubble"] * 1e-9,
            "idle_s": acc["idle"] * 1e-9,
        }
    return out


def _task_kinds(graph: TaskGraph) -> tuple[np.ndarray, np.ndarray]:
    """What :func:`_attribute` needs of each task's kind (:data:`_GPU` compute, :data:`_COMM`,
    :data:`_P2P`, :data:`_HOST`), and which lanes are device lanes."""
    t = graph.tasks
    lanes = graph.lanes
    lane_kind = lanes["kind"].astype(str).to_numpy()
    lane_rank = lanes["rank"].to_numpy()
    gpu_ranks = np.unique(lane_rank[lane_kind == "gpu"])
    has_gpu = np.isin(lane_rank, gpu_ranks)
    compute_lane = np.where(has_gpu, lane_kind == "gpu", lane_kind == "cpu")
    kind_code, kind_names = column_codes(t["kind"])
    table = np.array([_P2P if k in ("send", "recv") else _COMM if k == "coll" else
                      _HOST if k == "cpu" else _GPU for k in kind_names] or [_GPU], dtype=np.int8)
    kind = _lookup(table, kind_code)
    cls_code, cls_names = column_codes(t["op_class"])
    comm_cls = [i for i, c in enumerate(cls_names) if c == "comm"]
    if comm_cls:  # an unmatched communication kernel or op is still communication
        kind[(kind != _P2P) & np.isin(cls_code, comm_cls)] = _COMM
    # a CPU op of a rank without GPU lanes is its compute
    lane = t["lane"].to_numpy()
    host_is_device = ~has_gpu[lane] & (kind == _HOST)
    kind[host_is_device] = _GPU
    return kind, compute_lane


def _binding_predecessors(graph: TaskGraph, end_ns: np.ndarray) -> np.ndarray:
    """The latest-finishing explicit predecessor of every task (among equal ends, the last
    edge), -1 for none; temporaries are freed as soon as possible (a full graph has ~10^7
    edges)."""
    src = graph.edges["src"].to_numpy()
    dst = graph.edges["dst"].to_numpy()
    n = graph.n_tasks
    bind = np.full(n, -1, dtype=np.int32 if n < 2**31 else np.int64)
    n_chunks = max(1, len(src) // _EDGE_CHUNK)
    bounds = np.linspace(0, n, n_chunks + 1).astype(np.int64)
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        # edges into tasks [lo, hi), in edge order (a chunk at a time: less memory at once)
        e = np.flatnonzero((dst >= lo) & (dst < hi)) if n_chunks > 1 else np.arange(len(src))
        if not len(e):
            continue
        d = dst[e]
        order = np.lexsort((end_ns[src[e]], d))
        d_sorted = d[order]
        last = np.ones(len(order), dtype=bool)
        np.not_equal(d_sorted[1:], d_sorted[:-1], out=last[:-1])
        sel = e[order[last]]
        bind[dst[sel]] = src[sel]
    return bind


def _lane_waits(bind: np.ndarray, kind: np.ndarray, lane: np.ndarray, end_ns: np.ndarray) -> None:
    """A collective waits for its own lane too: where the collective before it on the same
    lane finished after its latest explicit predecessor (gradient buckets queued behind one
    another), that collective becomes its binding predecessor, so the queueing is charged as
    that communication, not as idle time."""
    c = np.flatnonzero(kind == _COMM)
    if len(c) < 2:
        return
    c = c[np.lexsort((c, lane[c]))]
    same = lane[c[1:]] == lane[c[:-1]]
    prev, cur = c[:-1][same], c[1:][same]
    pred = bind[cur]
    later = (pred < 0) | (end_ns[prev] > end_ns[np.maximum(pred, 0)])
    bind[cur[later]] = prev[later]


def _last_in(comm: np.ndarray | None, start_ns: np.ndarray, end_ns: np.ndarray, lo: int,
             hi: int) -> int:
    """The last-finishing of ``comm`` (task ids) that runs in the stretch [lo, hi), -1 if none."""
    if comm is None or not len(comm):
        return -1
    e = end_ns[comm]
    ok = (e > lo) & (start_ns[comm] < hi)
    if not ok.any():
        return -1
    cand = comm[ok]
    return int(cand[np.argmax(end_ns[cand])])


#: what _attribute needs of a task's kind: compute, a collective, a point-to-point transfer,
#: host work of a rank with GPU lanes
_GPU, _COMM, _P2P, _HOST = 0, 1, 2, 3
#: edges sorted at a time when finding each task's binding predecessor
_EDGE_CHUNK = 1 << 18
#: tasks handled at a time by the other vectorised passes
_STEP = 1 << 19
#: waits followed back from one idle stretch at most: each step moves the stretch's end back
#: to the start of a task that ran in it (a queue of collectives on one lane is one step
#: each), so the bound only guards against a malformed graph
_MAX_HOPS = 1 << 16


def _lookup(table: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """``table[codes]`` a chunk at a time (numpy turns a whole index array into 8-byte
    integers first: 100 MB for 13 million tasks)."""
    out = np.empty(len(codes), dtype=table.dtype)
    for i in range(0, len(codes), _STEP):
        out[i:i + _STEP] = table[codes[i:i + _STEP]]
    return out


def _count(rank: np.ndarray, idx: np.ndarray | None, n_ranks: int) -> np.ndarray:
    """How many of the tasks ``idx`` (None: all) each rank has, a chunk at a time."""
    out = np.zeros(n_ranks, dtype=np.int64)
    for i in range(0, len(rank) if idx is None else len(idx), _STEP):
        r = rank[i:i + _STEP] if idx is None else rank[idx[i:i + _STEP]]
        out += np.bincount(r, minlength=n_ranks)
    return out


def _ordered(idx: np.ndarray, rank: np.ndarray, start: np.ndarray) -> bool:
    """Whether tasks ``idx`` (ascending ids) are already sorted by (rank, start); checked a
    chunk at a time, each overlapping the previous one by a task."""
    for lo in range(0, max(len(idx) - 1, 0), _STEP):
        i = idx[lo:lo + _STEP + 1]
        r, s = rank[i], start[i]
        dr = np.diff(r)
        if (dr < 0).any() or not ((dr > 0) | (s[1:] >= s[:-1])).all():
            return False
    return True


class _Launch:
    """When each communication task's operation really began (ns): the latest start among
    the tasks of its match key, by the key's code."""

    def __init__(self, codes: np.ndarray, latest: np.ndarray):
        self.codes, self.latest = codes, latest

    def __getitem__(self, i: int) -> int:
        return int(self.latest[self.codes[i]])


class _Kinds:
    """The breakdown category (tp | dp | pp | cp | ep) of each task: codes and names."""

    def __init__(self, codes: np.ndarray, names: list[str]):
        self.codes, self.names = codes, names

    def __getitem__(self, i: int) -> str:
        return self.names[self.codes[i]]


def _attribute(p: int, lo: int, hi: int, bind: np.ndarray, kind: np.ndarray, gk: _Kinds,
               launch: _Launch, end_ns: np.ndarray, acc: dict[str, float]) -> None:
    """Charge the idle stretch [lo, hi) of a compute lane to the chain of waits behind it."""
    for _ in range(_MAX_HOPS):
        if hi <= lo:
            return
        if p < 0 or kind[p] == _GPU:
            acc["idle"] += hi - lo
            return
        if end_ns[p] < hi:  # the wait ended before the stretch did: the rest is idle
            cut = max(lo, int(end_ns[p]))
            acc["idle"] += hi - cut
            hi = cut
        if kind[p] == _HOST:
            acc["host"] += max(0, hi - lo)
            return
        k = gk[p]  # "" and unknown kinds count as dp
        active_from = max(lo, min(hi, int(launch[p])))
        acc[k] += hi - active_from
        hi = active_from
        if kind[p] == _P2P:
            acc["bubble" if k == "pp" else "idle"] += max(0, hi - lo)
            return
        p = int(bind[p])
    acc["idle"] += max(0, hi - lo)


def mean_breakdown(per_rank: dict[int, dict[str, Any]], total_s: float | None = None) -> dict[str, Any]:
    """Average of :func:`rank_breakdowns` over ranks. With equal windows it sums to the
    iteration time. ``total_s``: the ranks' windows differ (the recorded steps of a job's
    ranks, each its own length); each rank's parts are first scaled to sum to ``total_s``, so
    the mean gives every part its average share of a rank's step, in a step of ``total_s``."""
    n = max(len(per_rank), 1)
    w = {}
    for rk, b in per_rank.items():
        tot = (b["compute_s"] + sum(b["exposed_comm_s"].values()) + b.get("host_s", 0.0)
               + b["bubble_s"] + b["idle_s"])
        w[rk] = total_s / tot if total_s is not None and tot > 0 else 1.0
    exposed = {k: sum(b["exposed_comm_s"][k] * w[r] for r, b in per_rank.items()) / n for k in KINDS}
    return {
        "compute_s": sum(b["compute_s"] * w[r] for r, b in per_rank.items()) / n,
        "exposed_comm_s": exposed,
        "host_s": sum(b.get("host_s", 0.0) * w[r] for r, b in per_rank.items()) / n,
        "bubble_s": sum(b["bubble_s"] * w[r] for r, b in per_rank.items()) / n,
        "idle_s": sum(b["idle_s"] * w[r] for r, b in per_rank.items()) / n,
    }
