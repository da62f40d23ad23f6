"""``python -m collectors.contention``: how much N processes on this host slow each other.

Measures the ``host_contention.slowdown`` of a cluster spec
(:mod:`tracesim.hardware.contention`). N worker processes are started (spawned, each with
``--threads`` torch threads) and kept; each owns the same fixed loop of CPU work, a mix of
compute and memory traffic that is *not* any training job: per iteration

* ``aten::mm`` of 256 x 512 by 512 x 512 (fp32; the compute side, working set ~2.5 MB),
* a layer norm, a GELU, a softmax over 2048 x 512 (4 MiB tensors: cache / memory traffic),
* an element-wise add and a copy of 4 MiB.

``--rounds`` times, interleaved: worker 0 runs ``--iters`` iterations **alone** (the others
wait in a blocking read, using no CPU), then **all N at once**. The slowdown of a round is
the median iteration time of all workers together over the median of worker 0 alone; the
result is the median over rounds (alternating, so both see the same background load), with
the per-part slowdowns alongside. Prints the ``host_contention`` YAML mapping (with the load
average before and after) and writes it to ``-o`` if given.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

#: parts of one loop iteration (see module doc)
PARTS = ("gemm", "rows", "stream")


def _loop(threads: int) -> Any:
    """Build the tensors; return ``run(iters) -> {part: [ns per iteration]}``."""
    import torch

    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(256, 512, generator=gen)
    b = torch.randn(512, 512, generator=gen)
    x = torch.randn(2048, 512, generator=gen)
    y = torch.randn(2048, 512, generator=gen)
    out = torch.empty_like(x)
    w, bias = torch.ones(512), torch.zeros(512)

    def gemm() -> None:
        for _ in range(4):
            torch.mm(a, b)

    def rows() -> None:
        h = torch.nn.functional.layer_norm(x, (512,), w, bias)
        h = torch.nn.functional.gelu(h)
        torch.softmax(h, dim=-1)

    def stream() -> None:
        for _ in range(4):
            torch.add(x, y, out=out)
            out.copy_(y)

    fns = {"gemm": gemm, "rows": rows, "stream": stream}

    def run(iters: int) -> dict[str, list[int]]:
        times: dict[str, list[int]] = {p: [] for p in ("total", *PARTS)}
        with torch.no_grad():
            for _ in range(iters):
                t_start = time.perf_counter_ns()
                for part in PARTS:
                    t0 = time.perf_counter_ns()
                    fns[part]()
                    times[part].append(time.perf_counter_ns() - t0)
                times["total"].append(time.perf_counter_ns() - t_start)
        return times

    run(3)  # warm-up
    return run


def _worker(conn: Any, threads: int) -> None:
    run = _loop(threads)
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            return
        conn.send(run(int(msg)))


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def measure(procs: int = 2, threads: int = 1, rounds: int = 5, iters: int = 30) -> dict[str, Any]:
    """The ``host_contention`` mapping for ``procs`` co-located processes (see module doc)."""
    import multiprocessing as mp

    if procs < 2:
        raise ValueError("procs must be >= 2")
    ctx = mp.get_context("spawn")
    pipes, workers = [], []
    load_before = _load()
    try:
        for _ in range(procs):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(child, threads), daemon=True)
            p.start()
            pipes.append(parent)
            workers.append(p)
        for conn in pipes:
            if conn.recv() != "ready":
                raise RuntimeError("a contention worker failed to start")
        ratios: dict[str, list[float]] = {p: [] for p in ("total", *PARTS)}
        alone_ms, together_ms = [], []
        for _ in range(rounds):
            pipes[0].send(iters)
            alone = pipes[0].recv()
            for conn in pipes:
                conn.send(iters)
            together = [conn.recv() for conn in pipes]
            for part in ratios:
                shared = [t for res in together for t in res[part]]
                ratios[part].append(statistics.median(shared) / statistics.median(alone[part]))
            alone_ms.append(statistics.median(alone["total"]) / 1e6)
            together_ms.append(statistics.median(t for r in together for t in r["total"]) / 1e6)
    finally:
        for conn in pipes:
            try:
                conn.send(None)
            except OSError:
                pass
        for p in workers:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    factor = round(statistics.median(ratios["total"]), 3)
    return {
        "slowdown": {procs: factor},
        "method": (
            f"python -m collectors.contention --procs {procs} --threads {threads}: a fixed "
            f"gemm + layer-norm/gelu/softmax + add/copy loop, worker 0 alone vs {procs} "
            f"workers at once, {rounds} interleaved rounds of {iters} iterations, median "
            f"ratio; {datetime.date.today().isoformat()}, load average {load_before} before, "
            f"{_load()} after"
        ),
        "detail": {
            "per_round": [round(r, 3) for r in ratios["total"]],
            "parts": {p: round(statistics.median(ratios[p]), 3) for p in PARTS},
            "alone_ms": round(statistics.median(alone_ms), 2),
            "together_ms": round(statistics.median(together_ms), 2),
            "threads": threads,
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m collectors.contention",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", type=int, default=2, help="co-located processes (>= 2)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=30, help="loop iterations per phase")
    p.add_argument("-o", "--out", default=None, help="write the mapping to this YAML file")
    args = p.parse_args(argv)
    for flag in ("procs", "threads", "rounds", "iters"):
        minimum = 2 if flag == "procs" else 1
        if getattr(args, flag) < minimum:
            print(f"contention: error: --{flag} must be >= {minimum}", file=sys.stderr)
            return 2
    result = measure(args.procs, args.threads, args.rounds, args.iters)
    text = yaml.safe_dump({"host_contention": result}, sort_keys=False)
    if args.out:
        from tracesim.fileio import write_yaml

        write_yaml(Path(args.out), {"host_contention": result})
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
