"""A run recorded on a CPU, moved onto a GPU: each compute op becomes a launch and a kernel.

On a CPU the host thread does the arithmetic inside each aten op; on a GPU the same op only
dispatches and launches a kernel, and the kernel runs on a stream while the host goes on.
For every *compute op* (an op with cost features, FLOPs or bytes from its recorded shapes,
that does not hand its work to an op of the same class inside it,
:func:`tracesim.trace.cpulanes.compute_ops`):

* the op's own time on its host thread (its window less the ops recorded inside it, such
  as the allocations ``aten::empty`` and ``aten::as_strided``, which a GPU run makes too)
  is the arithmetic; it shrinks to :data:`HOST_LAUNCH_NS`, the launch call. The untraced
  time inside the window (and the op's own duration, where it has no ops inside) loses
  that share;
* a GPU task on the rank's stream runs the op's work for the cost model's time on the
  target device (method ``model``), launched by the last host task in the window, in the
  order the ops ended;
* the host waits for the stream where a GPU run would: at the end of every step (a
  training loop reads the loss), at ``aten::_local_scalar_dense`` (``.item()``) and
  ``aten::nonzero``, and before every collective (NCCL runs after the kernels that
  produced its buffers).

What is not arithmetic (Python, the dispatcher, the optimizer's bookkeeping) keeps its
recorded host time; the collectives are re-timed by :mod:`tracesim.transform.comms`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracesim.errors import InputError
from tracesim.graph.taskgraph import TaskGraph, make_edges, make_lanes, make_tasks
from tracesim.hardware.costmodel import op_times_ns
from tracesim.hardware.device import DeviceProfile
from tracesim.trace.cpulanes import compute_ops

#: host time of one kernel launch call (cudaLaunchKernel): the median in the shared H100 and
#: V100 traces is 5.2 us (../shared/traces/public: tracelens-h100-timesformer-infer,
#: v100_1rank), recorded under the profiler, so an upper end
HOST_LAUNCH_NS = 5_000
#: ops that make the host wait for the GPU (a copy of a device value to the host)
SYNC_OPS = ("aten::_local_scalar_dense", "aten::item", "aten::nonzero")


@dataclass(frozen=True)
class Transplanted:
    """A CPU-recorded graph moved onto a GPU.

    Attributes:
        graph: the new graph (host tasks shortened, GPU tasks and their edges added).
        kernel_ids: ids of the new GPU tasks.
        host_s_before, host_s_after: total host task and gap time, seconds.
    """

    graph: TaskGraph
    kernel_ids: np.ndarray
    host_s_before: float
    host_s_after: float

    def summary(self) -> dict[str, object]:
        return {"kernels": int(len(self.kernel_ids)),
                "host_s_before": round(self.host_s_before, 6),
                "host_s_after": round(self.host_s_after, 6),
                "launch_us": HOST_LAUNCH_NS / 1e3}


def to_gpu(graph: TaskGraph, ops: pd.DataFrame, dst: DeviceProfile) -> Transplanted:
    """Move a CPU-recorded graph onto ``dst`` (module docstring)."""
    if dst.kind == "cpu":
        raise InputError(f"{dst.name} is a CPU profile; the recording is already on a CPU", "--device")
    t = graph.tasks.copy()
    for col in ("rec_start", "rec_end", "src_event"):
        if col not in t:
            raise InputError("the graph has no recorded times; transplant a bundle or trace, "
                             "not a workload", "source")
    lanes = graph.lanes
    lane_name = dict(zip(lanes["lane"].tolist(), lanes["name"].tolist(), strict=True))
    comp = compute_ops(ops)
    dur = t["dur_ns"].to_numpy().astype(np.int64).copy()
    gap = t["gap_ns"].to_numpy().astype(np.int64).copy()
    host = t["kind"].to_numpy() == "cpu"
    before = float(dur[host].sum() + gap[host].sum()) / 1e9
    rs = t["rec_start"].to_numpy(dtype=float)
    re_ = t["rec_end"].to_numpy(dtype=float)
    names = t["name"].to_numpy()
    new_rows: list[dict] = []
    edges: list[tuple[int, int, str]] = []
    next_id = len(t)
    new_lanes: list[dict] = []
    n_lanes = len(lanes)
    for rank in sorted(set(comp["rank"].tolist())):
        c = comp[comp["rank"] == rank].sort_values("ts_ns", kind="stable")
        launcher = np.full(len(c), -1, dtype=np.int64)
        ends = (c["ts_ns"] + c["dur_ns"]).to_numpy().astype(float)
        for ln in sorted(set(c["lane"].tolist())):
            sel = (c["lane"] == ln).to_numpy()
            lane_ids = [k for k, v in lane_name.items() if v == f"cpu:{str(ln).split(':', 1)[-1]}"
                        and int(lanes["rank"].iat[k]) == rank]
            if not lane_ids:
                continue
            tids = np.flatnonzero((t["lane"].to_numpy() == lane_ids[0]) & ~np.isnan(rs))
            w_s = c["ts_ns"].to_numpy().astype(float)[sel]
            w_e = ends[sel]
            own = np.isin(t["src_event"].to_numpy()[tids], c["event_id"].to_numpy()[sel])
            cum = _compressor(w_s, w_e, rs[tids], re_[tids], own)
            prev_end = np.concatenate([[rs[tids[0]] if len(tids) else 0.0], re_[tids][:-1]])
            cut_gap = cum(rs[tids]) - cum(prev_end)
            cut_dur = np.where(own, cum(re_[tids]) - cum(rs[tids]), 0.0)
            gap[tids] = np.maximum(0, gap[tids] - np.rint(cut_gap)).astype(np.int64)
            dur[tids] = np.maximum(0, dur[tids] - np.rint(cut_dur)).astype(np.int64)
            # the launching task: the last task of the lane that started before the op ended
            pos = np.searchsorted(rs[tids], w_e, side="left") - 1
            launcher[np.flatnonzero(sel)] = np.where(pos >= 0, tids[np.clip(pos, 0, None)], -1)
        lane_id = n_lanes + len(new_lanes)
        new_lanes.append({"lane": lane_id, "rank": rank, "name": "stream:7", "kind": "gpu"})
        order = np.argsort(ends, kind="stable")
        kt = op_times_ns(dst, c["op_class"].to_numpy(), c["flops"].to_numpy(), c["bytes"].to_numpy(),
                         np.where(c["dtype"].astype(str) == "", "fp32", c["dtype"].astype(str)))
        kid = np.full(len(c), -1, dtype=np.int64)
        for k in order.tolist():
            if launcher[k] < 0:
                continue
            kid[k] = next_id
            new_rows.append({"task_id": next_id, "rank": rank, "lane": lane_id, "kind": "gpu",
                             "name": str(c["name"].iat[k]), "dur_ns": int(kt[k]),
                             "op_class": str(c["op_class"].iat[k]), "flops": float(c["flops"].iat[k]),
                             "bytes": float(c["bytes"].iat[k]), "step": str(c["step"].iat[k]),
                             "phase": str(c["phase"].iat[k]), "layer": int(c["layer"].iat[k]),
                             "src_event": int(c["event_id"].iat[k]), "cat": "kernel",
                             "rec_start": float(c["ts_ns"].iat[k]), "rec_end": float(ends[k])})
            edges.append((int(launcher[k]), next_id, "launch"))
            next_id += 1
        edges += _waits(t, rank, rs, names, kid[order], ends[order], c["step"].to_numpy()[order])
    if not new_rows:
        raise InputError("the recording has no compute ops with recorded shapes to move onto a "
                         "GPU (record with record_shapes=True)", "source")
    t["dur_ns"] = dur
    t["gap_ns"] = gap
    tasks = make_tasks(pd.concat([t, pd.DataFrame(new_rows)], ignore_index=True))
    src = np.concatenate([graph.edges["src"].to_numpy(), np.array([e[0] for e in edges])])
    dst_ = np.concatenate([graph.edges["dst"].to_numpy(), np.array([e[1] for e in edges])])
    kinds = graph.edges["kind"].astype(str).tolist() + [e[2] for e in edges]
    all_lanes = make_lanes(pd.concat([lanes, pd.DataFrame(new_lanes)], ignore_index=True))
    out = graph.replace(tasks=tasks, edges=make_edges(src, dst_, kinds), lanes=all_lanes)
    h = tasks["kind"].to_numpy() == "cpu"
    after = float(tasks["dur_ns"].to_numpy()[h].sum() + tasks["gap_ns"].to_numpy()[h].sum()) / 1e9
    return Transplanted(out, np.arange(len(t), next_id), before, after)


def _segments(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nested windows [s, e) flattened into disjoint segments, each owned by the innermost
    window that covers it: (segment starts, ends, owning window)."""
    order = sorted(range(len(s)), key=lambda i: (s[i], -e[i]))
    bounds = sorted(set(s.tolist()) | set(e.tolist()))
    seg_s: list[float] = []
    seg_e: list[float] = []
    seg_w: list[int] = []
    stack: list[int] = []
    k = 0
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        while stack and e[stack[-1]] <= a:
            stack.pop()
        while k < len(order) and s[order[k]] <= a:
            w = order[k]
            k += 1
            while stack and e[stack[-1]] <= s[w]:
                stack.pop()
            if e[w] > a:
                stack.append(w)
        while stack and e[stack[-1]] <= a:
            stack.pop()
        if stack:
            seg_s.append(a)
            seg_e.append(b)
            seg_w.append(stack[-1])
    return np.array(seg_s), np.array(seg_e), np.array(seg_w, dtype=np.int64)


