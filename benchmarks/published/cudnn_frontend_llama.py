"""The cuDNN frontend's Llama 3.2 1B training benchmark as a `tracesim validate published` table.

NVIDIA/cudnn-frontend ``benchmark/Llama-3.2-1B-Training`` (commit 9793df5) trains Hugging Face
transformers' ``LlamaForCausalLM`` (Llama 3.2 1B, randomly initialised, parameters in BF16:
``torch.set_default_dtype(torch.bfloat16)``) eagerly on one GPU with ``torch.optim.SGD`` and
times 100 iterations of forward, ``CrossEntropyLoss`` (on the model's BF16 logits: it passes
no labels, so transformers' own fp32 loss does not run; ``loss_fp32`` false), backward and
step per (batch, sequence)
point and PyTorch SDPA backend, on one B200 and one H200 (container nv25.04: PyTorch 2.7,
cuDNN 9.9.0; ``artifacts/{b200,h200}_training_timing.csv``, seconds per iteration). This
script writes its rows in the torchtitan table format with the ``transformers`` stack:

    .venv/bin/python benchmarks/published/cudnn_frontend_llama.py \\
        /work/.mirror/NVIDIA+cudnn-frontend/repo -o benchmarks/published

(the git directory ``fetch github:NVIDIA/cudnn-frontend`` leaves). The backends: ``CUDNN_ATTENTION``
is cuDNN's fused attention (the profiles' attention curve, ``attention`` flash);
``FLASH_ATTENTION`` is PyTorch's FlashAttention-2 (``flash2``: the H200 profile's FA2 rates;
the B200 profile has none, so those rows are not replayed); ``EFFICIENT_ATTENTION``
(memory-efficient attention) has no kernel model and is left out. tokens/s per GPU = batch x
sequence / seconds per iteration.
"""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
from pathlib import Path

COMMIT = "9793df5"
ARTIFACTS = "benchmark/Llama-3.2-1B-Training/artifacts"
#: the file of each GPU and the system it maps to
GPUS = {"b200": "DGX-B200", "h200": "DGX-H200"}
#: SDPA backend -> the table's attention cell (EFFICIENT_ATTENTION: not modelled)
BACKENDS = {"CUDNN_ATTENTION": "flash", "FLASH_ATTENTION": "flash2"}
COLUMNS = ("system", "model", "gpus", "precision", "local_batch", "seq_len", "tp", "ac", "compile",
           "attention", "stack", "optimizer", "loss_fp32", "cudnn", "tokens_per_s_per_gpu", "step_s",
           "note")


def rows(repo: Path) -> list[dict[str, str]]:
    """The table's rows from the benchmark's timing files at :data:`COMMIT`."""
    out = []
    for gpu, system in GPUS.items():
        text = subprocess.run(["git", "--git-dir", str(repo), "show",
                               f"{COMMIT}:{ARTIFACTS}/{gpu}_training_timing.csv"],
                              check=True, capture_output=True, text=True).stdout
        for r in csv.DictReader(io.StringIO(text)):
            if r["backend"] not in BACKENDS:
                continue
            b, s, t = int(r["batch_size"]), int(r["seq_len"]), float(r["time"])
            out.append({
                "system": system, "model": "llama3.2-1b", "gpus": "1", "precision": "bf16",
                "local_batch": str(b), "seq_len": str(s), "tp": "1", "ac": "none",
                "compile": "false", "attention": BACKENDS[r["backend"]], "stack": "transformers",
                "optimizer": "sgd", "loss_fp32": "false", "cudnn": "9.9.0", "tokens_per_s_per_gpu": f"{b * s / t:.1f}",
                "step_s": f"{t:.6f}",
                "note": (f"NVIDIA/cudnn-frontend@{COMMIT} {ARTIFACTS}/{gpu}_training_timing.csv "
                         f"{r['backend']}: mean of 100 iterations")})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("repo", type=Path, help="git directory of NVIDIA/cudnn-frontend")
    ap.add_argument("-o", "--out", type=Path, default=Path("benchmarks/published"))
    args = ap.parse_args()
    path = args.out / "cudnn_frontend_llama32_1b.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows(args.repo))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
