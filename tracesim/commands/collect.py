"""``tracesim collect``: record training steps of a model under torch.profiler into a bundle.

The tracesim process never imports torch: it validates the flags, then runs
``python -m tracesim.collectors.run`` (the same interpreter) as a subprocess. The collector's progress lines go to stderr as they come; its other output is
shown only if it fails. Only data parallelism is collected (``--ranks N`` local processes).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections import deque
from pathlib import Path

import click

from tracesim.catalog import load_model, model_path
from tracesim.errors import InputError
from tracesim.specs.model import ModelSpec
from tracesim.trace.bundle import is_bundle, load_bundle

TORCH_MISSING = "torch is not installed: pip install 'tracesim[collect]' (torch==2.13.0)"


def resolve_workload(name_or_path: str) -> tuple[ModelSpec, Path]:
    """The model spec for ``--workload`` (a YAML path or a ``workloads/`` name) and its file."""
    path = model_path(name_or_path, "--workload")
    if not path.is_file():
        raise InputError("model spec not found", path)
    return load_model(path), path


def check_layout(ranks: int | None, tp: int, pp: int, dp: int | None) -> int:
    """Validate the parallel flags; return the number of ranks to run."""
    if tp != 1 or pp != 1:
        flag = "--tp" if tp != 1 else "--pp"
        raise InputError(
            "only data parallelism is collected (tp = pp = 1); record a DP job with "
            "--ranks N and retarget it to TP/PP with `tracesim replay`",
            flag,
        )
    if ranks is None:
        return dp or 1
    if dp is not None and dp != ranks:
        raise InputError(f"must equal --ranks ({ranks}), got {dp}", "--dp")
    return ranks


def _check_output(out: Path) -> None:
    if out.exists() and not is_bundle(out):
        if not out.is_dir() or any(out.iterdir()):
            raise InputError("exists and is not a bundle; refusing to overwrite it", out)


def run_collector(argv: list[str]) -> None:
    """Run ``python -m tracesim.collectors.run ARGV``; stream its progress, raise on failure."""
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "tracesim.collectors.run", *argv]
    tail: deque[str] = deque(maxlen=25)
    error_line = None
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env=env, text=True, errors="replace",
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            if line.startswith("collect: error: "):
                error_line = line[len("collect: error: "):]
            elif line.startswith("collect: "):
                click.echo(line, err=True)
            else:
                tail.append(line)
        rc = proc.wait()
    if rc == 0:
        return
    if rc == 2 and error_line:
        raise InputError(error_line)
    for line in tail:
        click.echo(line, err=True)
    raise click.ClickException(f"the collector failed with exit code {rc} (its output is above)")


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
    spec, spec_path = resolve_workload(workload)
    n_ranks = check_layout(ranks, tp, pp, dp)
    _check_output(out)
    if importlib.util.find_spec("torch") is None:
        raise InputError(TORCH_MISSING)
    argv = ["--model", str(spec_path), "--device", device, "--ranks", str(n_ranks),
            "--steps", str(steps), "--warmup", str(warmup), "--measure", str(measure),
            "--calibration-cycles", str(calibration_cycles), "--batch", str(batch), "-o", str(out)]
    if seq_len is not None:
        argv += ["--seq-len", str(seq_len)]
    if threads is not None:
        argv += ["--threads", str(threads)]
    run_collector(argv)
    bundle = load_bundle(out)
    st = bundle.measured_step_time_s
    click.echo(
        f"{out}: {spec.name}, {len(bundle.ranks)} rank(s) on {bundle.device}, "
        f"measured step median {st['median'] * 1e3:.1f} ms "
        f"(min {st['min'] * 1e3:.1f}, max {st['max'] * 1e3:.1f}, n={st['n']})"
    )
