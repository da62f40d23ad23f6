"""``tracesim compare``: several replays side by side (one table, one PNG chart).

Each RUN is a result directory written by ``tracesim replay ... -o DIR`` (or its
``result.json``), or a replay spec: a ``replay`` command line in one quoted string
(``"replay --model llama3-70b --cluster h100x1024 --tp 8 --pp 8 --dp 16"``; a leading
``tracesim`` is allowed too). ``--common`` adds the same arguments to every spec (a flag the
spec gives too keeps the spec's value).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click

from tracesim.api import Prediction, compare, replay
from tracesim.commands.options import options_from
from tracesim.errors import InputError, ReplayError
from tracesim.report.compare import format_table, memory_note, work_note
from tracesim.report.resultdir import json_default
from tracesim.report.terminal import Progress


def load_run(spec: str, common: str = "") -> Prediction | Path:
    """A result directory / result.json, or the prediction of a replay spec."""
    p = Path(spec)
    if p.exists():
        return p
    args = _split(spec, spec)
    if args[:1] == ["tracesim"]:
        args = args[1:]
    if args[:1] != ["replay"]:
        raise InputError(f"{spec!r} is neither a result directory / result.json nor a replay "
                         "spec (\"replay --model M --cluster C --tp 8 ...\")", spec)
    from tracesim.commands.replay import command as replay_command

    args = _split(common, "--common") + args[1:]  # the spec's own value of a flag wins
    try:
        ctx = replay_command.make_context("replay", args)
    except click.exceptions.Exit:
        raise InputError("a replay spec cannot ask for --help", spec) from None
    except click.ClickException as exc:
        raise InputError(f"bad replay spec: {exc.format_message()}", spec) from None
    params = dict(ctx.params)
    for k in ("out", "as_json"):
        if params.pop(k, None):
            raise InputError("a replay spec cannot write files or print JSON (-o / --json): "
                             "give compare -o instead", spec)
    progress = Progress()
    try:
        return replay(params.pop("source"), options_from(params), progress=progress)
    except InputError as exc:  # say which of the runs failed
        raise InputError(exc.line(), spec) from None
    except ReplayError as exc:
        raise ReplayError(f"{spec}: {exc}") from None
    finally:
        progress.close()


def _split(text: str, source: str) -> list[str]:
    """``text`` split as a shell would (``source``: the spec or flag named in errors)."""
    try:
        return shlex.split(text)
    except ValueError as exc:  # an unclosed quote, a trailing backslash
        raise InputError(f"cannot split into arguments: {exc}", source) from None


@click.command("compare")
@click.argument("runs", nargs=-1, required=True)
@click.option("--common", default="", help="Replay arguments added to every spec (quoted); a spec's own value of a flag "
              "wins.")
@click.option("--labels", help="Comma-separated labels, one per RUN (default: what differs).")
@click.option("-o", "--output", "out", type=click.Path(path_type=Path),
              help="Directory for compare.png, compare.json and compare.csv.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def command(runs: tuple[str, ...], common: str, labels: str | None, out: Path | None,
            as_json: bool) -> None:
    """Compare RUNs (result directories, or quoted "replay ..." command lines) side by side.

    For each metric the table gives every run's value, the winner (lowest time / memory,
    highest tokens/s, TFLOP/s, MFU; "-" when runs share the best value, and on the time rows
    when the runs process different tokens per iteration) and the ratio winner vs runner-up.
    Times in seconds.
    """
    res = compare([load_run(r, common) for r in runs],
                  labels=[x.strip() for x in labels.split(",")] if labels else None,
                  names=[Path(r).name if Path(r).exists() else r for r in runs])
    names, table, results = list(res.labels), res.table, list(res.results)
    notes = [n for n in (work_note(table, names), memory_note(results, names)) if n]
    doc = {"labels": names, "runs": list(runs), **{k: v for k, v in res.to_dict().items()
                                                   if k != "labels"}, "notes": notes}
    if out is not None:
        from tracesim.fileio import atomic_path, output_dir, write_json

        output_dir(out)
        write_json(out / "compare.json", json.loads(json.dumps(doc, default=json_default)))
        with atomic_path(out / "compare.csv") as tmp:
            table.to_csv(tmp, index=False)
        try:
            from tracesim.report.plots import compare_figure, save

            save(compare_figure(names, results), out / "compare.png")
        except ImportError:
            click.echo("tracesim: warning: matplotlib is not installed, no compare.png "
                       "(pip install 'tracesim[plot]')", err=True)
    if as_json:
        click.echo(json.dumps(doc, indent=2, default=json_default))
        return
    click.echo(format_table(table, names))
    for note in notes:
        click.echo(f"note: {note}")
    if out is not None:
        click.echo(f"written to {out}/ (compare.png, compare.json, compare.csv)")
