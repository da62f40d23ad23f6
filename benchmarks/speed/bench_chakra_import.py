"""Benchmark: writing, importing and replaying a Chakra ET of every rank against the native replay.

Writes the Chakra ET of a model and layout with ``tracesim convert --model M --cluster C
--tp T --dp D --to chakra -o DIR/w`` (skipped when ``DIR/w.json`` exists), then measures,
each in a fresh process (wall time and peak RSS from ``wait4``'s ``ru_maxrss``, CPU time
user + system):

* ``import``: ``tracesim.interop.chakra_import.import_chakra(DIR/w, symmetric=None)``, what
  ``tracesim convert DIR/w --to tracesim`` and ``tracesim replay DIR --cluster C`` read: one
  representative rank per pipeline stage when the files prove the ranks symmetric (from 64
  ranks up), else every rank; ``--every-rank`` adds the import with ``symmetric=False``
  (the graph of every rank);
* ``import + replay``: the same, then ``tracesim.pipeline.replay_graph(graph, C)`` (the flow
  network), what ``tracesim convert DIR/w --to tracesim --replay-on C`` does before it writes
  its output;
* ``native``: ``tracesim replay --model M --cluster C --tp T --dp D --json`` (symmetry-reduced
  from 64 GPUs up), and ``native --full``: the same with ``--full``, every rank simulated
  (compute runs merged; ``--no-full`` leaves it out); ``--per-op`` adds ``--full --per-op``,
  one task per template op, as the ET holds.

``--nodes N`` replays on ``C`` resized to N nodes (the spec written to ``DIR``, named
``<C>-<N>n``), e.g. ``--nodes 512 --dp 512`` for 4,096 GPUs of ``h100x1024``'s fabric.

Usage::

    .venv/bin/python benchmarks/speed/bench_chakra_import.py [--model gpt3-175b]
        [--cluster h100x1024] [--nodes N] [--tp 8] [--dp 128] [--dir /tmp/chakra_et]
        [--per-op] [--no-native] [--no-full] [--no-replay] [--every-rank] [--repeat N] [--json]

The ET files take about 3.2 MB per rank of GPT-3 175B TP8 (3.2 GB for 1,024 ranks).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TRACESIM = [str(Path(sys.executable).parent / "tracesim")]

_IMPORT = r"""
import json, sys, time
from tracesim.interop.chakra_import import import_chakra
t0 = time.perf_counter()
g = import_chakra(sys.argv[1], symmetric=None if sys.argv[2] == "reduce" else False)
out = {"tasks": len(g.tasks), "edges": len(g.edges), "ranks": len(g.ranks),
       "import_s": time.perf_counter() - t0}
if len(sys.argv) > 3:
    from tracesim.pipeline import replay_graph
    t1 = time.perf_counter()
    p = replay_graph(g, sys.argv[3])
    out["replay_s"] = time.perf_counter() - t1
    out["iteration_time_s"] = p.iteration_time_s
print(json.dumps(out))
"""


def measure(cmd: list[str]) -> dict[str, Any]:
    """Run ``cmd`` in a fresh process under ``/usr/bin/time``: wall s, CPU s, peak RSS MiB
    and the last line it printed."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as f:
        proc = subprocess.run(["/usr/bin/time", "-o", f.name, "-f", "%e %U %S %M", *cmd],
                              cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        wall, user, system, rss_kib = f.read().split()[-4:]
    out = proc.stdout.strip()
    return {"wall_s": float(wall), "cpu_s": round(float(user) + float(system), 2),
            "peak_rss_MiB": round(int(rss_kib) / 1024), "out": out}


def resized(cluster: str, nodes: int, directory: Path) -> str:
    """The shipped cluster spec ``cluster`` with ``nodes`` nodes, written to ``directory``
    (its path)."""
    import yaml

    spec = yaml.safe_load((ROOT / "topologies" / f"{cluster}.yaml").read_text())
    spec["name"] = f"{cluster}-{nodes}n"
    spec["description"] = f"{cluster} resized to {nodes} nodes (benchmarks/speed/bench_chakra_import.py)"
    spec["nodes"] = nodes
    path = directory / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return str(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--model", default="gpt3-175b")
    ap.add_argument("--cluster", default="h100x1024")
    ap.add_argument("--nodes", type=int, help="resize the cluster to this many nodes")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--dp", type=int, default=128)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/chakra_et"),
                    help="where the ET files are written (kept for reuse)")
    ap.add_argument("--per-op", action="store_true", help="also the native --full --per-op")
    ap.add_argument("--no-native", action="store_true", help="only the import rows")
    ap.add_argument("--no-full", action="store_true", help="leave out the native --full rows")
    ap.add_argument("--every-rank", action="store_true",
                    help="also import every rank (no symmetry reduction)")
    ap.add_argument("--no-replay", action="store_true", help="skip the import + replay row")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run the import N times; its row is the run of least CPU time "
                         "(every run's CPU and wall seconds are printed)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = ap.parse_args(argv)
    a.dir.mkdir(parents=True, exist_ok=True)
    cluster = resized(a.cluster, a.nodes, a.dir) if a.nodes else a.cluster
    layout = ["--model", a.model, "--cluster", cluster, "--tp", str(a.tp), "--dp", str(a.dp)]
    prefix = a.dir / "w"
    rows: dict[str, dict[str, Any]] = {}
    if not prefix.with_suffix(".json").exists():
        rows["convert --to chakra"] = measure([*TRACESIM, "convert", *layout, "--to", "chakra",
                                               "-o", str(prefix), "--json"])
    imp = [sys.executable, "-c", _IMPORT, str(prefix)]
    runs = [measure([*imp, "reduce"]) for _ in range(max(1, a.repeat))]
    rows["import"] = min(runs, key=lambda r: r["cpu_s"])
    if len(runs) > 1:
        print("import runs (CPU s / wall s / peak RSS MiB):",
              ", ".join(f"{r['cpu_s']:.1f} / {r['wall_s']:.1f} / {r['peak_rss_MiB']:,}" for r in runs))
    if a.every_rank:
        rows["import, every rank"] = measure([*imp, "every"])
    if not a.no_replay:
        rows["import + replay"] = measure([*imp, "reduce", cluster])
    if not a.no_native:
        rows["native"] = measure([*TRACESIM, "replay", *layout, "--json"])
        if not a.no_full:
            rows["native --full"] = measure([*TRACESIM, "replay", *layout, "--full", "--json"])
            if a.per_op:
                rows["native --full --per-op"] = measure([*TRACESIM, "replay", *layout, "--full",
                                                          "--per-op", "--json"])
    for r in rows.values():
        try:
            o = json.loads(r.pop("out") or "{}")
        except json.JSONDecodeError:
            o = {}
        rep = o.get("replay", {})
        r["tasks"] = o.get("tasks", rep.get("tasks"))
        r["iteration_time_s"] = o.get("iteration_time_s")
    if a.json:
        print(json.dumps({"layout": layout, "rows": rows}, indent=1))
        return 0
    print(f"{' '.join(layout)}; ET in {a.dir}")
    print("| run | wall s | CPU s | peak RSS MiB | tasks | iteration s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        it = r.get("iteration_time_s")
        tasks = "" if r["tasks"] is None else f"{r['tasks']:,}"
        print(f"| {name} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['peak_rss_MiB']:,} | "
              f"{tasks} | {'' if it is None else f'{it:.9f}'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
