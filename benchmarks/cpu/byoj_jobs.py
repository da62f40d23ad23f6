"""Bring your own job: `tracesim collect -- CMD` on training scripts of many kinds, each
replayed on its own recording and moved onto a GPU cluster (docs/collect.md, "Jobs it was
run on").

The scripts in ``benchmarks/cpu/jobs/`` are plain PyTorch, written without tracesim in mind,
each exercising something a user's job does: mixed precision with accumulation, two
optimizers, activation checkpointing, a closure optimizer, torch.compile, a BF16 LM with
fused AdamW, TorchScript, DDP with ZeRO and DataLoader workers started by mp.spawn, DDP with
no_sync, FSDP2, a two-stage pipeline. For each: collect (collect's defaults: 3 warm-up
steps, 8 timed, 4 profiled), self-replay (the unprofiled step predicted from the profiled
ones against the timed steps' median), and `replay --cluster h100x8` (each CPU op a kernel
on an H100, gloo's collectives NCCL's). Prints a markdown table; nothing is fitted. Two
cores make the timed steps of the 2-rank jobs noisy (their spread is printed)::

    .venv/bin/python benchmarks/cpu/byoj_jobs.py [--only NAME ...] [--dir DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tracesim.options import ReplayOptions  # noqa: E402
from tracesim.pipeline.run import predict  # noqa: E402

JOBS = ROOT / "benchmarks" / "cpu" / "jobs"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
#: name -> (launcher prefix, what it exercises)
CASES: dict[str, tuple[list[str], str]] = {
    "amp_accum": ([sys.executable], "bf16 autocast, GradScaler, 4-step accumulation, clipping"),
    "gan": ([sys.executable], "two models, two optimizers"),
    "conv_checkpoint": ([sys.executable], "CNN, BatchNorm, activation checkpointing"),
    "lbfgs": ([sys.executable], "L-BFGS (closure: 4 forward / backward per step)"),
    "compiled": ([sys.executable], "torch.compile (inductor C++ kernels)"),
    "bf16_llm": ([sys.executable], "bf16 parameters, SDPA, SwiGLU, fused AdamW"),
    "torchscript": ([sys.executable], "torch.jit.script model"),
    "ddp_zero_spawn": ([sys.executable], "2 ranks by mp.spawn: DDP, ZeRO, DataLoader workers"),
    "ddp_no_sync": (TORCHRUN, "2 ranks: DDP, no_sync accumulation"),
    "fsdp2": (TORCHRUN, "2 ranks: FSDP2"),
    "pipeline_p2p": (TORCHRUN, "2 ranks: pipeline stages, gloo send / recv"),
}


def run_case(name: str, workdir: Path) -> dict[str, Any]:
    launcher, what = CASES[name]
    out = workdir / name
    t0 = time.perf_counter()
    env = {**os.environ, "TRACESIM_JOB_PORT": str(_free_port())}  # mp.spawn's rendezvous
    p = subprocess.run([sys.executable, "-m", "tracesim.cli", "collect", "-o", str(out), "--",
                        *launcher, str(JOBS / f"{name}.py")], capture_output=True, text=True,
                       cwd=ROOT, timeout=1200, env=env)
    row: dict[str, Any] = {"job": name, "what": what, "collect_s": round(time.perf_counter() - t0, 1)}
    if p.returncode != 0:
        row["error"] = (p.stderr.strip().splitlines() or ["?"])[-1]
        return row
    own = predict(out).to_dict()
    measured = own.get("measured_step_time_s")
    bd = own.get("breakdown") or {}
    gpu = predict(out, ReplayOptions.from_mapping({"cluster": "h100x8"}, "byoj_jobs", "options"))
    g = gpu.to_dict()
    comm = (g.get("communication") or {}).get("operations") or {}
    meta = own.get("steps") or []
    row.update(ranks=own["gpus"], measured_ms=measured * 1e3 if measured else None,
               predicted_ms=own["iteration_time_s"] * 1e3,
               error=(own["iteration_time_s"] / measured - 1.0) if measured else None,
               compute_share=(bd.get("compute_s") or 0.0) / own["iteration_time_s"],
               h100_ms=g["iteration_time_s"] * 1e3, matched=int(comm.get("matched", 0)),
               kept=int(comm.get("kept", 0)), steps=len(meta))
    spread = _spread(out)
    if spread:
        row["measured_min_max_ms"] = spread
    return row


def _free_port() -> int:
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return int(sk.getsockname()[1])


def _spread(bundle: Path) -> list[float] | None:
    import yaml

    meta = yaml.safe_load((bundle / "meta.yaml").read_text())
    st = meta.get("measured_step_time_s") or {}
    if "min" in st and "max" in st:
        return [round(st["min"] * 1e3, 2), round(st["max"] * 1e3, 2)]
    return None


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| job | exercises | ranks | timed step ms (median, min-max) | self-replay ms | error | "
            "compute share | on h100x8 ms | collectives matched |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        if "error" in r and r.get("predicted_ms") is None:
            lines.append(f"| {r['job']} | {r['what']} | | collect failed: {r['error']} | | | | | |")
            continue
        mm = r.get("measured_min_max_ms") or ["", ""]
        lines.append(
            f"| {r['job']} | {r['what']} | {r['ranks']} | {r['measured_ms']:.2f} ({mm[0]}-{mm[1]}) | "
            f"{r['predicted_ms']:.2f} | {r['error']:+.1%} | {r['compute_share']:.0%} | "
            f"{r['h100_ms']:.3f} | {r['matched']} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="job names (default: all)")
    ap.add_argument("--dir", default=None, help="keep the bundles here")
    ap.add_argument("--json", default=None, help="write the rows here")
    args = ap.parse_args()
    names = args.only or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"byoj_jobs.py: error: unknown job(s) {unknown}; known: {list(CASES)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.dir) if args.dir else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        rows = []
        for n in names:
            print(f"byoj_jobs: {n} ...", file=sys.stderr, flush=True)
            rows.append(run_case(n, workdir))
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
