"""Convolution layer shapes of CNN traces recorded without ``record_shapes``.

The public V100 / A100 ResNet-50 traces and the A100 AlexNet trace carry no input shapes.
Their models are public (torchvision ResNet-50 v1.5 and AlexNet), so the shapes of their
convolution and linear ops are rebuilt from the layer lists: :func:`annotate_resnet50`
(53 convolutions per pass, backward convolutions matched through autograd sequence numbers)
and :func:`annotate_alexnet` (5 convolutions and 3 linear layers per forward). The batch
size is read off the first ReLU kernel's launch grid (:func:`batch_from_relu_grid`).
Durations are never looked at.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from tracesim.ops.classify import op_cost

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


def conv_op_inputs(c: dict[str, Any], backward: bool) -> tuple[list, list, list]:
    """(Input Dims, Input type, Concrete Inputs) of ``aten::cudnn_convolution`` (forward) or
    ``aten::convolution_backward`` for a layer dict (batch, cin, cout, k, stride, pad, h_in,
    h_out), as Kineto records them with ``record_shapes``."""
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
    """Batch size from the first ReLU kernel after the first conv: elements = batch x 64 x
    112 x 112 (224-pixel images), :func:`batch_from_relu_grid`."""
    return batch_from_relu_grid(trace, 64 * 112 * 112)


def batch_from_relu_grid(trace: dict[str, Any], per_image: int) -> int | None:
    """Batch size from the first ReLU (``aten::clamp_min_``) kernel whose element count is a
    multiple of ``per_image``: PyTorch's vectorized elementwise kernel covers 4 elements per
    thread, so elements = grid x block x 4. Kernels are tied to the op by its External id
    or, in traces whose kernels carry the launch's correlation id there instead, by the
    launch call lying inside the op on the same thread."""
    events = trace.get("traceEvents", [])
    relus = [e for e in events if e.get("cat") == "cpu_op" and e.get("name") == "aten::clamp_min_"]
    relu_ids = {e["args"].get("External id") for e in relus}
    spans = sorted((e.get("tid"), e["ts"], e["ts"] + e.get("dur", 0)) for e in relus)
    corrs = {e["args"].get("correlation") for e in events if e.get("cat") == "cuda_runtime"
             and any(t == e.get("tid") and s0 <= e["ts"] <= s1 for t, s0, s1 in spans)}
    kernels = sorted((e for e in events if e.get("cat") == "kernel"
                      and (e.get("args", {}).get("External id") in relu_ids
                           or e.get("args", {}).get("correlation") in corrs)),
                     key=lambda e: e["ts"])
    for k in kernels:
        grid, block = k["args"].get("grid", [0]), k["args"].get("block", [0])
        elems = grid[0] * block[0] * 4
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
            updates[idx] = ("aten::cudnn_convolution", *conv_op_inputs(c, False))
    for idx in host.index[host["name"] == "aten::convolution_backward"]:
        a = ancestor(idx, "ConvolutionBackward0")
        if a is not None and int(t.at[a, "seq_nr"]) in layer_of_seq:
            c = convs[layer_of_seq[int(t.at[a, "seq_nr"])]]
            updates[idx] = ("aten::convolution_backward", *conv_op_inputs(c, True))
    feat, classes = 2048, 1000
    for idx in host.index[host["name"] == "aten::addmm"]:
        updates[idx] = ("aten::addmm", [[classes], [batch, feat], [feat, classes], [], []],
                        ["float", "float", "float", "Scalar", "Scalar"], [])
    # FC backward (AddmmBackward0), per step: grad_input = grad [B, 1000] x W [1000, 2048],
    # then grad_weight = x^T [2048, B] x grad [B, 1000]; same FLOPs, different GEMM shapes
    fc_bwd = ([[batch, classes], [classes, feat]], [[feat, batch], [batch, classes]])
    for i, idx in enumerate(host.index[host["name"] == "aten::mm"]):
        updates[idx] = ("aten::mm", fc_bwd[i % 2], ["float", "float"], [])
    return apply_op_shapes(t, updates, copy=False)


def apply_op_shapes(table: pd.DataFrame, updates: dict[Any, tuple[str, list, list, list]], *,
                    copy: bool = True) -> pd.DataFrame:
    """Set shapes, flops, bytes, dtype and op_class of the rows ``updates`` names (index ->
    (op name, Input Dims, Input type, Concrete Inputs)) from :func:`op_cost`."""
    t = table.copy() if copy else table
    for idx, (name, dims, types, conc) in updates.items():
        cost = op_cost(name, dims, types, conc)
        t.at[idx, "flops"], t.at[idx, "bytes"] = cost.flops, cost.bytes
        t.at[idx, "dtype"], t.at[idx, "op_class"] = cost.dtype, cost.op_class
        t.at[idx, "shapes"] = json.dumps(dims, separators=(",", ":"))
    return t


# --------------------------------------------------------------------------- AlexNet shapes


#: torchvision AlexNet (``features``): (cin, cout, kernel, stride, padding) per convolution
ALEXNET_CONV_LAYERS = ((3, 64, 11, 4, 2), (64, 192, 5, 1, 2), (192, 384, 3, 1, 1),
                       (384, 256, 3, 1, 1), (256, 256, 3, 1, 1))
#: torchvision AlexNet (``classifier``): (in_features, out_features) per linear layer
ALEXNET_FC_LAYERS = ((256 * 6 * 6, 4096), (4096, 4096), (4096, 1000))


def alexnet_convs(batch: int, image: int = 224) -> list[dict[str, Any]]:
    """The 5 convolutions of torchvision's AlexNet in forward order: dicts with batch, cin,
    cout, k, stride, pad, h_in, h_out (square inputs; 3x3 / stride-2 max-pools after conv 1,
    2 and 5)."""
    out, h = [], image
    for i, (cin, cout, k, s, p) in enumerate(ALEXNET_CONV_LAYERS):
        h_out = (h + 2 * p - k) // s + 1
        out.append(dict(batch=batch, cin=cin, cout=cout, k=k, stride=s, pad=p, h_in=h, h_out=h_out))
        h = (h_out - 3) // 2 + 1 if i in (0, 1) else h_out
    return out


def alexnet_batch(trace: dict[str, Any], image: int = 224) -> int | None:
    """Batch size from the first ReLU kernel's launch grid (elements = batch x 64 x 55 x 55)."""
    h = alexnet_convs(1, image)[0]["h_out"]
    return batch_from_relu_grid(trace, 64 * h * h)


