"""One rank of a collection: build, calibrate, warm up, profile, measure.

:func:`run_rank` is run in-process for one rank and in spawned processes for several
(:mod:`collectors.run`). It writes ``rank{r}/trace.json.gz`` and ``rank{r}/et.json.gz`` into
the bundle directory and returns its measurements as plain Python data.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

from collectors.models import build_model
from collectors.overhead import measure_profiler_overhead
from collectors.scopes import MODULE_PREFIX, PHASE_PREFIX, ModuleScopes, phase
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
    calib_events: int
    bundle_dir: str
    master_port: int

    @property
    def backend(self) -> str | None:
        """The torch.distributed backend (None for a single rank)."""
        if self.ranks == 1:
            return None
        return "nccl" if self.device == "cuda" else "gloo"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _make_step(model: torch.nn.Module, opt: torch.optim.Optimizer, tokens: torch.Tensor,
               targets: torch.Tensor, device: torch.device) -> Callable[[], torch.Tensor]:
    """One training step: forward, backward, optimizer (step, then zero_grad), synchronised."""

    def step() -> torch.Tensor:
        with phase("forward"):
            loss = model(tokens, targets)
        with phase("backward"):
            loss.backward()
        with phase("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        _sync(device)
        return loss

    return step


def _count_step_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """Count traced CPU events inside each ``ProfilerStep#N`` (per step, all CPU threads)."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    steps = sorted(
        (e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")),
        key=lambda e: e["ts"],
    )
    out = []
    for st in steps:
        t0, t1 = float(st["ts"]), float(st["ts"]) + float(st.get("dur", 0))
        counts = {"cpu_ops": 0, "module_scopes": 0, "annotations": 0}
        for e in events:
            if e is st or not t0 <= float(e["ts"]) <= t1:
                continue
            cat = e.get("cat")
            name = str(e.get("name", ""))
            if cat == "cpu_op":
                counts["cpu_ops"] += 1
            elif cat == "user_annotation":
                if name.startswith(MODULE_PREFIX):
                    counts["module_scopes"] += 1
                elif not name.startswith("ProfilerStep#"):
                    counts["annotations"] += 1
        out.append({"step": st["name"], "dur_us": float(st.get("dur", 0)), **counts})
    return out


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
    overhead = measure_profiler_overhead(cfg.device, n_events=cfg.calib_events)

    spec = cfg.spec
    model = build_model(spec, str(device))
    scopes = ModuleScopes(model)  # on the bare model: paths without DDP's "module." prefix
    if cfg.ranks > 1:
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        model = DistributedDataParallel(model, device_ids=ids)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(4321 + rank)
    data = torch.randint(0, spec.vocab, (cfg.batch, spec.seq_len + 1), generator=gen)
    tokens = data[:, :-1].contiguous().to(device)
    targets = data[:, 1:].contiguous().to(device)
    step = _make_step(model, opt, tokens, targets, device)

    for _ in range(cfg.warmup):
        step()
    if dist.is_initialized():
        dist.barrier()

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    plain_trace = rank_dir / "trace.json"
    plain_et = rank_dir / "et.json"
    et = ExecutionTraceObserver().register_callback(str(plain_et))
    with profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=1, active=cfg.steps, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(plain_trace)),
        record_shapes=True,
        with_flops=True,
        execution_trace_observer=et,
    ) as prof:
        for _ in range(1 + cfg.steps):
            step()
            prof.step()
    if dist.is_initialized():
        dist.barrier()

    times_s = []
    loss = torch.zeros(())
    for _ in range(cfg.measure):
        t0 = time.perf_counter_ns()
        loss = step()
        times_s.append((time.perf_counter_ns() - t0) / 1e9)
    scopes.remove()

    with open(plain_trace) as fh:
        step_events = _count_step_events(json.load(fh))
    if len(step_events) != cfg.steps:
        raise RuntimeError(
            f"rank {rank}: trace has {len(step_events)} ProfilerStep events, expected {cfg.steps}"
        )
    _gzip(plain_trace, rank_dir / "trace.json.gz")
    _gzip(plain_et, rank_dir / "et.json.gz")
    return {
        "rank": rank,
        "step_times_s": times_s,
        "median_s": statistics.median(times_s),
        "profiled_step_events": step_events,
        "profiler_overhead": overhead,
        "loss": float(loss.detach().float().cpu()),
    }


__all__ = ["RankConfig", "run_rank", "PHASE_PREFIX"]
