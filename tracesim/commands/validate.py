"""``tracesim validate``: accuracy checks (self-replay of recorded runs)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tracesim.api import validate_self_replay
from tracesim.options import NETWORKS
from tracesim.trace.traceinfo import WHOLE_TRACE_WARNING


@click.group("validate")
def command() -> None:
    """Check tracesim's predictions against measurements."""


@command.command("self-replay")
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def self_replay_cmd(sources: tuple[Path, ...], as_json: bool) -> None:
    """Replay each recorded step of SOURCES (traces or bundles) with its own durations.

    Reports, per rank and step, the measured step time (the ProfilerStep annotation), the
    predicted one and the relative error; for bundles also the prediction of the unprofiled
    step time (profiler overhead removed) against the measured unprofiled median, and per
    rank the median of the steady steps' unprofiled predictions (bundles recorded with
    ``collect --steps N``: one number per rank, less noisy than any single step).
    """
    check = validate_self_replay(*sources)
    results, summary = check.results, check.unprofiled
    if as_json:
        click.echo(json.dumps(check.to_dict(), indent=2))
        return
    hdr = f"{'source':<34} {'rank':>4} {'step':<18} {'measured ms':>12} {'predicted ms':>13} {'error':>8}"
    click.echo(hdr)
    click.echo("-" * len(hdr))
    for r in results:
        name = Path(r.source).name[:34]
        click.echo(f"{name:<34} {r.rank:>4} {r.step:<18} {r.measured_s * 1e3:>12.3f} "
                   f"{r.predicted_s * 1e3:>13.3f} {r.rel_error * 100:>+7.2f}%")
        if (r.rel_error_unprofiled is not None and r.measured_unprofiled_s is not None
                and r.predicted_unprofiled_s is not None):
            click.echo(f"{'  unprofiled (median of measured)':<34} {'':>4} {'':<18} "
                       f"{r.measured_unprofiled_s * 1e3:>12.3f} {r.predicted_unprofiled_s * 1e3:>13.3f} "
                       f"{r.rel_error_unprofiled * 100:>+7.2f}%")
    for src in dict.fromkeys(r.source for r in results if r.whole_trace):
        click.echo(f"note: {Path(src).name}: {WHOLE_TRACE_WARNING}")
    for src in dict.fromkeys(r.source for r in results if r.fallbacks):
        fb = next(r.fallbacks for r in results if r.source == src and r.fallbacks) or {}
        click.echo(f"note: {Path(src).name}: {sum(fb.values())} dependencies fell back to the "
                   f"recorded order ({', '.join(f'{k}: {v}' for k, v in sorted(fb.items()))})")
    if summary:
        click.echo("")
        click.echo("unprofiled step time per rank (median over its steady profiled steps):")
        hdr2 = (f"{'source':<34} {'rank':>4} {'steps':>5} {'measured ms':>12} {'predicted ms':>13} "
                f"{'error':>8}")
        click.echo(hdr2)
        click.echo("-" * len(hdr2))
        for u in summary:
            click.echo(f"{Path(u.source).name[:34]:<34} {u.rank:>4} {u.steps:>5} "
                       f"{u.measured_s * 1e3:>12.3f} {u.predicted_s * 1e3:>13.3f} "
                       f"{u.rel_error * 100:>+7.2f}%")


