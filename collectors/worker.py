"""One rank of a collection: build, warm up, then calibrate, profile and measure interleaved.

:func:`run_rank` is run in-process for one rank and in spawned processes for several
(:mod:`tracesim.collectors.run`). After the warm-up and the loop microbenchmark
(:func:`tracesim.collectors.overhead.op_overhead`) it runs one profiler session of cycles
(:mod:`tracesim.collectors.cycles`): calibration cycles measure the profiler's cost, recorded cycles
give the profiled steps and the timed unprofiled reference steps. It writes
``rank{r}/trace.json.gz`` and ``rank{r}/et.json.gz`` (the recorded steps only) into the
bundle directory and returns its measurements as plain Python data.
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tracesim.collectors.cycles import (
    CALIBRATION_CYCLES,
    Cycle,
    CycleTimes,
    cycle_overhead,
    cycle_schedule,
    filter_et_nodes,
    merge_chrome_traces,
    plan_cycles,
)
from tracesim.collectors.overhead import op_overhead, overhead_mapping
from tracesim.collectors.recorder import release_gil_for_workers
from tracesim.collectors.train import (
    Training,
    count_step_events,
    make_profiler,
    make_training,
    timed,
)

from tracesim.specs.model import ModelSpec


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
    calibration_cycles: int = CALIBRATION_CYCLES

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
            release_gil_for_workers()  # before the spawned process finalizes


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
    for _ in range(cfg.warmup):
        training.step()
    loops = op_overhead(device)
    if dist.is_initialized():
        dist.barrier()
    cycles = plan_cycles(cfg.steps, cfg.measure, cfg.calibration_cycles)
    with tempfile.TemporaryDirectory(prefix="tracesim-cycles-") as tmp:
        times, faults, files, loss = _profile_cycles(training, device, cycles, Path(tmp))
        result = _write_rank(rank, rank_dir, cycles, times, faults, files, loops,
                             Path(tmp) / "et.json")
    training.scopes.remove()
    return {**result, "loss": float(loss.detach().float().cpu())}


def _profile_cycles(training: Training, device: torch.device, cycles: list[Cycle],
                    tmp: Path) -> tuple[list[CycleTimes], list[tuple[list[int], int]],
                                        list[Path], torch.Tensor]:
    """Run ``cycles`` in one profiler session; per cycle its times, the minor faults of its
    timed steps (plain, profiled) and its exported trace file; and the last step's loss."""
    files: list[Path] = []

    def ready(p: Any) -> None:
        f = tmp / f"cycle{len(files)}.json"
        p.export_chrome_trace(str(f))
        files.append(f)
        # the export leaves many objects behind: collect them here, outside the timed
        # steps, rather than in a garbage collection inside one of the next steps
        gc.collect()

    prof = make_profiler(device, None, tmp / "et.json", on_trace_ready=ready,
                         step_schedule=cycle_schedule(cycles))
    step = training.step
    times: list[CycleTimes] = []
    faults: list[tuple[list[int], int]] = []
    loss = torch.zeros(())
    with prof:
        for c in cycles:
            step()  # settle: the step after a trace export runs slow
            prof.step()
            plain, plain_faults = [], []
            for _ in range(c.plain):
                f0 = _minor_faults()
                dt, loss = timed(step)
                plain.append(dt)
                plain_faults.append(_minor_faults() - f0)
                prof.step()
            step()  # the profiler's warm-up step
            prof.step()
            f0 = _minor_faults()
            profiled, loss = timed(step)
            faults.append((plain_faults, _minor_faults() - f0))
            prof.step()  # ends the cycle: its trace is exported
            times.append(CycleTimes(tuple(plain), profiled))
    if len(files) != len(cycles):
        raise RuntimeError(f"profiler exported {len(files)} traces for {len(cycles)} cycles")
    return times, faults, files, loss


def _write_rank(rank: int, rank_dir: Path, cycles: list[Cycle],
                times: list[CycleTimes], faults: list[tuple[list[int], int]],
                files: list[Path], loops: dict[str, Any], et_file: Path) -> dict[str, Any]:
    """Write the recorded cycles' traces into the bundle; the rank's measurements."""
    traces, counted = [], []
    for c, f in zip(cycles, files, strict=True):
        with open(f) as fh:
            traces.append(json.load(fh))
        steps = count_step_events(traces[-1])
        if len(steps) != 1:
            raise RuntimeError(f"rank {rank}: cycle {c.index} trace has {len(steps)} "
                               "ProfilerStep events, expected 1")
        counted.append(steps[0])
    cal = [k for k, c in enumerate(cycles) if not c.recorded]
    rec = [k for k, c in enumerate(cycles) if c.recorded]
    if cal:
        calib = cycle_overhead([times[k] for k in cal], [counted[k]["events"] for k in cal])
        typical = sorted((counted[k] for k in cal), key=lambda e: e["events"])[len(cal) // 2]
    else:  # no calibration cycles: the loop microbenchmark alone (a lower bound)
        calib = {"per_event_ns": 0, "cycles": 0}
        typical = counted[rec[0]]
    counts = {k: int(typical[k]) for k in ("cpu_ops", "module_scopes", "annotations", "events")}
    overhead = overhead_mapping(calib, counts, loops)

    plain_trace = rank_dir / "trace.json"
    with open(plain_trace, "w") as fh:
        json.dump(merge_chrome_traces([traces[k] for k in rec]), fh)
    with open(et_file) as fh:
        et = json.load(fh)
    plain_et = rank_dir / "et.json"
    with open(plain_et, "w") as fh:
        json.dump(filter_et_nodes(et, {str(counted[k]["step"]) for k in rec}), fh)
    _gzip(plain_trace, rank_dir / "trace.json.gz")
    _gzip(plain_et, rank_dir / "et.json.gz")

    step_events = []
    for k in rec:
        step_events.append({**counted[k], "minor_faults": faults[k][1], "cycle": cycles[k].index})
    times_s = [ns / 1e9 for k in rec for ns in times[k].plain_ns]
    measured_faults = [f for k in rec for f in faults[k][0]]
    return {
        "rank": rank,
        "step_times_s": times_s,
        "minor_faults": measured_faults,
        "profiled_step_events": step_events,
        "profiler_overhead": overhead,
        "cycles": [{"index": c.index, "recorded": c.recorded, "plain_ms":
                    [round(ns / 1e6, 3) for ns in times[k].plain_ns],
                    "profiled_ms": round(times[k].profiled_ns / 1e6, 3),
                    "events": int(counted[k]["events"])} for k, c in enumerate(cycles)],
    }
