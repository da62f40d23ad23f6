"""``python -m benchmarks.cpu.paired_gloo``: the 1-rank and the 2-rank gloo job, timed in turn.

The CPU gloo check (docs/accuracy.md, "2-rank gloo run") predicts the 2-rank data-parallel
job from a 1-rank trace collected a minute earlier. This VM's speed drifts by 5-15% over
tens of seconds, so the 1-rank trace's level and the 2-rank run's reference can come from
different stretches of machine time. This tool measures both jobs in the same seconds: two
spawned processes (one torch thread each, a gloo group) build the model twice, rank 0 also
bare (the 1-rank job, as ``tracesim collect --threads 1``) and both wrapped in DDP (the
2-rank job, as ``tracesim collect --ranks 2``); then ``--cycles`` times: rank 0 runs
``--steps`` bare steps while rank 1 waits in a barrier (blocked, no CPU), then both run
``--steps`` DDP steps. Step times are rank 0's, as ``collect`` records them; the result is
the median of each job's steps (the first of each phase left out: it follows the other
job). Prints ``{"one": s, "two": s, ...}`` as YAML (seconds), with every timed step of
each job (``one_s``, ``two_s``) for the comparison's noise interval.

The check uses only ``one``: the prediction from the trace, times ``one`` over the 1-rank
bundle's own unprofiled median (the trace's level moved to these seconds), is compared with
``two``. Nothing of the 2-rank job enters the prediction.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from typing import Any

import yaml


def _worker(rank: int, port: int, workload: str, batch: int, cycles: int, steps: int,
            queue: Any) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from tracesim.collectors.train import make_training

    from tracesim.catalog import load_model

    torch.set_num_threads(1)
    torch.manual_seed(1234)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=120))
    try:
        spec = load_model(workload)
        cpu = torch.device("cpu")
        ddp = make_training(spec, batch, cpu, seed=rank, wrap=DistributedDataParallel)
        bare = make_training(spec, batch, cpu, seed=0) if rank == 0 else None
        for _ in range(3):  # warm-up: both jobs
            if bare is not None:
                bare.step()
            ddp.step()
        one: list[float] = []
        two: list[float] = []
        waited = 0.0

        def timed(step: Any, out: list[float]) -> None:  # the first step follows the other job
            for i in range(steps + 1):
                t0 = time.perf_counter()
                step()
                if i:
                    out.append(time.perf_counter() - t0)

        for _ in range(cycles):
            dist.barrier()
            c0 = time.process_time()
            if bare is not None:
                timed(bare.step, one)
            dist.barrier()
            waited += time.process_time() - c0
            timed(ddp.step, two)
        if rank == 0:
            queue.put({"one": one, "two": two})
        else:
            queue.put({"waiting_cpu_s": waited})
    finally:
        dist.destroy_process_group()


def measure(workload: str = "gpt-tiny", batch: int = 8, cycles: int = 6, steps: int = 5) -> dict[str, Any]:
    """The paired medians (module doc); ``waiting_cpu_s``: CPU time rank 1 used while it
    waited (should be ~0: it must not slow the 1-rank job down)."""
    from tracesim.collectors.spawn import free_port, run_spawned

    port = free_port()
    got = run_spawned(_worker, [(r, port, workload, batch, cycles, steps) for r in range(2)])
    r0 = next(g for g in got if "one" in g)
    r1 = next(g for g in got if "waiting_cpu_s" in g)
    return {"one": round(statistics.median(r0["one"]), 6), "two": round(statistics.median(r0["two"]), 6),
            "one_steps": len(r0["one"]), "two_steps": len(r0["two"]),
            "waiting_cpu_s": round(r1["waiting_cpu_s"], 3),
            "one_total_s": round(sum(r0["one"]), 3),
            "one_s": [round(t, 6) for t in r0["one"]], "two_s": [round(t, 6) for t in r0["two"]]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cpu.paired_gloo",
                                description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--workload", default="gpt-tiny")
    p.add_argument("--batch", type=int, default=8, help="micro-batch per rank")
    p.add_argument("--cycles", type=int, default=6)
    p.add_argument("--steps", type=int, default=5, help="timed steps per job and cycle")
    args = p.parse_args(argv)
    for flag in ("batch", "cycles", "steps"):
        if getattr(args, flag) < 1:
            print(f"paired_gloo: error: --{flag} must be >= 1", file=sys.stderr)
            return 2
    print(yaml.safe_dump(measure(args.workload, args.batch, args.cycles, args.steps), sort_keys=False), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
