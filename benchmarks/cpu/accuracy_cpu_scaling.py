#!/usr/bin/env python3
"""Predict larger CPU training steps from one small recording, then measure them.

Each round:

1. collect the base model (default gpt-tiny) on this CPU;
2. predict the step time of hidden x2, layers x2 and sequence x2 variants from the base
   bundle alone (`tracesim.api.replay` on topologies/host-cpu.yaml: each recorded op's time scaled
   by the host-cpu cost model's ratio between the new and the recorded shapes);
3. collect each variant for real (right after the base, so base and variants see the same
   machine load) and compare with the median of its unprofiled steps;
4. measure base and variants once more, **paired**: one process builds all four models and
   runs their training steps in turn (base, variant, variant, variant, base, ...), so every
   configuration's median comes from the same seconds of machine time. This VM's speed
   drifts by 5-15% over tens of seconds, which moves a single round's error by as much (the
   base's level at its collection is carried into every prediction). The drift-corrected
   prediction is the prediction times the base's paired median over the base's own
   collected median (a measurement of the base only, nothing from the variant and no model
   output); it is compared with the variant's paired median ("paired" columns).

Rounds are repeated (``--repeats``) because other jobs share this machine: the summary gives
the median error over the rounds whose timing is trusted (:func:`disturbed` and
:func:`_flag_slow_rounds`, rules that look at the measurements only, never at the errors) and
its range; every round is listed too. Round r's bundles are
kept in OUT/r<r>/; ``--reuse`` predicts them again (e.g. after recalibrating) without
collecting. ``--per-op`` also prints, for the last trusted round, which
template ops carry the error (predicted from the base bundle vs measured in the variant's own
bundle, both on the profiled step after the collector's overhead correction).

Usage: .venv/bin/python benchmarks/cpu/accuracy_cpu_scaling.py [--base gpt-tiny] [--batch 8]
       [--measure 10] [--repeats 3] [--per-op] [--reuse] [--out runs/cpu-scaling]
Prints markdown tables (the one in docs/accuracy.md). Calibration (the host-cpu profile) and
the measured variants are separate runs: nothing is fitted on the runs it is compared with.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: the repository root holds benchmarks/
    sys.path.insert(0, str(ROOT))
CLUSTER = ROOT / "topologies" / "host-cpu.yaml"


def variants(base: dict, factor: int = 2) -> dict[str, dict]:
    """The larger configurations: hidden (and FFN) x factor, layers x factor, sequence x factor."""
    h2 = dict(base, name=f"{base['name']}-h{factor}", hidden=base["hidden"] * factor,
              ffn_hidden=base.get("ffn_hidden", 4 * base["hidden"]) * factor)
    l2 = dict(base, name=f"{base['name']}-l{factor}", layers=base["layers"] * factor)
    s2 = dict(base, name=f"{base['name']}-s{factor}", seq_len=base["seq_len"] * factor)
    return {"hidden x2": h2, "layers x2": l2, "sequence x2": s2}


def collect(spec_path: Path, out: Path, batch: int, measure: int,
            threads: int | None = None) -> float:
    """Collect ``spec_path`` into bundle ``out``; the median unprofiled step time (s)."""
    if out.exists():
        shutil.rmtree(out)
    # a template and its reference steps: one recorded cycle, no calibration cycles
    # (benchmarks.cpu.cpu_accuracy.TEMPLATE_ARGS)
    cmd = [sys.executable, "-m", "tracesim.cli", "collect", "--workload", str(spec_path),
           "--batch", str(batch), "--measure", str(measure), "--steps", "1",
           "--calibration-cycles", "0", "-o", str(out)]
    if threads:
        cmd += ["--threads", str(threads)]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    meta = yaml.safe_load((out / "meta.yaml").read_text())
    return float(meta["measured_step_time_s"]["median"])


def paired_steps(specs: dict[str, Path], batch: int, cycles: int = 8,
                 threads: int | None = None) -> dict[str, list[float]]:
    """Step times (s) per configuration, the configurations' training steps run in turn in
    one fresh process (``cycles`` steps each after 2 warm-up steps each); see step 4 of the
    module doc."""
    import json

    cmd = [sys.executable, str(Path(__file__).resolve()), "--paired-worker",
           json.dumps({"specs": {k: str(v) for k, v in specs.items()}, "batch": batch,
                       "cycles": cycles, "threads": threads})]
    out = subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, text=True).stdout
    return {k: [float(t) for t in v] for k, v in json.loads(out.strip().splitlines()[-1]).items()}


def _paired_worker(arg: str) -> None:
    import json
    import os
    import time

    import torch
    from tracesim.collectors.train import make_training

    from tracesim.catalog import load_model

    cfg = json.loads(arg)
    torch.set_num_threads(int(cfg["threads"] or max(1, os.cpu_count() or 1)))  # as collect, 1 rank
    runs = {k: make_training(load_model(v), int(cfg["batch"]), torch.device("cpu")).step
            for k, v in cfg["specs"].items()}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(2):
        for step in runs.values():
            step()
    for _ in range(int(cfg["cycles"])):
        for k, step in runs.items():
            t0 = time.perf_counter()
            step()
            times[k].append(time.perf_counter() - t0)
    print(json.dumps(times))


def _as_steps(v: Any) -> list[float]:
    """A paired.yaml entry: a list of step times (s), or one median (rounds stored before
    the step times were kept)."""
    return [float(t) for t in v] if isinstance(v, list) else [float(v)]


def predict(base_bundle: Path, spec_path: Path, batch: int, cluster: Path = CLUSTER) -> float:
    """Predicted step time (s) of the model ``spec_path`` from ``base_bundle`` alone."""
    from tracesim.api import replay

    opts = {"cluster": str(cluster), "micro_batch": batch, "global_batch": batch,
            "model": str(spec_path)}
    return float(replay(str(base_bundle), **opts).to_dict()["iteration_time_s"])


def per_op(base_bundle: Path, variant_bundle: Path, spec_path: Path, batch: int,
           cluster: Path = CLUSTER) -> list[dict[str, Any]]:
    """Per template op of ``spec_path``: time predicted from ``base_bundle`` and time measured
    in ``variant_bundle`` (its own template on its own device: the measurement), in ns, with
    how often the op runs per step (``count``: layers for block ops)."""
    from tracesim.catalog import load_cluster, load_model
    from tracesim.hardware.device import get_device
    from tracesim.specs.layout_options import parallel_from_options
    from tracesim.template.durations import make_op_time
    from tracesim.template.from_trace import template_from_source
    from tracesim.template.layer import evaluate, symbol_env
    from tracesim.template.resolve import op_numbers_units, resolve_template

    model = load_model(spec_path)
    par = parallel_from_options({"micro_batch": batch, "global_batch": batch}, model, 1)
    device = get_device(load_cluster(str(cluster)).device)
    env = symbol_env(model, par)

    def times(bundle: Path) -> dict[tuple[str, str, str], tuple[int, str, float, float]]:
        template = template_from_source(str(bundle), model)
        op_time, _ = make_op_time(template, device, par.dtype)
        res = resolve_template(template, model, par, op_time)  # the optimizer ops as the builder gets them
        sections = [res.prologue, res.epilogue] + [res.layer(model, i) for i in range(model.layers)]
        opt_env = {**env, "params": sum(s.params for s in sections)}
        out = {}
        for op in [op for op in template.ops if op.section != "optimizer"] + list(res.optimizer):
            if op.kind != "compute":
                continue
            units = 1.0
            if op.section == "optimizer":
                f, b = evaluate(op.flops, opt_env), evaluate(op.bytes, opt_env)
            else:
                f, b, units = op_numbers_units(op, env, env, par.dtype)
            out[(op.section, op.phase, op.name)] = (op_time(op.op_class, f, b, op, units), op.op_class, f, b)
        return out

    pred, meas = times(base_bundle), times(variant_bundle)
    rows = []
    for key, (p, cls, f, b) in pred.items():
        if key in meas:
            rows.append({"section": key[0], "phase": key[1], "op": key[2], "op_class": cls,
                         "flops": f, "bytes": b, "pred_ns": p, "meas_ns": meas[key][0],
                         "count": model.layers if key[0] == "block" else 1})
    return rows


def disturbed(bundle: Path, *, base: bool = False) -> str:
    """Why a bundle's timing is not trusted ("" if it is): its unprofiled steps spread by more
    than 1.5x (max / min), or, for the base, its profiled step took more than 1.5x what the
    profiler's own cost explains (the unprofiled median plus the step's events times the
    bundle's per-event cost; more means the recorded step, whose op times every prediction
    scales, was slowed down by other jobs). Bundles without the per-event figures: more than
    2x the unprofiled median (the profiler cost about 1.4x on a quiet VM)."""
    meta = yaml.safe_load((bundle / "meta.yaml").read_text())
    st = meta["measured_step_time_s"]
    if st["max"] > 1.5 * st["min"]:
        return f"unprofiled steps {st['min'] * 1e3:.0f}-{st['max'] * 1e3:.0f} ms"
    if base:
        from tracesim.trace.bundle import rank_entry

        steps = (rank_entry(meta, 0) or {}).get("profiled_step_events") or []
        per_event = (meta.get("profiler_overhead") or {}).get("per_event_ns")
        if steps and isinstance(per_event, (int, float)) and steps[0].get("events"):
            first = steps[0]
            expected_s = float(st["median"]) + float(first["events"]) * float(per_event) * 1e-9
            got_s = float(first["dur_us"]) * 1e-6
            if got_s > 1.5 * expected_s:
                return f"profiled step {got_s * 1e3:.0f} ms, {got_s / expected_s:.1f}x the expected {expected_s * 1e3:.0f} ms"
            return ""
        from tracesim.specs.model import model_from_dict
        from tracesim.template.from_trace import template_from_source

        scale = template_from_source(str(bundle), model_from_dict(meta["model"])).meta.get("time_scale")
        if isinstance(scale, (int, float)) and scale < 0.5:
            return f"profiled step {1 / scale:.1f}x the unprofiled median"
    return ""


def _specs(base_name: str, out: Path) -> dict[str, Path]:
    base_path = ROOT / "workloads" / f"{base_name}.yaml"
    specs = {"base (self)": base_path}
    for label, spec in variants(yaml.safe_load(base_path.read_text())).items():
        spec_path = out / f"{spec['name']}.yaml"
        spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
        specs[label] = spec_path
    return specs


def _bundle(out: Path, r: int, label: str, spec: Path) -> Path:
    return out / f"r{r}" / ("base" if label == "base (self)" else spec.stem)


def run(base_name: str, batch: int, measure: int, out: Path, repeats: int,
        threads: int | None = None, *, collect_new: bool = True) -> list[dict[str, Any]]:
    """``repeats`` rounds of base + variants (or, without ``collect_new``, the rounds already
    under ``out``): one row per round and configuration with the predicted and measured step
    times (s), the load average before the round, and why its timing is not trusted ("")."""
    out.mkdir(parents=True, exist_ok=True)
    specs = _specs(base_name, out)
    rows = []
    rounds = range(repeats) if collect_new else sorted(
        int(p.name[1:]) for p in out.glob("r*") if p.name[1:].isdigit() and (p / "base").is_dir())
    for r in rounds:
        load = "-"  # of a reused round: not known here
        if collect_new and Path("/proc/loadavg").exists():
            load = Path("/proc/loadavg").read_text().split()[0]
        labels = list(specs)[1:]
        labels = ["base (self)"] + labels[r % 3:] + labels[:r % 3]  # rotate: no variant always last
        base_bundle = _bundle(out, r, "base (self)", specs["base (self)"])
        paired: dict[str, list[float]] = {}
        if collect_new:
            for label in labels:
                collect(specs[label], _bundle(out, r, label, specs[label]), batch, measure, threads)
            paired = paired_steps({k: specs[k] for k in labels}, batch, threads=threads)
            (out / f"r{r}" / "paired.yaml").write_text(yaml.safe_dump(paired))
        elif (out / f"r{r}" / "paired.yaml").exists():
            paired = {k: _as_steps(v) for k, v in
                      yaml.safe_load((out / f"r{r}" / "paired.yaml").read_text()).items()}
        base_info = yaml.safe_load((base_bundle / "meta.yaml").read_text())
        base_meas = float(base_info["measured_step_time_s"]["median"])
        base_steps = _reference_steps(base_info)
        for label in labels:
            bundle = _bundle(out, r, label, specs[label])
            if not bundle.is_dir():
                continue
            meta = yaml.safe_load((bundle / "meta.yaml").read_text())
            why = disturbed(base_bundle, base=True) or disturbed(bundle)
            pred = predict(base_bundle, specs[label], batch)
            row = {"round": r, "label": label, "load": load, "disturbed": why, "pred": pred,
                   "meas": float(meta["measured_step_time_s"]["median"])}
            if label in paired and "base (self)" in paired:
                row["pred_paired"] = pred * statistics.median(paired["base (self)"]) / base_meas
                row["meas_paired"] = statistics.median(paired[label])
                # the samples behind the paired error (for its noise interval)
                row["samples"] = {"base_paired": paired["base (self)"], "paired": paired[label],
                                  "base_reference": base_steps}
            rows.append(row)
    _flag_slow_rounds(rows)
    return rows


def _reference_steps(meta: dict[str, Any]) -> list[float]:
    """Rank 0's unprofiled reference step times (s) of a bundle (its median where a bundle
    does not list them)."""
    from tracesim.trace.bundle import rank_entry

    steps = (rank_entry(meta, 0) or {}).get("step_times_s")
    return [float(t) for t in steps] if steps else [float(meta["measured_step_time_s"]["median"])]


def paired_error_interval(rows: list[dict[str, Any]]) -> tuple[float, float] | None:
    """95% noise interval of the median over ``rows`` (one configuration's trusted rounds) of
    the paired error ``pred * median(base paired) / median(base reference) /
    median(variant paired) - 1``: every round's three groups of timed steps resampled on
    their own (:func:`benchmarks.cpu.noise.bootstrap_interval`). None without samples."""
    from benchmarks.cpu.noise import bootstrap_interval

    used = [x for x in rows if "samples" in x]
    if not used:
        return None
    groups: list[list[float]] = []
    for x in used:
        s = x["samples"]
        groups += [s["base_paired"], s["base_reference"], s["paired"]]

    def stat(g: Any) -> float:
        errs = [x["pred"] * float(np.median(g[3 * i])) / float(np.median(g[3 * i + 1]))
                / float(np.median(g[3 * i + 2])) - 1.0 for i, x in enumerate(used)]
        return float(np.median(errs))

    return bootstrap_interval(stat, groups)


def _flag_slow_rounds(rows: list[dict[str, Any]], limit: float = 1.5) -> None:
    """Also distrust a measurement more than ``limit`` x the fastest median of the same
    configuration over all rounds (other jobs can slow every step alike), and every row of
    a round whose base is distrusted (the base bundle is the prediction's input)."""
    fastest: dict[str, float] = {}
    for x in rows:
        fastest[x["label"]] = min(fastest.get(x["label"], x["meas"]), x["meas"])
    for x in rows:
        if not x["disturbed"] and x["meas"] > limit * fastest[x["label"]]:
            x["disturbed"] = f"median {x['meas'] / fastest[x['label']]:.1f}x the fastest round's"
    bad_base = {x["round"]: x["disturbed"] for x in rows if x["label"] == "base (self)" and x["disturbed"]}
    for x in rows:
        if x["round"] in bad_base and not x["disturbed"]:
            x["disturbed"] = f"base: {bad_base[x['round']]}"


def _err(p: float, m: float) -> float:
    return (p - m) / m * 100


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--paired-worker":  # internal: paired_steps
        _paired_worker(sys.argv[2])
        return 0
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--base", default="gpt-tiny")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--measure", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads for collect")
    ap.add_argument("--per-op", action="store_true", help="print the per-op error of the last trusted round")
    ap.add_argument("--reuse", action="store_true",
                    help="predict the rounds already under --out again (no collection)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "cpu-scaling")
    a = ap.parse_args()
    rows = run(a.base, a.batch, a.measure, a.out, a.repeats, a.threads, collect_new=not a.reuse)
    print("| round | load | configuration | predicted (ms) | measured median (ms) | error | paired: "
          "predicted, drift-corrected (ms) | paired: measured (ms) | paired error | timing not trusted |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for x in rows:
        pp = (f"{x['pred_paired'] * 1e3:.2f} | {x['meas_paired'] * 1e3:.2f} | "
              f"{_err(x['pred_paired'], x['meas_paired']):+.1f}%") if "pred_paired" in x else "- | - | -"
        print(f"| {x['round']} | {x['load']} | {x['label']} | {x['pred'] * 1e3:.2f} | {x['meas'] * 1e3:.2f} | "
              f"{_err(x['pred'], x['meas']):+.1f}% | {pp} | {x['disturbed']} |")
    print("\n| configuration | rounds used (of) | predicted from the base trace (ms) | measured median (ms) | "
          "error, median of rounds | error range |")
    print("|---|---|---|---|---|---|")
    for label in dict.fromkeys(x["label"] for x in rows):
        ok = [x for x in rows if x["label"] == label and not x["disturbed"]]
        n = sum(1 for x in rows if x["label"] == label)
        if not ok:
            print(f"| {label} | 0 ({n}) | | | | |")
            continue
        errs = [_err(x["pred"], x["meas"]) for x in ok]
        print(f"| {label} | {len(ok)} ({n}) | {statistics.median(x['pred'] for x in ok) * 1e3:.2f} | "
              f"{statistics.median(x['meas'] for x in ok) * 1e3:.2f} | {statistics.median(errs):+.1f}% | "
              f"{min(errs):+.1f}% .. {max(errs):+.1f}% |")
    paired_rows = [x for x in rows if "pred_paired" in x and not x["disturbed"]]
    if paired_rows:
        print("\nPaired (drift-corrected prediction against the paired measurement):\n")
        print("| configuration | rounds | error, median of rounds | its 95% noise interval | error range |")
        print("|---|---|---|---|---|")
        for label in dict.fromkeys(x["label"] for x in paired_rows):
            mine = [x for x in paired_rows if x["label"] == label]
            errs = [_err(x["pred_paired"], x["meas_paired"]) for x in mine]
            ci = paired_error_interval(mine)
            band = f"{ci[0]:+.1%} .. {ci[1]:+.1%}" if ci else "-"
            print(f"| {label} | {len(errs)} | {statistics.median(errs):+.1f}% | {band} | "
                  f"{min(errs):+.1f}% .. {max(errs):+.1f}% |")
    if a.per_op:
        specs = _specs(a.base, a.out)
        for label, spec_path in list(specs.items())[1:]:
            trusted = [x["round"] for x in rows if x["label"] == label and not x["disturbed"]]
            if not trusted:
                continue
            last = trusted[-1]  # the last round whose timing is trusted
            bundle = _bundle(a.out, last, label, spec_path)
            ops = per_op(_bundle(a.out, last, "base (self)", specs["base (self)"]), bundle, spec_path, a.batch)
            tp = sum(o["pred_ns"] * o["count"] for o in ops)
            tm = sum(o["meas_ns"] * o["count"] for o in ops)
            print(f"\n{label}, round {last}: sum of op times predicted {tp / 1e6:.2f} ms, measured "
                  f"{tm / 1e6:.2f} ms ({_err(tp, tm):+.1f}%); largest differences:")
            print("| op | class | x per step | predicted (us) | measured (us) | difference per step (ms) |")
            print("|---|---|---|---|---|---|")
            ops.sort(key=lambda o: -abs(o["pred_ns"] - o["meas_ns"]) * o["count"])
            for o in ops[:12]:
                print(f"| {o['section']} {o['phase']} {o['op']} | {o['op_class']} | {o['count']} | "
                      f"{o['pred_ns'] / 1e3:.1f} | {o['meas_ns'] / 1e3:.1f} | "
                      f"{(o['pred_ns'] - o['meas_ns']) * o['count'] / 1e6:+.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
