"""``tracesim import DIR -o BUNDLE``: trace files recorded elsewhere -> a bundle."""

from __future__ import annotations

from pathlib import Path

import click

from tracesim.api import import_traces
from tracesim.trace.bundle import load_bundle


@click.command("import")
@click.argument("source", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), required=True,
              help="Bundle directory to write (an existing bundle there is replaced).")
def command(source: Path, out: Path) -> None:
    """Turn a folder of per-rank Kineto traces (with or without execution traces) into a
    bundle that every command accepts.

    SOURCE may be tensorboard_trace_handler output (the latest cycle of each worker is
    taken), a torchtitan profile_trace folder (its highest iteration_N) or any folder of
    per-rank traces (rank from distributedInfo, else from the file name); execution traces
    in it or below it are paired by pid or rank. Ranks on clocks that do not overlap are
    shifted so that their first common ProfilerStep#N begins together (docs/import.md).
    Every command also reads such a folder directly; importing keeps a copy.
    """
    path = import_traces(source, out)
    meta = load_bundle(path).meta
    imported = meta.get("imported_from") or {}
    files = imported.get("files") or []
    world = f", world size {meta['world_size']}" if meta.get("world_size") else ""
    where = f" ({imported['iteration']})" if imported.get("iteration") else ""
    click.echo(f"imported {len(files)} rank(s){world} recorded on {meta['device']} from "
               f"{source}{where}")
    for f in files:
        et = f"  + {f['et']}" if f.get("et") else ""
        click.echo(f"  rank {f['rank']:<4} {f['trace']}{et}  (rank from {f['rank_from']})")
    if imported.get("skipped"):
        click.echo(f"  not taken (other profiler cycles): {', '.join(imported['skipped'])}")
    click.echo(f"clocks: {meta.get('clock', 'recorded times')}")
    for rank, shift in (meta.get("clock_shift_ns") or {}).items():
        click.echo(f"  rank {rank:<4} {shift / 1e6:+.3f} ms")
    for w in meta.get("warnings") or []:
        click.echo(f"warning: {w}", err=True)
    click.echo(f"wrote {path}")
