"""``python -m tracesim.collectors.run``: record training steps of a model spec into a bundle.

Per rank: build the model (:mod:`tracesim.collectors.models`) with module-scope annotations
(:mod:`tracesim.collectors.scopes`), run ``--warmup`` steps, then one ``torch.profiler`` session
(plus the execution-trace observer) of interleaved cycles (:mod:`tracesim.collectors.cycles`):
``--calibration-cycles`` cycles measure the profiler's per-event overhead
(:mod:`tracesim.collectors.overhead`), ``--steps`` recorded cycles spread among them each give one
profiled step and a share of the ``--measure`` timed unprofiled reference steps.
``--ranks N > 1`` runs a real data-parallel job (DDP; gloo on the CPU, NCCL on CUDA) of N
local processes.

The bundle (see docs/collect.md)::

    BUNDLE/meta.yaml               written last, after every rank finished
    BUNDLE/rank{r}/trace.json.gz   Kineto Chrome trace of the profiled steps
    BUNDLE/rank{r}/et.json.gz      PyTorch execution trace of the same steps

Everything is written into a temporary directory beside ``-o`` and renamed at the end, so a
failed run leaves no bundle. Progress goes to stderr; exit 2 on bad arguments.
"""

from __future__ import annotations

import os

# quiet the C++ loggers of the profiler and the execution-trace observer (before torch loads)
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

import argparse  # noqa: E402
import datetime  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from tracesim.collectors.cycles import CALIBRATION_CYCLES  # noqa: E402
from tracesim.collectors.spawn import free_port  # noqa: E402
from tracesim.collectors.worker import RankConfig, run_rank  # noqa: E402

from tracesim.catalog import load_model  # noqa: E402
from tracesim.errors import InputError  # noqa: E402
from tracesim.fileio import replace_dir, write_yaml  # noqa: E402
from tracesim.specs.model import ModelSpec  # noqa: E402

BUNDLE_FORMAT = "tracesim-bundle"
BUNDLE_VERSION = 1
#: default micro-batch per rank: a gpt-tiny step takes ~40-70 ms on one or two CPU cores
DEFAULT_BATCH = 8


def _log(msg: str) -> None:
    print(f"collect: {msg}", file=sys.stderr, flush=True)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tracesim.collectors.run", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--model", required=True, help="model spec: a YAML path or a workloads/ name")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--ranks", type=int, default=1, help="data-parallel processes")
    p.add_argument("--steps", type=int, default=1, help="profiled steps")
    p.add_argument("--warmup", type=int, default=3, help="unprofiled warm-up steps")
    p.add_argument("--measure", type=int, default=10,
                   help="timed unprofiled reference steps (spread over the recorded cycles)")
    p.add_argument("--calibration-cycles", type=int, default=CALIBRATION_CYCLES,
                   help="profiler cycles that measure the profiler's overhead")
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH, help="micro-batch per rank")
    p.add_argument("--seq-len", type=int, default=None, help="default: the model's seq_len")
    p.add_argument("--threads", type=int, default=None, help="torch threads per rank")
    p.add_argument("-o", "--out", required=True, help="bundle directory to write")
    return p.parse_args(argv)


def _check(args: argparse.Namespace) -> None:
    for flag, minimum in (("ranks", 1), ("steps", 1), ("warmup", 0), ("measure", 1),
                          ("batch", 1), ("calibration_cycles", 0)):
        value = getattr(args, flag)
        if value < minimum:
            raise InputError(f"must be >= {minimum}, got {value}", "--" + flag.replace("_", "-"))
    if args.seq_len is not None and args.seq_len < 1:
        raise InputError(f"must be >= 1, got {args.seq_len}", "--seq-len")
    if args.threads is not None and args.threads < 1:
        raise InputError(f"must be >= 1, got {args.threads}", "--threads")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise InputError("CUDA is not available to this torch build / machine", "--device")
        if torch.cuda.device_count() < args.ranks:
            raise InputError(
                f"{args.ranks} ranks need {args.ranks} GPUs, found {torch.cuda.device_count()}",
                "--ranks",
            )
    out = Path(args.out)
    if out.exists() and not (out / "meta.yaml").is_file():
        if not out.is_dir() or any(out.iterdir()):
            raise InputError("exists and is not a bundle; refusing to overwrite it", out)


def _spec(args: argparse.Namespace) -> ModelSpec:
    spec = load_model(args.model)
    if args.seq_len is not None:
        spec = spec.replace(seq_len=args.seq_len)
    if spec.dtype == "fp8":
        raise InputError("fp8 training cannot be collected; use fp32, bf16 or fp16", args.model, "dtype")
    return spec


def _device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    return "cpu"