def annotate_alexnet(table: pd.DataFrame, batch: int, image: int = 224) -> pd.DataFrame:
    """Fill shapes / flops / bytes / dtype of the convolutions (5 per forward, in order) and
    the linear layers (``aten::addmm``, 3 per forward) of an AlexNet trace recorded without
    shapes. Returns a copy; raises ValueError if the op counts do not fit AlexNet."""
    convs = alexnet_convs(batch, image)
    host = table[table["cat"] == "cpu_op"].sort_values("ts_ns")
    conv_idx = host.index[host["name"] == "aten::cudnn_convolution"]
    fc_idx = host.index[host["name"] == "aten::addmm"]
    if len(conv_idx) == 0 or len(conv_idx) % len(convs) or len(fc_idx) % len(ALEXNET_FC_LAYERS):
        raise ValueError(f"{len(conv_idx)} cudnn_convolution and {len(fc_idx)} addmm ops do not "
                         "fit AlexNet (5 and 3 per forward)")
    updates: dict[Any, tuple[str, list, list, list]] = {}
    for i, idx in enumerate(conv_idx):
        updates[idx] = ("aten::cudnn_convolution", *conv_op_inputs(convs[i % len(convs)], False))
    for i, idx in enumerate(fc_idx):
        fin, fout = ALEXNET_FC_LAYERS[i % len(ALEXNET_FC_LAYERS)]
        updates[idx] = ("aten::addmm", [[fout], [batch, fin], [fin, fout], [], []],
                        ["float", "float", "float", "Scalar", "Scalar"], [])
    return apply_op_shapes(table, updates)
