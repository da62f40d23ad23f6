"""Compute ops of a recording and, on a CPU, the stretch of an op's own time that does its
arithmetic.

A *compute op* is a host op with cost features (FLOPs or bytes from its recorded shapes)
that does not hand its work to an op of the same class inside it: ``aten::linear`` runs its
GEMM in ``aten::addmm``, which is the compute op; the bias copy ``aten::copy_`` inside
``aten::addmm`` is one too, as on a GPU (:func:`compute_ops`; the op moved onto a GPU is a
kernel, :mod:`tracesim.transform.transplant`).

On a CPU the host thread does an op's arithmetic itself. A compute op that calls other ops
(``aten::addmm`` allocates its output with ``aten::empty`` and resolves its operands with
``aten::resolve_conj`` before the GEMM) is no leaf of its host lane, so without more its
arithmetic would be the untraced gap before the lane's next leaf, and a report would count
a GEMM as host time. For a rank recorded on a CPU the extractor makes the longest stretch of
each such op's own time (its window less its children's windows: :func:`own_stretches`) a
task of the op: its name, class, FLOPs and bytes, its recorded stretch. The lane's timeline
is unchanged (the stretch was part of the next leaf's gap); reports name the op and count it
as compute.
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


def own_stretches(ops: pd.DataFrame) -> dict[int, tuple[int, int]]:
    """Row position (in ``ops``, one rank's op table) -> ``(start_ns, end_ns)`` of the
    longest stretch of own time of every compute op that has ops inside it (module
    docstring). Stretches of zero length are left out."""
    comp = compute_ops(ops)
    if comp.empty:
        return {}
    pos = pd.Series(np.arange(len(ops)), index=ops.index)
    ts = ops["ts_ns"].to_numpy().astype(np.int64)
    end = ts + ops["dur_ns"].to_numpy().astype(np.int64)
    parent = ops["parent_id"].to_numpy()
    eid = ops["event_id"].to_numpy()
    want = set(comp["event_id"].tolist())
    children: dict[int, list[int]] = {}
    for k in np.flatnonzero(np.isin(parent, list(want))).tolist():
        children.setdefault(int(parent[k]), []).append(k)
    row_of = {int(e): int(pos.iat[k]) for k, e in enumerate(eid.tolist()) if e in want}
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
