"""A Megatron-LM transformer layer's forward kernels, as recorded, against the analytic
template's ops for the same layer on the same GPU (the ``megatron-2021`` stack).

The trace: all eight ranks of a Megatron-LM GPT run with tensor parallelism 8 in FP16 on
A100-SXM4-80GB (``tests/data/traces/astra-megatron-gpt-tp8-a100``; one step, forward only:
40 layers, hidden 4096, 64 heads of 64, sequence 2048, micro-batch 4, vocabulary 51200;
cuBLAS and CUTLASS GEMMs, Megatron's fused causal softmax, Triton bias-dropout-add and
bias-GeLU kernels). Its rank 0's kernels are summed per layer op: the GEMMs by the host op
that launched them and its recorded shapes, the others by kernel name. The replay builds the
same model and layout from a model spec (``--stack megatron-2021 --attention unfused``, no
recomputation) and reads its forward ops' durations. Nothing is fitted to the trace: the
ratios test the GEMM shape model (cuBLAS batched GEMMs included: the unfused attention's
``scores = Q K^T`` and ``context = P V``) and the memory-bound curves on one recorded layer.

    PYTHONPATH=. .venv/bin/python benchmarks/kernels/megatron_layer.py [--json]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.kernels.kernel_eval import trace_groups
from tracesim.options import ReplayOptions
from tracesim.pipeline.run import predict
from tracesim.specs.model import ModelSpec

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "data" / "traces" / "astra-megatron-gpt-tp8-a100" / "megatron_kineto_0.json.gz"
#: the traced model (its GEMM shapes: qkv 8192 x 1536 x 4096, fc1 8192 x 2048 x 4096 at TP 8)
MODEL = ModelSpec(name="gpt-astra-tp8", family="gpt", layers=40, hidden=4096, heads=64, kv_heads=64,
                  ffn_hidden=16384, vocab=51200, seq_len=2048, activation="gelu", norm="layernorm",
                  tied_embeddings=True, dtype="fp16")
LAYOUT = {"cluster": "a100-selene", "tp": 8, "pp": 1, "dp": 1, "micro_batch": 4, "global_batch": 4,
          "template": "analytic", "attention": "unfused", "stack": "megatron-2021", "dtype": "fp16"}
#: the replay's ops and how the trace's kernels are found: a GEMM host op and its
#: (batched) shape (m, n, k), or a kernel-name prefix; per layer (calls per layer)
OPS: tuple[tuple[str, str, Any, int], ...] = (
    ("ln1 + ln2", "kernel", "void cuApplyLayerNorm", 2),
    ("attn.qkv", "gemm", ("aten::mm", 8192, 1536, 4096), 1),
    ("attn.scores", "gemm", ("aten::baddbmm", 2048, 2048, 64), 1),
    ("attn.softmax", "kernel", "void (anonymous namespace)::scaled_upper_triang_masked_softmax_warp_forward", 1),
    ("attn.context", "gemm", ("aten::bmm", 2048, 64, 2048), 1),
    ("attn.proj", "gemm", ("aten::mm", 8192, 4096, 512), 1),
    ("attn.residual + mlp.residual", "kernel", "triton__0d1d2d3d4de", 2),
    ("mlp.fc1", "gemm", ("aten::mm", 8192, 2048, 4096), 1),
    ("mlp.act", "kernel", "triton__0d1d2d3de", 1),
    ("mlp.fc2", "gemm", ("aten::mm", 8192, 4096, 2048), 1),
)
#: the replay's op names per row of OPS
REPLAY_NAMES = {"ln1 + ln2": ("ln1", "ln2"), "attn.residual + mlp.residual": ("attn.residual", "mlp.residual")}


def _gemm_dims(name: str, dims: list[list[int]]) -> tuple[int, int, int] | None:
    """(m, n, k) of a recorded GEMM host op from its input dims (batched: per batch)."""
    try:
        if name == "aten::mm":
            (m, k), (_, n) = dims[0], dims[1]
        elif name == "aten::bmm":
            (_, m, k), (_, _, n) = dims[0], dims[1]
        elif name == "aten::baddbmm":
            (_, m, k), (_, _, n) = dims[1], dims[2]
        else:
            return None
    except (ValueError, IndexError, TypeError):
        return None
    return int(m), int(n), int(k)


def trace_us(path: Path = TRACE) -> dict[str, float]:
    """Per layer and op of :data:`OPS`: the trace's kernel microseconds (sum of the op's
    calls over all layers / 40), from each host op's kernels
    (:func:`benchmarks.kernels.kernel_eval.trace_groups`)."""
    groups = trace_groups(path)
    total: dict[str, float] = defaultdict(float)
    for name, shapes, names, durs in zip(groups["name"], groups["shapes"], groups["kernel_names"],
                                         groups["kernel_durs"], strict=True):
        dims = _gemm_dims(str(name), json.loads(shapes) if shapes else [])
        for label, how, what, _ in OPS:
            if how == "gemm" and dims is not None and (name, *dims) == what:
                total[label] += sum(durs) / 1e3
            elif how == "kernel":
                total[label] += sum(d for k, d in zip(names, durs, strict=True) if k.startswith(what)) / 1e3
    layers = MODEL.layers
    return {label: total[label] / layers for label, _, _, _ in OPS}


def replay_us() -> dict[str, float]:
    """Per layer and op of :data:`OPS`: the replay's forward microseconds."""
    res = predict(None, ReplayOptions.from_mapping({"model": MODEL, **LAYOUT}, None, "megatron_layer"),
                  detail=True)
    t = res.graph.tasks
    dur = np.asarray(res.end_ns) - np.asarray(res.start_ns)
    rank0 = t["rank"].to_numpy() == t["rank"].min()
    per: dict[str, float] = defaultdict(float)
    for name, phase, d in zip(t["name"].to_numpy()[rank0], t["phase"].to_numpy()[rank0], dur[rank0],
                              strict=True):
        if phase == "fwd":
            per[str(name)] += float(d) / 1e3
    layers = MODEL.layers
    return {label: sum(per[n] for n in REPLAY_NAMES.get(label, (label,))) / layers
            for label, _, _, _ in OPS}


def table() -> list[dict[str, Any]]:
    """One row per op of :data:`OPS` and a total: trace and replay microseconds per layer."""
    tr, rp = trace_us(), replay_us()
    rows = [{"op": op, "trace_us": round(tr[op], 1), "replay_us": round(rp[op], 1),
             "ratio": round(rp[op] / tr[op], 3) if tr[op] else None} for op, _, _, _ in OPS]
    t_sum, r_sum = sum(tr.values()), sum(rp.values())
    rows.append({"op": "layer (these ops)", "trace_us": round(t_sum, 1), "replay_us": round(r_sum, 1),
                 "ratio": round(r_sum / t_sum, 3)})
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    rows = table()
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'op (forward, per layer)':32s} {'trace us':>9s} {'replay us':>10s} {'replay/trace':>13s}")
    for r in rows:
        print(f"{r['op']:32s} {r['trace_us']:9.1f} {r['replay_us']:10.1f} {r['ratio']:13.3f}")


if __name__ == "__main__":
    main()
