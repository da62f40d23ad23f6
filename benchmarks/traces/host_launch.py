"""Host time per kernel launch in real GPU training traces: the calibration of
``tracesim.build.host`` (docs/stacks.md, "Host launch time and CUDA graphs").

For every real GPU trace under ``../shared/traces/public`` with kernel launches on the host,
the launching threads are split into the *forward* thread (the one that runs the Python
training loop: its launches are not inside ``autograd::engine::evaluate_function``) and the
*backward* thread (PyTorch's autograd engine, whose launches are). Per thread the host time
per launch is the median gap between consecutive launch calls (``cudaLaunchKernel``,
``hipLaunchKernel``, ``cudaLaunchKernelExC``, ``hipExtModuleLaunchKernel``, ...): the Python,
dispatch and launch work the program spends on one kernel, which sets how fast the host can
feed the GPU when its kernels are short. The constants of ``tracesim.build.host`` are the
medians over traces of these per-trace medians.

    .venv/bin/python benchmarks/traces/host_launch.py [--traces DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
from pathlib import Path
from typing import Any

LAUNCH_WORDS = ("LaunchKernel", "ModuleLaunchKernel", "LaunchCooperativeKernel")
AUTOGRAD = "autograd::engine::evaluate_function"


def _events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        data = json.load(f)
    ev = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in ev if e.get("ph") == "X" and "dur" in e]


def thread_gaps(path: Path) -> dict[str, float]:
    """``{"fwd": median us, "bwd": median us}`` of one trace (a key is absent without
    enough launches on that kind of thread)."""
    ev = _events(path)
    launches = [e for e in ev if e.get("cat") in ("cuda_runtime", "Runtime", "cuda_driver")
                and any(w in str(e.get("name", "")) for w in LAUNCH_WORDS)]
    spans: dict[Any, list[tuple[float, float]]] = {}
    for e in ev:
        if str(e.get("name", "")).startswith(AUTOGRAD):
            spans.setdefault(e.get("tid"), []).append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    by_tid: dict[Any, list[float]] = {}
    bwd_tids = set()
    for e in launches:
        by_tid.setdefault(e.get("tid"), []).append(float(e["ts"]))
    for tid, ts in by_tid.items():
        s = sorted(spans.get(tid, []))
        inside = sum(1 for t in ts if any(a <= t <= b for a, b in s[:2000]))
        if s and inside > len(ts) / 2:
            bwd_tids.add(tid)
    out: dict[str, list[float]] = {}
    for tid, ts in by_tid.items():
        if len(ts) < 50:
            continue
        ts.sort()
        gap = statistics.median(b - a for a, b in zip(ts, ts[1:], strict=False))
        out.setdefault("bwd" if tid in bwd_tids else "fwd", []).append(gap)
    return {k: min(v) for k, v in out.items()}  # several forward threads: the busiest loop


def traces(root: Path) -> list[Path]:
    """The real GPU traces with host launches (the public ones, every rank file once)."""
    out = []
    for p in sorted(root.rglob("*.json*")):
        name = p.name
        if ".et." in name or name.endswith(".txt") or "SOURCE" in name:
            continue
        out.append(p)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", default=str(Path(__file__).resolve().parents[3] / "shared/traces/public"))
    args = ap.parse_args()
    rows: dict[str, list[float]] = {"fwd": [], "bwd": []}
    print(f"{'trace':60s} {'fwd us':>8s} {'bwd us':>8s}")
    seen_jobs = set()
    for p in traces(Path(args.traces)):
        job = p.parent.name if p.parent.name != "public" else re.sub(r"_r\d+\.json\.gz$", "", p.name)
        if job in seen_jobs:
            continue  # one rank per multi-rank job
        try:
            g = thread_gaps(p)
        except (OSError, ValueError, KeyError):
            continue
        if not g:
            continue
        seen_jobs.add(job)
        for k, v in g.items():
            rows[k].append(v)
        print(f"{str(p.relative_to(Path(args.traces)))[:60]:60s} {g.get('fwd', float('nan')):8.1f} "
              f"{g.get('bwd', float('nan')):8.1f}")
    for k in ("fwd", "bwd"):
        if rows[k]:
            print(f"median over {len(rows[k])} traces, {k}: {statistics.median(rows[k]):.1f} us per launch")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
