"""Kernel times of a recorded graph on another device; host time at another host speed.

Every GPU task keeps its measured duration times the cost model's ratio between the target
and the recorded device (:mod:`tracesim.hardware.costmodel`), so what the model does not
capture (a kernel's own efficiency, its launch configuration) carries over from the
measurement:

* **scaled**: the task has cost features (FLOPs, bytes) from the op that launched it, taken
  from the recorded input shapes; ratio = model time on the target / on the recorded device;
* **inferred**: no shapes were recorded (or the op has no cost rule): the work is inferred
  from the measured time by inverting the recorded device's model for the kernel's class
  (a GEMM / attention kernel is taken as compute-bound at its dtype, anything else as
  memory-bound), and that work is timed on the target;
* **kept**: host <-> device copies (PCIe, not in the device profile) keep the measured time;
* **measured**: the target is the recorded device (every ratio is 1);
* **model**: timed by the cost model on the target already (``modelled``: the kernels of a
  CPU recording moved onto the GPU, :mod:`tracesim.transform.transplant`); left as they are.

Host tasks (CPU ops, runtime calls, the untraced time between them) are divided by
``host_speed``. Communication tasks are left to :mod:`tracesim.transform.comms`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracesim.graph.taskgraph import TaskGraph
from tracesim.hardware.costmodel import MATRIX_CLASSES, alike_profiles, op_times_ns
from tracesim.hardware.device import DeviceProfile
from tracesim.ops.classify import kernel_dtype_hint

#: what a GPU task's time was made from (see the module docstring); host tasks are ``host``
GPU_METHODS = ("measured", "scaled", "inferred", "kept", "model")
#: a memory-bound kernel's work is found on this grid of sizes (bytes, log10)
_LOG_GRID = np.arange(0.0, 18.01, 0.01)
#: dtype assumed for a matrix kernel whose op and name do not say, on a device with bf16
#: matrix units (Ampere and later); fp32 on one without (V100 trains in fp32 or fp16 AMP)
DEFAULT_MATRIX_DTYPE = "bf16"


@dataclass(frozen=True)
class Retimed:
    """A retimed graph and how its times were obtained.

    Attributes:
        graph: the graph with new ``dur_ns`` (GPU and host tasks) and ``gap_ns`` (host).
        methods: per task (row order): one of :data:`GPU_METHODS` for GPU compute, ``host``
            for host tasks, ``comm`` for communication (timed later).
        gpu_ns: recorded GPU compute time (ns) by method.
        by_class: recorded GPU compute time (ns) by op class.
        dtype_assumed_ns: recorded time of matrix kernels whose dtype nothing recorded
            (:data:`DEFAULT_MATRIX_DTYPE` assumed, fp32 on a device without bf16).
        ratio: target over recorded GPU compute time (1 when nothing changed).
    """

    graph: TaskGraph
    methods: np.ndarray
    gpu_ns: Mapping[str, int] = field(default_factory=dict)
    by_class: Mapping[str, int] = field(default_factory=dict)
    dtype_assumed_ns: int = 0
    ratio: float = 1.0

    def shares(self) -> dict[str, float]:
        """Fraction of the recorded GPU compute time per method."""
        total = sum(self.gpu_ns.values())
        return {k: (v / total if total else 0.0) for k, v in self.gpu_ns.items()}


def task_dtypes(graph: TaskGraph, op_table: pd.DataFrame | None) -> np.ndarray:
    """The dtype of each task's op (joined on rank and source event), "" where unknown."""
    t = graph.tasks
    out = np.full(len(t), "", dtype=object)
    if op_table is None or "src_event" not in t or op_table.empty:
        return out
    ops = op_table[["rank", "event_id", "dtype"]]
    key = pd.MultiIndex.from_arrays([ops["rank"].to_numpy(), ops["event_id"].to_numpy()])
    lookup = pd.Series(ops["dtype"].to_numpy(), index=key)
    lookup = lookup[~lookup.index.duplicated()]
    want = pd.MultiIndex.from_arrays([t["rank"].to_numpy(), t["src_event"].to_numpy()])
    got = lookup.reindex(want).to_numpy()
    return np.where(pd.isna(got), "", got).astype(object)


