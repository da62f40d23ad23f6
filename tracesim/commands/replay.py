"""``tracesim replay``: replay a recorded run (self-replay) or retarget it.

With no --model / --cluster / layout flag, the recorded device and layout are replayed
(self-replay) and the report gives the predicted step time. With any of them, the source (or
the stored default template for the model family) is retargeted to that model, cluster and
parallel layout (tracesim.pipeline).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import numpy as np

from tracesim.engine.replay import replay
from tracesim.errors import InputError
from tracesim.report.resultdir import Replayed, enrich, write_result_dir
from tracesim.report.terminal import Progress, print_report, report_text
from tracesim.report.terminal import fmt_seconds as fmt_seconds
from tracesim.trace.extract import extract_source
from tracesim.trace.overhead import profiler_overhead
from tracesim.trace.sources import load_source, source_kind

_RETARGET_KEYS = ("model", "cluster", "tp", "pp", "dp", "cp", "ep", "sp", "vpp", "zero", "fsdp",
                  "micro_batch", "global_batch", "seq_len", "schedule", "recompute", "dtype")


@click.command("replay")
@click.argument("source", required=False, type=click.Path(path_type=Path))
@click.option("--model", help="Model spec: a YAML file or a name from workloads/.")
@click.option("--cluster", help="Cluster spec: a YAML file or a name from topologies/.")
@click.option("--tp", type=click.IntRange(min=1), help="Tensor-parallel degree.")
@click.option("--pp", type=click.IntRange(min=1), help="Pipeline-parallel degree (stages).")
@click.option("--dp", type=click.IntRange(min=1), help="Data-parallel degree.")
@click.option("--cp", type=click.IntRange(min=1), help="Context-parallel degree.")
@click.option("--ep", type=click.IntRange(min=1), help="Expert-parallel degree.")
@click.option("--sp/--no-sp", default=None, help="Sequence parallelism (with TP).")
@click.option("--vpp", type=click.IntRange(min=1), help="Virtual stages per pipeline rank (interleaved).")
@click.option("--zero", type=click.IntRange(0, 3), help="ZeRO stage 0-3.")
@click.option("--fsdp", is_flag=True, default=None, help="Fully sharded data parallel.")
@click.option("--micro-batch", type=click.IntRange(min=1), help="Sequences per micro-batch.")
@click.option("--global-batch", type=click.IntRange(min=1), help="Sequences per iteration.")
@click.option("--seq-len", type=click.IntRange(min=1), help="Sequence length (tokens).")
@click.option("--schedule", type=click.Choice(["gpipe", "1f1b", "interleaved"]), help="Pipeline schedule.")
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]), help="Activation recomputation.")
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp8", "fp32"]), help="Compute dtype.")
@click.option("--template", help="Layer template: 'analytic' (first principles) or a bundle / trace "
              "to take it from (default: SOURCE, else the family's stored bundle).")
@click.option("--attention", type=click.Choice(["flash", "unfused"]),
              help="Attention kernel of the analytic template (unfused: 2021-era softmax kernels).")
@click.option("--network", type=click.Choice(["flow", "estimate"]),
              help="flow: flow-level max-min network model; estimate: uncongested closed forms (faster).")
@click.option("--strict", is_flag=True, help="Error (not warn) when the layout does not fit in memory.")
@click.option("--full", is_flag=True, help="Simulate every rank (no symmetry reduction).")
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), help="Result directory to write.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def command(source: Path | None, out: Path | None, as_json: bool, strict: bool, full: bool, **flags: Any) -> None:
    """Replay SOURCE (bundle, trace or workload) or retarget it to another model/cluster/layout.

    Times are seconds, throughput tokens/s, TFLOP/s per GPU. Exit code 2 on bad input.
    """
    progress = Progress()
    try:
        rep = run_replay(source, flags, strict=strict, full=full, detail=out is not None,
                         progress=progress)
    finally:
        progress.close()
    if out is not None:
        res = write_result_dir(out, rep)
    else:
        res = enrich(rep)
    if as_json:
        click.echo(json.dumps(res, indent=2, default=_json_default))
    else:
        print_report(res)


def run_replay(source: Path | None, flags: dict[str, Any], *, strict: bool = False,
               full: bool = False, detail: bool = False,
               progress: Any = None) -> Replayed:
    """What ``tracesim replay`` runs, as a :class:`~tracesim.report.resultdir.Replayed`.

    ``flags`` are the command's options by parameter name (``model``, ``cluster``, ``tp``,
    ..., ``network``; None = not given); ``detail`` also records per-link traffic and
    per-task scaling methods (for a result directory).
    """
    flags = {k: flags.get(k) for k in (*_RETARGET_KEYS, "template", "attention", "network")}
    retarget = any(flags.get(k) is not None for k in _RETARGET_KEYS)
    only_cluster = flags.get("cluster") is not None and not any(
        flags.get(k) is not None for k in _RETARGET_KEYS if k != "cluster")
    if (source is not None and only_cluster and source_kind(source) == "workload"
            and not (source / "template.yaml").exists()):
        # a task graph (extracted, or converted from Chakra / AICB): replay it as it is
        from tracesim.convert import replay_workload
        from tracesim.graph.io import load_graph

        return Replayed(replay_workload(load_graph(source), str(flags["cluster"])))
    if retarget:
        from tracesim.pipeline import simulate_retarget

        opts = {k: v for k, v in flags.items() if v is not None}
        if opts.get("template") not in (None, "analytic") and source is None:
            source, opts["template"] = Path(str(opts["template"])), None
            opts = {k: v for k, v in opts.items() if v is not None}
        opts["strict"] = strict
        opts["full"] = full
        run = simulate_retarget(str(source) if source else None, opts,
                                record_links=detail, progress=progress)
        return Replayed(run.result, run.graph, run.replay.start_ns, run.replay.end_ns,
                        run.task_methods() if detail else None, run.per_rank,
                        run.links, run.network.topology)
    if source is None:
        raise InputError("give a bundle or trace to self-replay, or --model / --cluster / "
                         "layout flags to retarget", "SOURCE")
    return _self_replay(source)


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _self_replay(source: Path) -> Replayed:
    from tracesim.report.selfresult import self_result

    if source_kind(source) == "workload":
        raise InputError("self-replay needs the recorded bundle or trace (a workload directory "
                         "holds no measured steps)", source)
    src = load_source(source)
    overhead = profiler_overhead(src.meta) or (0.0, 0.0)
    graph = extract_source(src, overhead)
    result = replay(graph)
    res = self_result(src, graph, result)
    res["profiler_overhead_removed_ns"] = {"per_op": overhead[0], "per_annotation": overhead[1]}
    methods = np.full(graph.n_tasks, "measured", dtype=object)
    return Replayed(res, graph, result.start_ns, result.end_ns, methods)


def format_report(res: dict[str, Any]) -> str:
    """A plain-text report of a replay result (:func:`tracesim.report.terminal.report_text`)."""
    return report_text(res)
