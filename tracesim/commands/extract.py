"""``tracesim extract``: a bundle or trace -> op table and task graph (a workload directory)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import click

from tracesim.errors import InputError
from tracesim.graph.io import save_graph
from tracesim.trace.extract import extract_source
from tracesim.trace.schema import write_op_table
from tracesim.trace.sources import load_source


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
    if out.exists() and (not out.is_dir() or any(p.name not in _OUTPUTS for p in out.iterdir())):
        raise InputError("exists and is not a workload directory; refusing to overwrite it", out)
    src = load_source(source)
    graph = extract_source(src)
    graph.validate()
    graph = graph.replace(meta={**graph.meta, "source": str(source), "device": src.device,
                                "bundle_meta": src.meta or {}})
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write_op_table(src.op_table, tmp / "ops.parquet", {"source": str(source)})
        save_graph(graph, tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    n_ranks = len(graph.ranks)
    click.echo(
        f"wrote {out}: {len(src.op_table)} events, {graph.n_tasks} tasks, "
        f"{len(graph.edges)} edges, {len(graph.lanes)} lanes, {n_ranks} rank(s)"
    )


_OUTPUTS = {"ops.parquet", "tasks.parquet", "edges.parquet", "lanes.parquet", "graph.yaml"}
