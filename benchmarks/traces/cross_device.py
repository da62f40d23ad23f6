#!/usr/bin/env python3
"""Cross-device validation of trace replay: one GPU's measured times carried to another.

Replay scales every recorded kernel by the cost model's ratio between the target and the
recorded device (tracesim/transform/retime.py). This study checks that mechanism on public
data measured on two or more GPUs with the same workload, none of it used to calibrate the
device profiles (the profiles' calibration records are printed and searched for these sets):

* ``tracelens``: Kineto traces of 5 HuggingFace models (bf16 inference) on H100 and MI300X;
  each replayed on the other device with ``tracesim.replay(trace, device=...)``: GPU time in
  total, per op class and per (aten op, Input Dims), and the step time;
* ``vidur``: fp16 per-op times of Llama-style layers on A100 and H100 (num_tokens 1..4096,
  TP 1..8): H100 from A100 by the ``scaled`` and ``inferred`` methods;
* ``neusight``: fp32 GEMMs (TF32 off) on A100 (2 boards), H100 and V100: every ordered pair.

Each is compared with two naive baselines: the recorded time unchanged (``same``) and the
datasheet ratio (``peak``: matrix peak for GEMM / attention, HBM bandwidth for the rest).

Usage: .venv/bin/python benchmarks/traces/cross_device.py [--parts tracelens vidur neusight]
[--data DIR] [--json]. The tables in docs/accuracy.md ("Replaying a trace on another device")
come from this script. A part whose device profile is not shipped yet is skipped with a
message. Deterministic; about 30 s on 2 cores (most of it the TraceLens traces).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.traces.crossdev import neusight, tracelens, vidur  # noqa: E402
from benchmarks.traces.crossdev.common import (  # noqa: E402
    REPO_DATA,
    Skipped,
    default_data,
    md_table,
    provenance,
)
from tracesim.hardware.device import get_device  # noqa: E402

PARTS = ("tracelens", "vidur", "neusight")
#: the profiles each part reads
PROFILES = {"tracelens": ("h100", "mi300x"), "vidur": ("a100", "h100"),
            "neusight": ("a100", "a100-40gb", "h100", "v100")}
TESTED_ON = {
    "tracelens": "TraceLens H100 / MI300X Kineto traces (AMD-AGI/TraceLens @ 171dd747, MIT)",
    "vidur": "Vidur A100 / H100 fp16 op profiles (microsoft/vidur @ 7d475133, MIT)",
    "neusight": "NeuSight fp32 linear microbenchmarks (sitar-lab/NeuSight @ 6945927d, MIT)",
}


def run(parts: list[str], data: Path, models: list[str] | None = None,
        vidur_models: list[str] | None = None) -> dict[str, Any]:
    """Every requested part's result (a part that cannot run: ``{"unavailable": reason}``)."""
    shown = data.resolve()
    root = REPO_DATA.parents[3]
    out: dict[str, Any] = {"data": str(shown.relative_to(root) if shown.is_relative_to(root)
                                        else shown), "profiles": profiles(parts)}
    for part in parts:
        try:
            if part == "tracelens":
                out[part] = tracelens.run(data, models)
            elif part == "vidur":
                out[part] = vidur.run(data, models=vidur_models)
            else:
                out[part] = neusight.run(data)
        except Skipped as exc:
            out[part] = {"unavailable": str(exc)}
    return out


def profiles(parts: list[str]) -> list[dict[str, Any]]:
    """Provenance of every profile the parts read (absent ones say so)."""
    names = sorted({p for part in parts for p in PROFILES[part]})
    out = []
    for n in names:
        try:
            out.append(provenance(get_device(n)))
        except Exception as exc:  # noqa: BLE001 - an absent profile is reported, not fatal
            out.append({"device": n, "missing": str(exc)})
    return out


def render(res: dict[str, Any], top: int = 8) -> str:
    """The markdown report of :func:`run`'s result."""
    lines = [f"Data: `{res['data']}`", "", "What calibrated each profile (from its YAML; none of "
             "the sets below may appear there):", ""]
    rows = []
    for p in res["profiles"]:
        if "missing" in p:
            rows.append([p["device"], "not shipped yet", "", "", ""])
            continue
        cal = p.get("calibrated_on") or {"record": "none (datasheet figures, older plateaus)"}
        rows.append([p["device"], p["source"].split(":")[0].split(" (")[0],
                     "; ".join(f"{k}: {v}" for k, v in cal.items()),
                     ", ".join(p["test_sets_named"]) or "none",
                     ", ".join(part for part, devs in PROFILES.items()
                               if p["device"] in devs and part in res)])
    lines.append(md_table(["profile", "source", "calibrated on", "test sets named there",
                           "tested here by"], rows))
    for part, fn in (("tracelens", lambda r: tracelens.render(r, top)), ("vidur", vidur.render),
                     ("neusight", neusight.render)):
        if part not in res:
            continue
        lines += ["", f"## {part}: {TESTED_ON[part]}", ""]
        r = res[part]
        lines.append(f"skipped: {r['unavailable']}" if "unavailable" in r else fn(r))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                    help="which data sets (default: all)")
    ap.add_argument("--data", type=Path, default=None,
                    help="folder holding the data sets (default: "
                         f"{REPO_DATA.relative_to(REPO_DATA.parents[3])})")
    ap.add_argument("--models", nargs="+", default=None,
                    help="TraceLens models: substrings of the trace names (default: all 5)")
    ap.add_argument("--vidur-models", nargs="+", default=None,
                    help="Vidur models as org/name (default: all profiled on both devices)")
    ap.add_argument("--top", type=int, default=8,
                    help="TraceLens: list this many largest ops per direction (default 8)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    a = ap.parse_args(argv)
    data = a.data or default_data()
    res = run(a.parts, data, a.models, a.vidur_models)
    if a.json:
        print(json.dumps(res, indent=1, default=float))
    else:
        print(render(res, a.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
