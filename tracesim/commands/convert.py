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

from tracesim.errors import InputError

_BUILD_KEYS = ("model", "cluster", "tp", "pp", "dp", "cp", "ep", "sp", "vpp", "zero",
               "micro_batch", "global_batch", "seq_len", "schedule", "recompute", "dtype")


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
@click.option("--model", help="Build from a model spec (YAML or a name from workloads/).")
@click.option("--cluster", help="Cluster the built workload is sized for.")
@click.option("--tp", type=click.IntRange(min=1), help="Tensor-parallel degree.")
@click.option("--pp", type=click.IntRange(min=1), help="Pipeline-parallel degree.")
@click.option("--dp", type=click.IntRange(min=1), help="Data-parallel degree.")
@click.option("--cp", type=click.IntRange(min=1), help="Context-parallel degree.")
@click.option("--ep", type=click.IntRange(min=1), help="Expert-parallel degree.")
@click.option("--sp/--no-sp", default=None, help="Sequence parallelism.")
@click.option("--vpp", type=click.IntRange(min=1), help="Virtual stages per pipeline rank.")
@click.option("--zero", type=click.IntRange(0, 3), help="ZeRO stage.")
@click.option("--micro-batch", type=click.IntRange(min=1), help="Sequences per micro-batch.")
@click.option("--global-batch", type=click.IntRange(min=1), help="Sequences per iteration.")
@click.option("--seq-len", type=click.IntRange(min=1), help="Sequence length.")
@click.option("--schedule", type=click.Choice(["gpipe", "1f1b", "interleaved"]), help="Pipeline schedule.")
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]), help="Recomputation.")
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp8", "fp32"]), help="Compute dtype.")
def command(source: Path | None, out: Path, to: str, fmt: str, comm_groups: Path | None,
            plain: bool, one_rank: bool, rank: int | None, replay_on: str | None, system: Path | None, as_json: bool,
            **build: Any) -> None:
    """Convert SOURCE (or a built --model workload) to --to's format and write it to OUT.

    Exit code 2 on bad input, with one line naming the file and the line or key.
    """
    from tracesim.convert import (
        build_workload,
        load_workload,
        replay_workload,
        save_workload,
    )

    given = {k: v for k, v in build.items() if v is not None}
    if source is None:
        if not given:
            raise InputError("give a SOURCE to convert, or --model and --cluster to build one",
                             "SOURCE")
        graph, src_fmt = build_workload(given), "built"
    else:
        extra = sorted(k for k in given if k != "cluster")
        if extra:
            raise InputError(f"--{extra[0].replace('_', '-')} builds a workload; it cannot be "
                             "combined with a SOURCE", f"--{extra[0].replace('_', '-')}")
        graph, src_fmt = load_workload(source, fmt, comm_groups=comm_groups, plain=plain,
                                        one_rank=one_rank)
    if system is not None and not replay_on:
        raise InputError("--system applies to the --replay-on cluster; give --replay-on", "--system")
    written, warnings = save_workload(graph, out, to, rank=rank)
    res: dict[str, Any] = {
        "source": str(source) if source else None, "from": src_fmt, "to": to,
        "written": [str(p) for p in written], "ranks": len(graph.ranks), "tasks": graph.n_tasks,
        "warnings": warnings,
    }
    if replay_on:
        res["replay"] = replay_workload(graph, replay_on, system)
    if as_json:
        click.echo(json.dumps(res, indent=2, default=_json_default))
        return
    shown = ", ".join(res["written"][:3]) + (f" (+{len(written) - 3} more)" if len(written) > 3 else "")
    click.echo(f"wrote {shown}: {src_fmt} -> {to}, {res['ranks']} rank(s), {res['tasks']} tasks")
    for w in warnings:
        click.echo(f"  warning: {w}")
    if replay_on:
        from tracesim.commands.replay import format_report

        click.echo(format_report(res["replay"]))


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