@command.command("published")
@click.argument("tables", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--only", default=None, metavar="TEXT",
              help="Replay only the rows whose label contains TEXT (e.g. 'H100', 'deepseek').")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option("--network", type=click.Choice(list(NETWORKS)), default=None,
              help="Network model of every replay (as replay's --network): flow (the default: "
                   "flow-level max-min sharing), flow-relays (flow with every PXN relay's "
                   "NVLink hop in its flow), flow-steps (flow with every ring step on its own) "
                   "or estimate (each collective's uncongested time: faster, blind to "
                   "contention).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="Rows replayed at once, each in its own process (rows still print in "
                   "table order; 'wall s' is each row's own replay time).")
def published_cmd(tables: tuple[Path, ...], only: str | None, as_json: bool,
                  network: str | None, jobs: int) -> None:
    """Replay every row of published end-to-end TABLES and compare.

    TABLES: Megatron-Bridge performance summaries (tokens/s per GPU; e.g.
    ../shared/reference/megatron_bridge_25_11.csv; a table of your own runs in that format
    may add the columns recompute, dispatcher, a2a_overlap, cuda_graph, etp, pp_layout,
    mtp_layers and segment per row and give step_time_s or model_tflops_per_gpu instead of tokens/s, e.g.
    benchmarks/published/megatron_moe_modelzoo_h100.csv), Megatron-LM SC'21 Table 1 (TFLOP/s
    per GPU; ../shared/reference/megatron_sc21_table1.csv), Megatron-Core GPT tables
    (TFLOP/s per GPU; benchmarks/published/megatron_core_h100_weak_scaling.csv) or
    torchtitan runs (tokens/s per GPU; benchmarks/published/torchtitan_h200.csv). Each row's layout, batch and
    precision are replayed on the system's cluster spec with the row's software stack;
    nothing is fitted to the rows. Prints one line per row as it finishes, then the mean
    absolute error, the mean signed error (+: predicted faster than published), the largest
    error and the rows within 10% and 20% (with several tables: for each table, then for
    all).
    """
    from tracesim.pipeline.published import summary, validate_rows

    needle = only.lower() if only else None
    rows = []  # tables named by file name, by path where two share one; one given twice: once
    # every row is read and checked before the first comes back: nothing is printed for a
    # table with bad input
    for r in validate_rows(list(tables), only=(lambda lab: needle in lab.lower()) if needle else None,
                           network=network, jobs=jobs):
        rows.append(r)
        if as_json:
            continue
        if len(rows) == 1:
            click.echo(f"{'row':<62} {'published':>10} {'predicted':>10} {'error':>8} {'wall s':>7}")
            click.echo("-" * 101)
        if r.error:  # an unknown system's row lists the systems tracesim has
            known = f" (known: {', '.join(r.known)})" if r.known else ""
            click.echo(f"{r.label[:62]:<62} not replayed: {r.error}{known}")
        else:
            click.echo(f"{r.label[:62]:<62} {r.published:>10.1f} {r.predicted:>10.1f} "
                       f"{r.rel_error * 100:>+7.1f}% {r.wall_s:>7.1f}")
    s = summary(rows)
    names = list(dict.fromkeys(r.table for r in rows))
    per_table = {t: summary([r for r in rows if r.table == t]) for t in names} if len(names) > 1 else {}
    if as_json:
        out: dict[str, object] = {"rows": [r.to_dict() for r in rows], "summary": s}
        if per_table:
            out["per_table"] = per_table
        click.echo(json.dumps(out, indent=2))
        return
    if not rows:
        click.echo("no row" + (f" whose label contains {only!r}" if only else "") + " to replay")
    if rows:
        click.echo("")
        for t, ts in per_table.items():
            click.echo(f"{t}: {_summary_line(ts)}")
        click.echo(("all tables: " if per_table else "") + _summary_line(s))


def _summary_line(s: dict) -> str:
    """One line of :func:`tracesim.pipeline.published.summary`'s numbers (a table none of
    whose rows was replayed: how many were not)."""
    if not s["rows"]:
        return f"0 rows replayed; {s['not_replayed']} not replayed"
    return (f"{s['rows']} rows: mean absolute error {s['mean_abs_error'] * 100:.1f}% "
            f"(signed {s['mean_error'] * 100:+.1f}%), largest {s['max_abs_error'] * 100:.1f}%, within 10%: {s['within_10pct']}, "
            f"within 20%: {s['within_20pct']}; slowest replay {s['max_wall_s']:.1f} s"
            + (f"; {s['not_replayed']} not replayed" if s.get("not_replayed") else ""))
