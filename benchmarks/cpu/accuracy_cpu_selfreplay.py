"""CPU self-replay accuracy in rounds: the numbers of docs/accuracy.md, "CPU bundles".

Each round collects, one after the other, a 1-rank bundle (``tracesim collect --workload
gpt-tiny``, collect's defaults: 2 threads on a 2-core machine) and a 2-rank gloo DDP bundle
(``--ranks 2``), then self-replays each (``tracesim.report.steps``) and prints a markdown row:
per bundle and rank, the worst profiled step's error and the median over the steps, the
unprofiled error (median of the steady steps' predictions against the median of the
reference steps) with its 95% interval from the measurement noise
(:mod:`benchmarks.cpu.selfreplay_interval`), and the spread of the reference steps (coefficient of
variation: how noisy the machine was). Nothing is fitted; run it on an otherwise idle
machine (each round takes 2-3 minutes here)::

    .venv/bin/python benchmarks/cpu/accuracy_cpu_selfreplay.py --rounds 5 [--json FILE] [--dir DIR] \
        [--collect-args "--steps 24 --measure 48 --calibration-cycles 48"]

``--reuse DIR`` collects nothing: it replays the bundles ``DIR/b1-*`` / ``DIR/b2-*`` of
earlier rounds with the profiler overhead recomputed from their recorded calibration cycles
by the current collector code (:func:`tracesim.collectors.cycles.cycle_overhead`), for comparing two
estimators on the same bundles.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.cpu.selfreplay_interval import error_interval  # noqa: E402
from tracesim.report.steps import self_replay, unprofiled_summary  # noqa: E402
from tracesim.trace.sources import load_source  # noqa: E402


def collect(out: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "tracesim.cli", "collect", "--workload", "gpt-tiny",
                    "-o", str(out), *args], check=True, capture_output=True, cwd=ROOT, timeout=900)


def recalibrated(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` with every rank's ``profiler_overhead`` recomputed from its calibration
    cycles by the current collector code."""
    from tracesim.collectors.cycles import CycleTimes, cycle_overhead
    from tracesim.collectors.overhead import overhead_mapping

    out = dict(meta, per_rank=[])
    for entry in meta["per_rank"]:
        cal = [c for c in entry["cycles"] if not c["recorded"]]
        times = [CycleTimes(tuple(round(x * 1e6) for x in c["plain_ms"]), round(c["profiled_ms"] * 1e6))
                 for c in cal]
        old = entry["profiler_overhead"]
        calib = cycle_overhead(times, [c["events"] for c in cal])
        po = overhead_mapping(calib, old["calibration"]["events_per_step"], old["loops"])
        out["per_rank"].append(dict(entry, profiler_overhead=po))
    out["profiler_overhead"] = out["per_rank"][0]["profiler_overhead"]
    return out


def bundle_errors(path: Path, reuse: bool = False) -> dict[str, Any]:
    import dataclasses

    src = load_source(path)
    if reuse:
        src = dataclasses.replace(src, meta=recalibrated(src.meta))
    results = self_replay(src)
    ref = [float(x) for x in src.meta["per_rank"][0]["step_times_s"]]
    ranks = []
    for u in unprofiled_summary(results):
        mine = sorted(r.rel_error for r in results if r.rank == u.rank)
        used = [r for r in results if r.rank == u.rank and r.predicted_unprofiled_s is not None]
        used = [r for r in used if r.steady] or used
        ci = error_interval(src.meta, u.rank,
                            {r.step: float(r.predicted_unprofiled_s) for r in used})  # type: ignore[arg-type]
        ranks.append({"rank": u.rank, "steps": u.steps, "profiled_worst": max(mine, key=abs),
                      "profiled_median": mine[len(mine) // 2], "unprofiled": u.rel_error,
                      "ci95": ci, "predicted_ms": u.predicted_s * 1e3})
    return {"reference_ms": statistics.median(ref) * 1e3,
            "reference_cv": statistics.pstdev(ref) / statistics.fmean(ref), "ranks": ranks}


def pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def cells(rec: dict[str, Any]) -> str:
    parts = []
    for r in rec["ranks"]:
        lo, hi = r["ci95"] or (float("nan"), float("nan"))
        parts.append(f"r{r['rank']} {pct(r['unprofiled'])} [{pct(lo)}, {pct(hi)}]")
    prof = max((r["profiled_worst"] for r in rec["ranks"]), key=abs)
    return (f"{rec['reference_ms']:.1f} | {rec['reference_cv'] * 100:.0f}% | {pct(prof)} "
            f"| {'; '.join(parts)}")


HEADER = ("| time (UTC) | 1-rank reference ms | CV | worst profiled step | unprofiled error "
          "[95% interval] | 2-rank reference ms | CV | worst profiled step | unprofiled error "
          "[95% interval] |\n|---|---|---|---|---|---|---|---|---|")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", default=None, help="keep the bundles here (default: a temp dir)")
    p.add_argument("--json", default=None, help="append one JSON line per round here")
    p.add_argument("--reuse", default=None, help="replay the stored bundles of DIR instead")
    p.add_argument("--collect-args", default="",
                   help="extra `tracesim collect` flags for both bundles, e.g. "
                        "'--steps 24 --measure 48 --calibration-cycles 48'")
    args = p.parse_args(argv)
    if args.reuse:
        print(HEADER, flush=True)
        for b1 in sorted(Path(args.reuse).glob("b1-*[0-9]")):
            b2 = b1.with_name("b2-" + b1.name[3:])
            if b2.is_dir():
                rec = {"b1": bundle_errors(b1, True), "b2": bundle_errors(b2, True)}
                print(f"| {b1.name[3:]} | {cells(rec['b1'])} | {cells(rec['b2'])} |", flush=True)
        return 0
    with tempfile.TemporaryDirectory(prefix="tracesim-cpu-self-") as default_tmp:
        tmp = Path(args.dir or default_tmp)
        tmp.mkdir(parents=True, exist_ok=True)
        print(HEADER, flush=True)
        for _ in range(args.rounds):
            stamp = time.strftime("%H:%M:%S", time.gmtime())
            tag = stamp.replace(":", "")
            extra = args.collect_args.split()
            collect(tmp / f"b1-{tag}", *extra)
            collect(tmp / f"b2-{tag}", "--ranks", "2", *extra)
            rec = {"time": stamp, "b1": bundle_errors(tmp / f"b1-{tag}"),
                   "b2": bundle_errors(tmp / f"b2-{tag}")}
            print(f"| {stamp} | {cells(rec['b1'])} | {cells(rec['b2'])} |", flush=True)
            if args.json:
                with open(args.json, "a") as fh:
                    fh.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
