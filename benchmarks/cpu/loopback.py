"""``python -m benchmarks.cpu.loopback``: the gloo all-reduce rate between processes on this host.

Measures the ``intra_node`` link of a CPU cluster spec (the ranks of ``tracesim collect
--ranks N`` talk through gloo over TCP loopback), separately from any training run it is later
used to predict. N worker processes (spawned, one torch thread each, a gloo process group) run
``--reps`` rounds; in each round, for every message size in a shuffled order, the ranks meet
in a barrier, do ``--gap-ms`` of GEMM work each (a fixed time, so they stay within a fraction
of a millisecond of each other) and go straight into one timed ``all_reduce`` of that many
fp32 bytes, the way a gradient all-reduce follows backward compute in training (no barrier
right before it: that would wake gloo's threads and sockets first and hide the cost of
doing so after a stretch of compute: on the development machine the fitted fixed time was 0.1-1.2 ms with a
barrier right before the call and 1.8-2.4 ms without). A
size's time is the median over rounds of the ranks' mean.

The per-size medians are fitted (least squares) as ``time = fixed + bytes / rate``; the link
is then set so that tracesim's own network model (:func:`tracesim.network.model.
collective_time_ns`, the collective's algorithm and efficiencies included) gives the same
fixed time and rate for this all-reduce on this many ranks. Prints (and writes with ``-o``)::

    intra_node: {kind: pcie, bandwidth_GBps: ..., latency_us: ...}
    method: "..."          # how, when, load average
    detail: {sizes_bytes: [...], median_ms: [...], fit_fixed_us: ..., fit_rate_GBps: ...}

Gloo over loopback is erratic on a small VM (the same 2 MiB all-reduce took 0.8 ms in one run
and 3.5-4.7 ms in another; docs/accuracy.md), hence many rounds and medians.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

#: default message sizes (bytes): the gradient buckets of the tiny models lie in this range
SIZES = (256 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20)


def _busy(ms: float, a: Any) -> None:
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < ms:
        a @ a


def _worker(rank: int, world: int, port: int, sizes: list[int], reps: int, gap_ms: float,
            seed: int, queue: Any) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        bufs = {s: torch.ones(max(1, s // 4)) for s in sizes}
        a = torch.randn(256, 256)
        order = list(sizes)
        rng = random.Random(seed)  # the same order on every rank
        times: dict[int, list[float]] = {s: [] for s in sizes}
        for s in sizes:  # warm-up: connections and buffers
            dist.all_reduce(bufs[s])
        for _ in range(reps):
            rng.shuffle(order)
            for s in order:
                # aligned by the barrier, then compute straight into the collective, as a
                # gradient all-reduce follows backward: a barrier right before the timed
                # call would wake gloo's threads and sockets and hide that cost
                dist.barrier()
                _busy(gap_ms, a)
                t0 = time.perf_counter()
                dist.all_reduce(bufs[s])
                times[s].append(time.perf_counter() - t0)
        queue.put((rank, times))
    finally:
        dist.destroy_process_group()


def measure_times(procs: int, sizes: list[int], reps: int, gap_ms: float) -> dict[int, float]:
    """Median seconds per size of one ``all_reduce`` over ``procs`` local gloo ranks."""
    from tracesim.collectors.spawn import free_port, run_spawned

    port = free_port()
    results = run_spawned(_worker, [(r, procs, port, sizes, reps, gap_ms, 1234) for r in range(procs)])
    per_rank = [t for _, t in sorted(results, key=lambda x: x[0])]
    return {s: statistics.median(statistics.fmean(r[s][i] for r in per_rank) for i in range(reps))
            for s in sizes}


def fit(times_s: dict[int, float]) -> tuple[float, float]:
    """Least-squares ``time = fixed + bytes / rate``: (fixed seconds, rate bytes/s)."""
    xs, ys = list(times_s), [times_s[s] for s in times_s]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    if slope <= 0:
        raise RuntimeError(f"all-reduce time does not grow with size: {times_s}")
    return max(0.0, my - slope * mx), 1.0 / slope


def link_for(procs: int, fixed_s: float, rate_Bps: float) -> dict[str, Any]:
    """The ``intra_node`` link with which tracesim's network model reproduces the fit."""
    from benchmarks.cpu.cpu_accuracy import CPU_CLUSTER
    from tracesim.network.model import collective_time_ns
    from tracesim.specs.cluster import cluster_from_dict

    ranks = tuple(range(procs))
    probe = 64 << 20

    def model_ns(bw: float, lat: float, nbytes: int) -> float:
        spec = {**CPU_CLUSTER, "gpus_per_node": procs,
                "intra_node": {"kind": "pcie", "bandwidth_GBps": bw, "latency_us": lat}}
        return float(collective_time_ns(cluster_from_dict(spec), "all_reduce", ranks, nbytes))

    # the model is affine in latency (at 0 bytes) and in 1 / bandwidth (per byte)
    lat_per_us = model_ns(1.0, 1.0, 0) - model_ns(1.0, 0.0, 0)
    ns_per_byte_at_1GBps = (model_ns(1.0, 0.0, probe) - model_ns(1.0, 0.0, 0)) / probe
    latency_us = fixed_s * 1e9 / lat_per_us if lat_per_us > 0 else 0.0
    bandwidth_GBps = ns_per_byte_at_1GBps * rate_Bps / 1e9
    return {"kind": "pcie", "bandwidth_GBps": round(bandwidth_GBps, 4),
            "latency_us": round(latency_us, 1)}


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def measure(procs: int = 2, reps: int = 15, gap_ms: float = 5.0,
            sizes: tuple[int, ...] = SIZES) -> dict[str, Any]:
    """The ``intra_node`` mapping plus how it was measured (module doc)."""
    if procs < 2:
        raise ValueError("procs must be >= 2")
    load_before = _load()
    times = measure_times(procs, list(sizes), reps, gap_ms)
    fixed_s, rate = fit(times)
    return {
        "intra_node": link_for(procs, fixed_s, rate),
        "method": (f"python -m benchmarks.cpu.loopback --procs {procs}: gloo all_reduce over TCP "
                   f"loopback, {reps} rounds x {len(sizes)} sizes after {gap_ms:g} ms of GEMM "
                   f"work each, median per size, least-squares fit; "
                   f"{datetime.date.today().isoformat()}, load average {load_before} before, "
                   f"{_load()} after"),
        "detail": {"sizes_bytes": list(sizes),
                   "median_ms": [round(times[s] * 1e3, 3) for s in sizes],
                   "fit_fixed_us": round(fixed_s * 1e6, 1),
                   "fit_rate_GBps": round(rate / 1e9, 4)},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cpu.loopback",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", type=int, default=2, help="local gloo ranks (>= 2)")
    p.add_argument("--reps", type=int, default=15, help="rounds over all sizes")
    p.add_argument("--gap-ms", type=float, default=5.0, help="GEMM work before each all-reduce")
    p.add_argument("-o", "--out", default=None, help="write the mapping to this YAML file")
    args = p.parse_args(argv)
    if args.procs < 2 or args.reps < 1 or args.gap_ms < 0:
        print("loopback: error: need --procs >= 2, --reps >= 1, --gap-ms >= 0", file=sys.stderr)
        return 2
    result = measure(args.procs, args.reps, args.gap_ms)
    if args.out:
        from tracesim.fileio import write_yaml

        write_yaml(Path(args.out), result)
    print(yaml.safe_dump(result, sort_keys=False), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
