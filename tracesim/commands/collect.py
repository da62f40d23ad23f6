"""``tracesim collect``: record training steps of a model under torch.profiler into a bundle.

The tracesim process never imports torch: it validates the flags, then runs the collector
(``python -m tracesim.collectors.run``, :func:`tracesim.api.collect`) as a subprocess. The
collector's progress lines go to stderr as they come; its other output is shown only if it
fails. Only data parallelism is collected (``--ranks N`` local processes).
"""

from __future__ import annotations

from pathlib import Path

import click

from tracesim.api import collect
from tracesim.collectors.launch import CollectorFailed, check_layout, resolve_workload
from tracesim.trace.bundle import load_bundle


@click.command("collect")
@click.option("--workload", required=True, metavar="NAME|MODEL.yaml",
              help="Model spec: a name from workloads/ (gpt-tiny, llama-tiny, moe-tiny) or a YAML file.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--ranks", type=click.IntRange(min=1), default=None,
              help="Data-parallel processes (DDP; gloo on cpu, nccl on cuda). Default 1.")
@click.option("--tp", type=click.IntRange(min=1), default=1, help="Must be 1 (not collected).")
@click.option("--pp", type=click.IntRange(min=1), default=1, help="Must be 1 (not collected).")
@click.option("--dp", type=click.IntRange(min=1), default=None, help="Must equal --ranks.")
@click.option("--steps", type=click.IntRange(min=1), default=8, show_default=True,
              help="Profiled steps (self-replay predicts the unprofiled step time by the "
                   "median over them; templates use the first).")
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True,
              help="Unprofiled warm-up steps before profiling.")
@click.option("--measure", type=click.IntRange(min=1), default=16, show_default=True,
              help="Timed unprofiled reference steps, spread over the profiled steps' cycles "
                   "(median/min/max in meta.yaml).")
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
def command(workload: str, device: str, ranks: int | None, tp: int, pp: int, dp: int | None,
            steps: int, warmup: int, measure: int, calibration_cycles: int, batch: int,
            seq_len: int | None, threads: int | None, out: Path) -> None:
    """Record training steps of a model under torch.profiler into a bundle.

    Runs WARMUP steps, then one profiler session of cycles (settle step, timed unprofiled
    steps, profiler warm-up, one profiled step): STEPS recorded cycles (Kineto trace and
    execution trace per rank, and MEASURE reference steps) spread among CALIBRATION_CYCLES
    cycles that measure the profiler's overhead. Writes OUT/meta.yaml and
    OUT/rank{r}/{trace,et}.json.gz.
    """
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
