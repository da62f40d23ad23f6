"""``python -m benchmarks.cpu.overhead_table BUNDLE...``: calibrated vs actual profiler overhead.

For every rank and profiled step of each bundle prints: events in the step, the unprofiled
step median, the profiled step duration, the calibrated ``per_event_ns``, the actual cost per
event ``(profiled - unprofiled median) / events``, and the error of the corrected prediction
``(profiled - events x per_event_ns) / unprofiled median - 1``, and the minor page faults
of the profiled step next to the median of the unprofiled ones. Reads only ``meta.yaml``
(no torch). This is the command behind the overhead table in docs/collect.md.
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

from tracesim.errors import InputError
from tracesim.trace.bundle import load_bundle


def rows(path: str) -> list[dict[str, Any]]:
    """One row per (rank, profiled step) of the bundle at ``path``; times in ms, costs in ns."""
    bundle = load_bundle(path)
    out = []
    for rank in bundle.ranks:
        entry = bundle.rank_meta(rank)
        if entry is None:
            raise InputError(f"no per_rank entry for rank {rank}", bundle.meta_path, "per_rank")
        per_event = float(entry["profiler_overhead"]["per_event_ns"])
        plain_ms = float(entry["measured_step_time_s"]["median"]) * 1e3
        plain_faults = entry.get("minor_faults") or []
        median_faults = statistics.median(plain_faults) if plain_faults else None
        for step in entry["profiled_step_events"]:
            prof_ms = float(step["dur_us"]) / 1e3
            events = int(step["events"])
            corrected_ms = prof_ms - events * per_event / 1e6
            out.append({
                "bundle": path, "model": bundle.model.name, "rank": rank, "step": step["step"],
                "events": events, "unprofiled_ms": plain_ms, "profiled_ms": prof_ms,
                "per_event_ns": per_event,
                "actual_ns": (prof_ms - plain_ms) * 1e6 / max(1, events),
                "corrected_error": corrected_ms / plain_ms - 1.0,
                "faults": step.get("minor_faults"),
                "unprofiled_faults": median_faults,
            })
    return out


def _opt(value: Any) -> str:
    return "-" if value is None else f"{value:.0f}"


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m benchmarks.cpu.overhead_table",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("bundles", nargs="+", metavar="BUNDLE")
    paths = ap.parse_args(argv).bundles
    print("| model | rank | step | events | unprofiled ms | profiled ms | per_event_ns "
          "| actual ns/event | corrected error | minor faults profiled / unprofiled |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    try:
        for path in paths:
            for r in rows(path):
                print(f"| {r['model']} | {r['rank']} | {r['step']} | {r['events']} "
                      f"| {r['unprofiled_ms']:.1f} | {r['profiled_ms']:.1f} "
                      f"| {r['per_event_ns']:.0f} | {r['actual_ns']:.0f} "
                      f"| {r['corrected_error'] * 100:+.1f}% "
                      f"| {_opt(r['faults'])} / {_opt(r['unprofiled_faults'])} |")
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
