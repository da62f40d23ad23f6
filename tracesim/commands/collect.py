"""``tracesim collect``: record training steps under torch.profiler into a bundle.

Two ways: ``--workload NAME`` runs a built-in model (the collector, ``python -m
tracesim.collectors.run``, :func:`tracesim.api.collect`; its progress lines go to stderr as
they come, its other output is shown only if it fails; only data parallelism, ``--ranks N``
local processes); ``-- CMD ...`` runs the user's own training command with the profiler
injected into every rank (:func:`tracesim.api.collect_command`; the job's stdout and stderr
pass through). The tracesim process never imports torch.
"""

from __future__ import annotations

from pathlib import Path

import click

from tracesim.api import collect, collect_command
from tracesim.collectors.launch import CollectorFailed, check_layout, resolve_workload
from tracesim.errors import InputError
from tracesim.trace.bundle import load_bundle

#: (steps, warmup, measure) defaults: built-in workload, own command
WORKLOAD_DEFAULTS = (8, 3, 16)
COMMAND_DEFAULTS = (4, 3, 8)
#: options that only the built-in workload path takes
WORKLOAD_ONLY = ("workload", "device", "ranks", "tp", "pp", "dp", "calibration_cycles", "batch",
                 "seq_len", "threads")


@click.command("collect", context_settings={"allow_interspersed_args": False})
@click.option("--workload", default=None, metavar="NAME|MODEL.yaml",
              help="Model spec: a name from workloads/ (gpt-tiny, llama-tiny, moe-tiny) or a "
                   "YAML file. Not with a command.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--ranks", type=click.IntRange(min=1), default=None,
              help="Data-parallel processes (DDP; gloo on cpu, nccl on cuda). Default 1.")
@click.option("--tp", type=click.IntRange(min=1), default=1, help="Must be 1 (not collected).")
@click.option("--pp", type=click.IntRange(min=1), default=1, help="Must be 1 (not collected).")
@click.option("--dp", type=click.IntRange(min=1), default=None, help="Must equal --ranks.")
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="Profiled steps (self-replay predicts the unprofiled step time by the "
                   "median over them; templates use the first). Default 8; 4 with a command.")
@click.option("--warmup", type=click.IntRange(min=0), default=None,
              help="Unprofiled warm-up steps before profiling (default 3; with a command, "
                   "optimizer steps, at least 1).")
@click.option("--measure", type=click.IntRange(min=1), default=None,
              help="Timed unprofiled reference steps (median/min/max in meta.yaml); with "
                   "--workload spread over the profiled steps' cycles. Default 16; 8 with a "
                   "command.")
@click.option("--calibration-cycles", type=click.IntRange(min=0), default=16, show_default=True,
              help="Profiler cycles, interleaved with the recorded ones, that measure the "
                   "profiler's per-event overhead (0: the loop microbenchmark's lower bound).")
@click.option("--batch", type=click.IntRange(min=1), default=8, show_default=True,
              help="Micro-batch per rank (sequences).")
@click.option("--seq-len", type=click.IntRange(min=1), default=None,
              help="Sequence length (default: the model's seq_len).")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="torch threads per rank (default: cores // ranks).")
@click.option("-o", "--out", "out", required=True, type=click.Path(path_type=Path),
              help="Bundle directory to write (an existing bundle there is replaced).")
@click.argument("cmd", nargs=-1, metavar="[-- COMMAND [ARGS]...]", type=click.UNPROCESSED)
def command(workload: str | None, device: str, ranks: int | None, tp: int, pp: int,
            dp: int | None, steps: int | None, warmup: int | None, measure: int | None,
            calibration_cycles: int, batch: int, seq_len: int | None, threads: int | None,
            out: Path, cmd: tuple[str, ...]) -> None:
    """Record training steps under torch.profiler into a bundle.

    With --workload: a built-in model. Runs WARMUP steps, then one profiler session of
    cycles (settle step, timed unprofiled steps, profiler warm-up, one profiled step): STEPS
    recorded cycles (Kineto trace and execution trace per rank, and MEASURE reference steps)
    spread among CALIBRATION_CYCLES cycles that measure the profiler's overhead.

    With a command after -- (python train.py ..., torchrun ... train.py ...): your own
    training job, the profiler injected into every rank. Steps are optimizer steps: WARMUP
    untouched, MEASURE timed, 1 profiler warm-up, STEPS profiled; the job then goes on.

    Writes OUT/meta.yaml and OUT/rank{r}/{trace,et}.json.gz.
    """
    if cmd:
        _own_command(list(cmd), out, steps, warmup, measure)
        return
    if workload is None:
        raise InputError("give --workload NAME|MODEL.yaml, or your own training command "
                         "after --", "collect")
    steps, warmup, measure = (v if v is not None else d
                              for v, d in zip((steps, warmup, measure), WORKLOAD_DEFAULTS,
                                              strict=True))
    spec, _ = resolve_workload(workload)
    n_ranks = check_layout(ranks, tp, pp, dp)
    try:
        collect(workload, out, device=device, ranks=n_ranks, steps=steps, warmup=warmup,
                measure=measure, calibration_cycles=calibration_cycles, batch=batch,
                seq_len=seq_len, threads=threads, log=lambda line: click.echo(line, err=True))
    except CollectorFailed as exc:
        for line in exc.tail:
            click.echo(line, err=True)
        raise click.ClickException(f"{exc} (its output is above)") from None
    bundle = load_bundle(out)
    st = bundle.measured_step_time_s
    assert st is not None  # a built-in model's collection always times its steps
    click.echo(
        f"{out}: {spec.name}, {len(bundle.ranks)} rank(s) on {bundle.device}, "
        f"measured step median {st['median'] * 1e3:.1f} ms "
        f"(min {st['min'] * 1e3:.1f}, max {st['max'] * 1e3:.1f}, n={st['n']})"
    )


def _own_command(cmd: list[str], out: Path, steps: int | None, warmup: int | None,
                 measure: int | None) -> None:
    ctx = click.get_current_context()
    for name in WORKLOAD_ONLY:
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT:
            flag = "--" + name.replace("_", "-")
            if name == "workload":
                raise InputError("give either --workload or a command after --, not both", flag)
            raise InputError("applies to --workload (a built-in model), not to a command; "
                             "launch several ranks of a command with torchrun", flag)
    k, w, m = (v if v is not None else d
               for v, d in zip((steps, warmup, measure), COMMAND_DEFAULTS, strict=True))
    collect_command(cmd, out, steps=k, warmup=w, measure=m,
                    log=lambda line: click.echo(line, err=True))
    bundle = load_bundle(out)
    st = bundle.measured_step_time_s
    assert st is not None  # a recorded command always times its steps
    click.echo(
        f"{out}: {len(bundle.ranks)} rank(s) of {bundle.meta.get('world_size')} on "
        f"{bundle.device}, {bundle.meta.get('profiled_steps')} profiled steps, measured step "
        f"median {st['median'] * 1e3:.1f} ms (min {st['min'] * 1e3:.1f}, "
        f"max {st['max'] * 1e3:.1f}, n={st['n']})"
    )
