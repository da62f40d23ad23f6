"""Memory-bound kernels inside recorded steps against the streaming memory curve, and the
per-class factors the GPU profiles take from them.

Every device profile's streaming curve prices a memory-bound op as ``bytes / (HBM bandwidth x
E_mem(bytes))``, with ``E_mem`` from a streaming benchmark (FluidX3D's LBM kernel) and a ramp
from the small copies of public A100 traces (docs/devices.md). This study asks how the
memory-bound kernels of real recorded steps compare: for every host op of a trace that
launched one kernel of a memory-bound class (elementwise, copy, softmax, norm, reduction; fewer
than 4 FLOPs per byte), the streaming curve's time for the op's bytes (from its recorded
shapes and dtypes, as replay prices an op) over the kernel's measured time. A ratio under 1:
the curve is faster than the kernel ran. Ops are grouped by size against the device's L2
cache (a tensor that fits may be served from L2, one of several times its size is not).

Per-class factors (:func:`class_factors`): for the ops of at least a quarter of the L2 whose
kernel ran more than twice the launch overhead, the memory part of the ratio, ``(streaming
time - launch) / (measured - launch)``; its median per trace, then the median over traces (each
trace one vote), capped at 1 (no class streams faster than the benchmark). A class is
calibrated only where at least :data:`MIN_TRACES` traces have it. The factors are written to
``data/memory_classes.csv`` (``--write``), which ``datasheet.py`` multiplies into each GPU
profile's memory curve of that class.

    PYTHONPATH=. .venv/bin/python benchmarks/kernels/memory_in_steps.py [--json] [--write]
"""

from __future__ import annotations

import argparse
import copy
import json
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.kernels.kernel_eval import evaluate_trace
from tracesim.hardware.device import DeviceProfile, get_device

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
#: a class's factor needs this many traces with its ops
MIN_TRACES = 3
FACTORS_CSV = ROOT / "benchmarks" / "kernels" / "data" / "memory_classes.csv"
#: the profile classes every op class of the study may have a curve of its own under
STREAMING_CLASSES = ("default", "gemm", "attention")


def streaming(device: str | DeviceProfile) -> DeviceProfile:
    """``device``'s profile with every memory-bound class on the streaming curve (the
    per-class curves this study calibrates removed)."""
    dev = get_device(device) if not isinstance(device, DeviceProfile) else device
    eff = {k: v for k, v in dev.efficiency.items() if k in STREAMING_CLASSES}
    return replace(dev, efficiency=eff)


def kernels(path: Path, device: str) -> pd.DataFrame:
    """The single-kernel memory-bound ops of one trace with the streaming curve's ratio
    (``ratio``: whole times; ``mem_ratio``: launch overhead taken out of both, NaN for kernels
    of at most twice the launch overhead)."""
    dev = streaming(device)
    rows = evaluate_trace(path, dev, classes=None)
    sel = rows[rows["op_class"].isin(CLASSES) & (rows["n_kernels"] == 1) & (rows["bytes"] > 0)
               & (rows["flops"] <= 4 * rows["bytes"]) & (rows["kernel_ns"] > 0)].copy()
    sel["ratio"] = sel["predicted_ns"] / sel["kernel_ns"]
    launch = dev.launch_overhead_us * 1e3
    busy = sel["kernel_ns"] > 2 * launch
    sel["mem_ratio"] = ((sel["predicted_ns"] - launch) / (sel["kernel_ns"] - launch)).where(busy)
    sel["GBps"] = sel["bytes"] / sel["kernel_ns"]
    sel["l2x"] = sel["bytes"] / (L2_MIB[device] * 2**20)
    return sel


def all_kernels() -> list[tuple[str, str, pd.DataFrame]]:
    """(label, device, :func:`kernels`) of every trace of :data:`TRACES`."""
    return [(label, device, kernels(path, device)) for label, path, device in TRACES]


