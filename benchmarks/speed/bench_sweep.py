"""Benchmark ``tracesim sweep``: the same 48-point sweep with 1 and 2 local Dask workers.

Usage::

    .venv/bin/python benchmarks/speed/bench_sweep.py                    # 1 and 2 local workers
    .venv/bin/python benchmarks/speed/bench_sweep.py --workers 1,2,4 --repeat 2
    .venv/bin/python benchmarks/speed/bench_sweep.py --scheduler tcp://HOST:8786   # a running cluster

Each run starts from an empty sweep directory. Reported per run: wall time of the whole
``run_sweep`` call (cluster start and stop included), compute time (first task submitted to
last result), points per second, the sum of the tasks' own times, the speed-up over the
first row, and the 1-minute load average before the run (other processes on a shared
machine take cores away). The script also checks that every run produced the same metrics
and exits 1 when they differ.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

from tracesim.sweep import run_sweep, space_from_dict

#: GPT-3 1.7B on 4 DGX H100 nodes (32 GPUs): 4 TP x 3 PP x 2 NIC speeds x 2 micro-batch sizes
SPACE = {
    "name": "bench48",
    "base": {"model": "gpt3-1.7b", "cluster": "h100x8", "nodes": 4, "global_batch": 64},
    "axes": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4], "nic_Gbps": [100, 400], "micro_batch": [1, 2]},
}
_COMPARED = ("iteration_time_s", "tokens_per_s", "mfu", "memory_gib_per_gpu")


def bench_once(space_data: dict, workers: int | None, scheduler: str | None, root: Path) -> dict:
    """One fresh sweep; returns the timings and the results table."""
    out = root / f"w{workers or 'sched'}"
    shutil.rmtree(out, ignore_errors=True)
    space = space_from_dict(space_data, root / "space.yaml")
    marks: dict[str, float] = {}

    def progress(p) -> None:
        now = time.perf_counter()
        if p.done == 0:
            marks["first"] = now
        marks["last"] = now

    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    summary = run_sweep(space, out, workers=workers, scheduler=scheduler, progress=progress)
    wall = time.perf_counter() - t0
    table = pd.read_parquet(out / "results.parquet")
    compute = marks["last"] - marks["first"]
    return {"workers": summary.workers or scheduler, "points": summary.points, "ok": summary.ok,
            "failed": summary.failed, "wall_s": wall, "compute_s": compute,
            "points_per_s": summary.computed / compute if compute > 0 else float("nan"),
            "task_sum_s": float(table["task_wall_s"].sum()), "load_1min": load, "table": table}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2", help="comma list of local worker counts")
    ap.add_argument("--scheduler", help="bench a running Dask scheduler instead")
    ap.add_argument("--space", type=Path, help="a SPACE.yaml instead of the built-in 48 points")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per worker count, interleaved (the fastest is reported)")
    ap.add_argument("-o", "--output", type=Path, help="work directory (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    space = yaml.safe_load(args.space.read_text()) if args.space else SPACE
    root = args.output or Path(tempfile.mkdtemp(prefix="tracesim-bench-sweep-"))
    root.mkdir(parents=True, exist_ok=True)
    configs: list[int | None] = [None] if args.scheduler else [int(w) for w in args.workers.split(",")]
    runs: dict[int | None, list[dict]] = {w: [] for w in configs}
    for _ in range(max(1, args.repeat)):  # interleaved, so a burst of load hits every config
        for w in configs:
            runs[w].append(bench_once(space, w, args.scheduler, root))
    rows, tables = [], []
    for w in configs:
        best = min(runs[w], key=lambda r: r["wall_s"])
        tables.append(best.pop("table"))
        rows.append(best)
    ref = tables[0].set_index("key")[list(_COMPARED)].astype(float)
    n_diff, worst = 0, 0.0
    for t in tables[1:]:
        other = t.set_index("key").loc[ref.index, list(_COMPARED)].astype(float)
        rel = ((ref - other).abs() / ref.abs().where(ref != 0, 1.0)).fillna(0.0)
        n_diff += int((rel > 0).any(axis=1).sum())
        worst = max(worst, float(rel.to_numpy().max()))
    same = ("identical metrics across runs" if n_diff == 0 else
            f"WARNING: {n_diff} point(s) differ between runs (max relative difference "
            f"{worst:.2e}; did the code change during the benchmark?)")
    base_wall, base_compute = rows[0]["wall_s"], rows[0]["compute_s"]
    for r in rows:
        r["speedup_wall"] = base_wall / r["wall_s"]
        r["speedup_compute"] = base_compute / r["compute_s"]
    if args.json:
        print(json.dumps({"rows": rows, "differing_points": n_diff}, indent=2))
        return 0 if n_diff == 0 else 1
    print(f"{rows[0]['points']} points ({rows[0]['ok']} ok, {rows[0]['failed']} failed), "
          f"{os.cpu_count()} CPU cores; {same}")
    print("| workers | wall s | compute s | points/s | sum of task times s | speed-up (wall) "
          "| speed-up (compute) | load avg |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workers']} | {r['wall_s']:.1f} | {r['compute_s']:.1f} | {r['points_per_s']:.2f} "
              f"| {r['task_sum_s']:.1f} | {r['speedup_wall']:.2f}x | {r['speedup_compute']:.2f}x "
              f"| {r['load_1min']:.1f} |")
    return 0 if n_diff == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
