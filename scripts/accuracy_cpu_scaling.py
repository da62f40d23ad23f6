#!/usr/bin/env python3
"""Predict larger CPU training steps from one small recording, then measure them.

1. collect the base model (default gpt-tiny) on this CPU;
2. predict the step time of hidden x2, layers x2 and sequence x2 variants from the base
   bundle alone (`run_retarget` on topologies/host-cpu.yaml: each recorded op's time scaled
   by the host-cpu cost model's ratio between the new and the recorded shapes);
3. collect each variant for real and compare with the median of its unprofiled steps.

Usage: .venv/bin/python scripts/accuracy_cpu_scaling.py [--base gpt-tiny] [--batch 8]
       [--measure 10] [--out runs/cpu-scaling]
Prints a markdown table (the one in docs/accuracy.md). Calibration (the host-cpu profile) and
the measured variants are separate runs: nothing is fitted on the runs it is compared with.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def variants(base: dict, factor: int = 2) -> dict[str, dict]:
    h2 = dict(base, name=f"{base['name']}-h{factor}", hidden=base["hidden"] * factor,
              ffn_hidden=base.get("ffn_hidden", 4 * base["hidden"]) * factor)
    l2 = dict(base, name=f"{base['name']}-l{factor}", layers=base["layers"] * factor)
    s2 = dict(base, name=f"{base['name']}-s{factor}", seq_len=base["seq_len"] * factor)
    return {"hidden x2": h2, "layers x2": l2, "sequence x2": s2}


def collect(spec_path: Path, out: Path, batch: int, measure: int) -> float:
    cmd = [sys.executable, "-m", "tracesim.cli", "collect", "--workload", str(spec_path),
           "--batch", str(batch), "--measure", str(measure), "-o", str(out)]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    meta = yaml.safe_load((out / "meta.yaml").read_text())
    return float(meta["measured_step_time_s"]["median"])


def run(base_name: str, batch: int, measure: int, out: Path) -> list[tuple[str, float, float]]:
    from tracesim.retarget import run_retarget

    out.mkdir(parents=True, exist_ok=True)
    base_spec = yaml.safe_load((ROOT / "workloads" / f"{base_name}.yaml").read_text())
    base_bundle = out / "base"
    if base_bundle.exists():
        import shutil

        shutil.rmtree(base_bundle)
    base_measured = collect(ROOT / "workloads" / f"{base_name}.yaml", base_bundle, batch, measure)
    cluster = str(ROOT / "topologies" / "host-cpu.yaml")
    rows = []
    opts = {"cluster": cluster, "micro_batch": batch, "global_batch": batch}
    pred = run_retarget(str(base_bundle), {**opts, "model": str(ROOT / "workloads" / f"{base_name}.yaml")})
    rows.append(("base (self)", pred["iteration_time_s"], base_measured))
    for label, spec in variants(base_spec).items():
        spec_path = out / f"{spec['name']}.yaml"
        spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
        predicted = run_retarget(str(base_bundle), {**opts, "model": str(spec_path)})["iteration_time_s"]
        bundle = out / spec["name"]
        if bundle.exists():
            import shutil

            shutil.rmtree(bundle)
        measured = collect(spec_path, bundle, batch, measure)
        rows.append((label, predicted, measured))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="gpt-tiny")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--measure", type=int, default=10)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "cpu-scaling")
    a = ap.parse_args()
    rows = run(a.base, a.batch, a.measure, a.out)
    print("| configuration | predicted from the base trace (ms) | measured median (ms) | error |")
    print("|---|---|---|---|")
    for label, p, m in rows:
        print(f"| {label} | {p * 1e3:.2f} | {m * 1e3:.2f} | {(p - m) / m * 100:+.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
