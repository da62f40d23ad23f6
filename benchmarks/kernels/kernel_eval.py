"""Model-only prediction of recorded GPU kernels, against their measured times.

For every host op that launched GPU kernels, the measured time is the sum of its kernels'
durations; the prediction is :func:`tracesim.hardware.costmodel.op_times_ns` from the op's
class, FLOPs, bytes and dtype alone (as if the op had never been measured). The math dtype
comes from :func:`tracesim.ops.classify.math_dtype`: kernel names tell TF32 from FP32
SIMT (the precision the job configured; durations are never looked at).

Traces recorded without ``record_shapes`` (the public V100 and A100 ResNet-50 traces, the
A100 AlexNet trace) carry no shapes; :mod:`benchmarks.kernels.conv_shapes` rebuilds them from
the torchvision layer lists, with the batch size read off the first ReLU kernel's launch
grid. Only then are their convolutions and FC GEMMs evaluated.

GEMM-class ops are charged with effective FLOPs (FLOPs over the useful fraction of the tile
work: tile padding and wave fill from the kernels' tiles and recorded launch grids, with an
L2 tile cap) plus cuDNN's layout-transform traffic and one launch per kernel
(:mod:`benchmarks.kernels.gemm_shape`, :data:`SHAPE_PARTS`); the work that TF32 implicit-GEMM
convolution kernels run is charged on their own curve (:mod:`benchmarks.kernels.conv_tf32`).

``python -m benchmarks.kernels.kernel_ablation`` prints the per-class tables of docs/devices.md;
``--layers`` the per-layer-class tables of the ResNet-50 traces, ``--ablation`` the
shape-model ablation, ``--transforms`` the layout-transform kernels against their model
(:mod:`benchmarks.kernels.kernel_ablation`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.kernels.conv_shapes import (
    alexnet_batch,
    annotate_alexnet,
    annotate_resnet50,
    resnet50_batch,
)
from benchmarks.kernels.conv_tf32 import conv_tf32_profile
from benchmarks.kernels.gemm_shape import layout_transform_bytes, op_quantization
from tracesim.hardware.costmodel import op_times_ns
from tracesim.hardware.device import DeviceProfile, get_device
from tracesim.ops.classify import classify, math_dtype

# --------------------------------------------------------------------------- grouping


def launch_groups(table: pd.DataFrame) -> pd.DataFrame:
    """One row per host op that launched GPU kernels (innermost ``cpu_op`` above the launch).

    Columns: rank, step, event_id (of the op), name, op_class, flops, bytes, dtype, shapes,
    n_kernels, kernel_ns (sum of its kernels' durations), kernel_names (tuple), kernel_durs
    (tuple of each kernel's ns), math_dtype; kernel_ctas (tuple of thread blocks per kernel)
    when the table has a ``ctas`` column.
    """
    cats = table["cat"].to_numpy()
    kern = table[cats == "kernel"]
    host = table[~np.isin(cats, ["kernel", "memcpy", "memset", "sync", "gpu_annotation"])]
    rt = host[host["cat"] == "runtime"]
    rt_parent = dict(zip(zip(rt["rank"], rt["correlation"], strict=True), rt["parent_id"], strict=True))
    pos = {(r, e): i for i, (r, e) in enumerate(zip(host["rank"], host["event_id"], strict=True))}
    hcat = host["cat"].to_numpy()
    hparent = host["parent_id"].to_numpy()
    owner = np.full(len(kern), -1, dtype=np.int64)
    for j, (r, c) in enumerate(zip(kern["rank"], kern["correlation"], strict=True)):
        p = rt_parent.get((r, c), -1)
        hops = 0
        while p >= 0 and hops < 64:
            k = pos.get((r, p))
            if k is None:
                break
            if hcat[k] in ("cpu_op", "comm"):
                owner[j] = p
                break
            p = hparent[k]
            hops += 1
    kern = kern.assign(_owner=owner)
    kern = kern[kern["_owner"] >= 0]
    extra = {"kernel_ctas": ("ctas", lambda s: tuple(int(v) for v in s))} if "ctas" in kern else {}
    agg = kern.groupby(["rank", "_owner"], sort=False).agg(
        n_kernels=("dur_ns", "size"), kernel_ns=("dur_ns", "sum"),
        kernel_names=("name", lambda s: tuple(s)),
        kernel_durs=("dur_ns", lambda s: tuple(int(v) for v in s)), **extra)
    agg = agg.reset_index().rename(columns={"_owner": "event_id"})
    ops = host[["rank", "event_id", "step", "name", "op_class", "flops", "bytes", "dtype", "shapes"]]
    out = agg.merge(ops, on=["rank", "event_id"], how="left")
    out["dtype"] = out["dtype"].where(out["dtype"].astype(bool), "fp32")
    out["math_dtype"] = [math_dtype(n, d, k) for n, d, k in
                         zip(out["name"], out["dtype"], out["kernel_names"], strict=True)]
    return out


# --------------------------------------------------------------------------- prediction

#: Winograd F(2x2, 3x3) does 2.25x fewer multiplications than direct convolution (Lavin & Gray,
#: "Fast Algorithms for Convolutional Neural Networks", CVPR 2016, Table 1)
WINOGRAD_FLOPS_FACTOR = 1.0 / 2.25


def algorithm_flops_factor(name: str, kernel_names: Sequence[str]) -> float:
    """FLOP factor of the convolution algorithm the kernel names show (Winograd: 1/2.25)."""
    if classify(name) == "gemm" and any("winograd" in k.lower() for k in kernel_names):
        return WINOGRAD_FLOPS_FACTOR
    return 1.0


#: the parts of the shape model :func:`evaluate` can switch on (all by default)
SHAPE_PARTS = ("waves", "grids", "l2", "transforms", "launches", "conv")


def shape_features(g: pd.DataFrame, dev: DeviceProfile, *, l2: bool = True,
                   grids: bool = True) -> pd.DataFrame:
    """Per row: ``useful`` (tile / wave quantisation, with ``l2`` the L2 tile cap,
    :func:`benchmarks.kernels.gemm_shape.op_quantization`), ``min_alignment``,
    ``conv_fraction`` (share of the work on implicit-GEMM convolution kernels),
    ``transform_bytes`` and ``n_transforms`` (cuDNN layout-transform kernels,
    :func:`layout_transform_bytes`)."""
    useful, tbytes, ntrans, align, conv = [], [], [], [], []
    ctas = g["kernel_ctas"] if grids and "kernel_ctas" in g else [None] * len(g)
    for name, shp, f, kn, md, kc in zip(g["name"], g["shapes"], g["flops"], g["kernel_names"],
                                        g["math_dtype"], ctas, strict=True):
        eb = 2 if md in ("bf16", "fp16") else 4
        q = op_quantization(name, shp, f, kn, dev.sm_count, l2_GBps=dev.l2_GBps if l2 else 0.0,
                            peak_flops=dev.peak_flops(md or "fp32"), elem_bytes=eb,
                            kernel_ctas=kc if kc and any(kc) else None)
        tb, nt = layout_transform_bytes(name, shp, f, kn, eb)
        useful.append(q.useful)
        align.append(q.min_alignment)
        conv.append(q.conv_fraction)
        tbytes.append(tb)
        ntrans.append(nt)
    return g.assign(useful=useful, transform_bytes=tbytes, n_transforms=ntrans, min_alignment=align,
                    conv_fraction=conv)


def evaluate(groups: pd.DataFrame, device: DeviceProfile | str,
             classes: Iterable[str] | None = ("gemm", "attention"), *,
             algorithms: bool = True,
             shapes_model: bool | Iterable[str] = True,
             conv_e_max: float | None = None) -> pd.DataFrame:
    """Predict each launching op on ``device`` from its cost features alone.

    Rows without cost features (flops and bytes both zero) are dropped. Adds
    ``flops_eff`` (the FLOPs the roofline is charged with), ``predicted_ns``, ``ratio``
    (predicted / measured) and ``ape`` (|ratio - 1|). With ``algorithms``, convolutions whose
    kernels are Winograd count :data:`WINOGRAD_FLOPS_FACTOR` of their direct FLOPs. With
    ``shapes_model`` (gemm class, needs the device's ``sm_count``; True = all of
    :data:`SHAPE_PARTS`, or a subset): ``waves`` divides the FLOPs by the useful fraction of
    the tile work and ``l2`` adds the L2 tile cap to it (:func:`shape_features`),
    ``transforms`` adds the layout-transform kernels' bytes at the memory curve, and
    ``launches`` adds the launch overhead for every kernel of the op after the first, and
    ``conv`` charges the share of a TF32 op's work that runs on implicit-GEMM convolution
    kernels (``conv_fraction``) on the curve of :mod:`benchmarks.kernels.conv_tf32` (its
    ``e_max`` calibrated for the device, or ``conv_e_max``; no change on other devices):
    compute time = (1 - share) x GEMM-curve time + share x convolution-curve time, both at
    the op's effective FLOPs.
    """
    dev = get_device(device) if not isinstance(device, DeviceProfile) else device
    g = groups
    if classes is not None:
        g = g[g["op_class"].isin(list(classes))]
    g = g[((g["flops"] > 0) | (g["bytes"] > 0)) & (g["kernel_ns"] > 0)].copy()
    factor = np.array([algorithm_flops_factor(n, k) if algorithms else 1.0
                       for n, k in zip(g["name"], g["kernel_names"], strict=True)], dtype=float)
    parts = set(SHAPE_PARTS if shapes_model is True else () if shapes_model is False
                else shapes_model)
    if dev.sm_count <= 0:
        parts = set()
    gemm = (g["op_class"] == "gemm").to_numpy()
    g = shape_features(g, dev, l2="l2" in parts, grids="grids" in parts)
    useful = np.where(gemm & ("waves" in parts), g["useful"].to_numpy(float), 1.0)
    g["flops_eff"] = g["flops"].to_numpy() * factor / useful
    pred = op_times_ns(dev, g["op_class"].to_numpy(object), g["flops_eff"].to_numpy(),
                       g["bytes"].to_numpy(), g["math_dtype"].to_numpy(object)).astype(float)
    conv_dev = conv_tf32_profile(dev, conv_e_max) if "conv" in parts else None
    share = np.where(gemm & (g["math_dtype"].to_numpy(object) == "tf32"),
                     g["conv_fraction"].to_numpy(float), 0.0)
    if conv_dev is not None and (share > 0).any():
        pred = np.where(share > 0, _conv_blend_ns(dev, conv_dev, g, share), pred)
    tb = np.where(gemm & ("transforms" in parts), g["transform_bytes"].to_numpy(float), 0.0)
    launch_ns = dev.launch_overhead_us * 1e3
    t_tr = op_times_ns(dev, "memcpy", 0.0, tb, "fp32") - launch_ns
    extra = np.where(gemm & ("launches" in parts), g["n_kernels"].to_numpy() - 1, 0) * launch_ns
    g["predicted_ns"] = np.rint(pred + np.where(tb > 0, t_tr, 0.0) + extra).astype(np.int64)
    g["ratio"] = g["predicted_ns"] / g["kernel_ns"]
    g["ape"] = (g["ratio"] - 1.0).abs()
    return g


def _conv_blend_ns(dev: DeviceProfile, conv_dev: DeviceProfile, g: pd.DataFrame,
                   share: np.ndarray) -> np.ndarray:
    """Roofline time (ns) with the compute time split between the GEMM and the implicit-GEMM
    convolution curves by ``share``."""
    cls = g["op_class"].to_numpy(object)
    md = g["math_dtype"].to_numpy(object)
    f = g["flops_eff"].to_numpy(float)
    b = g["bytes"].to_numpy(float)
    zero = np.zeros_like(f)
    launch = dev.launch_overhead_us * 1e3
    t_gemm = op_times_ns(dev, cls, f, zero, md) - launch
    t_conv = op_times_ns(conv_dev, cls, f, zero, md) - launch
    t_mem = op_times_ns(dev, cls, zero, b, md) - launch
    return np.maximum((1.0 - share) * t_gemm + share * t_conv, t_mem) + launch


def summarize(rows: pd.DataFrame, by: Sequence[str] = ("op_class",)) -> pd.DataFrame:
    """Per group: n, MAPE, median APE, p10 / p90 of predicted/measured, total-time error."""
    def one(d: pd.DataFrame) -> pd.Series:
        return pd.Series({
            "n": len(d),
            "mape": d["ape"].mean(),
            "median_ape": d["ape"].median(),
            "ratio_p10": d["ratio"].quantile(0.10),
            "ratio_p90": d["ratio"].quantile(0.90),
            "sum_error": d["predicted_ns"].sum() / d["kernel_ns"].sum() - 1.0,
        })

    return rows.groupby(list(by), sort=True).apply(one, include_groups=False).reset_index()


# --------------------------------------------------------------------------- the public traces

#: the public traces evaluated in docs/devices.md: file, device profile, how shapes are known
PUBLIC_TRACES = (
    ("v100_1rank.json.gz", "v100", "resnet50"),
    ("a100_2rank_nccl.json.gz", "a100-40gb", "resnet50"),
    ("sampled_128rank_r0.json.gz", "a100", "recorded"),
    ("sampled_128rank_r1.json.gz", "a100", "recorded"),
    ("a100_alexnet_cuda_sync.json.gz", "a100-40gb", "alexnet"),
)


def trace_groups(path: str | Path, shapes: str = "recorded") -> pd.DataFrame:
    """Read a Kineto trace, rebuild its shapes if ``shapes`` is ``"resnet50"`` or
    ``"alexnet"``, and return its :func:`launch_groups` (with a ``trace`` column)."""
    from tracesim.trace.kineto import load_trace_json, op_table_from_events

    data = load_trace_json(path)
    table = op_table_from_events(data, path)
    if shapes == "resnet50":
        batch = resnet50_batch(data)
        if batch is None:
            raise ValueError(f"{path}: cannot read the batch size off the ReLU kernel grid")
        table = annotate_resnet50(table, batch)
    elif shapes == "alexnet":
        batch = alexnet_batch(data)
        if batch is None:
            raise ValueError(f"{path}: cannot read the batch size off the ReLU kernel grid")
        table = annotate_alexnet(table, batch)
    return launch_groups(table.assign(ctas=kernel_ctas(data, table))).assign(trace=Path(path).name)


def kernel_ctas(trace: dict[str, Any], table: pd.DataFrame) -> np.ndarray:
    """Thread blocks (grid x * y * z) of each kernel row of ``table`` from the trace's launch
    records (matched by correlation id; 0 where unknown or not a kernel)."""
    grids = {}
    for e in trace.get("traceEvents", []):
        if e.get("cat") == "kernel":
            args = e.get("args", {})
            g = args.get("grid")
            if isinstance(g, list) and g and all(isinstance(v, int) for v in g):
                grids[args.get("correlation")] = int(np.prod(g))
    kern = (table["cat"] == "kernel").to_numpy()
    return np.array([grids.get(c, 0) if k else 0 for c, k in zip(table["correlation"], kern,
                                                                  strict=True)], dtype=np.int64)


def evaluate_trace(path: str | Path, device: str | DeviceProfile, shapes: str = "recorded",
                   classes: Iterable[str] | None = ("gemm", "attention"), *,
                   algorithms: bool = True,
                   shapes_model: bool | Iterable[str] = True) -> pd.DataFrame:
    """Read a Kineto trace, rebuild shapes if needed, and :func:`evaluate` it on ``device``."""
    rows = evaluate(trace_groups(path, shapes), device, classes, algorithms=algorithms,
                    shapes_model=shapes_model)
    name = device.name if isinstance(device, DeviceProfile) else device
    return rows.assign(device=name)


# --------------------------------------------------------------------------- calibrating on a trace


def fit_from_trace(rows: pd.DataFrame, device: DeviceProfile | str, *, tiny_bytes: float = 1e4,
                   mem_classes: Sequence[str] = ("elementwise", "memcpy"),
                   gemm_dtype: str = "tf32", min_alignment: int = 0) -> dict[str, Any]:
    """Fit launch overhead, memory curve and one GEMM compute curve from a trace's kernels.

    ``rows`` come from :func:`evaluate` (any classes). The launch overhead is the median
    kernel time of ops moving < ``tiny_bytes``; memory efficiency ``bytes / (bw * (t - L))``
    of the ``mem_classes`` ops; compute efficiency ``flops_eff / (peak * (t - L))`` (``flops``
    for rows without ``flops_eff``) of the GEMMs
    whose math dtype is ``gemm_dtype`` and whose memory time (at the fitted curve) is under
    half their time. Each curve is a median per half decade made non-decreasing
    (:func:`tracesim.hardware.calibrate.fit_curve`).
    """
    from tracesim.hardware.calibrate import fit_curve, spread_of
    from tracesim.hardware.device import EfficiencyCurve

    dev = get_device(device) if not isinstance(device, DeviceProfile) else device
    t = rows["kernel_ns"].to_numpy(float) * 1e-9
    b = rows["bytes"].to_numpy(float)
    f = rows["flops_eff" if "flops_eff" in rows else "flops"].to_numpy(float)
    cls = rows["op_class"].to_numpy(object)
    tiny = (b > 0) & (b < tiny_bytes) & (rows["n_kernels"].to_numpy() == 1)
    launch = float(np.median(t[tiny])) if tiny.any() else dev.launch_overhead_us * 1e-6
    busy = np.maximum(t - launch, 0.1 * t)
    bw = dev.hbm_GBps * 1e9
    m = np.isin(cls, list(mem_classes)) & (b >= tiny_bytes)
    mem = fit_curve(b[m], b[m] / (bw * busy[m]), per_decade=2, min_points=3)
    mem_curve = EfficiencyCurve(tuple(np.log10([p[0] for p in mem])), tuple(p[1] for p in mem))
    g = (cls == "gemm") & (rows["math_dtype"].to_numpy(object) == gemm_dtype) & (f > 0)
    t_mem = b / (bw * np.asarray(mem_curve.at(b)))
    g &= t_mem < 0.5 * busy
    if min_alignment > 0 and "min_alignment" in rows:  # 0 = no alignN in the kernel names
        al = rows["min_alignment"].to_numpy()
        g &= (al == 0) | (al >= min_alignment)
    effs = f[g] / (dev.peak_flops(gemm_dtype) * busy[g])
    # a bin at the clip (efficiency 1) is not a measurement of the plateau: dropped
    comp = [p for p in fit_curve(f[g], effs, per_decade=2, min_points=3) if p[1] < 1.0]
    return {
        "launch_overhead_us": round(launch * 1e6, 3),
        "memory": mem,
        "memory_spread": spread_of(b[m], b[m] / (bw * busy[m]), mem),
        "compute": comp,
        "compute_spread": spread_of(f[g], effs, comp),
        "n_memory": int(m.sum()),
        "n_compute": int(g.sum()),
        "n_tiny": int(tiny.sum()),
    }
