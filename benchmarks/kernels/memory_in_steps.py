"""Memory-bound kernels inside recorded steps against the profiles' memory curves (a study).

Every device profile prices a memory-bound op as ``bytes / (HBM bandwidth x E_mem(bytes))``,
with ``E_mem`` from a streaming benchmark (FluidX3D's LBM kernel) and a ramp from the small
copies of public A100 traces (docs/devices.md). This study asks how the memory-bound kernels
of real recorded steps compare: for every host op of a trace that launched one kernel of a
memory-bound class (elementwise, copy, softmax, norm, reduction; fewer than 4 FLOPs per byte),
the profile's time for the op's bytes (from its recorded shapes and dtypes, as replay prices
an op) over the kernel's measured time. A ratio under 1: the profile is faster than the
kernel ran. Ops are grouped by size against the device's L2 cache (a tensor that fits may be
served from L2, one of several times its size is not).

Nothing is fitted and no profile reads this: it is a measurement of the model on kernel-level
data, for docs/devices.md ("Memory-bound kernels inside recorded steps").

    PYTHONPATH=. .venv/bin/python benchmarks/kernels/memory_in_steps.py [--json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.kernels.kernel_eval import evaluate_trace

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "traces" / "public"
DATA = ROOT / "tests" / "data" / "traces"

#: L2 (last-level on-die) cache per GPU, MiB: NVIDIA architecture whitepapers (A100 40 MB,
#: H100 SXM 50 MB, V100 6 MB), AMD CDNA3 whitepaper (MI300X: 256 MB Infinity Cache)
L2_MIB = {"a100": 40.0, "h100": 50.0, "v100": 6.0, "mi300x": 256.0}

#: (label, trace, profile): the real GPU traces with memory-bound ops of known shapes
TRACES: tuple[tuple[str, Path, str], ...] = (
    ("Megatron-LM GPT TP8 fp16 training, A100 (rank 0 of 8)",
     DATA / "astra-megatron-gpt-tp8-a100" / "megatron_kineto_0.json.gz", "a100"),
    ("recommendation training, A100, sampled (rank 0 of 128)",
     SHARED / "sampled_128rank_r0.json.gz", "a100"),
    ("DDP training, A100 (rank 3 of 8)", DATA / "hta-a100-8rank-r3-ddp" / "control.json.gz", "a100"),
    ("CUDA-graph training with all-to-all, A100 (rank 0 of 16)",
     DATA / "hta-a100-16rank-r0-cudagraph-alltoall" / "rank0.json.gz", "a100"),
    ("TimeSformer inference bf16, H100",
     SHARED / "tracelens-h100-timesformer-infer" / "facebook_timesformer-base-finetuned-k400__1016002.json.gz",
     "h100"),
    ("CUDA-graph training, V100 (rank 1 of 2)", DATA / "hta-v100-2rank-r1-cudagraph" / "test.json.gz",
     "v100"),
)
CLASSES = ("elementwise", "memcpy", "softmax", "norm", "reduction")
#: size bands in multiples of the device's L2
BANDS = ((0.25, 1.0, "L2/4 .. L2"), (1.0, 4.0, "L2 .. 4 L2"), (4.0, np.inf, ">= 4 L2"))


def kernels(path: Path, device: str) -> pd.DataFrame:
    """The single-kernel memory-bound ops of one trace with the profile's ratio."""
    rows = evaluate_trace(path, device, classes=None)
    sel = rows[rows["op_class"].isin(CLASSES) & (rows["n_kernels"] == 1) & (rows["bytes"] > 0)
               & (rows["flops"] <= 4 * rows["bytes"]) & (rows["kernel_ns"] > 0)].copy()
    sel["ratio"] = sel["predicted_ns"] / sel["kernel_ns"]
    sel["GBps"] = sel["bytes"] / sel["kernel_ns"]
    sel["l2x"] = sel["bytes"] / (L2_MIB[device] * 2**20)
    return sel


def study() -> list[dict[str, Any]]:
    out = []
    for label, path, device in TRACES:
        k = kernels(path, device)
        for lo, hi, band in BANDS:
            b = k[(k["l2x"] >= lo) & (k["l2x"] < hi)]
            for cls in (*CLASSES, "all"):
                c = b if cls == "all" else b[b["op_class"] == cls]
                if not len(c):
                    continue
                out.append({"trace": label, "device": device, "band": band, "class": cls,
                            "ops": len(c), "measured_ms": float(c["kernel_ns"].sum() / 1e6),
                            "ratio_median": float(c["ratio"].median()),
                            "ratio_time_weighted": float(c["predicted_ns"].sum() / c["kernel_ns"].sum()),
                            "achieved_GBps_median": float(c["GBps"].median())})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    rows = study()
    if ap.parse_args().json:
        print(json.dumps(rows, indent=1))
        return
    print("| trace | size | class | ops | measured ms | profile / measured (median) | "
          "time-weighted | achieved GB/s (median) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['trace']} | {r['band']} | {r['class']} | {r['ops']} | {r['measured_ms']:.2f} | "
              f"{r['ratio_median']:.2f} | {r['ratio_time_weighted']:.2f} | {r['achieved_GBps_median']:.0f} |")


if __name__ == "__main__":
    main()
