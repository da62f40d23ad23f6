"""Vidur fp16 per-op profiles: H100 times predicted from A100 times.

Data: microsoft/vidur ``data/profiling/compute/{a100,h100}/<org>/<model>/mlp.csv`` (MIT),
the non-attention ops of a Llama-style layer (and phi-2's) for ``num_tokens`` 1..4096 and
tensor parallelism 1..8 emulated on one GPU, fp16, GPU-kernel time per op (median of the
profiled repetitions, ms, printed to 1 us). The same script and shapes ran on both devices.

Each op's cost features are built from the model columns (``n_embd`` h, ``n_expanded_embd``
F, ``n_head``, ``n_kv_head``, ``use_gated_mlp``, TP) as tracesim's cost rules count them:

* GEMMs (``attn_pre_proj`` QKV, ``attn_post_proj`` output, ``mlp_up_proj`` (gate + up when
  gated), ``mlp_down_proj``): ``2 m n k`` FLOPs, ``2 (m k + k n + m n)`` bytes, m = tokens;
* norms (``input_layernorm``, ``post_attention_layernorm``): RMSNorm (LayerNorm for phi-2),
  input read and output written plus the weights;
* elementwise (``mlp_act``: SiLU-and-mul reading 2 F / TP and writing F / TP per token, GELU
  for phi-2; ``add``: the residual add; ``attn_rope``: rotary embedding of q and k in place).

Methods (every one predicts the H100 time of a row from its A100 time):

* ``scaled``: :func:`tracesim.hardware.costmodel.scale_durations` (measured x model ratio at
  the op's FLOPs, bytes and dtype), what replay does for a kernel whose op recorded shapes;
* ``scaled+shape``: the same with each GEMM's (1, m, n, k) passed, so the profiles' GEMM
  shape model sets the efficiency (replay does not pass shapes; a diagnostic);
* ``inferred``: the replay's transform with no shapes (work inverted from the A100 time);
* ``same``: the A100 time; ``peak``: the datasheet ratio (fp16 tensor peak for GEMMs, HBM
  bandwidth for the rest).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.traces.crossdev.common import (
    Skipped,
    device,
    md_table,
    pct,
    peak_ratio,
    retime_kernels,
    summary,
)
from tracesim.hardware.costmodel import scale_durations

SET = "vidur-a100-a40-h100-opprofiles"
#: op -> class, in the order of a layer
OPS = {"input_layernorm": "norm", "attn_pre_proj": "gemm", "attn_rope": "elementwise",
       "attn_post_proj": "gemm", "post_attention_layernorm": "norm", "mlp_up_proj": "gemm",
       "mlp_act": "elementwise", "mlp_down_proj": "gemm", "add": "elementwise"}
MODEL_COLS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp",
              "num_tokens", "num_tensor_parallel_workers")
#: num_tokens bands (inclusive upper bounds)
BANDS = ((16, "1-16"), (128, "17-128"), (1024, "129-1024"), (4096, "1025-4096"))
METHODS = ("scaled", "scaled+shape", "inferred", "same", "peak")
ELT = 2  # fp16 bytes


def columns() -> list[str]:
    """The columns the study reads (the repository copy keeps only these)."""
    return [f"time_stats.{op}.median" for op in OPS] + list(MODEL_COLS)


def load(data: Path, src: str = "a100", dst: str = "h100") -> pd.DataFrame:
    """One row per (model, num_tokens, TP, op) with both devices' median ms."""
    base = data / SET / "compute"
    if not (base / src).is_dir() or not (base / dst).is_dir():
        raise Skipped(f"Vidur profiles not found under {base}")
    frames = []
    for f in sorted((base / src).glob("*/*/mlp.csv")):
        rel = f.relative_to(base / src)
        g = base / dst / rel
        if not g.is_file():
            continue
        want = set(columns())
        a = pd.read_csv(f, usecols=want.__contains__)
        b = pd.read_csv(g, usecols=want.__contains__)
        keys = ["num_tokens", "num_tensor_parallel_workers"]
        m = a.merge(b, on=[*keys, *[c for c in MODEL_COLS if c not in keys]],
                    suffixes=("_src", "_dst"))
        for op, cls in OPS.items():
            col = f"time_stats.{op}.median"
            if col + "_src" not in m:  # phi-2 has no post-attention norm (parallel block)
                continue
            frames.append(pd.DataFrame({
                "model": str(rel.parent), "op": op, "op_class": cls,
                **{c: m[c].to_numpy() for c in MODEL_COLS},
                "src_ms": m[col + "_src"].to_numpy(float), "dst_ms": m[col + "_dst"].to_numpy(float),
            }))
    if not frames:
        raise Skipped(f"no model profiled on both {src} and {dst} under {base}")
    df = pd.concat(frames, ignore_index=True)
    return df[(df.src_ms > 0) & (df.dst_ms > 0)].reset_index(drop=True)


