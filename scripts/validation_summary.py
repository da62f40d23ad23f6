"""Replay the published tables of docs/accuracy.md and write what a retarget reports as its
validation (``tracesim/report/validated.py``): per software stack, model kind and GPU, the
rows' mean signed and absolute error; and the page's per-row tables of those CSVs: each
row's predicted value and error (and, where they moved, its replay wall time), the
summary line under each table, and the table of groups (``scripts/accuracy_rows.py``).

    .venv/bin/python scripts/validation_summary.py [--jobs 2] [--check]

``--check`` writes nothing and exits 1 when the shipped ``validation.yaml`` or a row of the
page differs from a fresh replay (run it after a change that moves predictions; then bring
the Summary table's quotes and the prose that quotes the moved rows along by hand;
``tests/test_accuracy_doc.py`` checks the quotes). About 2.5 min with two jobs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # accuracy_rows, also when loaded from a file path

from accuracy_rows import DOC, compare, groups  # noqa: E402

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
    every = list(validate_rows([str(p) for p in tables()], jobs=args.jobs))
    rows = [r for r in every if not r.error]
    overall = {k: (round(v, 4) if isinstance(v, float) else v)  # wall time: not a result
               for k, v in summary(rows).items() if k != "max_wall_s"}
    data = {"command": "python scripts/validation_summary.py",
            "tables": [p.name for p in tables()], "all": overall,
            **summarize((*group_of(r.options), r.rel_error) for r in rows)}
    text = ("# Written by scripts/validation_summary.py (docs/accuracy.md, \"The accuracy a replay "
            "reports\"); do not edit.\n" + yaml.safe_dump(data, sort_keys=False))
    page = DOC.read_text()
    lines, changes, matched = compare(every, page.splitlines())
    missing = sorted({p.name for p in tables()} - matched)
    if missing:  # a table the page does not show row by row (or shows other rows of)
        print(f"{DOC}: no per-row table matches {', '.join(missing)}", file=sys.stderr)
        return 1
    lines, grouped, same = groups(lines, yaml.safe_load(text))
    if not same:
        print(f"{DOC}: its table of groups lists other groups than the replay's; add or drop "
              "those lines by hand", file=sys.stderr)
        return 1
    changes += grouped
    for c in changes:
        print(f"{DOC.name}:{c.line}: {c.label}: {' '.join(c.old)} -> {' '.join(c.new)}")
    if args.check:
        stale = [str(f) for f, bad in ((FILE, not FILE.exists() or FILE.read_text() != text),
                                       (DOC, bool(changes))) if bad]
        if stale:
            print(f"{' and '.join(stale)} stale: run python scripts/validation_summary.py",
                  file=sys.stderr)
            return 1
        print(f"{FILE}: current ({data['all']['rows']} rows); {DOC.name}'s rows current")
        return 0
    FILE.write_text(text)
    DOC.write_text("\n".join(lines) + ("\n" if page.endswith("\n") else ""))
    print(f"wrote {FILE}: {data['all']['rows']} rows, {len(data['groups'])} groups; "
          f"{DOC.name}: {len(changes)} lines rewritten (bring the Summary table and prose along)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
