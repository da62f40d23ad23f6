"""The network model's grouping of ring steps into rounds, checked on the published rows:
every row of docs/accuracy.md's tables replayed as `tracesim validate published` replays it,
once with the default grouping (`NetworkModel(phases="auto")`, at most 2 rounds a phase
while other traffic shares its links) and once with another one, side by side.

    .venv/bin/python benchmarks/network/rounds.py [--phases steps] [--max-rounds N]
        [--only TEXT] [--jobs 2] [--json OUT] [--breakdown] [KEY=VALUE ...]

``--phases steps`` runs every ring step on its own (the reference the rounds approximate; one
replay so: ``tracesim replay ... --network flow-steps``), ``--phases aggregate`` every phase at
once; ``--max-rounds N`` keeps the automatic grouping
with at most N rounds. ``KEY=VALUE`` changes a replay option of every row in both replays
(``overlap_grad_reduce=false``, as ``benchmarks/published/what_if.py`` takes them);
``--breakdown`` replays each row whole (no extrapolation over its micro-batches, slower) and
prints its exposed communication per group both ways. Prints each row whose iteration time
differs by 0.05% or more, then
the largest difference and how many rows fall within 0.1%, 0.5% and 1.5%; each replay's own
wall time beside it (``--jobs`` replays side by side in worker processes, which slows each
one down on a busy machine); progress on stderr. Results in docs/network.md, "Collective
algorithms". Step by step, the whole set takes about half an hour of CPU here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import tracesim.network.model as netmodel  # noqa: E402
from benchmarks.published.what_if import _typed  # noqa: E402
from tracesim.errors import InputError  # noqa: E402
from tracesim.options import ReplayOptions  # noqa: E402
from tracesim.pipeline.published import (  # noqa: E402
    TOKEN_FORMATS,
    predicted_metric,
    steady_iteration_s,
    table_rows,
)
from tracesim.pipeline.run import predict  # noqa: E402

_INIT = netmodel.NetworkModel.__init__


def _replay(item: tuple[Path, int, str, dict[str, str], dict[str, Any], dict[str, Any], bool]
            ) -> tuple[float, float, float, dict[str, float]]:
    """(iteration s, metric per GPU, wall s, exposed communication s per group with
    ``whole``) of one row with the network model's keyword defaults ``net`` (``phases``,
    ``max_rounds``) over the replay's own; ``whole``: the row replayed in full."""
    p, k, fmt, row, opts, net, whole = item

    def patched(self: Any, *a: Any, **kw: Any) -> None:
        _INIT(self, *a, **{**kw, **net})

    netmodel.NetworkModel.__init__ = patched  # type: ignore[method-assign]
    exposed: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        if whole:
            res = predict(None, ReplayOptions.from_mapping(opts, p, f"row {k + 2}"))
            it = res.iteration_time_s
            exposed = dict((res.breakdown or {}).get("exposed_comm_s") or {})
        else:
            it, _ = steady_iteration_s(opts, p, f"row {k + 2}")
        wall = time.perf_counter() - t0
    finally:
        netmodel.NetworkModel.__init__ = _INIT  # type: ignore[method-assign]
    return it, predicted_metric(fmt, row, opts, it), wall, exposed


def _compare(rows: list[Any], items: list[Any], jobs: int, breakdown: bool) -> list[dict[str, Any]]:
    """Each row's replays as it is and changed (``items``, two per row), printed as they come."""
    out: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        done = pool.map(_replay, items)  # in order: each row as it is, then changed
        for n, (p, _, fmt, _, _, label, _) in enumerate(rows):
            (t0, m0, w0, x0), (t1, m1, w1, x1) = next(done), next(done)
            rec: dict[str, Any] = {
                "table": p.name, "row": label, "iteration_s": t0, "changed_iteration_s": t1,
                "metric": "tokens/s" if fmt in TOKEN_FORMATS else "TFLOP/s", "per_gpu": m0,
                "changed_per_gpu": m1, "wall_s": w0, "changed_wall_s": w1, "diff": t1 / t0 - 1.0}
            out.append(rec)
            print(f"[{n + 1}/{len(rows)}] {label}", file=sys.stderr, flush=True)
            if abs(rec["diff"]) >= 5e-4:
                print(f"{rec['diff']:+.2%}  {m0:,.1f} -> {m1:,.1f} {rec['metric']} per GPU  "
                      f"wall {w0:.1f} -> {w1:.1f} s  {p.name}: {label}", flush=True)
            if breakdown:
                rec["exposed_s"], rec["changed_exposed_s"] = x0, x1
                print("  exposed ms per step: " + ", ".join(
                    f"{g} {x0[g] * 1e3:.2f} -> {x1.get(g, 0.0) * 1e3:.2f}" for g in x0), flush=True)
    return out


def main() -> int:
    from validation_summary import tables  # docs/accuracy.md's tables

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phases", choices=("auto", "steps", "aggregate"), default="steps")
    ap.add_argument("--max-rounds", type=int, default=None, help="with --phases auto")
    ap.add_argument("--only", default="", help="the rows whose label contains TEXT")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", type=Path, help="write every row's numbers here")
    ap.add_argument("--breakdown", action="store_true",
                    help="replay each row whole and print its exposed communication per group")
    ap.add_argument("changes", nargs="*", metavar="KEY=VALUE")
    args = ap.parse_args()
    edits = dict(_typed({}, c) for c in args.changes)  # typed by their text, as what_if.py does
    changed: dict[str, Any] = {"phases": args.phases}
    if args.max_rounds is not None:
        if args.phases != "auto" or args.max_rounds < 1:
            ap.error("--max-rounds takes a positive number, with --phases auto")
        changed["max_rounds"] = args.max_rounds
    rows = list(table_rows([str(p) for p in tables()], (lambda lb: args.only in lb) if args.only else None,
                           skip_unmodelled=True))
    if not rows:
        print(f"no row contains {args.only!r}", file=sys.stderr)
        return 2
    items = [(p, k, fmt, row, {**opts, **edits}, net, args.breakdown)
             for p, k, fmt, row, opts, _, _ in rows for net in ({}, changed)]
    try:
        out = _compare(rows, items, args.jobs, args.breakdown)
    except InputError as exc:  # a KEY=VALUE the rows cannot take
        print(exc.line(), file=sys.stderr)
        return 2
    diffs = [abs(float(r["diff"])) for r in out]
    worst = max(out, key=lambda r: abs(float(r["diff"])))
    print(f"{len(out)} rows, {changed}: largest {worst['diff']:+.2%} ({worst['row']}); "
          + ", ".join(f"within {b:.1%}: {sum(d <= b for d in diffs)}" for b in (0.001, 0.005, 0.015)))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