def class_factors(traces: list[tuple[str, str, pd.DataFrame]] | None = None) -> list[dict[str, Any]]:
    """One row per class: the factor on the streaming memory curve (1 where uncalibrated),
    the traces behind it and their medians (``traces``: :func:`all_kernels`, read if None)."""
    per: dict[str, list[tuple[str, float, int]]] = {c: [] for c in CLASSES}
    for label, device, k in traces if traces is not None else all_kernels():
        k = k[(k["l2x"] >= BANDS[0][0]) & k["mem_ratio"].notna()]
        for cls, g in k.groupby("op_class"):
            per[str(cls)].append((f"{label.split(',')[0]} ({device})", float(g["mem_ratio"].median()),
                                  len(g)))
    out = []
    for cls in CLASSES:
        meds = [m for _, m, _ in per[cls]]
        ok = len(meds) >= MIN_TRACES
        factor = round(min(float(np.median(meds)), 1.0), 2) if ok else 1.0
        out.append({"class": cls, "factor": factor, "traces": len(meds), "calibrated": ok,
                    "ops": sum(n for _, _, n in per[cls]),
                    "medians": "; ".join(f"{lab}: {m:.2f}" for lab, m, _ in per[cls])})
    return out


def write_factors(rows: list[dict[str, Any]], path: Path = FACTORS_CSV) -> Path:
    pd.DataFrame(rows).to_csv(path, index=False, lineterminator="\n")
    return path


@cache
def read_factors(path: Path = FACTORS_CSV) -> dict[str, float]:
    """The calibrated classes' factors (classes left on the streaming curve are not listed)."""
    t = pd.read_csv(path)
    return {str(r["class"]): float(r["factor"]) for _, r in t.iterrows()
            if bool(r["calibrated"]) and float(r["factor"]) < 1.0}


def study(traces: list[tuple[str, str, pd.DataFrame]] | None = None) -> list[dict[str, Any]]:
    """Per trace, size band and class: the ops' ratios and achieved bandwidth."""
    out = []
    for label, device, k in traces if traces is not None else all_kernels():
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


#: GPU profiles kept as shipped (not generated by ``datasheet.py``)
KEPT = ("v100", "mi250")


def memory_classes(default: dict[str, Any]) -> dict[str, Any]:
    """Efficiency entries of the calibrated memory-bound classes: ``default``'s entry with its
    memory curve times the class's factor (data/memory_classes.csv)."""
    out = {}
    for cls, f in sorted(read_factors().items()):
        e = copy.deepcopy(default)
        e["memory"] = [[b, round(v * f, 4)] for b, v in default["memory"]]
        out[cls] = e
    return out


def memory_classes_source() -> str:
    """The profiles' ``calibration`` entry for the memory-bound classes' curves."""
    facts = ", ".join(f"{c} {f}" for c, f in sorted(read_factors().items()))
    return (f"the streaming curve times {facts}: median over the public traces of the "
            "memory part of streaming time / measured kernel time of single-kernel ops of at "
            f"least L2/4 (benchmarks/kernels/memory_in_steps.py, {FACTORS_CSV.name}); softmax "
            "and elementwise stay on the streaming curve")


def kept_profile(name: str) -> dict[str, Any]:
    """A kept profile (:data:`KEPT`) as shipped, with the calibrated memory-bound classes'
    entries made from its own default class."""
    from tracesim.fileio import read_yaml
    from tracesim.hardware.device import DEVICES_DIR

    out = read_yaml(DEVICES_DIR / f"{name}.yaml")
    eff = {k: v for k, v in out["efficiency"].items() if k in STREAMING_CLASSES}
    eff.update(memory_classes(eff["default"]))
    out["efficiency"] = eff
    cal = dict(out.get("calibration") or {})
    cal["efficiency memory classes"] = memory_classes_source()
    out["calibration"] = cal
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--write", action="store_true", help=f"write the factors to {FACTORS_CSV.name}")
    args = ap.parse_args()
    traces = all_kernels()
    rows = study(traces)
    factors = class_factors(traces)
    if args.write:
        print(f"written to {write_factors(factors)}")
    if args.json:
        print(json.dumps({"study": rows, "factors": factors}, indent=1))
        return
    print("| trace | size | class | ops | measured ms | profile / measured (median) | "
          "time-weighted | achieved GB/s (median) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['trace']} | {r['band']} | {r['class']} | {r['ops']} | {r['measured_ms']:.2f} | "
              f"{r['ratio_median']:.2f} | {r['ratio_time_weighted']:.2f} | {r['achieved_GBps_median']:.0f} |")
    print("\n| class | factor | traces | ops | per-trace medians |\n|---|---|---|---|---|")
    for f in factors:
        shown = f"{f['factor']:.2f}" if f["calibrated"] else "1 (too few traces)"
        print(f"| {f['class']} | {shown} | {f['traces']} | {f['ops']} | {f['medians']} |")


if __name__ == "__main__":
    main()
