"""Benchmark the replay at scale: wall time, peak RSS, simulated events.

Usage::

    .venv/bin/python benchmarks/speed/bench.py                     # everything, writes docs/performance.*
    .venv/bin/python benchmarks/speed/bench.py --only S1,S2        # some scenarios (no docs written)
    .venv/bin/python benchmarks/speed/bench.py --no-scaling --no-agreement
    .venv/bin/python benchmarks/speed/bench.py --repeat 3          # best of 3 per run (noisy machine)
    .venv/bin/python benchmarks/speed/bench.py --from-json docs/performance.json   # docs from stored results
    .venv/bin/python benchmarks/speed/bench.py --cases A,B,C [--repo DIR]   # fixed cases, CPU seconds per phase

Every run is one fresh subprocess that calls :func:`tracesim.api.replay` with the
scenario's options, exactly as ``tracesim replay --model ... --cluster ...`` does; the time
reported is that whole call (template, build, replay, breakdown, memory estimate), the peak
RSS is the subprocess's own maximum resident set (interpreter and imports included), and the
events are the replay's simulated events (``replay.events`` in the result). Clusters larger
than the shipped ``topologies/`` (16,384 GPUs, the scaling sweep) and the layer-count variants
of the model are generated into a temporary directory (see :func:`h100_cluster`).

Outputs: ``docs/performance.json`` (all numbers, the machine, the command) and, when the whole
benchmark ran, the generated part of ``docs/performance.md`` (between the ``bench:begin`` /
``bench:end`` markers; everything else in that file is left alone) and
``docs/performance_scaling.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

try:  # the tables and the plot
    from benchmarks.speed.bench_report import markdown, write_docs
except ModuleNotFoundError:  # run as a script: its own folder is on the path
    from bench_report import markdown, write_docs

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

LLAMA405_STAGES = [7] + [8] * 14 + [7]  # Llama 3 paper: one layer fewer on the first and last stage

SCENARIOS: dict[str, dict[str, Any]] = {
    "S1": {"title": "Llama 3 8B, 128 H100, FSDP 128, local batch 2, seq 8192",
           "opts": {"model": "llama3-8b", "cluster": "h100x128", "dp": 128, "fsdp": True,
                    "micro_batch": 2, "global_batch": 256, "seq_len": 8192}},
    "S2": {"title": "Llama 3 70B, 1024 H100, TP8 PP8 DP16, interleaved 1F1B, batch 1024, seq 8192",
           "opts": {"model": "llama3-70b", "cluster": "h100x1024", "tp": 8, "pp": 8, "dp": 16,
                    "schedule": "interleaved", "micro_batch": 1, "global_batch": 1024,
                    "seq_len": 8192}},
    "S3": {"title": "Llama 3 405B, 16,384 H100, TP8 PP16 DP128, 16 sequences per DP rank, seq 8192",
           "opts": {"model": "llama3-405b", "cluster": "gen:h100:2048", "tp": 8, "pp": 16,
                    "dp": 128, "micro_batch": 1, "global_batch": 2048, "seq_len": 8192,
                    "stage_layers": LLAMA405_STAGES}},
    "S4": {"title": "GPT-3 175B, 1024 A100 (Selene), TP8 PP16 DP8, batch 1536, every rank simulated",
           "opts": {"model": "gpt3-175b", "cluster": "a100-selene", "tp": 8, "pp": 16, "dp": 8,
                    "micro_batch": 1, "global_batch": 1536, "full": True}},
}

#: extra rows: (row name, scenario, option changes)
VARIANTS: list[tuple[str, str, dict[str, Any]]] = [
    ("S2 flow", "S2", {"network": "flow"}),
    ("S2 full", "S2", {"full": True}),
    ("S3 flow", "S3", {"network": "flow"}),
    ("S4 per-op", "S4", {"per_op": True}),
]

#: reduced vs full: (name, options); each is run twice, without and with ``full``
AGREEMENT: dict[str, dict[str, Any]] = {
    "S1": SCENARIOS["S1"]["opts"],
    "S2-128": {**SCENARIOS["S2"]["opts"], "cluster": "h100x128", "dp": 2, "global_batch": 128},
    "S4": SCENARIOS["S4"]["opts"],
}

SCALING_GPUS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
SCALING_LAYERS = (24, 48, 96)


# ---------------------------------------------------------------------------- inputs


def h100_cluster(nodes: int, directory: Path) -> Path:
    """A cluster spec of ``nodes`` DGX H100 nodes (8 GPUs, 8 x 400 Gb/s NICs each) on a
    non-blocking three-level fat tree with 32 NIC ports per leaf (Llama 3's 24k-GPU RoCE
    fabric is a three-level Clos); NVSwitch at 450 GB/s per GPU per direction with NVLS.
    Written to ``directory``; returns its path."""
    import yaml

    base = yaml.safe_load((ROOT / "topologies" / "h100x1024.yaml").read_text())
    base["name"] = f"h100x{nodes * 8}-fat-tree"
    base["description"] = f"{nodes} x DGX H100 on a three-level fat tree (benchmarks/speed/bench.py)"
    base["nodes"] = nodes
    base["inter_node"].update({"topology": "fat_tree", "levels": 3})
    path = directory / f"{base['name']}.yaml"
    path.write_text(yaml.safe_dump(base, sort_keys=False))
    return path


def model_with_layers(name: str, layers: int, directory: Path) -> Path:
    """The shipped model ``name`` with ``layers`` transformer layers, written to ``directory``."""
    import yaml

    spec = yaml.safe_load((ROOT / "workloads" / f"{name}.yaml").read_text())
    spec["name"] = f"{name}-{layers}l"
    spec["layers"] = layers
    path = directory / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def resolve(opts: dict[str, Any], directory: Path) -> dict[str, Any]:
    """Replace ``gen:h100:NODES`` cluster names by generated spec files."""
    out = dict(opts)
    c = str(out.get("cluster", ""))
    if c.startswith("gen:h100:"):
        out["cluster"] = str(h100_cluster(int(c.split(":")[2]), directory))
    return out


# ---------------------------------------------------------------------------- one run


def child(opts: dict[str, Any]) -> dict[str, Any]:
    """Run one replay in this (fresh) process; returns the measurements."""
    t0 = time.perf_counter()
    from tracesim.api import replay

    t_import = time.perf_counter() - t0
    opts = dict(opts)
    per_op = bool(opts.pop("per_op", False))
    t0 = time.perf_counter()
    if per_op:  # one task per template op, as for a result directory (replay --full -o OUT)
        from tracesim.api import replay

        res = replay(None, **{**opts, "per_op": True}).to_dict()
    else:
        res = replay(None, **opts).to_dict()
    wall = time.perf_counter() - t0
    rep = res["replay"]
    events = int(rep["events"])
    return {
        "wall_s": round(wall, 3),
        "import_s": round(t_import, 3),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
        "iteration_time_s": res["iteration_time_s"],
        "tasks": int(rep["tasks"]),
        "events": events,
        "events_per_s": round(events / wall) if wall > 0 else 0,
        "replay_wall_s": rep.get("replay_wall_s"),
        "symmetric": bool(rep.get("symmetric")),
        "network": rep.get("network"),
        "gpus": res["gpus"],
        "mfu": res["mfu"],
    }


def run(opts: dict[str, Any], timeout_s: float, repeat: int = 1, limit_gib: float = 12.0) -> dict[str, Any]:
    """Run ``opts`` in ``repeat`` fresh subprocesses; keeps the fastest (plus every wall time).

    Each subprocess may use at most ``limit_gib`` of address space (the machine is shared):
    a run above it fails with a MemoryError, reported as its error."""
    best: dict[str, Any] | None = None
    walls = []
    for _ in range(repeat):
        load = os.getloadavg()[0]
        try:
            p = subprocess.run([sys.executable, __file__, "--child", json.dumps(opts),
                                "--limit-gib", str(limit_gib)], cwd=ROOT,
                               capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout_s:.0f} s", "load_before": load}
        if p.returncode != 0:
            tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["?"]
            return {"error": f"exit {p.returncode}: {tail[0][:300]}", "load_before": load}
        r = json.loads(p.stdout.strip().splitlines()[-1])
        r["load_before"] = round(load, 2)
        walls.append(r["wall_s"])
        if best is None or r["wall_s"] < best["wall_s"]:
            best = r
    assert best is not None
    best["walls_s"] = walls
    return best


# ---------------------------------------------------------------------------- fixed cases

#: fixed cases timed phase by phase (CPU seconds, fresh process each)
CASES: dict[str, dict[str, Any]] = {
    # A: the full replay of S4 with 16 micro-batches: graph build + replay
    "A": {**SCENARIOS["S4"]["opts"], "global_batch": 128},
    # B: tracesim.api.replay on S2 at 128 GPUs (TP8 PP8 DP2), 8 micro-batches, every rank: the whole call
    "B": {**SCENARIOS["S2"]["opts"], "cluster": "h100x128", "dp": 2, "global_batch": 16, "full": True},
    # C: the reduced replay of S2 (1024 GPUs) with the flow network: the replay
    "C": {**SCENARIOS["S2"]["opts"], "network": "flow"},
    # S4 itself, for its memory by phase
    "S4": SCENARIOS["S4"]["opts"],
}


def _rss_gib() -> dict[str, float]:
    """Resident set now and its peak so far (GiB), from /proc/self/status (Linux)."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return {}
    return {k: round(int(text.split(k + ":")[1].split()[0]) / 2**20, 3) for k in ("VmRSS", "VmHWM")}


