"""``tracesim replay``: replay a recorded run (self-replay) or retarget it.

With no --model / --cluster / layout flag, the recorded device and layout are replayed
(self-replay) and the report gives the predicted step time. With any of them, the source (or
the stored default template for the model family) is retargeted to that model, cluster and
parallel layout (tracesim.retarget).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from tracesim.engine.replay import replay
from tracesim.errors import InputError
from tracesim.fileio import write_json
from tracesim.selfreplay import extract_options
from tracesim.sources import load_source, source_kind
from tracesim.workload.extract import extract

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
    retarget = any(flags.get(k) is not None for k in _RETARGET_KEYS)
    only_cluster = flags.get("cluster") is not None and not any(
        flags.get(k) is not None for k in _RETARGET_KEYS if k != "cluster")
    if (source is not None and only_cluster and source_kind(source) == "workload"
            and not (source / "template.yaml").exists()):
        # a task graph (extracted, or converted from Chakra / AICB): replay it as it is
        from tracesim.interop.workload import replay_workload
        from tracesim.workload.graph_io import load_graph

        res = replay_workload(load_graph(source), str(flags["cluster"]))
    elif retarget:
        from tracesim.retarget import run_retarget

        opts = {k: v for k, v in flags.items() if v is not None}
        if opts.get("template") not in (None, "analytic") and source is None:
            source, opts["template"] = Path(str(opts["template"])), None
            opts = {k: v for k, v in opts.items() if v is not None}
        opts["strict"] = strict
        opts["full"] = full
        res = run_retarget(str(source) if source else None, opts)
    else:
        if source is None:
            raise InputError("give a bundle or trace to self-replay, or --model / --cluster / "
                             "layout flags to retarget", "SOURCE")
        res = _self_replay(source)
    if out is not None:
        write_json(out / "result.json", res)
    if as_json:
        click.echo(json.dumps(res, indent=2, default=_json_default))
    else:
        click.echo(format_report(res))


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _self_replay(source: Path) -> dict[str, Any]:
    from tracesim.report.selfresult import self_result

    if source_kind(source) == "workload":
        raise InputError("self-replay needs the recorded bundle or trace (a workload directory "
                         "holds no measured steps)", source)
    src = load_source(source)
    po = (src.meta or {}).get("profiler_overhead") or {}
    overhead = float(po.get("per_event_ns", 0.0)) if isinstance(po, dict) else 0.0
    graph = extract(src.op_table, extract_options(src, overhead), src.et_tables)
    result = replay(graph)
    res = self_result(src, graph, result)
    res["profiler_overhead_removed_ns_per_event"] = overhead
    return res


def fmt_seconds(x: float | None) -> str:
    """Seconds with a unit that keeps 4 significant digits (s, ms or us)."""
    if x is None:
        return "n/a"
    ax = abs(x)
    if ax >= 1 or ax == 0:
        return f"{x:.4g} s"
    if ax >= 1e-3:
        return f"{x * 1e3:.4g} ms"
    return f"{x * 1e6:.4g} us"


def format_report(res: dict[str, Any]) -> str:
    """A plain-text report of a replay result."""
    def f(x: Any, fmt: str) -> str:
        return "n/a" if x is None else format(x, fmt)

    lines = []
    title = res.get("mode", "replay")
    model = res.get("model")
    mname = model.get("name") if isinstance(model, dict) else model
    lines.append(f"tracesim {title}: model {mname or 'unknown'} on {res.get('cluster')} "
                 f"({res.get('gpus')} rank(s), device {res.get('device', '')})")
    lines.append(f"  iteration time     {fmt_seconds(res.get('iteration_time_s'))}")
    if res.get("measured_step_time_s") is not None:
        m = res["measured_step_time_s"]
        err = (res["iteration_time_s"] - m) / m * 100 if m else 0.0
        lines.append(f"  measured           {fmt_seconds(m)}   (error {err:+.2f}%)")
    lines.append(f"  tokens/s           {f(res.get('tokens_per_s'), ',.0f')}")
    lines.append(f"  TFLOP/s per GPU    {f(res.get('tflops_per_gpu'), '.3f')}")
    lines.append(f"  MFU                {f(res.get('mfu'), '.1%')}")
    lines.append(f"  memory per GPU     {f(res.get('memory_gib_per_gpu'), '.1f')} GiB")
    bd = res.get("breakdown") or {}
    if bd:
        lines.append("  breakdown (one iteration, first rank):")
        lines.append(f"    compute          {fmt_seconds(bd.get('compute_s', 0))}")
        for k, v in (bd.get("exposed_comm_s") or {}).items():
            if v:
                lines.append(f"    exposed {k:<8} {fmt_seconds(v)}")
        lines.append(f"    bubble           {fmt_seconds(bd.get('bubble_s', 0))}")
        lines.append(f"    idle             {fmt_seconds(bd.get('idle_s', 0))}")
    for w in res.get("warnings", []) or []:
        lines.append(f"  warning: {w}")
    return "\n".join(lines)
