"""A published row's iteration time from replays of a few of its micro-batches.

A row with many micro-batches per pipeline is replayed at a small sample and its iteration
time extrapolated through the schedule's steady period (:func:`steady_iteration_s`;
docs/retarget.md, "Published end-to-end tables").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tracesim.options import ReplayOptions

#: a row with more micro-batches per pipeline than ``SAMPLE_FACTOR`` x the sample is replayed
#: at the sample and extrapolated (:func:`steady_iteration_s`)
SAMPLE_FACTOR = 2


def steady_iteration_s(opts: dict[str, Any], file: Path, where: str) -> tuple[float, tuple[str, ...]]:
    """The iteration time (s) of a row and the replay's warnings. A row with many
    micro-batches per pipeline (``m``) is replayed at ``m2 = 3 pp`` and extrapolated
    linearly: past the schedule's warm-up every further micro-batch adds the same steady
    period ``P``, ``T(m) = T(m2) + (m - m2) P``. Every stage's forward passes of the first
    ``m1 = 2 pp`` micro-batches run exactly as in a replay of ``m1`` (nothing they wait for
    comes later in any stage's schedule), so where every stage sends its activations of the
    last ``m2 - m1`` micro-batches in the same time ``D``, the pipeline ran them periodically
    and ``P = D / (m2 - m1)``. Where the stages disagree (the first stages still catching up
    with a slower one), ``m1`` is replayed as well and ``P = (T(m2) - T(m1)) / (m2 - m1)``.
    Without a pipeline the samples are 4 and 8 micro-batches, both replayed. Rows with fewer
    micro-batches, and rows whose schedule runs more than once per iteration (``pp_rounds``),
    are replayed whole. tests/test_published.py compares both ways with the
    full replay."""
    from tracesim.pipeline.run import predict

    pp = int(opts.get("pp", 1))
    per = int(opts["micro_batch"]) * int(opts["dp"])
    m = int(opts["global_batch"]) // per if per else 0
    m1, m2 = (2 * pp, 3 * pp) if pp > 1 else (4, 8)
    if m <= SAMPLE_FACTOR * m2 or int(opts["global_batch"]) % per or int(opts.get("pp_rounds") or 1) > 1:
        res = predict(None, ReplayOptions.from_mapping(opts, file, where), breakdown=False)
        return res.iteration_time_s, tuple(res.warnings)

    def sample(mb: int) -> Any:
        return predict(None, ReplayOptions.from_mapping({**opts, "global_batch": mb * per}, file, where),
                       breakdown=False)

    res = sample(m2)
    t2 = res.iteration_time_s
    warns = [w for w in res.warnings if "global batch" not in w]
    d = steady_span_s(res, m1, m2) if pp > 1 else None
    if d is not None:
        t1 = t2 - d
        how = (f"a replay of {m2} of its {m} micro-batches per pipeline (the period of its "
               f"last {m2 - m1}, equal on every stage)")
    else:
        res = sample(m1)
        t1 = res.iteration_time_s
        warns += [w for w in res.warnings if w not in warns and "global batch" not in w]
        how = f"{m1} and {m2} of its {m} micro-batches per pipeline (steady state of the schedule)"
    it = t1 + (m - m1) * (t2 - t1) / (m2 - m1)
    warns.append(f"iteration time extrapolated from {how}")
    return it, tuple(warns)


def steady_span_s(res: Any, m1: int, m2: int, tol: float = 1e-4) -> float | None:
    """How long (s) the micro-batches ``m1 .. m2 - 1`` of a pipelined replay ``res`` of
    ``m2`` took, when every stage took the same: the time between a stage's activation sends
    (one per forward pass of a model chunk, in schedule order) of micro-batch ``m1 - 1``'s
    last chunk and of micro-batch ``m2 - 1``'s, the largest over the stages; None when two
    stages differ by more than ``tol`` of it (the period then moves the extrapolation by
    less than ``tol`` of the iteration), or a stage has no such sends."""
    t = res.graph.tasks
    sends = (t["name"] == "pp.send_act").to_numpy()
    rank = t["rank"].to_numpy()[sends]
    ends = np.asarray(res.end_ns)[sends]
    spans = []
    for r in np.unique(rank).tolist():
        e = ends[rank == r]
        if len(e) % m2:
            return None
        spans.append(int(e[-1] - e[len(e) // m2 * m1 - 1]))
    if not spans or max(spans) - min(spans) > tol * max(spans):
        return None
    return max(spans) * 1e-9
