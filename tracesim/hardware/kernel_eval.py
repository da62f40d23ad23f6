"""Model-only prediction of recorded GPU kernels, against their measured times.

For every host op that launched GPU kernels, the measured time is the sum of its kernels'
durations; the prediction is :func:`tracesim.hardware.costmodel.op_times_ns` from the op's
class, FLOPs, bytes and dtype alone (as if the op had never been measured). The math dtype
comes from :func:`tracesim.workload.classify.math_dtype`: kernel names tell TF32 from FP32
SIMT (the precision the job configured; durations are never looked at).

Traces recorded without ``record_shapes`` (the public V100 and A100 ResNet-50 traces) carry
no shapes; :func:`annotate_resnet50` rebuilds them from the torchvision ResNet-50 layer list
(the model is identified by its 53 convolutions per step), with the batch size read off the
first ReLU kernel's launch grid. Only then are their convolutions and FC GEMMs evaluated.

GEMM-class ops are charged with effective FLOPs (FLOPs over the useful fraction of the tile
work: tile padding and wave fill from the kernels' tiles and recorded launch grids, with an
L2 tile cap) plus cuDNN's layout-transform traffic and one launch per kernel
(:mod:`tracesim.hardware.gemm_shape`, :data:`SHAPE_PARTS`).

``python -m tracesim.hardware.kernel_eval`` prints the per-class tables of docs/devices.md;
``--ablation`` the shape-model ablation (:mod:`tracesim.hardware.kernel_ablation`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracesim.hardware.costmodel import op_times_ns
from tracesim.hardware.device import DeviceProfile, get_device
from tracesim.hardware.gemm_shape import layout_transform_bytes, op_quantization
from tracesim.workload.classify import classify, math_dtype, op_cost

# --------------------------------------------------------------------------- grouping


def launch_groups(table: pd.DataFrame) -> pd.DataFrame:
    """One row per host op that launched GPU kernels (innermost ``cpu_op`` above the launch).

    Columns: rank, step, event_id (of the op), name, op_class, flops, bytes, dtype, shapes,
    n_kernels, kernel_ns (sum of its kernels' durations), kernel_names (tuple), math_dtype;
    kernel_ctas (tuple of thread blocks per kernel) when the table has a ``ctas`` column.
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
        kernel_names=("name", lambda s: tuple(s)), **extra)
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
SHAPE_PARTS = ("waves", "grids", "l2", "transforms", "launches")


def shape_features(g: pd.DataFrame, dev: DeviceProfile, *, l2: bool = True,
                   grids: bool = True) -> pd.DataFrame:
    """Per row: ``useful`` (tile / wave quantisation, with ``l2`` the L2 tile cap,
    :func:`tracesim.hardware.gemm_shape.op_quantization`), ``transform_bytes`` and
    ``n_transforms`` (cuDNN layout-transform kernels, :func:`layout_transform_bytes`)."""
    useful, tbytes, ntrans, align = [], [], [], []
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
        tbytes.append(tb)
        ntrans.append(nt)
    return g.assign(useful=useful, transform_bytes=tbytes, n_transforms=ntrans, min_alignment=align)


