"""Eager PyTorch chains (Hugging Face transformers' modules) against their fused kernels.

The ``transformers`` stack prices Hugging Face's RMSNorm, rotary embedding and
cross-entropy as the template's fused op times a number of passes
(:mod:`tracesim.template.stacks`, ``HF_PASSES``). Those passes are calibrated here, on
Liger-Kernel's published kernel benchmark (``data/eager.csv``, source LIGER-BENCH:
``transformers``' ``LlamaRMSNorm``, ``apply_rotary_pos_emb`` and ``torch.nn.CrossEntropyLoss``
timed forward, backward and both on an A100 80GB, BF16 (the loss on fp32 logits)):

    passes = measured time / the cost model's time of the fused op (the template's bytes, its
             op class, the A100 profile)

at each kernel's largest size (the one furthest from launch overheads; the tables of a
training step are larger still). Liger's own fused kernels are timed the same way as a check
that the fused pricing holds (they should read about 1). Run:

    .venv/bin/python -m benchmarks.kernels.eager_chains            # the table
    .venv/bin/python -m benchmarks.kernels.eager_chains --extract LIGER_GIT_DIR  # data/eager.csv

(``LIGER_GIT_DIR``: the git directory ``fetch github:linkedin/Liger-Kernel`` leaves; the rows
of ``benchmark/data/all_benchmark_data.csv`` at commit :data:`COMMIT` measured on the A100,
kernels ``rms_norm``, ``rope`` and ``cross_entropy``, speed in ms, the median).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tracesim.hardware.costmodel import op_time_ns
from tracesim.hardware.device import get_device

DATA = Path(__file__).parent / "data" / "eager.csv"
COMMIT = "ead96b61"
COLUMNS = ("device", "profile", "kernel", "provider", "pass", "tokens", "width", "kv_width",
           "ms", "source")
#: kernel -> (op class, fused bytes per element forward, backward): the template's ops
#: (tracesim.template.primitives.norm_op, attention_ops' rotary, analytic._epilogue's loss)
FUSED = {"rms_norm": ("norm", 4, 8), "rope": ("elementwise", 4, 6),
         "cross_entropy": ("softmax", 12, 18)}
PASSES = {"forward": "fwd", "backward": "bwd", "full": "full"}


def extract(git_dir: Path) -> list[dict[str, str]]:
    """The A100 rows of Liger-Kernel's benchmark data (module docstring)."""
    text = subprocess.run(["git", "--git-dir", str(git_dir), "show",
                           f"{COMMIT}:benchmark/data/all_benchmark_data.csv"],
                          check=True, capture_output=True, text=True).stdout
    out = []
    for r in csv.DictReader(io.StringIO(text)):
        if (r["kernel_name"] not in FUSED or r["metric_name"] != "speed"
                or "A100" not in r["gpu_name"]):
            continue
        cfg = json.loads(r["extra_benchmark_config_str"])
        x = int(r["x_value"])
        if r["kernel_name"] == "rms_norm":
            tokens, width, kv = cfg["M"], x, 0
        elif r["kernel_name"] == "rope":
            tokens, width = cfg.get("seq_len", x), cfg.get("hidden_size", x)
            kv = width * cfg["num_kv_heads"] // cfg["num_q_heads"]
        else:
            tokens, width, kv = cfg["B"] * cfg["T"], x, 0
        out.append({"device": "A100-SXM4-80GB", "profile": "a100", "kernel": r["kernel_name"],
                    "provider": r["kernel_provider"], "pass": PASSES[r["kernel_operation_mode"]],
                    "tokens": str(tokens), "width": str(width), "kv_width": str(kv),
                    "ms": f"{float(r['y_value_50']):.6g}", "source": "LIGER-BENCH"})
    return out


def rows(path: Path = DATA) -> Iterator[dict[str, str]]:
    with path.open(newline="") as fh:
        yield from csv.DictReader(fh)


def fused_ms(row: dict[str, str]) -> float:
    """The cost model's time of the fused op the row's kernel stands for."""
    cls, fwd, bwd = FUSED[row["kernel"]]
    n = int(row["tokens"]) * (int(row["width"]) + int(row["kv_width"]))
    per = {"fwd": fwd, "bwd": bwd, "full": fwd + bwd}[row["pass"]]
    return op_time_ns(get_device(row["profile"]), cls, 0.0, per * n, "bf16") / 1e6


def calibrated() -> dict[tuple[str, str], float]:
    """Passes of each Hugging Face kernel and pass (``fwd``, ``bwd``) over the fused op's at
    its largest size; a backward without its own rows (the loss) from ``full`` - ``fwd``."""
    big: dict[tuple[str, str], dict[str, str]] = {}
    for r in rows():
        if r["provider"] != "huggingface":
            continue
        key = (r["kernel"], r["pass"])
        size = int(r["tokens"]) * int(r["width"])
        if key not in big or size > int(big[key]["tokens"]) * int(big[key]["width"]):
            big[key] = r
    out = {}
    for (kernel, ps), r in big.items():
        if ps in ("fwd", "bwd"):
            out[(kernel, ps)] = float(r["ms"]) / fused_ms(r)
    for kernel in FUSED:
        if (kernel, "bwd") not in out and (kernel, "full") in big:
            full, fwd = big[(kernel, "full")], big[(kernel, "fwd")]
            back = dict(full, **{"pass": "bwd"})
            out[(kernel, "bwd")] = (float(full["ms"]) - float(fwd["ms"])) / fused_ms(back)
    return {k: round(v, 2) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--extract", type=Path, metavar="LIGER_GIT_DIR",
                    help="write data/eager.csv from Liger-Kernel's benchmark data")
    args = ap.parse_args()
    if args.extract:
        with DATA.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(extract(args.extract))
        print(f"wrote {DATA}")
        return
    cal = calibrated()
    print("calibrated passes (measured / fused op at the largest size, A100):")
    for (kernel, ps), v in sorted(cal.items()):
        print(f"  {kernel:14s} {ps}: {v:.2f}")
    print("\nkernel          provider     pass   tokens x width    measured ms   model ms   error")
    for r in rows():
        if r["pass"] == "full":
            continue
        k = cal.get((r["kernel"], r["pass"]), 1.0) if r["provider"] == "huggingface" else 1.0
        model = fused_ms(r) * k
        size = f"{r['tokens']} x {r['width']}"
        print(f"{r['kernel']:15s} {r['provider']:12s} {r['pass']:5s} {size:>17s} "
              f"{float(r['ms']):12.4f} {model:10.4f} {model / float(r['ms']) - 1:+7.1%}")


if __name__ == "__main__":
    main()