def features(df: pd.DataFrame) -> pd.DataFrame:
    """op_class, flops, bytes, dtype and GEMM shape (1, m, n, k) per row (module docstring)."""
    n = df.num_tokens.to_numpy(float)
    h = df.n_embd.to_numpy(float)
    f = df.n_expanded_embd.to_numpy(float)
    nh = df.n_head.to_numpy(float)
    nkv = df.n_kv_head.to_numpy(float)
    tp = df.num_tensor_parallel_workers.to_numpy(float)
    gated = df.use_gated_mlp.astype(bool).to_numpy()
    hd = h / nh
    op = df.op.to_numpy()
    flops = np.zeros(len(df))
    nbytes = np.zeros(len(df))
    mnk = np.zeros((len(df), 3))
    gemm = {"attn_pre_proj": (h, (nh + 2 * nkv) * hd / tp), "attn_post_proj": (nh * hd / tp, h),
            "mlp_up_proj": (h, f * np.where(gated, 2, 1) / tp), "mlp_down_proj": (f / tp, h)}
    for name, (k, cols) in gemm.items():
        s = op == name
        kk, nn, m = k[s], cols[s], n[s]
        flops[s] = 2 * m * nn * kk
        nbytes[s] = ELT * (m * kk + kk * nn + m * nn)
        mnk[s] = np.stack([m, nn, kk], axis=1)
    for name in ("input_layernorm", "post_attention_layernorm"):
        s = op == name
        e = n[s] * h[s]
        flops[s] = np.where(gated[s], 4.0, 8.0) * e
        nbytes[s] = ELT * (2 * e + np.where(gated[s], 1, 2) * h[s])
    s = op == "mlp_act"
    out = n[s] * f[s] / tp[s]
    flops[s] = 5.0 * out
    nbytes[s] = ELT * out * np.where(gated[s], 3, 2)
    s = op == "add"
    flops[s] = n[s] * h[s]
    nbytes[s] = ELT * 3 * n[s] * h[s]
    s = op == "attn_rope"
    qk = n[s] * (nh[s] + nkv[s]) * hd[s] / tp[s]
    flops[s] = 3.0 * qk
    nbytes[s] = ELT * (2 * qk + n[s] * hd[s])
    is_gemm = df.op_class.to_numpy() == "gemm"
    return pd.DataFrame({
        "op_class": df.op_class.to_numpy(), "flops": flops, "bytes": nbytes, "dtype": "fp16",
        "shape_b": np.where(is_gemm, 1.0, 0.0), "shape_m": np.where(is_gemm, mnk[:, 0], 0.0),
        "shape_n": np.where(is_gemm, mnk[:, 1], 0.0), "shape_k": np.where(is_gemm, mnk[:, 2], 0.0),
    })


