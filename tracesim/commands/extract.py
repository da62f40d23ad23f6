"""``tracesim extract``: a bundle or trace -> op table and task graph (a workload directory)."""

from __future__ import annotations

from pathlib import Path

import click

from tracesim.api import extract


@click.command("extract")
@click.argument("source", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), required=True,
              help="Workload directory to write (ops.parquet, tasks/edges/lanes.parquet, graph.yaml).")
def command(source: Path, out: Path) -> None:
    """Turn a bundle or Kineto trace (SOURCE) into an op table and a task graph.

    Writes OUT/ops.parquet (the canonical op table, see docs/formats.md) and the task graph
    (OUT/tasks.parquet, edges.parquet, lanes.parquet, graph.yaml). Nothing is written if the
    input is bad.
    """
    r = extract(source, out)
    click.echo(f"wrote {r.out}: {r.events} events, {r.tasks} tasks, {r.edges} edges, "
               f"{r.lanes} lanes, {r.ranks} rank(s)")
