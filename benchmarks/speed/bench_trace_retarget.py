"""Benchmark: a 128-rank recorded job replayed onto another cluster (trace path).

The job is made from the real 8-rank Megatron GPT TP8 recording in
``tests/data/traces/astra-megatron-gpt-tp8-a100`` (A100, one step per rank): ``--replicas``
copies of it side by side as one job of 8 x replicas ranks (data-parallel replicas of the
TP8 model: ranks renumbered ``8 j + r``, each copy's process groups moved to its own
ranks). Each copy is the recording itself, so the per-rank work, the collectives and the
event mix are real; the copies do not talk to each other (the recording has no data-
parallel collective). The folder is written to a temporary directory, then

    tracesim replay FOLDER --cluster CLUSTER --json

runs in a fresh process pinned to one core (``taskset -c 0`` where available); its wall
time, CPU time (user + system) and peak RSS are reported with the events read, the tasks
replayed and the predicted step.

Usage::

    .venv/bin/python benchmarks/speed/bench_trace_retarget.py [--replicas 16] [--cluster h100x128] [--json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "data" / "traces" / "astra-megatron-gpt-tp8-a100"


def _shift_ranks(text: str, offset: int) -> str:
    return json.dumps([int(x) + offset for x in json.loads(text)])


def write_job(out: Path, replicas: int) -> dict[str, int]:
    """Write ``replicas`` copies of the 8-rank recording as one job into ``out``."""
    files = sorted(SOURCE.glob("megatron_kineto_*.json.gz"))
    if len(files) != 8:
        raise SystemExit(f"expected 8 rank traces in {SOURCE}, found {len(files)}")
    events = 0
    out.mkdir(parents=True, exist_ok=True)
    for path in files:
        data = json.loads(gzip.open(path, "rt").read())
        r = int(data["distributedInfo"]["rank"])
        for j in range(replicas):
            off = 8 * j
            d = dict(data)
            d["distributedInfo"] = {**data["distributedInfo"], "rank": r + off,
                                    "world_size": 8 * replicas}
            evs = []
            for e in data["traceEvents"]:
                a = e.get("args")
                if isinstance(a, dict) and "Process Group Ranks" in a:
                    a = dict(a)
                    a["Process Group Ranks"] = _shift_ranks(a["Process Group Ranks"], off)
                    a["Process Group Name"] = f"{a.get('Process Group Name', '')}-{j}"
                    if isinstance(a.get("Global rank start"), int):
                        a["Global rank start"] += off
                    e = {**e, "args": a}
                evs.append(e)
            d["traceEvents"] = evs
            events += len(evs)
            with gzip.open(out / f"rank{r + off}.json.gz", "wt", compresslevel=1) as fh:
                json.dump(d, fh)
    return {"ranks": 8 * replicas, "events": events}


def run_replay(folder: Path, cluster: str) -> dict[str, object]:
    cmd = [sys.executable, "-m", "tracesim.cli", "replay", str(folder), "--cluster", cluster, "--json"]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"replay failed ({p.returncode}): {p.stderr.strip()}")
    res = json.loads(p.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_MiB": after.ru_maxrss / 1024.0,
            "iteration_time_s": res["iteration_time_s"], "tasks": res["replay"]["tasks"],
            "recorded_step_s": res["recorded"]["measured_step_time_s"],
            "device": res["device"], "cluster": res["cluster"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, default=16, help="copies of the 8-rank job")
    ap.add_argument("--cluster", default="h100x128")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tracesim-bench-") as d:
        folder = Path(d) / "job"
        t0 = time.perf_counter()
        job = write_job(folder, args.replicas)
        gen_s = time.perf_counter() - t0
        res = run_replay(folder, args.cluster)
    out = {**job, "generate_s": round(gen_s, 1), **res}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"job: {job['ranks']} ranks, {job['events']} trace events (written in {gen_s:.0f} s)")
    print(f"replay onto {res['cluster']} ({res['device']}): wall {res['wall_s']:.1f} s, "
          f"CPU {res['cpu_s']:.1f} s, peak RSS {res['peak_rss_MiB']:.0f} MiB, "
          f"{res['tasks']} tasks")
    print(f"step: recorded {res['recorded_step_s'] * 1e3:.1f} ms on A100, predicted "
          f"{res['iteration_time_s'] * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