def case_child(name: str) -> dict[str, Any]:
    """Run speed-up case ``name`` in this process: CPU seconds (``time.process_time``) of
    the graph build, the replay and the whole ``tracesim.api.replay`` call, the peak RSS, and the
    resident set (now, peak) after the imports, the build, the replay and the breakdown."""
    import tracesim.build.builder as builder
    import tracesim.engine.replay as engine
    import tracesim.report.breakdown as breakdown
    from tracesim.api import replay

    cpu: dict[str, float] = {}
    rss: dict[str, Any] = {"imports": _rss_gib()}

    def timed(mod: Any, attr: str, key: str) -> None:
        inner = getattr(mod, attr)

        def wrapped(*a: Any, **kw: Any) -> Any:
            t = time.process_time()
            try:
                return inner(*a, **kw)
            finally:
                cpu[key] = cpu.get(key, 0.0) + time.process_time() - t
                rss[key.split("_")[0]] = _rss_gib()

        setattr(mod, attr, wrapped)

    if name == "A":  # defined with compute runs merged (commits before they were by default)
        plain = builder.build_graph
        builder.build_graph = lambda *a, **kw: plain(*a, **{**kw, "merge_compute": True})  # type: ignore[assignment]
    timed(builder, "build_graph", "build_cpu_s")
    timed(engine, "replay", "replay_cpu_s")
    timed(breakdown, "rank_breakdowns", "breakdown_cpu_s")
    t = time.process_time()
    res = replay(None, **CASES[name]).to_dict()
    return {"case": name, "call_cpu_s": round(time.process_time() - t, 2),
            **{k: round(v, 2) for k, v in cpu.items()},
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "tasks": res["replay"]["tasks"], "iteration_time_s": res["iteration_time_s"],
            "rss_gib_after": rss,
            "load_before": round(os.getloadavg()[0], 2)}


