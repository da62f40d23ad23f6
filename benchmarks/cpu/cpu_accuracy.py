"""``python -m benchmarks.cpu.cpu_accuracy``: the CPU accuracy checks of docs/accuracy.md, in rounds.

Each round, one after the other (so they see similar load; nothing is fitted on a result):

1. ``contention``: ``python -m benchmarks.cpu.contention --procs 2 --threads 1`` (host contention,
   the training probe, measured again after ``paired`` and averaged, :func:`mean_contention`;
   and ``--probe loop``, the earlier op loop, for comparison), and
   ``python -m benchmarks.cpu.loopback --procs 2`` (the gloo all-reduce rate over loopback);
2. ``one``: ``tracesim collect --workload gpt-tiny --threads 1`` (the 1-rank template);
3. ``two``: ``tracesim collect --workload gpt-tiny --ranks 2`` (2 gloo DDP ranks);
4. ``paired``: ``python -m benchmarks.cpu.paired_gloo`` (the 1-rank and the 2-rank job timed in
   turn, in the same seconds);
5. ``b1``: ``tracesim collect --workload gpt-tiny`` (1 rank, default threads);

(``two`` and ``b1`` with ``--steps N``, default 3 (``tracesim collect``: 8): N profiled
steps, whose unprofiled predictions' median is compared);

then, from the stored results: self-replay of ``b1`` and ``two`` (profiled step error, and
unprofiled error with the step calibration of ``profiler_overhead`` and, for comparison on
the same bundle, with the older loop microbenchmark), and the 2-rank prediction from ``one``
(``tracesim.api.replay``, DP 2 over the loopback cluster :data:`CPU_CLUSTER`)
as specified (2 GB/s, no contention) and with the measured loopback link and
``host_contention`` (:func:`calibrated_cluster`), against ``two``'s unprofiled median; and
paired: that prediction times ``paired.one`` over ``one``'s unprofiled median (the trace's
level moved to the paired seconds: a measurement of the 1-rank job only) against
``paired.two`` (:func:`paired_error`).
While each part runs a thread samples ``procs_running`` of ``/proc/stat`` (runnable
threads, ours included) twice a second. Prints a markdown row per round (and JSON lines with
``--json FILE``). Needs torch (the collections) and a few minutes per round.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]

#: two CPU "GPUs" on one node, joined by loopback (gloo): 2 GB/s, 50 us
CPU_CLUSTER: dict[str, Any] = {
    "name": "cpu-loopback",
    "nodes": 1,
    "gpus_per_node": 2,
    "device": {
        "name": "cpu", "kind": "cpu", "peak_tflops": {"fp32": 0.1}, "hbm_GBps": 20,
        "launch_overhead_us": 5,
        "efficiency": {"default": {"compute": [[1e6, 0.3], [1e9, 0.6]],
                                   "memory": [[1e4, 0.3], [1e8, 0.8]], "spread": 0.3}},
    },
    "intra_node": {"kind": "pcie", "bandwidth_GBps": 2, "latency_us": 50},
}
#: the retarget flags of the 2-rank prediction: micro-batch 8 per rank (as collected), fp32,
#: PyTorch DDP's gradient buckets (25 MiB, the first one 1 MiB), and no overlap of the
#: gradient all-reduces with backward compute: on a CPU host whose ranks fill the cores,
#: gloo's threads take their CPU from the compute (the overlapped first bucket of gpt-tiny
#: took 6.0-6.2 ms in the real 2-rank job against 3.6-3.7 ms for the exposed one,
#: docs/accuracy.md)
GLOO_OPTS: dict[str, Any] = {"dp": 2, "global_batch": 16, "micro_batch": 8, "dtype": "fp32",
                             "bucket_params": (25 << 20) // 4,
                             "first_bucket_params": (1 << 20) // 4, "dp_overlap": False}


def calibrated_cluster(contention: dict[str, Any], loopback: dict[str, Any]) -> dict[str, Any]:
    """:data:`CPU_CLUSTER` with the measured ``host_contention`` (``benchmarks.cpu.contention``)
    and the measured loopback link (``benchmarks.cpu.loopback``'s ``intra_node``)."""
    return {**CPU_CLUSTER, "intra_node": dict(loopback["intra_node"]),
            "host_contention": contention}


def measure_contention(*extra: str) -> dict[str, Any]:
    """``python -m benchmarks.cpu.contention --procs 2 --threads 1 EXTRA``: its ``host_contention``."""
    return yaml.safe_load(run_cmd([sys.executable, "-m", "benchmarks.cpu.contention", "--procs", "2",
                                   "--threads", "1", *extra]))["host_contention"]


def mean_contention(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """One ``host_contention`` from two measurements (before and after the collections: the
    mean of their factors, so the factor covers the stretch of machine time the jobs ran in)."""
    f = round((float(first["slowdown"][2]) + float(second["slowdown"][2])) / 2, 3)
    return {"slowdown": {2: f},
            "method": f"mean of two measurements, before and after the collections "
                      f"(x{first['slowdown'][2]}, x{second['slowdown'][2]}): {first['method']}",
            "detail": {"before": first["detail"], "after": second["detail"],
                       "readings": [float(first["slowdown"][2]), float(second["slowdown"][2])]}}


class _Sampler:
    """Mean of ``procs_running`` (/proc/stat) while the ``with`` block runs."""

    def __enter__(self) -> _Sampler:
        self.values: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            try:
                for line in Path("/proc/stat").read_text().splitlines():
                    if line.startswith("procs_running"):
                        self.values.append(int(line.split()[1]))
            except OSError:
                return

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float | None:
        return round(sum(self.values) / len(self.values), 1) if self.values else None


def run_cmd(cmd: list[str]) -> str:
    """Run ``cmd`` in the checkout; its stdout (raises on failure)."""
    return subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT,
                          timeout=900).stdout


#: ``tracesim collect`` flags of a bundle used only as a template (its first profiled step)
#: and for its reference steps: one recorded cycle and no calibration cycles (templates take
#: the profiler's cost from the loop microbenchmark and the reference steps), a third of the
#: default collection's time
TEMPLATE_ARGS = ("--steps", "1", "--calibration-cycles", "0")


def collect_tiny(out: Path, *args: str) -> None:
    """``tracesim collect --workload gpt-tiny --batch 8 -o out ARGS``."""
    run_cmd([sys.executable, "-m", "tracesim.cli", "collect", "--workload", "gpt-tiny",
          "--batch", "8", "-o", str(out), *args])


def self_replay_errors(bundle: Path) -> dict[str, Any]:
    """Per rank: profiled-step error (the worst step), unprofiled error (step calibration:
    median of the steps' predictions, :func:`tracesim.report.steps.unprofiled_summary`; and
    the same with the loop calibration)."""
    import statistics

    from tracesim.engine.replay import replay
    from tracesim.report.steps import self_replay, step_times, unprofiled_summary
    from tracesim.trace.extract import ExtractOptions, extract
    from tracesim.trace.sources import load_source

    src = load_source(bundle)
    meta = src.meta
    median = float(meta["measured_step_time_s"]["median"])
    loops = tuple((int(e["rank"]), float(e["profiler_overhead"]["loops"]["op_ns"]),
                   float(e["profiler_overhead"]["loops"]["annotation_ns"]))
                  for e in meta["per_rank"])
    opts = ExtractOptions(profiler_overhead_ns=1.0, rank_overhead_ns=loops,
                          joint_ranks=src.op_table["rank"].nunique() > 1)
    graph = extract(src.op_table, opts, src.et_tables)
    loop_steps: dict[int, list[int]] = {}
    for rk, _, _, _, pred, _, _ in step_times(graph, replay(graph)):
        loop_steps.setdefault(rk, []).append(pred)
    results = self_replay(src)
    out = []
    for u in unprofiled_summary(results):
        mine = [r for r in results if r.rank == u.rank]
        worst = max(mine, key=lambda r: abs(r.rel_error))
        out.append({"rank": u.rank, "steps": len(mine), "profiled_err": worst.rel_error,
                    "unprofiled_err": u.rel_error,
                    "unprofiled_step_errs": [r.rel_error_unprofiled for r in mine],
                    "loops_err": statistics.median(loop_steps[u.rank]) / 1e9 / median - 1.0,
                    "profiled_ms": statistics.median(r.measured_s for r in mine) * 1e3,
                    "per_event_ns": meta["per_rank"][u.rank]["profiler_overhead"]["per_event_ns"]})
    return {"median_ms": median * 1e3, "ranks": out}


def gloo_errors(one: Path, two: Path, contention: dict[str, Any], loopback: dict[str, Any],
                tmp: Path) -> dict[str, Any]:
    """The 2-rank prediction from the 1-rank bundle: on the plain spec, and with the measured
    loopback link and host contention."""
    from tracesim.api import replay
    from tracesim.fileio import write_yaml

    plain_spec, cont_spec = tmp / "cpu.yaml", tmp / "cpu-calibrated.yaml"
    write_yaml(plain_spec, CPU_CLUSTER)
    write_yaml(cont_spec, calibrated_cluster(contention, loopback))
    seq = int(yaml.safe_load((one / "meta.yaml").read_text())["seq_len"])
    measured = float(yaml.safe_load((two / "meta.yaml").read_text())["measured_step_time_s"]["median"])
    plain = replay(str(one), **{**GLOO_OPTS, "seq_len": seq, "cluster": str(plain_spec)}).to_dict()
    cont = replay(str(one), **{**GLOO_OPTS, "seq_len": seq, "cluster": str(cont_spec)}).to_dict()
    return {"measured_ms": measured * 1e3,
            "plain_ms": plain["iteration_time_s"] * 1e3,
            "contention_ms": cont["iteration_time_s"] * 1e3,
            "plain_err": plain["iteration_time_s"] / measured - 1.0,
            "contention_err": cont["iteration_time_s"] / measured - 1.0}


def paired_error(predicted_s: float, one: Path, paired: dict[str, Any]) -> float:
    """Relative error of the 2-rank prediction against the paired 2-rank median, the
    prediction moved by the 1-rank job's drift between its collection and the pairing."""
    one_median = float(yaml.safe_load((one / "meta.yaml").read_text())["measured_step_time_s"]["median"])
    return predicted_s * float(paired["one"]) / one_median / float(paired["two"]) - 1.0


def paired_error_interval(predicted_s: float, one: Path, paired: dict[str, Any],
                          contention: dict[str, Any] | None = None,
                          compute_s: float = 0.0) -> tuple[float, float] | None:
    """95% noise interval of :func:`paired_error`: the 1-rank bundle's reference steps and
    the paired run's 1-rank and 2-rank steps resampled on their own
    (:func:`benchmarks.cpu.noise.bootstrap_interval`). With ``contention`` (from
    :func:`mean_contention`) and ``compute_s`` (the prediction's compute time before the
    host-contention factor), also the two contention readings (before and after the
    collections), the prediction moved by the resampled factor's change times ``compute_s``
    (a first-order estimate: compute on the critical path). It leaves out the loopback
    calibration's noise. None when the paired run did not list its steps."""
    from benchmarks.cpu.noise import bootstrap_interval
    from tracesim.trace.bundle import rank_entry

    ref = (rank_entry(yaml.safe_load((one / "meta.yaml").read_text()), 0) or {}).get("step_times_s")
    if not ref or not paired.get("one_s") or not paired.get("two_s"):
        return None
    groups: list[list[float]] = [list(ref), list(paired["one_s"]), list(paired["two_s"])]
    factor = 0.0
    readings = ((contention or {}).get("detail") or {}).get("readings")
    if contention is not None and compute_s > 0 and readings:
        factor = float(contention["slowdown"][2])
        groups.append([float(r) for r in readings])

    def stat(g: Any) -> float:
        pred = predicted_s
        if len(g) > 3:
            pred += (float(np.mean(g[3])) - factor) * compute_s
        return pred * float(np.median(g[1])) / float(np.median(g[0])) / float(np.median(g[2])) - 1.0

    return bootstrap_interval(stat, groups)


def one_round(tmp: Path, steps: int = 3) -> dict[str, Any]:
    rec: dict[str, Any] = {"time": time.strftime("%H:%M:%S", time.gmtime()), "running": {}}
    parts = [
        ("contention", lambda: rec.__setitem__("contention_before", measure_contention())),
        ("contention_loop", lambda: rec.__setitem__("contention_loop", measure_contention("--probe", "loop"))),
        ("loopback", lambda: rec.__setitem__("loopback", yaml.safe_load(run_cmd(
            [sys.executable, "-m", "benchmarks.cpu.loopback", "--procs", "2"])))),
        ("one", lambda: collect_tiny(tmp / "one", "--threads", "1", *TEMPLATE_ARGS)),
        ("two", lambda: collect_tiny(tmp / "two", "--ranks", "2", "--steps", str(steps))),
        ("paired", lambda: rec.__setitem__("paired", yaml.safe_load(run_cmd(
            [sys.executable, "-m", "benchmarks.cpu.paired_gloo"])))),
        ("contention_after", lambda: rec.__setitem__("contention", mean_contention(
            rec["contention_before"], measure_contention()))),
        ("b1", lambda: collect_tiny(tmp / "b1", "--steps", str(steps))),
    ]
    for name, fn in parts:
        with _Sampler() as s:
            fn()
        rec["running"][name] = s.mean
    rec["load"] = round(os.getloadavg()[0], 2)
    rec["b1"] = self_replay_errors(tmp / "b1")
    rec["two"] = self_replay_errors(tmp / "two")
    rec["gloo"] = gloo_errors(tmp / "one", tmp / "two", rec["contention"], rec["loopback"], tmp)
    rec["gloo"]["paired_err"] = paired_error(rec["gloo"]["contention_ms"] / 1e3, tmp / "one", rec["paired"])
    # the same prediction with the op loop's contention factor (the earlier default), for comparison
    rec["gloo_loop"] = gloo_errors(tmp / "one", tmp / "two", rec["contention_loop"], rec["loopback"], tmp)
    rec["gloo_loop"]["paired_err"] = paired_error(rec["gloo_loop"]["contention_ms"] / 1e3, tmp / "one",
                                                  rec["paired"])
    return rec


def row(rec: dict[str, Any]) -> str:
    """A markdown row: time, runnable threads, b1, two, contention, gloo (errors in %)."""
    def pct(x: float) -> str:
        return f"{x * 100:+.1f}%"

    b1 = rec["b1"]["ranks"][0]
    two = rec["two"]["ranks"]
    run = rec["running"]
    return (f"| {rec['time']} | {run['b1']} / {run['two']} | {rec['b1']['median_ms']:.1f} "
            f"| {pct(b1['unprofiled_err'])} ({pct(b1['loops_err'])}) "
            f"| {rec['two']['median_ms']:.1f} "
            f"| {' / '.join(pct(r['unprofiled_err']) for r in two)} "
            f"({' / '.join(pct(r['loops_err']) for r in two)}) "
            f"| x{float(rec['contention']['slowdown'][2]):.2f} "
            f"| {rec['loopback']['intra_node']['bandwidth_GBps']:.2f} GB/s, "
            f"{rec['loopback']['intra_node']['latency_us']:.0f} us "
            f"| {pct(rec['gloo']['plain_err'])} | {pct(rec['gloo']['contention_err'])} "
            f"| {rec['paired']['one'] * 1e3:.1f} / {rec['paired']['two'] * 1e3:.1f} "
            f"| {pct(rec['gloo']['paired_err'])} |")


HEADER = ("| time (UTC) | runnable threads b1 / 2-rank | 1-rank median ms | 1-rank unprofiled "
          "error (loops) | 2-rank median ms | 2-rank unprofiled error r0 / r1 (loops) "
          "| contention | loopback link | gloo predicted, plain spec | measured link + contention "
          "| paired 1-rank / 2-rank ms | paired error |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cpu.cpu_accuracy",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", default=None, help="where the bundles go (default: a temp dir)")
    p.add_argument("--json", default=None, help="append one JSON line per round here")
    p.add_argument("--steps", type=int, default=3,
                   help="profiled steps of the self-replay bundles (b1, two); the unprofiled "
                        "prediction is the median over them")
    args = p.parse_args(argv)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tracesim-cpu-acc-") as default_tmp:
        tmp = Path(args.dir or default_tmp)
        tmp.mkdir(parents=True, exist_ok=True)
        print(HEADER, flush=True)
        for _ in range(args.rounds):
            rec = one_round(tmp, args.steps)
            print(row(rec), flush=True)
            if args.json:
                with open(args.json, "a") as fh:
                    fh.write(json.dumps(rec, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
