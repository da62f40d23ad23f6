"""``tracesim list models|clusters|devices|stacks``: what ships with tracesim (usable by name)."""

from __future__ import annotations

import json

import click

from tracesim.catalog import KINDS, shipped


@click.command("list")
@click.argument("kind", type=click.Choice(KINDS))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def command(kind: str, as_json: bool) -> None:
    """List the shipped model specs, cluster specs, device profiles or software stacks (KIND).

    Each is usable by its name wherever a file is accepted (``--model``, ``--cluster``, a
    cluster spec's ``device:``; a stack by ``--stack``); your own YAML files are accepted by
    path.
    """
    entries = shipped(kind)
    if as_json:
        click.echo(json.dumps({kind: [{"name": e.name, "summary": e.summary} for e in entries]},
                              indent=2))
        return
    width = max(len(e.name) for e in entries)
    for e in entries:
        click.echo(f"{e.name:<{width}}  {e.summary}")