def _compressor(w_s: np.ndarray, w_e: np.ndarray, t_s: np.ndarray, t_e: np.ndarray,
                own: np.ndarray):  # noqa: ANN202
    """C(x): the host time removed before ``x`` (vectorised over x).

    Each window keeps :data:`HOST_LAUNCH_NS` of its own time (the segments it owns less
    the recorded tasks in them that are not the op itself); the rest of its segments is cut
    evenly."""
    seg_s, seg_e, seg_w = _segments(w_s, w_e)
    if not len(seg_s):
        return lambda x: np.zeros(np.shape(x))
    self_t = np.zeros(len(w_s))
    np.add.at(self_t, seg_w, seg_e - seg_s)
    k = np.searchsorted(seg_s, t_s, side="right") - 1
    inside = (k >= 0) & ~own
    kk = np.clip(k, 0, None)
    inside &= t_s < seg_e[kk]
    busy = np.minimum(t_e, seg_e[kk]) - t_s
    np.add.at(self_t, seg_w[kk[inside]], -busy[inside])
    cut = 1.0 - np.minimum(1.0, HOST_LAUNCH_NS / np.maximum(self_t, 1.0))
    dens = cut[seg_w]
    prefix = np.concatenate([[0.0], np.cumsum((seg_e - seg_s) * dens)])

    def cum(x: np.ndarray) -> np.ndarray:
        j = np.searchsorted(seg_s, x, side="right") - 1
        jj = np.clip(j, 0, None)
        part = np.clip(x - seg_s[jj], 0.0, (seg_e - seg_s)[jj]) * dens[jj]
        return np.where(j >= 0, prefix[jj] + part, 0.0)

    return cum


