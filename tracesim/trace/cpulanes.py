"""The host lanes of a rank recorded on a CPU: compute ops and their arithmetic,
communication ops whole.

A *compute op* is a host op with cost features (FLOPs or bytes from its recorded shapes)
that does not hand its work to an op of the same class inside it: ``aten::linear`` runs its
GEMM in ``aten::addmm``, which is the compute op; the bias copy ``aten::copy_`` inside
``aten::addmm`` is one too, as on a GPU (:func:`compute_ops`; the op moved onto a GPU is a
kernel, :mod:`tracesim.transform.transplant`).

A host lane is made of its leaf events (those with no event inside). On a CPU two kinds of
op are no leaves but must be tasks of their own (:mod:`tracesim.trace.rankgraph` asks this
module for them on ranks without GPU events):

* **a compute op's arithmetic.** The host thread does an op's arithmetic itself. A compute op
  that calls other ops (``aten::addmm`` allocates its output with ``aten::empty`` and
  resolves its operands with ``aten::resolve_conj`` before the GEMM) would otherwise leave
  its arithmetic as the untraced gap before the lane's next leaf, and a report would count a
  GEMM as host time. The longest stretch of such an op's own time (its window less its
  children's windows: :func:`own_stretches`) becomes a task of the op: its name, class, FLOPs
  and bytes, its recorded stretch. The lane's timeline is unchanged (the stretch was part of
  the next leaf's gap);
* **a communication op.** Gloo runs a collective on its own thread as one op
  (``gloo:all_gather``) that may call aten ops inside it (FSDP2's
  ``all_gather_into_tensor`` views, selects and copies the chunks; a reduce-scatter
  divides), and its ``c10d::`` call on the training thread may chunk and allocate first.
  Without more the collective would be no task at all, so a replay on a cluster would have
  no communication to time. Every outermost communication op is a task over its whole
  window, the ops inside it folded in (:func:`whole_comm_leaves`).

Gloo implements some collectives with others: it runs ``reduce_scatter_tensor`` (FSDP's
gradient reduction) as an all-reduce of the whole buffer (``gloo:all_reduce``, then a
division). A replay on a cluster should run what the program asked for, as NCCL would, so
each gloo op takes the collective of the ``c10d::`` call it ran for
(:func:`gloo_collectives`: the calls and the gloo ops of one process group pair up in order,
gloo's work queue being first in, first out; the sizes follow the nccl-tests convention for
both, the whole buffer).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: op classes that are not device arithmetic
NOT_COMPUTE = ("comm", "other")


def compute_ops(ops: pd.DataFrame) -> pd.DataFrame:
    """The compute ops of an op table (module docstring): host ops with cost features
    that have no op of their own class inside them."""
    host = ops[(ops["cat"] == "cpu_op")]
    featured = host[((host["flops"] > 0) | (host["bytes"] > 0))
                    & ~host["op_class"].isin(NOT_COMPUTE)]
    parent = dict(zip(zip(ops["rank"].tolist(), ops["event_id"].tolist(), strict=True),
                      ops["parent_id"].tolist(), strict=True))
    cls = dict(zip(zip(featured["rank"].tolist(), featured["event_id"].tolist(), strict=True),
                   featured["op_class"].tolist(), strict=True))
    wrapper: set[tuple[int, int]] = set()
    for (r, e), c in cls.items():
        p = parent.get((r, e), -1)
        hops = 0
        while p >= 0 and hops < 256:
            if cls.get((r, p)) == c:
                wrapper.add((r, p))
            p = parent.get((r, p), -1)
            hops += 1
    keep = [(r, e) not in wrapper for r, e in
            zip(featured["rank"].tolist(), featured["event_id"].tolist(), strict=True)]
    return featured[np.array(keep, dtype=bool)]


def gloo_collectives(ops: pd.DataFrame) -> dict[int, str]:
    """Row position (in ``ops``, one rank's op table) -> the collective of the ``c10d::``
    call a ``gloo:`` op ran for, where the two differ (module docstring). A process group
    whose calls and gloo ops do not pair up (other counts, a gloo op before its call) is
    left as recorded."""
    names = ops["name"].astype(str).to_numpy()
    comm = ops["cat"].to_numpy() == "comm"
    pg = ops["pg"].astype(str).to_numpy() if "pg" in ops else np.full(len(ops), "")
    ts = ops["ts_ns"].to_numpy()
    coll = ops["collective"].astype(str).to_numpy()
    out: dict[int, str] = {}
    for g in sorted(set(pg[comm].tolist())):
        mine = comm & (pg == g)
        enq = np.flatnonzero(mine & np.char.startswith(names.astype(str), "c10d::"))
        run = np.flatnonzero(mine & np.char.startswith(names.astype(str), "gloo:"))
        if not len(run) or len(enq) != len(run):
            continue
        enq = enq[np.argsort(ts[enq], kind="stable")]
        run = run[np.argsort(ts[run], kind="stable")]
        if (ts[run] < ts[enq]).any():
            continue
        for a, b in zip(enq.tolist(), run.tolist(), strict=True):
            if coll[a] and coll[a] != coll[b]:
                out[b] = str(coll[a])
    return out


def relabel_gloo(col: dict[str, np.ndarray], ops: pd.DataFrame) -> None:
    """Set ``col["collective"]`` (the extractor's task fields of ``ops``) of every gloo op
    to its call's collective (:func:`gloo_collectives`)."""
    if "collective" not in col:
        return
    fixed = gloo_collectives(ops)
    if fixed:
        col["collective"] = col["collective"].copy()
        for i, c in fixed.items():
            col["collective"][i] = c


def whole_comm_leaves(ts: np.ndarray, end: np.ndarray, comm: np.ndarray, leaf: np.ndarray,
                      tol_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """The leaf mask of one host lane (events sorted by start, then longest first) with every
    outermost communication op made a leaf and the events inside it none (module
    docstring), and the mask of the events inside those ops."""
    leaf = leaf.copy()
    inside = np.zeros(len(ts), dtype=bool)
    j = 0
    for p in np.flatnonzero(comm).tolist():
        if p < j:  # inside a communication op already kept
            continue
        # the events recorded inside it follow it in start order
        q = int(np.searchsorted(ts, end[p], side="left"))
        q = p + 1 + int(np.sum(end[p + 1:q] <= end[p] + tol_ns))
        leaf[p] = True
        leaf[p + 1:q] = False
        inside[p + 1:q] = True
        j = q
    return leaf, inside


def keep_outside(own: dict[int, tuple[int, int]], rows: np.ndarray) -> dict[int, tuple[int, int]]:
    """``own`` (:func:`own_stretches`) without the ops at ``rows`` (those folded into a
    communication op, :func:`whole_comm_leaves`)."""
    drop = set(rows.tolist())
    return {i: v for i, v in own.items() if i not in drop} if drop else own


def own_stretches(ops: pd.DataFrame) -> dict[int, tuple[int, int]]:
    """Row position (in ``ops``, one rank's op table) -> ``(start_ns, end_ns)`` of the
    longest stretch of own time of every compute op that has ops inside it (module
    docstring). Stretches of zero length are left out."""
    comp = compute_ops(ops)
    if comp.empty:
        return {}
    ts = ops["ts_ns"].to_numpy().astype(np.int64)
    end = ts + ops["dur_ns"].to_numpy().astype(np.int64)
    parent = ops["parent_id"].to_numpy()
    eid = ops["event_id"].to_numpy()
    want = set(comp["event_id"].tolist())
    children: dict[int, list[int]] = {}
    for k in np.flatnonzero(np.isin(parent, list(want))).tolist():
        children.setdefault(int(parent[k]), []).append(k)
    row_of = {int(e): k for k, e in enumerate(eid.tolist()) if e in want}
    out: dict[int, tuple[int, int]] = {}
    for e, kids in children.items():
        i = row_of.get(e)
        if i is None:
            continue
        kids.sort(key=lambda k: (ts[k], -end[k]))
        starts = np.concatenate([[ts[i]], end[kids]])
        ends = np.concatenate([ts[kids], [end[i]]])
        # children recorded in sequence: each stretch runs from one child's end (or the
        # op's start) to the next child's start (or the op's end)
        ends = np.maximum(ends, starts)
        j = int(np.argmax(ends - starts))
        if ends[j] > starts[j]:
            out[i] = (int(starts[j]), int(ends[j]))
    return out
