"""``tracesim convert``: workloads between tracesim, Chakra ET (ASTRA-sim) and AICB (SimAI).

SOURCE is a tracesim workload directory, a bundle or Kineto trace (extracted first), Chakra
ET files (a prefix, one ``.et`` file or their directory) or an AICB ``.txt``; without SOURCE,
``--model`` / ``--cluster`` and layout flags build the per-rank workload. ``--replay-on``
replays the converted workload on a cluster (the way to simulate imported files).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from tracesim.api import convert
from tracesim.commands.options import options_from, replay_flags
from tracesim.options import BUILD_KEYS
from tracesim.report.resultdir import json_default
from tracesim.report.terminal import print_report

#: the flags that build a workload (without SOURCE): the model, its cluster and the layout
BUILD_FLAGS = ("cluster", "nodes", *BUILD_KEYS)


@click.command("convert")
@click.argument("source", required=False, type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), required=True,
              help="Output: a workload directory (tracesim), an ET prefix (chakra: "
                   "OUT.<rank>.et + OUT.json; a directory gets OUT/workload.*), or a .txt (aicb).")
@click.option("--to", "to", type=click.Choice(["chakra", "aicb", "tracesim"]), required=True,
              help="Output format.")
@click.option("--from", "fmt", type=click.Choice(["auto", "tracesim", "trace", "chakra", "aicb"]),
              default="auto", show_default=True, help="Input format (auto: from the path).")
@click.option("--comm-groups", type=click.Path(path_type=Path),
              help="Chakra input: ASTRA-sim communicator-group JSON (default <prefix>.json).")
@click.option("--chakra-plain", "plain", is_flag=True,
              help="Chakra input: ignore tracesim's own attributes (read the files as ASTRA-sim "
                   "does: microsecond durations, no lanes).")
@click.option("--one-rank", "one_rank", is_flag=True,
              help="AICB input: build rank 0 only and replay it symmetrically (large all_gpus).")
@click.option("--rank", type=click.IntRange(min=0),
              help="AICB output: the rank whose program is written (default: the lowest).")
@click.option("--replay-on", "replay_on", help="After converting, replay the workload on this "
              "cluster (YAML or a name from topologies/) and print the report.")
@click.option("--system", type=click.Path(path_type=Path),
              help="With --replay-on: an ASTRA-sim system JSON applied to the cluster.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@replay_flags(only=BUILD_FLAGS)
def command(source: Path | None, out: Path, to: str, fmt: str, comm_groups: Path | None,
            plain: bool, one_rank: bool, rank: int | None, replay_on: str | None, system: Path | None, as_json: bool,
            **build: Any) -> None:
    """Convert SOURCE (or a built --model workload) to --to's format and write it to OUT.

    Exit code 2 on bad input, with one line naming the file and the line or key.
    """
    res = convert(source, out, to, source_format=fmt, options=options_from(build),
                  comm_groups=comm_groups, chakra_plain=plain, aicb_one_rank=one_rank,
                  aicb_rank=rank, replay_on=replay_on, system=system)
    if as_json:
        click.echo(json.dumps(res.to_dict(), indent=2, default=json_default))
        return
    written = res.written
    shown = ", ".join(written[:3]) + (f" (+{len(written) - 3} more)" if len(written) > 3 else "")
    click.echo(f"wrote {shown}: {res.source_format} -> {to}, {res.ranks} rank(s), {res.tasks} tasks")
    for w in res.warnings:
        click.echo(f"  warning: {w}")
    if res.replay is not None:
        print_report(res.replay.to_dict())
