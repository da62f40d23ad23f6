"""One pipeline for every replay: source -> graph -> engine -> report.

:func:`predict` is what ``tracesim replay`` (and :func:`tracesim.api.replay`) runs:

* **graph**: built from a layer template for a model and a layout when any of those options
  is given (:mod:`tracesim.pipeline.build`, a retarget; also a bundle named with ``cluster``
  alone: its recorded model on that cluster); otherwise the source's own graph: extracted
  from a recorded trace or bundle (:func:`tracesim.trace.extract.extract_source`), or a
  workload directory (``tracesim extract``, ``tracesim convert``);
* **engine**: the SimPy replay (:func:`tracesim.engine.replay.replay`) with a communication
  model: the cluster's flow-level network, its uncongested estimate, a symmetry-reduced
  wrapper of either, or none (a self-replay keeps the recorded durations);
* **report**: a :class:`~tracesim.report.result.Prediction`: iteration time, throughput,
  MFU, the breakdown (:mod:`tracesim.report.breakdown`), memory, warnings.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tracesim.catalog import load_cluster
from tracesim.engine.replay import ReplayResult, replay
from tracesim.errors import InputError
from tracesim.graph.taskgraph import TaskGraph
from tracesim.network.model import NetworkModel, replay_network
from tracesim.options import ReplayOptions
from tracesim.pipeline.build import Built, build
from tracesim.pipeline.perturbed import perturbation_step
from tracesim.report.breakdown import mean_breakdown, rank_breakdowns
from tracesim.report.result import Prediction
from tracesim.specs.cluster import ClusterSpec
from tracesim.specs.collectives import MEGATRON_NAME
from tracesim.specs.model import DTYPE_BYTES
from tracesim.template.optimizer import state_bytes

#: progress callback: (stage, done, total)
ProgressFn = Callable[[str, int, int], None]


def predict(source: str | Path | None = None, options: ReplayOptions | None = None, *,
            detail: bool = False, progress: ProgressFn | None = None,
            breakdown: bool = True) -> Prediction:
    """Replay ``source`` (or build ``options.model``) as ``options`` say (module docstring).

    Args:
        source: a bundle, a trace (``.json[.gz]``), an op table (``.parquet``) or a workload
            directory; None to build ``options.model`` from its family's default template.
        options: the replay's options (:class:`~tracesim.options.ReplayOptions`).
        detail: keep what a result directory needs: per-link traffic (flow-level replays),
            per-task scaling methods, one task per template op in full replays.
        progress: called with (stage, done, total) while building and replaying.
        breakdown: False skips the per-rank breakdown of a retarget (its ``breakdown`` and
            ``per_rank`` are then zero / empty): for callers that read only the iteration
            time, such as ``validate published``'s sample replays.
    """
    opts = options or ReplayOptions()
    if source is not None and (fmt := _format_of(source)) in ("chakra", "aicb"):
        return (_replay_chakra if fmt == "chakra" else _replay_aicb)(Path(source), opts)
    kind = _source_kind(source)
    route = _route(source, kind, opts)
    if route == "template":
        return _retarget(source, opts, detail, progress, breakdown)
    if source is None:
        raise InputError("give a bundle or trace to self-replay, or --model / --cluster / "
                         "layout flags to retarget", "SOURCE")
    if kind == "workload" and not _extracted(source):
        from tracesim.graph.io import load_graph

        if not opts.cluster:
            raise InputError("an imported workload holds a task graph, not a recorded run: "
                             "give --cluster to replay it on a cluster", source)
        _cluster_only(opts, "an imported workload")
        return replay_graph(load_graph(source), _cluster_of(opts))
    if route == "trace" or kind == "workload":
        from tracesim.pipeline.recorded import replay_recorded

        return replay_recorded(source, opts, detail, progress)
    return self_replay(source, detail)


#: options a recorded run is replayed with by its own graph (no model spec needed)
TRACE_KEYS = ("cluster", "device", "source_device", "host_speed", "dp", "network", "straggler",
              "jitter", "seed", "degrade_link", "background", "nccl_max_ctas")


def _route(source: str | Path | None, kind: str, opts: ReplayOptions) -> str:
    """``template`` (build a model's layout), ``trace`` (the recorded graph, transformed) or
    ``self`` (the recorded graph as recorded); see ``ReplayOptions.retarget``."""
    from tracesim.options import BUILD_KEYS
    from tracesim.pipeline.build import bundle_model

    given = opts.given()
    layout = [k for k in given if k in BUILD_KEYS and k != "dp"]
    if source is None:
        return "template" if (opts.model or layout or opts.cluster) else "self"
    if opts.retarget == "template" or kind == "template" or layout:
        asked = f"--{layout[0].replace('_', '-')}" if layout else "--retarget template"
        if opts.retarget == "trace" and layout:
            raise InputError(f"{asked} needs a model spec: a trace replay keeps the recorded "
                             "layout (only --dp grows)", "--retarget")
        if kind != "template" and not opts.model and bundle_model(source) is None:
            raise InputError(f"{asked} needs a model spec (--model NAME|YAML) to build the "
                             "layout from: this recording names no model, and a trace replay "
                             "keeps its recorded layout (--cluster, --device and --dp apply)",
                             "--model")
        return "template"
    wants = [k for k in given if k in TRACE_KEYS]
    if opts.retarget == "trace":
        return "trace"
    if wants and kind == "bundle" and opts.cluster and bundle_model(source) is not None:
        return "template"  # a built-in model's bundle: its layer template on the cluster
    return "trace" if wants else "self"


def _extracted(source: str | Path) -> bool:
    """A workload directory written by ``tracesim extract`` (it keeps the op table)."""
    return (Path(source) / "ops.parquet").is_file()


def _format_of(source: str | Path) -> str | None:
    """The workload format of ``source`` (:mod:`tracesim.interop.formats`), None if none."""
    from tracesim.interop.formats import detect_format

    try:
        return detect_format(source)
    except InputError:
        return None


def _replay_aicb(source: Path, opts: ReplayOptions) -> Prediction:
    """A SimAI / AICB workload file replayed on ``--cluster``: every NPU runs the file's rows
    (docs/interop.md, "SimAI / AICB workload files"; ``convert --replay-on`` does the same)."""
    from tracesim.interop.formats import load_workload

    _cluster_only(opts, "an AICB workload")
    if not opts.cluster:
        raise InputError("an AICB workload holds a task graph, not a recorded run: give "
                         "--cluster to replay it on a cluster", source)
    graph, _ = load_workload(source, "aicb")
    return replay_graph(graph, _cluster_of(opts))


def _replay_chakra(source: Path, opts: ReplayOptions) -> Prediction:
    """Chakra ET files replayed on ``--cluster`` (symmetry-reduced when the ranks prove
    symmetric, from SYMMETRY_MIN_GPUS ranks up, as :func:`tracesim.api.convert` reads them
    for ``--to tracesim``)."""
    from tracesim.interop.chakra_import import import_chakra

    _cluster_only(opts, "Chakra ET files")
    if not opts.cluster:
        raise InputError("Chakra ET files hold a task graph, not a recorded run: give "
                         "--cluster to replay them on a cluster", source)
    return replay_graph(import_chakra(source, symmetric=None), _cluster_of(opts))


def _cluster_only(opts: ReplayOptions, what: str) -> None:
    """A task graph replays with its own durations on a cluster: other options would be
    ignored, so they are an error."""
    extra = sorted(k for k in opts.given() if k not in ("cluster", "nodes"))
    if extra:
        raise InputError(f"--{extra[0].replace('_', '-')} does not apply to {what} (every "
                         "rank's tasks with their own durations): give --cluster (and --nodes) "
                         "only", "SOURCE")


def _cluster_of(opts: ReplayOptions) -> ClusterSpec:
    """``--cluster`` scaled to ``--nodes`` (replays of imported task graphs)."""
    from tracesim.pipeline.perturbed import scaled_cluster

    assert opts.cluster is not None
    return scaled_cluster(load_cluster(opts.cluster), opts.nodes)


def _source_kind(source: str | Path | None) -> str:
    if source is None:
        return "none"
    if (Path(source) / "template.yaml").is_file():
        return "template"  # a layer template (an extracted bundle's): it retargets
    from tracesim.trace.sources import source_kind

    return source_kind(source)


def _comm_model(cluster: ClusterSpec, graph: TaskGraph, network: str, symmetric: bool,
                detail: bool) -> tuple[Any, NetworkModel, Any]:
    """(the engine's communication model, the flow network behind it, the link recorder)."""
    from tracesim.engine.symmetry import EstimateComm, SymmetricComm

    # nothing here reads the records
    net = replay_network(cluster, network)
    base = EstimateComm(net) if network == "estimate" else net
    comm = SymmetricComm(base, graph) if symmetric else base
    recorder = None
    if detail and network != "estimate":
        from tracesim.report.links import LinkRecorder

        recorder = LinkRecorder.install(net)
    return comm, net, recorder


def _observers(graph: TaskGraph, progress: ProgressFn | None, stage: str = "replay") -> list[Any]:
    """A replay observer reporting ``stage`` progress every 0.5% of the tasks (none without
    ``progress``)."""
    if not progress:
        return []
    n_tasks = graph.n_tasks
    step = max(1, n_tasks // 200)
    done = [0]

    def _tick(_t: int, _s: int, _e: int) -> None:
        done[0] += 1
        if done[0] % step == 0 or done[0] == n_tasks:
            progress(stage, done[0], n_tasks)

    return [_tick]


def _engine(graph: TaskGraph, comm: Any, progress: ProgressFn | None) -> tuple[ReplayResult, float]:
    """The replay and its wall time (s), reporting progress every 0.5% of the tasks."""
    t0 = time.perf_counter()
    result = replay(graph, comm, observers=_observers(graph, progress))
    return result, time.perf_counter() - t0


def _retarget(source: str | Path | None, opts: ReplayOptions, detail: bool,
              progress: ProgressFn | None, breakdown: bool = True) -> Prediction:
    """A retarget: build the graph, replay it on the cluster, report (module docstring)."""
    from tracesim.report.memory import estimate_memory
    from tracesim.template.resolve import model_flops_per_iteration

    t_wall = time.perf_counter()
    if progress:
        progress("build", 0, 1)
    b: Built = build(source, opts, per_op=bool(detail if opts.per_op is None else opts.per_op))
    graph, model, par, device = b.graph, b.model, b.par, b.device
    # the flow network at every scale; in a symmetric replay the representatives'
    # operations run together with their copies' flows (estimate: an explicit fast option)
    network = opts.network or "flow"
    comm, net, recorder = _comm_model(b.cluster, graph, network, b.symmetric, detail)
    graph, perturbed = perturbation_step(
        graph, opts, b.cluster,
        lambda c: _comm_model(c or b.cluster, graph, network, b.symmetric, False)[0],
        observers=_observers(graph, progress, "reference"))  # the unperturbed replay first
    result, t_rep = _engine(graph, comm, progress)
    warnings = list(b.warnings)
    iter_s = result.makespan_ns * 1e-9
    per_rank = (rank_breakdowns(graph, result.start_ns, result.end_ns, result.makespan_ns)
                if breakdown else {})
    flops = model_flops_per_iteration(b.built.resolved, model, par)
    tflops = flops / iter_s / par.world / 1e12 if iter_s > 0 else 0.0
    peak = device.peak_flops(par.gemm_dtype) / 1e12  # NVFP4: the FP4 peak its GEMMs run at
    mem = estimate_memory(model, par, b.built.stage_params, b.built.stage_expert_params,
                          flash=b.template.meta.get("attention", "flash") != "unfused",
                          capacity_gib=float(getattr(device, "hbm_GiB", 0.0) or 0.0),
                          offloaded_layers=opts.cpu_offload_layers or 0,
                          optimizer_bytes=_optimizer_bytes(b.template.meta, par.dtype))
    if not mem.fits:
        msg = (f"the layout needs {mem.total_gib:.1f} GiB per GPU on pipeline stage "
               f"{mem.worst_stage}, more than the device's {mem.capacity_gib:.0f} GiB")
        if opts.strict:
            raise InputError(msg, "--strict")
        warnings.append(msg)
    if mem.capacity_gib <= 0:
        warnings.append(f"memory per GPU not checked: the {device.name} device profile gives "
                        "no hbm_GiB")
    details = {
        "memory": mem.to_dict(),
        "model_flops_per_iteration": flops,
        "sustained_clock": device.sustained(par.dtype),
        "slowest_gpu": device.fleet_factor(par.world),
        "template": dict(b.template.meta),
        "stack": dict(b.stack),
        "duration_methods": b.duration_methods,
        "replay": {
            "symmetric": b.symmetric,
            "merged_compute": b.merged,
            "network": network,
            "nccl_max_ctas": {MEGATRON_NAME[k]: n for k, n in b.cluster.collectives.max_ctas},
            "tasks": graph.n_tasks,
            "events": result.events,
            "replay_wall_s": round(t_rep, 3),
            "wall_s": round(time.perf_counter() - t_wall, 3),
        },
        "per_stage_breakdown": {str(k): v for k, v in per_rank.items()} if b.symmetric else {},
    }
    if perturbed is not None:
        details["perturbation"] = perturbed.report(graph, result, net=net)
    if device.kind == "gpu":  # how close published runs of this kind came (not a correction)
        from tracesim.report.validated import lookup, model_kind

        kind = model_kind(model.family, model.experts)
        details["validation"] = {"stack": b.stack.get("name"), "kind": kind,
                                 "group": lookup(str(b.stack.get("name")), kind, device.name)}
    return Prediction(
        mode="retarget", iteration_time_s=iter_s, gpus=par.world, cluster=b.cluster.name,
        device=device.name, breakdown=mean_breakdown(per_rank),
        tokens_per_s=par.tokens_per_iteration / iter_s if iter_s > 0 else 0.0,
        tflops_per_gpu=tflops, mfu=tflops / peak if peak else 0.0, model=model.to_dict(),
        parallel=par.to_dict(), memory_gib_per_gpu=round(mem.total_gib, 3),
        warnings=tuple(warnings), details=details, makespan_ns=result.makespan_ns, graph=graph,
        start_ns=result.start_ns, end_ns=result.end_ns,
        methods=b.task_methods(network) if detail else None,
        per_rank=per_rank, links=recorder, topology=net.topology)


def _optimizer_bytes(meta: Any, dtype: str) -> float | None:
    """Optimizer states per parameter of an analytic template's optimizer (None for a
    recorded template: the memory estimate's default, Adam over master weights)."""
    opt = meta.get("optimizer")
    if opt is None:
        return None
    return state_bytes(str(opt), bool(meta.get("master_weights", True)), DTYPE_BYTES[dtype])


def self_replay(source: str | Path, detail: bool = False) -> Prediction:
    """A recorded run with its own durations (the profiler's per-event cost taken out where
    the bundle measured it): steps, iteration time, breakdown."""
    from tracesim.report.selfresult import self_result
    from tracesim.trace.extract import extract_source
    from tracesim.trace.overhead import (
        MAX_OVERHEAD_SHARE,
        largest_claim,
        measured_on_the_job,
        profiler_overhead,
    )
    from tracesim.trace.sources import gc_paused, load_source
    from tracesim.trace.traceinfo import whole_trace_warnings

    notes: list[str] = []
    with gc_paused():
        src = load_source(source)
        overhead = profiler_overhead(src.meta) or (0.0, 0.0)
        claim = largest_claim(src.meta, overhead) if any(overhead) else 0.0
        if claim > MAX_OVERHEAD_SHARE and not measured_on_the_job(src.meta):
            # calibration cycles that do not describe the recorded steps
            notes.append(f"profiler overhead not taken out: its calibration would remove "
                         f"{100 * claim:.0f}% of a recorded step (more than "
                         f"{100 * MAX_OVERHEAD_SHARE:.0f}%: the calibration cycles ran under other "
                         "load); the steps replay as profiled (collect on a quieter machine)")
            overhead = (0.0, 0.0)
        graph = extract_source(src, overhead)
    result = replay(graph)
    res, per_rank = self_result(src, graph, result, unprofiled=any(overhead))
    mfu_note = str(res.pop("mfu_note", ""))
    details = {k: v for k, v in res.items() if k not in _CONTRACT}
    details["profiler_overhead_removed_ns"] = {"per_op": overhead[0], "per_annotation": overhead[1]}
    details["fallbacks"] = dict(result.fallbacks)
    return Prediction(
        mode="self-replay", iteration_time_s=res["iteration_time_s"], gpus=res["gpus"],
        cluster=res["cluster"], device=res["device"], breakdown=res["breakdown"],
        tokens_per_s=res["tokens_per_s"], tflops_per_gpu=res["tflops_per_gpu"], mfu=res["mfu"],
        model=res["model"], parallel=res["parallel"], memory_gib_per_gpu=None,
        warnings=tuple(w for w in (*whole_trace_warnings(src.meta), *notes,
                                   result.fallback_summary(), mfu_note) if w),
        details=details, makespan_ns=result.makespan_ns, graph=graph, start_ns=result.start_ns,
        end_ns=result.end_ns, methods=np.full(graph.n_tasks, "measured", dtype=object),
        per_rank=per_rank)


#: keys of the result dict that are Prediction fields, not details
_CONTRACT = ("mode", "iteration_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "gpus",
             "model", "parallel", "cluster", "device", "breakdown", "memory_gib_per_gpu",
             "warnings")


def replay_graph(graph: TaskGraph, cluster: str | Path | ClusterSpec,
                 system: str | Path | None = None) -> Prediction:
    """Replay a task graph (extracted, or imported from Chakra / AICB) on ``cluster``'s
    flow-level network, with its tasks' own durations.

    ``system``: an ASTRA-sim system JSON whose collective choices and device settings are
    applied to the cluster first (:mod:`tracesim.interop.astrasim_system`). For an AICB
    workload with pp > 1 the result also has ``pp_bubble_s_simai_formula``.
    """
    from tracesim.hardware.device import get_device

    spec = load_cluster(cluster)
    warnings: list[str] = []
    if system is not None:
        from tracesim.interop.astrasim_system import apply_system, load_astrasim_system

        mapping = load_astrasim_system(system)
        spec = apply_system(spec, mapping)
        warnings += [f"system configuration: {w}" for w in mapping.warnings]
    ranks = graph.ranks
    needed = max([ranks[-1] + 1 if ranks else 0] + [max(g) + 1 for g in graph.groups])
    if needed > spec.gpus:
        raise InputError(f"the workload uses ranks 0..{needed - 1} but cluster {spec.name} has "
                         f"{spec.gpus} GPUs", "--cluster")
    comm: Any = NetworkModel(spec)
    if graph.meta.get("representatives"):
        from tracesim.engine.symmetry import SymmetricComm

        comm = SymmetricComm(comm, graph)
        warnings.append("symmetric replay: one rank per class simulated; its collectives run "
                        "over their full groups, other groups' traffic is not simulated")
    result, wall = _engine(graph, comm, None)
    per_rank = rank_breakdowns(graph, result.start_ns, result.end_ns, result.makespan_ns)
    imported = graph.meta.get("imported_from")
    fmt = graph.meta.get("source_format") or (imported.get("format") if isinstance(imported, dict)
                                              else "tracesim")
    details: dict[str, Any] = {"tasks": graph.n_tasks, "events": result.events,
                               "replay_wall_s": round(wall, 3), "source_format": fmt}
    aicb = graph.meta.get("aicb")
    if fmt == "aicb" and isinstance(aicb, dict) and int(aicb.get("pp", 1)) > 1:
        from tracesim.interop.aicb_graph import simai_bubble_s

        details["pp_bubble_s_simai_formula"] = simai_bubble_s(graph, result, aicb)
        warnings.append("pp > 1: AICB rows are one pipeline stage's program; stages were replayed "
                        "side by side without activation transfers. SimAI's own estimate of the "
                        "pipeline bubble is in pp_bubble_s_simai_formula (not included in "
                        "iteration_time_s)")
    model = graph.meta.get("model")
    return Prediction(
        mode="replay-workload", iteration_time_s=result.makespan_ns * 1e-9,
        gpus=(int(aicb["all_gpus"]) if isinstance(aicb, dict)
              else int(graph.meta.get("world") or len(ranks))),
        cluster=spec.name, device=get_device(spec.device).name,
        breakdown=mean_breakdown(per_rank),
        model=model.get("name") if isinstance(model, dict) else f"({fmt} workload)",
        parallel=graph.meta.get("parallel"), warnings=tuple(warnings), details=details,
        makespan_ns=result.makespan_ns, graph=graph, start_ns=result.start_ns,
        end_ns=result.end_ns, per_rank=per_rank)