def _summary(times_s: list[float]) -> dict[str, Any]:
    return {
        "median": float(statistics.median(times_s)),
        "min": float(min(times_s)),
        "max": float(max(times_s)),
        "n": len(times_s),
    }


def _spawned(rank: int, cfg: RankConfig, queue: Any) -> None:
    """Entry point of a spawned rank: run it and hand its result to the parent."""
    try:
        queue.put((rank, run_rank(rank, cfg), None))
    except BaseException as exc:  # report, then let the process fail
        queue.put((rank, None, f"{type(exc).__name__}: {exc}"))
        raise


def _run_ranks(cfg: RankConfig) -> list[dict[str, Any]]:
    if cfg.ranks == 1:
        return [run_rank(0, cfg)]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=_spawned, args=(r, cfg, queue), daemon=False) for r in range(cfg.ranks)]
    for proc in procs:
        proc.start()
    results: dict[int, dict[str, Any]] = {}
    errors: list[str] = []
    while len(results) + len(errors) < cfg.ranks:
        if queue.empty() and any(p.exitcode not in (None, 0) for p in procs):
            # a rank died without reporting (killed, or crashed in C++)
            dead = [f"rank {r} exited with {p.exitcode}" for r, p in enumerate(procs)
                    if p.exitcode not in (None, 0)]
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
            raise RuntimeError("; ".join(dead))
        if queue.empty():
            for proc in procs:
                proc.join(timeout=0.05)
            continue
        rank, result, error = queue.get()
        if error is not None:
            errors.append(f"rank {rank}: {error}")
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
            break
        results[rank] = result
    for proc in procs:
        proc.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    return [results[r] for r in range(cfg.ranks)]


def _meta(spec: ModelSpec, cfg: RankConfig,
          results: list[dict[str, Any]]) -> dict[str, Any]:
    r0 = results[0]
    meta: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "device": _device_name(cfg.device),
        "device_kind": cfg.device,
        "torch_version": str(torch.__version__),
        "threads": cfg.threads,
        "host": _cpu_model(),
        "cores": _cores(),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "model": spec.to_dict(),
        "batch": cfg.batch,
        "seq_len": spec.seq_len,
        "parallel": {"tp": 1, "pp": 1, "dp": cfg.ranks, "cp": 1, "ep": 1},
        "ranks": cfg.ranks,
        "backend": cfg.backend,
        "warmup_steps": cfg.warmup,
        "profiled_steps": cfg.steps,
        "calibration_cycles": cfg.calibration_cycles,
        "measured_step_time_s": _summary(r0["step_times_s"]),
        "profiler_overhead": dict(r0["profiler_overhead"]),
        "per_rank": [
            {
                "rank": r["rank"],
                "measured_step_time_s": _summary(r["step_times_s"]),
                "step_times_s": [float(t) for t in r["step_times_s"]],
                "minor_faults": [int(f) for f in r["minor_faults"]],
                "profiled_step_events": r["profiled_step_events"],
                "profiler_overhead": dict(r["profiler_overhead"]),
                "cycles": list(r["cycles"]),
                "loss": r["loss"],
            }
            for r in results
        ],
    }
    return meta


def collect(args: argparse.Namespace) -> Path:
    """Run the collection described by ``args``; return the bundle path."""
    _check(args)
    spec = _spec(args)
    cores = _cores()
    threads = args.threads or max(1, cores // args.ranks)
    if threads * args.ranks > cores:
        _log(f"warning: {args.ranks} ranks x {threads} threads > {cores} cores")
    out = Path(args.out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    cfg = RankConfig(
        spec=spec,
        device=args.device,
        ranks=args.ranks,
        steps=args.steps,
        warmup=args.warmup,
        measure=args.measure,
        batch=args.batch,
        threads=threads,
        bundle_dir=str(tmp),
        master_port=free_port() if args.ranks > 1 else 0,
        calibration_cycles=args.calibration_cycles,
    )
    try:
        _log(f"{spec.name}: {args.ranks} rank(s) x {threads} thread(s), batch {args.batch}, "
             f"seq {spec.seq_len}, {args.warmup} warm-up steps, then {args.steps} recorded "
             f"cycle(s) ({args.steps} profiled + {max(args.measure, args.steps)} measured "
             f"steps) among {args.calibration_cycles} calibration cycles on {args.device}")
        results = _run_ranks(cfg)
        write_yaml(tmp / "meta.yaml", _meta(spec, cfg, results))
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    med = results[0]["step_times_s"]
    _log(f"wrote {out} (measured step median {statistics.median(med) * 1e3:.1f} ms)")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        collect(args)
    except InputError as exc:
        print(f"collect: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
