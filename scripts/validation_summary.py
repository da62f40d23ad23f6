"""Replay the published tables of docs/accuracy.md and write what a retarget reports as its
validation (``tracesim/report/validated.py``): per software stack, model kind and GPU, the
rows' mean signed and absolute error.

    .venv/bin/python scripts/validation_summary.py [--jobs 2] [--check]

``--check`` writes nothing and exits 1 when the shipped ``validation.yaml`` differs from a
fresh replay (run it after a change that moves predictions). About 70 s with two jobs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracesim.catalog import load_cluster, load_model  # noqa: E402
from tracesim.pipeline.published import summary, validate_rows  # noqa: E402
from tracesim.report.validated import FILE, model_kind, summarize  # noqa: E402

#: docs/accuracy.md's tables: the shared references and every converted table of
#: benchmarks/published but the releases' spread and the cuDNN frontend's eager runs
SHARED = ("megatron_sc21_table1.csv", "megatron_bridge_25_11.csv")
SKIP = ("releases", "cudnn_frontend")


def tables() -> list[Path]:
    shared = ROOT.parent / "shared" / "reference"
    own = sorted(p for p in (ROOT / "benchmarks" / "published").glob("*.csv")
                 if not any(s in p.name for s in SKIP))
    return [shared / n for n in SHARED] + own


def group_of(opts: dict[str, Any]) -> tuple[str, str, str]:
    """(stack, kind, device) of a published row's replay options."""
    model = opts["model"]
    spec = model if hasattr(model, "family") else load_model(str(model))
    cluster = opts["cluster"]
    device = opts.get("device") or (cluster if hasattr(cluster, "device") else load_cluster(str(cluster))).device
    return (str(opts.get("stack") or "megatron-core"), model_kind(spec.family, spec.experts),
            str(device))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    rows = [r for r in validate_rows([str(p) for p in tables()], jobs=args.jobs) if not r.error]
    overall = {k: (round(v, 4) if isinstance(v, float) else v)  # wall time: not a result
               for k, v in summary(rows).items() if k != "max_wall_s"}
    data = {"command": "python scripts/validation_summary.py",
            "tables": [p.name for p in tables()], "all": overall,
            **summarize((*group_of(r.options), r.rel_error) for r in rows)}
    text = ("# Written by scripts/validation_summary.py (docs/accuracy.md, \"The accuracy a replay "
            "reports\"); do not edit.\n" + yaml.safe_dump(data, sort_keys=False))
    if args.check:
        if not FILE.exists() or FILE.read_text() != text:
            print(f"{FILE} is stale: run python scripts/validation_summary.py", file=sys.stderr)
            return 1
        print(f"{FILE}: current ({data['all']['rows']} rows)")
        return 0
    FILE.write_text(text)
    print(f"wrote {FILE}: {data['all']['rows']} rows, {len(data['groups'])} groups")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