def run_cases(names: list[str], repo: Path) -> list[dict[str, Any]]:
    """Each case in a fresh process on the checkout ``repo`` (this script's cases and
    measurement, that checkout's tracesim: compare commits on copies, e.g. ``git archive``)."""
    out = []
    for name in names:
        env = {**os.environ, "PYTHONPATH": str(repo)}
        p = subprocess.run([sys.executable, __file__, "--case-child", name], cwd=repo, env=env,
                           capture_output=True, text=True)
        if p.returncode != 0:
            out.append({"case": name, "error": (p.stderr or p.stdout).strip().splitlines()[-1:]})
        else:
            out.append(json.loads(p.stdout.strip().splitlines()[-1]))
        print(json.dumps(out[-1]), flush=True)
    return out


# ---------------------------------------------------------------------------- sweeps


def fit_exponent(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log(y) against log(x)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx else None


def scaling_gpus_opts(gpus: int, directory: Path) -> dict[str, Any]:
    """S2's model and layout (TP8 PP8, interleaved, 64 micro-batches per pipeline) on ``gpus``
    GPUs: DP = gpus / 64 (weak scaling: the global batch grows with DP)."""
    dp = gpus // 64
    return {**SCENARIOS["S2"]["opts"], "cluster": str(h100_cluster(gpus // 8, directory)),
            "dp": dp, "global_batch": 64 * dp}


def scaling_layers_opts(layers: int, directory: Path) -> dict[str, Any]:
    """S2 (1024 GPUs) with a ``layers``-layer Llama 3 70B; vpp 3 so that every count splits."""
    return {**SCENARIOS["S2"]["opts"], "model": str(model_with_layers("llama3-70b", layers, directory)),
            "vpp": 3}


# ---------------------------------------------------------------------------- report


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    except OSError:
        mem_kib = 0
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                                capture_output=True).stdout.strip()
    except OSError:
        commit = ""
    import numpy
    import simpy

    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_kib / 2**20, 1),
            "python": platform.python_version(), "numpy": numpy.__version__,
            "simpy": simpy.__version__, "os": platform.platform(), "commit": commit,
            "date": time.strftime("%Y-%m-%d %H:%M")}