def _waits(t: pd.DataFrame, rank: int, rs: np.ndarray, names: np.ndarray, kid: np.ndarray,
           k_end: np.ndarray, k_step: np.ndarray) -> list[tuple[int, int, str]]:
    """``sync`` edges from the stream to the host where a GPU run waits (module docstring)."""
    out: list[tuple[int, int, str]] = []
    valid = kid >= 0
    kid, k_end, k_step = kid[valid], k_end[valid], k_step[valid]
    if not len(kid):
        return out
    mine = t["rank"].to_numpy() == rank
    marker = t["marker"].to_numpy().astype(str) if "marker" in t else np.full(len(t), "")
    for i in np.flatnonzero(mine & (marker == "end")).tolist():
        step = str(t["step"].iat[i])
        last = np.flatnonzero(k_step == step)
        if len(last):
            out.append((int(kid[last[-1]]), i, "sync"))
    waits = mine & ~np.isnan(rs) & (np.isin(names, SYNC_OPS)
                                   | ((t["kind"].to_numpy() == "coll")
                                      | (t["op_class"].to_numpy() == "comm"))
                                   & t["name"].astype(str).str.startswith("gloo:").to_numpy(dtype=bool))
    for i in np.flatnonzero(waits).tolist():
        k = int(np.searchsorted(k_end, rs[i], side="right")) - 1
        if k >= 0:
            out.append((int(kid[k]), i, "sync"))
    return out
