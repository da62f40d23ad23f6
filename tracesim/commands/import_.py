"""``tracesim import DIR -o BUNDLE``: trace files recorded elsewhere -> a bundle."""

from __future__ import annotations

from pathlib import Path

import click

from tracesim.api import import_traces


@click.command("import")
@click.argument("source", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), required=True,
              help="Bundle directory to write.")
def command(source: Path, out: Path) -> None:
    """Turn a folder of per-rank Kineto traces (with or without execution traces) into a
    bundle that every command accepts."""
    path = import_traces(source, out)
    click.echo(f"wrote {path}")