def retime(graph: TaskGraph, src: DeviceProfile, dst: DeviceProfile, *,
           op_table: pd.DataFrame | None = None, host_speed: float = 1.0,
           modelled: np.ndarray | None = None) -> Retimed:
    """Kernel times on ``dst`` and host time at ``host_speed`` (module docstring).

    Args:
        graph: an extracted graph (tasks with ``kind``, ``op_class``, ``flops``, ``bytes``,
            and, from the extractor, ``cat`` and ``src_event``).
        src, dst: the recorded and the target device.
        op_table: the source's op table, for the dtype of each kernel's op.
        host_speed: the target host's speed relative to the recorded one.
        modelled: ids of GPU tasks already timed on ``dst`` by the cost model.
    """
    t = graph.tasks
    kind = t["kind"].to_numpy()
    cls = t["op_class"].to_numpy().astype(str)
    dur = t["dur_ns"].to_numpy().astype(np.int64)
    new_dur = dur.copy()
    methods = np.full(len(t), "comm", dtype=object)
    is_cpu = kind == "cpu"
    methods[is_cpu] = "host"
    gpu = (kind == "gpu") & (cls != "comm")
    idx = np.flatnonzero(gpu)
    names = t["name"].to_numpy()[idx]
    cat = t["cat"].to_numpy()[idx].astype(str) if "cat" in t else np.full(len(idx), "kernel")
    flops = t["flops"].to_numpy()[idx].astype(float)
    nbytes = t["bytes"].to_numpy()[idx].astype(float)
    op_dtype = task_dtypes(graph, op_table)[idx]
    c = cls[idx]
    copy = np.flatnonzero(cat == "memcpy")
    host_copy = np.zeros(len(idx), dtype=bool)
    host_copy[copy] = [_crosses_host(str(n)) for n in names[copy]]
    has_features = ((flops > 0) | (nbytes > 0)) & ~host_copy
    default = DEFAULT_MATRIX_DTYPE if src.peak_tflops.get("bf16") else "fp32"
    dts, assumed = _dtypes(names, op_dtype, c, default)
    m = np.where(host_copy, "kept", np.where(has_features, "scaled", "inferred")).astype(object)
    d = dur[idx].astype(float)
    out = d.copy()
    same = src.name == dst.name
    if same:
        m[:] = np.where(host_copy, "kept", "measured")
    else:
        src, dst = alike_profiles(src, dst)  # recorded in one regime: compare like with like
        f = has_features
        if f.any():
            ratio = (op_times_ns(dst, c[f], flops[f], nbytes[f], dts[f]).astype(float)
                     / np.maximum(op_times_ns(src, c[f], flops[f], nbytes[f], dts[f]), 1))
            out[f] = d[f] * ratio
        inf = (m == "inferred")
        if inf.any():
            out[inf] = _inferred_ns(src, dst, c[inf], dts[inf], d[inf])
    if modelled is not None and len(modelled):
        pre = np.isin(idx, modelled)
        m[pre] = "model"
        out[pre] = d[pre]
    new_dur[idx] = np.rint(out).astype(np.int64)
    methods[idx] = m
    gap = t["gap_ns"].to_numpy().astype(np.int64)
    new_gap = gap
    if host_speed != 1.0:
        new_dur[is_cpu] = np.rint(dur[is_cpu] / host_speed).astype(np.int64)
        new_gap = np.where(is_cpu, np.rint(gap / host_speed).astype(np.int64), gap)
    tasks = t.assign(dur_ns=new_dur, gap_ns=new_gap)
    gpu_ns = {k: int(d[m == k].sum()) for k in GPU_METHODS if (m == k).any()}
    by_class = {str(k): int(v) for k, v in pd.Series(d).groupby(c).sum().items()} if len(c) else {}
    total = float(d.sum())
    return Retimed(graph.replace(tasks=tasks), methods, gpu_ns, by_class,
                   int(d[assumed].sum()), float(out.sum()) / total if total else 1.0)


def _crosses_host(name: str) -> bool:
    """A copy between host and device memory (``Memcpy HtoD``, ``DtoH``, pinned, pageable)."""
    low = name.lower()
    return any(k in low for k in ("htod", "dtoh", "htoh", "pageable", "pinned", "host"))


def _dtypes(names: np.ndarray, op_dtype: np.ndarray, cls: np.ndarray,
            default: str) -> tuple[np.ndarray, np.ndarray]:
    """Math dtype per kernel: the kernel name's marker, else its op's dtype, else (matrix
    classes) ``default`` / (others) fp32; and which were assumed."""
    out = np.empty(len(names), dtype=object)
    assumed = np.zeros(len(names), dtype=bool)
    hints: dict[str, str | None] = {}
    for i, (n, od, c) in enumerate(zip(names.tolist(), op_dtype.tolist(), cls.tolist(), strict=True)):
        matrix = c in MATRIX_CLASSES
        h = hints.get(n, "")
        if h == "":
            h = hints[n] = kernel_dtype_hint(n) if matrix else None
        if h:
            out[i] = h
        elif od:
            out[i] = od
        elif matrix:
            out[i] = default
            assumed[i] = True
        else:
            out[i] = "fp32"
    return out, assumed


def _inferred_ns(src: DeviceProfile, dst: DeviceProfile, cls: np.ndarray, dts: np.ndarray,
                 measured: np.ndarray) -> np.ndarray:
    """Target times of kernels whose work is unknown: invert the recorded device's model
    for each (class, dtype) on a grid of sizes, then time that work on the target."""
    out = np.empty(len(measured))
    keys = pd.MultiIndex.from_arrays([cls, dts])
    codes, uniques = pd.factorize(keys)
    grid = 10.0 ** _LOG_GRID
    for j, (c, dt) in enumerate(uniques):
        sel = codes == j
        matrix = c in MATRIX_CLASSES
        fl = grid if matrix else np.zeros_like(grid)
        by = np.zeros_like(grid) if matrix else grid
        t_src = np.maximum.accumulate(op_times_ns(src, c, fl, by, dt).astype(float))
        t_dst = op_times_ns(dst, c, fl, by, dt).astype(float)
        # the smallest size with the measured time on the recorded device
        pos = np.searchsorted(t_src, measured[sel], side="left")
        pos = np.clip(pos, 0, len(grid) - 1)
        ratio = t_dst[pos] / np.maximum(t_src[pos], 1.0)
        out[sel] = measured[sel] * ratio
    return out

