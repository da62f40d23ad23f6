"""``tracesim sweep``: replay every point of a design space on Dask.

Writes into SWEEP_DIR: ``results.parquet`` (one row per point, rewritten atomically after
each batch), ``ranking.csv`` (top N), ``pareto.csv`` and ``pareto.png`` (throughput vs GPUs,
or vs cost per hour when the space gives prices), ``summary.json``, and the resolved specs
under ``clusters/`` and ``models/``. Progress goes to stderr; the ranked table to stdout.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from tracesim.errors import InputError

_RANK_CHOICES = ("tokens_per_s", "tokens_per_s_per_gpu", "tokens_per_usd", "mfu",
                 "iteration_time_s")


class _StderrProgress:
    """Progress on stderr: one rewritten line on a terminal, else a line every 10 s."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self._last = 0.0

    def __call__(self, p: Any) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        final = p.done == p.total
        if self.tty:
            click.echo("\r" + p.line().ljust(79), err=True, nl=final)
        elif final or p.done == 0 or now - self._last >= 10.0:
            click.echo(p.line(), err=True)
            self._last = now


@click.command("sweep")
@click.argument("space", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="Sweep directory (results.parquet, ranking, Pareto plot); reused to resume.")
@click.option("--scheduler", help="Address of a running Dask scheduler (tcp://HOST:8786); "
              "default: a local cluster.")
@click.option("--workers", type=click.IntRange(min=1),
              help="Local worker processes (default: one per CPU core).")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Rows of the ranked table.")
@click.option("--rank-by", type=click.Choice(_RANK_CHOICES), default="tokens_per_s",
              show_default=True, help="Metric of the ranked table (descending; the "
              "iteration time ascending). Points without tokens/s (a recording that does not "
              "say its tokens) are ranked by iteration time.")
@click.option("--retry-failed", is_flag=True, help="Recompute points stored as failed.")
@click.option("--dry-run", is_flag=True, help="Expand the space and print its size; run nothing.")
@click.option("--no-plot", is_flag=True, help="Do not write pareto.png.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def command(space: Path, out: Path, scheduler: str | None, workers: int | None, top: int,
            rank_by: str, retry_failed: bool, dry_run: bool, no_plot: bool, quiet: bool,
            as_json: bool) -> None:
    """Replay every point of SPACE (a sweep-space YAML) as one Dask task each.

    Rerunning with the same -o skips points already computed (keyed by their inputs and the
    tracesim version). Throughput is tokens/s; cost columns are USD. Exit code 2 on bad input.
    """
    from tracesim.sweep.outputs import (
        format_table,
        has_metric,
        pareto_axes,
        pareto_front,
        plot_pareto,
        ranked,
    )
    from tracesim.sweep.runner import run_sweep
    from tracesim.sweep.space import expand_space, load_space
    from tracesim.sweep.store import read_results

    if scheduler and workers:
        raise InputError("--workers sets the size of a local cluster; with --scheduler the "
                         "scheduler's workers are used", "--workers")
    spec = load_space(space)
    if rank_by == "tokens_per_usd" and not spec.prices:
        raise InputError(f"tokens_per_usd needs prices (USD per GPU-hour by device) in the space "
                         f"file {space}", "--rank-by")
    exp = expand_space(spec, out)
    if dry_run:
        res = {"points": len(exp.points), "excluded": exp.excluded, "duplicates": exp.duplicates}
        click.echo(json.dumps(res) if as_json else
                   f"{space}: {res['points']} points ({res['excluded']} excluded by constraints, "
                   f"{res['duplicates']} duplicates)")
        return
    summary = run_sweep(spec, out, workers=workers, scheduler=scheduler,
                        retry_failed=retry_failed, progress=_StderrProgress(quiet or as_json),
                        expansion=exp)
    table = read_results(out)
    keys = {p.key for p in exp.points}
    rate = table is not None and has_metric(table, "tokens_per_s", keys)
    if table is not None and rank_by == "tokens_per_s" and not rate \
            and has_metric(table, "iteration_time_s", keys):
        rank_by = "iteration_time_s"  # recordings without a token count: the fastest step
    top_df = ranked(table, by=rank_by, top=top, keys=keys) if table is not None else None
    import pandas as pd

    from tracesim.fileio import atomic_path

    if table is not None and top_df is not None:  # rewritten for this --rank-by, even when empty
        shown = top_df if not top_df.empty else pd.DataFrame(columns=["rank", rank_by])
        with atomic_path(out / "ranking.csv") as tmp:
            shown.to_csv(tmp, index=False)
    if table is not None and top_df is not None and not top_df.empty and rate:
        x, y = pareto_axes(table[table["key"].isin(keys)])
        front = pareto_front(table, x, y, keys=keys)
        with atomic_path(out / "pareto.csv") as tmp:
            front.to_csv(tmp, index=False)
        if not no_plot:
            plot_pareto(table, out / "pareto.png", keys=keys, title=f"{spec.name}: Pareto front")
    if as_json:
        click.echo(json.dumps({"summary": summary.to_dict(),
                               "top": [] if top_df is None else
                               json.loads(top_df.to_json(orient="records"))}, indent=2))
        return
    s = summary
    where = (f"on {s.workers} local worker(s)" if s.workers else f"on {s.scheduler}")
    ran = (f"{s.computed} computed in {s.wall_s:.1f} s {where}" if s.computed
           else "nothing new to compute")
    click.echo(f"sweep {spec.name}: {s.points} points ({s.reused} reused, {ran}): {s.ok} ok, "
               f"{s.failed} failed, {s.skipped} skipped; {s.excluded} excluded by constraints")
    click.echo(f"results: {s.results}")
    if top_df is not None:
        click.echo(f"top {min(top, len(top_df))} by {rank_by}:")
        click.echo(format_table(top_df))