def predict(df: pd.DataFrame, src: str = "a100", dst: str = "h100") -> pd.DataFrame:
    """``df`` with one predicted ms column per method (:data:`METHODS`)."""
    sp, dp = device(src), device(dst)
    feats = features(df)
    meas_ns = df.src_ms.to_numpy() * 1e6
    plain = feats.drop(columns=["shape_b", "shape_m", "shape_n", "shape_k"])
    scaled, _ = scale_durations(meas_ns, sp, plain, dp, plain)
    shaped, _ = scale_durations(meas_ns, sp, feats, dp, feats)
    inferred, how = retime_kernels(sp, dp, feats.op_class.tolist(), meas_ns, dtype="fp16")
    assert (how == "inferred").all(), set(how)
    return df.assign(
        flops=feats.flops.to_numpy(), bytes=feats.bytes.to_numpy(),
        scaled=scaled / 1e6, **{"scaled+shape": shaped / 1e6}, inferred=inferred / 1e6,
        same=df.src_ms.to_numpy(),
        peak=df.src_ms.to_numpy() * peak_ratio(sp, dp, feats.op_class.to_numpy(), "fp16"))


def band_of(tokens: Any) -> np.ndarray:
    """The :data:`BANDS` label of each num_tokens."""
    t = np.asarray(tokens)
    labels = np.array([b for _, b in BANDS], dtype=object)
    return labels[np.searchsorted([u for u, _ in BANDS], t, side="left")]


def run(data: Path, src: str = "a100", dst: str = "h100",
        models: list[str] | None = None) -> dict[str, Any]:
    """Per-op and per-band errors of every method (JSON-ready)."""
    df = load(data, src, dst)
    if models:
        df = df[df.model.isin(models)].reset_index(drop=True)
        if df.empty:
            raise Skipped(f"none of {models} in the Vidur profiles")
    p = predict(df, src, dst)
    p = p.assign(band=band_of(p.num_tokens))

    def block(g: pd.DataFrame) -> dict[str, Any]:
        return {"n": len(g), "measured_ratio_median": float(np.median(g.dst_ms / g.src_ms)),
                "scaled_ratio_median": float(np.median(g.scaled / g.src_ms)),
                **{m: summary(g[m], g.dst_ms) for m in METHODS}}

    return {
        "src": src, "dst": dst, "models": sorted(p.model.unique()), "rows": len(p),
        "all": block(p),
        "by_class": {c: block(g) for c, g in p.groupby("op_class", sort=False)},
        "by_op": {o: {"op_class": OPS[o], **block(p[p.op == o])} for o in OPS},
        "by_band_class": {f"{b} {c}": {"band": b, "op_class": c, **block(g)}
                          for (b, c), g in p.groupby(["band", "op_class"], sort=False)},
    }


def render(res: dict[str, Any]) -> str:
    """Markdown tables of :func:`run`'s result."""
    heads = ["n", f"{res['dst']}/{res['src']} measured (median)", "model ratio (median)",
             *[f"{m} MAPE / median APE" for m in METHODS], "scaled bias"]

    def cells(b: dict[str, Any]) -> list[str]:
        return [str(b["n"]), f"{b['measured_ratio_median']:.3f}", f"{b['scaled_ratio_median']:.3f}",
                *[f"{pct(b[m]['mape'])} / {pct(b[m]['median_ape'])}" for m in METHODS],
                pct(b["scaled"]["bias"], True)]

    out = [f"Vidur fp16 ops, {res['src']} -> {res['dst']}: {res['rows']} (model, tokens, TP, op) "
           f"rows of {len(res['models'])} models ({', '.join(res['models'])})", ""]
    rows = [["all", "", *cells(res["all"])]]
    rows += [[c, "", *cells(b)] for c, b in res["by_class"].items()]
    rows += [[o, b["op_class"], *cells(b)] for o, b in res["by_op"].items()]
    out.append(md_table(["op", "class", *heads], rows))
    out += ["", f"By num_tokens band (launch-bound at the small end), {res['src']} -> {res['dst']}:", ""]
    order = {b: i for i, (_, b) in enumerate(BANDS)}
    items = sorted(res["by_band_class"].values(), key=lambda b: (order[b["band"]], b["op_class"]))
    out.append(md_table(["num_tokens", "class", *heads],
                        [[b["band"], b["op_class"], *cells(b)] for b in items]))
    return "\n".join(out)