# ---------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated scenarios (S1..S4); implies --no-docs")
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--no-agreement", action="store_true")
    ap.add_argument("--no-variants", action="store_true", help="skip the extra rows (S2/S3 with "
                    "--network flow, S4 with one task per op)")
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/performance.*")
    ap.add_argument("--repeat", type=int, default=1, help="runs per point; the fastest is kept")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    ap.add_argument("--limit-gib", type=float, default=12.0,
                    help="address-space limit of each run (GiB); the machine is shared")
    ap.add_argument("--out", type=Path, help="results JSON (default docs/performance.json for a "
                    "whole run, none with --only)")
    ap.add_argument("--from-json", type=Path, help="write docs/performance.* from a results file "
                    "of an earlier run instead of running")
    ap.add_argument("--cases", help="fixed cases to run (comma-separated, of A,B,C,S4): "
                    "CPU seconds and peak RSS, one fresh process each; nothing else runs")
    ap.add_argument("--repo", type=Path, default=ROOT, help="checkout whose tracesim --cases "
                    "measures (default: this one)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--case-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.from_json:
        data = json.loads(args.from_json.read_text())
        write_docs(data)
        print(markdown(data))
        return 0
    if args.case_child:
        print(json.dumps(case_child(args.case_child)))
        return 0
    if args.cases:
        run_cases(args.cases.split(","), args.repo.resolve())
        return 0
    if args.child:
        lim = int(args.limit_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
        print(json.dumps(child(json.loads(args.child))))
        return 0
    names = args.only.split(",") if args.only else list(SCENARIOS)
    data: dict[str, Any] = {"machine": machine(),
                            "command": "python benchmarks/speed/bench.py " + " ".join(argv or sys.argv[1:]),
                            "scenarios": {}, "agreement": {}}

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="tracesim-bench-") as tmp:
        d = Path(tmp)
        lim = args.limit_gib
        for name in names:
            r = run(resolve(SCENARIOS[name]["opts"], d), args.timeout, args.repeat, lim)
            data["scenarios"][name] = r
            say(f"{name}: {r}")
            for row, base, change in VARIANTS:
                if base == name and not args.no_variants:
                    r = run({**resolve(SCENARIOS[name]["opts"], d), **change}, args.timeout, args.repeat, lim)
                    r["per_op"] = bool(change.get("per_op"))
                    data["scenarios"][row] = r
                    say(f"{row}: {r}")
        if not args.no_agreement and not args.only:
            for name, opts in AGREEMENT.items():
                red_opts = {k: v for k, v in resolve(opts, d).items() if k != "full"}
                known = data["scenarios"].get(name) if name in SCENARIOS else None
                red = known if known and not SCENARIOS[name]["opts"].get("full") else run(
                    red_opts, args.timeout, args.repeat, lim)
                red_flow = run({**red_opts, "network": "flow"}, args.timeout, args.repeat, lim)
                full = known if known and SCENARIOS[name]["opts"].get("full") else run(
                    {**red_opts, "full": True}, args.timeout, 1, lim)
                data["agreement"][name] = {"reduced": red, "reduced_flow": red_flow, "full": full}
                say(f"agreement {name}: {red.get('iteration_time_s')} / {red_flow.get('iteration_time_s')}"
                    f" vs {full.get('iteration_time_s')}")
        if not args.no_scaling and not args.only:
            for key, xkey, xs, make in (("scaling_gpus", "gpus", SCALING_GPUS, scaling_gpus_opts),
                                        ("scaling_layers", "layers", SCALING_LAYERS, scaling_layers_opts)):
                rows = []
                for net in ("estimate", "flow"):
                    for x in xs:
                        r = {xkey: x, "net": net,
                             **run({**make(x, d), "network": net}, args.timeout, args.repeat, lim)}
                        rows.append(r)
                        say(f"{key} {net} {x}: {r}")
                data[key] = rows
                ex: dict[str, dict[str, float | None]] = {}
                for net in ("estimate", "flow"):
                    ok = [r for r in rows if r["net"] == net and "error" not in r
                          and (xkey != "gpus" or r["gpus"] >= 1024)]
                    xv = [float(r[xkey]) for r in ok]
                    ex[net] = {k: fit_exponent(xv, [float(r[f]) for r in ok])
                               for k, f in (("wall", "wall_s"), ("events", "events"), ("rss", "peak_rss_gib"))}
                data[f"exponents_{xkey}"] = ex
    data["load_after"] = round(os.getloadavg()[0], 2)
    out = args.out or (None if args.only else DOCS / "performance.json")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=1) + "\n")
    if not args.no_docs and not args.only:
        write_docs(data)
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
