"""One rank of a collection: build, warm up, calibrate, profile, measure.

:func:`run_rank` is run in-process for one rank and in spawned processes for several
(:mod:`collectors.run`). It writes ``rank{r}/trace.json.gz`` and ``rank{r}/et.json.gz`` into
the bundle directory and returns its measurements as plain Python data.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
import warnings
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from collectors.overhead import measure_profiler_overhead
from collectors.train import count_step_events, make_profiler, make_training
from tracesim.workload.model import ModelSpec


@dataclass(frozen=True)
class RankConfig:
    """What every rank runs. Counts are steps; ``bundle_dir`` is the (temporary) bundle."""

    spec: ModelSpec
    device: str  # "cpu" | "cuda"
    ranks: int
    steps: int
    warmup: int
    measure: int
    batch: int
    threads: int
    bundle_dir: str
    master_port: int

    @property
    def backend(self) -> str | None:
        """The torch.distributed backend (None for a single rank)."""
        if self.ranks == 1:
            return None
        return "nccl" if self.device == "cuda" else "gloo"


def _minor_faults() -> int:
    """Minor page faults of this process so far (0 where getrusage is unavailable)."""
    try:
        import resource
    except ImportError:  # not on Unix
        return 0
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


def _gzip(src: Path, dst: Path) -> None:
    with open(src, "rb") as fin, gzip.open(dst, "wb", compresslevel=6) as fout:
        shutil.copyfileobj(fin, fout)
    src.unlink()


def _init_dist(rank: int, cfg: RankConfig) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(cfg.master_port)
    assert cfg.backend is not None
    dist.init_process_group(
        cfg.backend, rank=rank, world_size=cfg.ranks, timeout=timedelta(seconds=120)
    )


def run_rank(rank: int, cfg: RankConfig) -> dict[str, Any]:
    """Run rank ``rank``'s collection; return its measurements (times in seconds, ns)."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(1234)
    warnings.filterwarnings("ignore", module="torch.profiler")
    if cfg.device == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    rank_dir = Path(cfg.bundle_dir) / f"rank{rank}"
    rank_dir.mkdir(parents=True, exist_ok=True)
    if cfg.backend is not None:
        _init_dist(rank, cfg)
    try:
        return _run(rank, cfg, device, rank_dir)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _run(rank: int, cfg: RankConfig, device: torch.device, rank_dir: Path) -> dict[str, Any]:
    wrap = None
    if cfg.ranks > 1:
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None

        def wrap(model: torch.nn.Module) -> torch.nn.Module:
            # an expert that gets no token on a rank has no gradient there
            return DistributedDataParallel(model, device_ids=ids,
                                           find_unused_parameters=cfg.spec.is_moe)

    training = make_training(cfg.spec, cfg.batch, device, seed=rank, wrap=wrap)
    step = training.step
    for _ in range(cfg.warmup):
        step()
    # on the warm job, before the recorded profile; all ranks at once (DDP keeps them in step)
    overhead = measure_profiler_overhead(training, device, steps=cfg.steps)
    if dist.is_initialized():
        dist.barrier()

    plain_trace = rank_dir / "trace.json"
    plain_et = rank_dir / "et.json"
    prof = make_profiler(device, cfg.steps, plain_et,
                         on_trace_ready=lambda p: p.export_chrome_trace(str(plain_trace)))
    profiled_faults = []
    with prof:
        for _ in range(1 + cfg.steps):
            f0 = _minor_faults()
            step()
            profiled_faults.append(_minor_faults() - f0)
            prof.step()
    if dist.is_initialized():
        dist.barrier()

    times_s = []
    loss = torch.zeros(())
    measured_faults = []
    for _ in range(cfg.measure):
        f0 = _minor_faults()
        t0 = time.perf_counter_ns()
        loss = step()
        times_s.append((time.perf_counter_ns() - t0) / 1e9)
        measured_faults.append(_minor_faults() - f0)
    training.scopes.remove()

    with open(plain_trace) as fh:
        step_events = count_step_events(json.load(fh))
    if len(step_events) != cfg.steps:
        raise RuntimeError(
            f"rank {rank}: trace has {len(step_events)} ProfilerStep events, expected {cfg.steps}"
        )
    for entry, faults in zip(step_events, profiled_faults[1:], strict=True):
        entry["minor_faults"] = faults
    _gzip(plain_trace, rank_dir / "trace.json.gz")
    _gzip(plain_et, rank_dir / "et.json.gz")
    return {
        "rank": rank,
        "step_times_s": times_s,
        "minor_faults": measured_faults,
        "profiled_step_events": step_events,
        "profiler_overhead": overhead,
        "loss": float(loss.detach().float().cpu()),
    }