def evaluate(groups: pd.DataFrame, device: DeviceProfile | str,
             classes: Iterable[str] | None = ("gemm", "attention"), *,
             algorithms: bool = True,
             shapes_model: bool | Iterable[str] = True) -> pd.DataFrame:
    """Predict each launching op on ``device`` from its cost features alone.

    Rows without cost features (flops and bytes both zero) are dropped. Adds
    ``flops_eff`` (the FLOPs the roofline is charged with), ``predicted_ns``, ``ratio``
    (predicted / measured) and ``ape`` (|ratio - 1|). With ``algorithms``, convolutions whose
    kernels are Winograd count :data:`WINOGRAD_FLOPS_FACTOR` of their direct FLOPs. With
    ``shapes_model`` (gemm class, needs the device's ``sm_count``; True = all of
    :data:`SHAPE_PARTS`, or a subset): ``waves`` divides the FLOPs by the useful fraction of
    the tile work and ``l2`` adds the L2 tile cap to it (:func:`shape_features`),
    ``transforms`` adds the layout-transform kernels' bytes at the memory curve, and
    ``launches`` adds the launch overhead for every kernel of the op after the first.
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
    tb = np.where(gemm & ("transforms" in parts), g["transform_bytes"].to_numpy(float), 0.0)
    launch_ns = dev.launch_overhead_us * 1e3
    t_tr = op_times_ns(dev, "memcpy", 0.0, tb, "fp32") - launch_ns
    extra = np.where(gemm & ("launches" in parts), g["n_kernels"].to_numpy() - 1, 0) * launch_ns
    g["predicted_ns"] = np.rint(pred + np.where(tb > 0, t_tr, 0.0) + extra).astype(np.int64)
    g["ratio"] = g["predicted_ns"] / g["kernel_ns"]
    g["ape"] = (g["ratio"] - 1.0).abs()
    return g


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


# --------------------------------------------------------------------------- ResNet-50 shapes


def resnet50_convs(batch: int, image: int = 224) -> list[dict[str, Any]]:
    """The 53 convolutions of torchvision's ResNet-50 (v1.5: stride on the 3x3) in forward
    order: dicts with cin, cout, k, stride, pad, h_in (square inputs)."""
    convs = [dict(cin=3, cout=64, k=7, stride=2, pad=3, h_in=image)]
    h = image // 4  # conv1 stride 2, then max-pool stride 2
    cin = 64
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            s = stride if b == 0 else 1
            convs.append(dict(cin=cin, cout=planes, k=1, stride=1, pad=0, h_in=h))
            convs.append(dict(cin=planes, cout=planes, k=3, stride=s, pad=1, h_in=h))
            convs.append(dict(cin=planes, cout=planes * 4, k=1, stride=1, pad=0, h_in=h // s))
            if b == 0:
                convs.append(dict(cin=cin, cout=planes * 4, k=1, stride=s, pad=0, h_in=h))
            cin, h = planes * 4, h // s
    for c in convs:
        c["batch"] = batch
        c["h_out"] = (c["h_in"] + 2 * c["pad"] - c["k"]) // c["stride"] + 1
    return convs


def _conv_inputs(c: dict[str, Any], backward: bool) -> tuple[list, list, list]:
    x = [c["batch"], c["cin"], c["h_in"], c["h_in"]]
    w = [c["cout"], c["cin"], c["k"], c["k"]]
    stride, pad = f"[{c['stride']}, {c['stride']}]", f"[{c['pad']}, {c['pad']}]"
    if not backward:  # aten::cudnn_convolution(self, weight, padding, stride, dilation, groups, ...)
        dims = [x, w, [], [], [], [], [], [], []]
        types = ["float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar",
                 "Scalar", "Scalar"]
        conc = ["", "", pad, stride, "[1, 1]", "1", "False", "False", "True"]
        return dims, types, conc
    g = [c["batch"], c["cout"], c["h_out"], c["h_out"]]
    mask = "[False, True, False]" if c["cin"] == 3 else "[True, True, False]"
    dims = [g, x, w, [], [], [], [], [], [], [], []]
    types = ["float"] * 3 + ["ScalarList"] * 3 + ["Scalar", "ScalarList", "Scalar", "ScalarList"]
    conc = ["", "", "", "[0]", stride, pad, "[1, 1]", "False", "[0, 0]", "1", mask]
    return dims, types, conc


def resnet50_batch(trace: dict[str, Any]) -> int | None:
    """Batch size from the first ReLU (``aten::clamp_min_``) kernel after the first conv:
    PyTorch's vectorized elementwise kernel covers 4 elements per thread, so elements =
    grid x block x 4 = batch x 64 x 112 x 112 (224-pixel images)."""
    events = trace.get("traceEvents", [])
    relu_ids = {e["args"].get("External id") for e in events
                if e.get("cat") == "cpu_op" and e.get("name") == "aten::clamp_min_"}
    kernels = sorted((e for e in events if e.get("cat") == "kernel"
                      and e.get("args", {}).get("External id") in relu_ids), key=lambda e: e["ts"])
    for k in kernels:
        grid, block = k["args"].get("grid", [0]), k["args"].get("block", [0])
        elems = grid[0] * block[0] * 4
        per_image = 64 * 112 * 112
        if elems >= per_image and elems % per_image == 0:
            return elems // per_image
    return None


def annotate_resnet50(table: pd.DataFrame, batch: int, image: int = 224) -> pd.DataFrame:
    """Fill shapes / flops / bytes / dtype of the convolution and FC ops of a ResNet-50 trace
    recorded without shapes. Forward convs are matched to layers by order (53 per pass),
    backward convs through the autograd sequence number of their ``ConvolutionBackward0``.
    Returns a copy; raises ValueError if the trace does not look like ResNet-50.
    """
    t = table.copy()
    convs = resnet50_convs(batch, image)
    nconv = len(convs)
    host = t[t["cat"] == "cpu_op"].sort_values("ts_ns")
    fwd = host[host["name"] == "aten::convolution"]
    if len(fwd) == 0 or len(fwd) % nconv:
        raise ValueError(f"{len(fwd)} aten::convolution ops, not a multiple of {nconv}")
    layer_of_seq = {int(s): i % nconv for i, s in enumerate(fwd["seq_nr"])}
    by_id = dict(zip(t["event_id"], t.index, strict=True))
    parent = t["parent_id"]
    names = t["name"]

    def ancestor(idx: Any, wanted: str) -> Any:
        p = parent[idx]
        for _ in range(8):
            j = by_id.get(p)
            if j is None:
                return None
            if names[j] == wanted:
                return j
            p = parent[j]
        return None

    updates: dict[Any, tuple[str, list, list, list]] = {}
    for idx in host.index[host["name"] == "aten::cudnn_convolution"]:
        a = ancestor(idx, "aten::convolution")
        if a is not None and int(t.at[a, "seq_nr"]) in layer_of_seq:
            c = convs[layer_of_seq[int(t.at[a, "seq_nr"])]]
            updates[idx] = ("aten::cudnn_convolution", *_conv_inputs(c, False))
    for idx in host.index[host["name"] == "aten::convolution_backward"]:
        a = ancestor(idx, "ConvolutionBackward0")
        if a is not None and int(t.at[a, "seq_nr"]) in layer_of_seq:
            c = convs[layer_of_seq[int(t.at[a, "seq_nr"])]]
            updates[idx] = ("aten::convolution_backward", *_conv_inputs(c, True))
    feat, classes = 2048, 1000
    for idx in host.index[host["name"] == "aten::addmm"]:
        updates[idx] = ("aten::addmm", [[classes], [batch, feat], [feat, classes], [], []],
                        ["float", "float", "float", "Scalar", "Scalar"], [])
    # FC backward (AddmmBackward0), per step: grad_input = grad [B, 1000] x W [1000, 2048],
    # then grad_weight = x^T [2048, B] x grad [B, 1000]; same FLOPs, different GEMM shapes
    fc_bwd = ([[batch, classes], [classes, feat]], [[feat, batch], [batch, classes]])
    for i, idx in enumerate(host.index[host["name"] == "aten::mm"]):
        updates[idx] = ("aten::mm", fc_bwd[i % 2], ["float", "float"], [])
    for idx, (name, dims, types, conc) in updates.items():
        cost = op_cost(name, dims, types, conc)
        t.at[idx, "flops"], t.at[idx, "bytes"] = cost.flops, cost.bytes
        t.at[idx, "dtype"], t.at[idx, "op_class"] = cost.dtype, cost.op_class
        t.at[idx, "shapes"] = json.dumps(dims, separators=(",", ":"))
    return t


# --------------------------------------------------------------------------- the public traces

#: the public traces evaluated in docs/devices.md: file, device profile, how shapes are known
PUBLIC_TRACES = (
    ("v100_1rank.json.gz", "v100", "resnet50"),
    ("a100_2rank_nccl.json.gz", "a100-40gb", "resnet50"),
    ("sampled_128rank_r0.json.gz", "a100", "recorded"),
    ("sampled_128rank_r1.json.gz", "a100", "recorded"),
)


def trace_groups(path: str | Path, shapes: str = "recorded") -> pd.DataFrame:
    """Read a Kineto trace, rebuild its shapes if ``shapes == "resnet50"``, and return its
    :func:`launch_groups` (with a ``trace`` column)."""
    from tracesim.trace.kineto import load_trace_json, op_table_from_events

    data = load_trace_json(path)
    table = op_table_from_events(data, path)
    if shapes == "resnet50":
        batch = resnet50_batch(data)
        if batch is None:
            raise ValueError(f"{path}: cannot read the batch size off the ReLU kernel grid")
        table = annotate_resnet50(table, batch)
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


def main(argv: Sequence[str] | None = None) -> int:
    """Print per-class and per-op kernel-prediction tables for the public traces
    (``--ablation``: the shape-model ablation of :mod:`tracesim.hardware.kernel_ablation`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    ablation = "--ablation" in args
    args = [a for a in args if a != "--ablation"]
    root = Path(args[0]) if args else Path(__file__).resolve().parents[3] / "shared/traces/public"
    pd.set_option("display.width", 160)
    if ablation:
        from tracesim.hardware.kernel_ablation import ablation_table

        table = ablation_table(root)
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        return 0 if len(table) else 2
    frames = []
    for name, dev, shapes in PUBLIC_TRACES:
        if (root / name).exists():
            frames.append(evaluate_trace(root / name, dev, shapes, classes=None))
    if not frames:
        print(f"no public traces under {root}", file=sys.stderr)
        return 2
    rows = pd.concat(frames, ignore_index=True)
    rows["op"] = rows["name"].str.replace("aten::", "", regex=False)
    for title, by in (("per class", ["trace", "device", "op_class"]),
                      ("per op (gemm, attention)", ["trace", "op"])):
        sub = rows if by[-1] == "op_class" else rows[rows["op_class"].isin(["gemm", "attention"])]
        print(f"\n== {title}")
        print(summarize(sub, by).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["launch_groups", "evaluate", "summarize", "annotate_resnet50", "resnet50_batch",
           "resnet50_convs", "evaluate_trace", "trace_groups", "shape_features", "classify"]


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
