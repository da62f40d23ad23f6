"""NeuSight fp32 GEMM microbenchmarks: one GPU's time predicted from another's.

Data: sitar-lab/NeuSight ``scripts/asplos/data/dataset/test/linear.csv`` (MIT): ``nn.Linear``
forward, fp32 with TF32 off (CUDA-core SGEMM kernels), the same (B, M, N, K) on 8 NVIDIA
GPUs, each timed in isolation with CUDA events (``Latency`` in ms, mean of the 5 fastest of
25 runs). Only the GPUs tracesim has a profile for take part (:data:`DEVICES`); every
ordered pair of them is one prediction task on the shapes both measured.

Cost features of a row: ``2 B M N K`` FLOPs, ``4 (B M K + N K + N + B M N)`` bytes (input,
weight, bias, output), class gemm, dtype fp32. Methods: ``scaled`` (measured x model ratio,
:func:`tracesim.hardware.costmodel.scale_durations`), ``inferred`` (the replay's transform
without shapes, with the recorded kernel name), ``same`` (the other GPU's time) and ``peak``
(the fp32 datasheet peak ratio).
"""

from __future__ import annotations

from itertools import permutations
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

SET = "neusight-12gpu-opgraph-latencies"
FILE = Path(SET) / "microbench_test" / "linear.csv"
#: NeuSight device name -> tracesim profile (the board each profile stands for may differ:
#: the PCIe A100s run at 250-300 W; ``a100`` is the SXM 80 GB profile, 2039 GB/s against
#: the PCIe card's 1935; ``v100`` is SXM2, 15.7 fp32 TFLOP/s against the PCIe card's 14)
DEVICES = {"NVIDIA A100 80GB PCIe": "a100", "NVIDIA A100-PCIE-40GB": "a100-40gb",
           "NVIDIA H100 80GB HBM3": "h100", "Tesla V100-PCIE-32GB": "v100"}
COLUMNS = ["OPName", "Latency", "Device", "Kernel Name", "B", "M", "N", "K"]
#: FLOPs bands (upper bounds) for the size table
BANDS = ((1e10, "< 1e10"), (1e11, "1e10-1e11"), (1e12, "1e11-1e12"), (np.inf, ">= 1e12"))
METHODS = ("scaled", "inferred", "same", "peak")


def load(data: Path) -> pd.DataFrame:
    """Rows of the profiled devices, one per (device, B, M, N, K) (mean latency)."""
    path = data / FILE
    if not path.is_file():
        raise Skipped(f"NeuSight linear.csv not found at {path}")
    df = pd.read_csv(path, usecols=COLUMNS)
    df = df[df.Device.isin(list(DEVICES))]
    return (df.groupby(["Device", "B", "M", "N", "K"], as_index=False)
              .agg(ms=("Latency", "mean"), kernel=("Kernel Name", "first")))


def pair(df: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """The shapes measured on both ``a`` (recorded) and ``b`` (target), with predictions."""
    sp, dp = device(DEVICES[a]), device(DEVICES[b])
    x = df[df.Device == a].merge(df[df.Device == b], on=["B", "M", "N", "K"],
                                 suffixes=("_src", "_dst"))
    bb, m, n, k = (x[c].to_numpy(float) for c in ("B", "M", "N", "K"))
    feats = pd.DataFrame({"op_class": "gemm", "flops": 2 * bb * m * n * k,
                          "bytes": 4 * (bb * m * k + n * k + n + bb * m * n), "dtype": "fp32"})
    meas = x.ms_src.to_numpy() * 1e6
    scaled, _ = scale_durations(meas, sp, feats, dp, feats)
    inferred, how = retime_kernels(sp, dp, ["gemm"] * len(x), meas, names=x.kernel_src.tolist(),
                                   dtype="fp32")
    assert (how == "inferred").all(), set(how)
    return x.assign(flops=feats.flops, scaled=scaled / 1e6, inferred=inferred / 1e6,
                    same=x.ms_src, peak=x.ms_src * peak_ratio(sp, dp, ["gemm"], "fp32")[0])


def run(data: Path, pairs: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """Errors of every method per ordered device pair and per FLOPs band (JSON-ready)."""
    df = load(data)
    names = [d for d in DEVICES if (df.Device == d).any()]
    todo = pairs or list(permutations(names, 2))
    out: dict[str, Any] = {"devices": {d: DEVICES[d] for d in names}, "pairs": [], "skipped": []}
    frames = []
    for a, b in todo:
        try:
            p = pair(df, a, b)
        except Skipped as exc:
            out["skipped"].append(f"{a} -> {b}: {exc}")
            continue
        frames.append(p.assign(pair=f"{DEVICES[a]} -> {DEVICES[b]}"))
        out["pairs"].append({"src": a, "dst": b, "src_profile": DEVICES[a],
                             "dst_profile": DEVICES[b], **_block(p)})
    if not frames:
        raise Skipped("no device pair could be evaluated")
    allp = pd.concat(frames, ignore_index=True)
    labels = np.array([lab for _, lab in BANDS], dtype=object)
    band = labels[np.searchsorted([u for u, _ in BANDS], allp.flops.to_numpy(), side="right")]
    out["all"] = _block(allp)
    out["by_band"] = {lab: _block(allp[band == lab]) for lab in labels if (band == lab).any()}
    return out


def _block(g: pd.DataFrame) -> dict[str, Any]:
    return {"n": len(g), "measured_ratio_median": float(np.median(g.ms_dst / g.ms_src)),
            "scaled_ratio_median": float(np.median(g.scaled / g.ms_src)),
            **{m: summary(g[m], g.ms_dst) for m in METHODS}}


def render(res: dict[str, Any]) -> str:
    """Markdown tables of :func:`run`'s result."""
    heads = ["n", "measured ratio (median)", "model ratio (median)",
             *[f"{m} MAPE / median APE" for m in METHODS], "scaled bias"]

    def cells(b: dict[str, Any]) -> list[str]:
        return [str(b["n"]), f"{b['measured_ratio_median']:.3f}", f"{b['scaled_ratio_median']:.3f}",
                *[f"{pct(b[m]['mape'])} / {pct(b[m]['median_ape'])}" for m in METHODS],
                pct(b["scaled"]["bias"], True)]

    lines = ["NeuSight fp32 nn.Linear (TF32 off), target time from the recorded GPU's time; "
             "profiles: " + ", ".join(f"{k} = `{v}`" for k, v in res["devices"].items()), ""]
    rows = [[f"{p['src_profile']} -> {p['dst_profile']}", *cells(p)] for p in res["pairs"]]
    rows.append(["all pairs", *cells(res["all"])])
    lines.append(md_table(["recorded -> target", *heads], rows))
    lines += ["", "All pairs by GEMM FLOPs:", ""]
    lines.append(md_table(["FLOPs", *heads], [[k, *cells(b)] for k, b in res["by_band"].items()]))
    lines += [f"skipped: {s}" for s in res["skipped"]]
    return "\n".join(lines)
