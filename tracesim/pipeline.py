"""Retargeting: predict one training iteration of a model on a cluster and parallel layout.

:func:`run_retarget` is what ``tracesim replay --model/--cluster/--tp ...`` calls. It

1. loads the model spec (``--model``, else the source bundle's), the cluster spec and the
   layout (:func:`tracesim.specs.parallel.parallel_from_options`);
2. picks the layer template: the source's (a bundle or trace: extracted from its op table;
   a workload directory: its ``template.yaml``), else the stored default bundle of the
   model's family, else the first-principles template of the family;
3. turns each template op into a duration on the cluster's device: measured on the same
   device -> the measurement (scaled by the cost model's ratio when the shapes changed);
   measured on another GPU -> scaled; measured on a CPU or not measured -> the cost model;
4. builds the task graph and replays it: with all ranks on the flow-level network model of
   the cluster; from 64 GPUs up (unless ``full``) with one representative rank per pipeline
   stage and each collective charged its uncongested time on its full group
   (:class:`tracesim.engine.symmetry.EstimateComm`), ``network: flow|estimate`` overrides;
5. reports iteration time, throughput, TFLOP/s and MFU (model FLOPs only, no
   recomputation), the breakdown, and the memory estimate (a warning, or with ``strict``
   an error, when the worst stage does not fit the device).
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tracesim.catalog import load_model
from tracesim.errors import InputError
from tracesim.specs.model import ModelSpec, model_from_dict
from tracesim.specs.parallel import ParallelSpec, parallel_from_options
from tracesim.template.analytic import first_principles_template
from tracesim.template.layer import LayerTemplate

#: above this many GPUs the replay simulates one representative rank per pipeline stage
SYMMETRY_MIN_GPUS = 64


def _load_model(source: str | None, opts: Mapping[str, Any]) -> ModelSpec:
    if opts.get("model"):
        return load_model(str(opts["model"]))
    if source:
        from tracesim.template.from_trace import bundle_meta

        meta = bundle_meta(source)
        if meta and isinstance(meta.get("model"), Mapping):
            return model_from_dict(meta["model"], Path(source) / "meta.yaml")
    raise InputError("give --model (a model spec), or a source bundle whose meta.yaml has one", "--model")


def _files_stamp(directory: Path) -> tuple[tuple[str, int, int], ...]:
    """(name, size, mtime_ns) of every file under ``directory``: a cache key that changes
    when the stored bundle does."""
    stats = ((f, f.stat()) for f in directory.rglob("*") if f.is_file())
    return tuple(sorted((str(f.relative_to(directory)), st.st_size, st.st_mtime_ns) for f, st in stats))


@functools.lru_cache(maxsize=8)
def _stored_template(bundle: str, stamp: tuple[tuple[str, int, int], ...]) -> LayerTemplate:
    """The template of a stored default bundle, extracted once per process (a sweep or a
    notebook replays many points from the same bundle; extracting takes ~0.3 s). The
    template is a frozen dataclass; ``stamp`` (:func:`_files_stamp`) keys the cache on the
    bundle's files."""
    from tracesim.template.from_trace import template_from_source

    return template_from_source(bundle)


def choose_template(source: str | None, model: ModelSpec, opts: Mapping[str, Any]) -> tuple[LayerTemplate, list[str]]:
    """The layer template for ``model``: from ``source``, the family's stored bundle, or
    first principles (``opts['template'] == 'analytic'`` forces the last)."""
    from tracesim.catalog import default_bundle
    from tracesim.template.from_trace import template_from_source

    warnings: list[str] = []
    attention = str(opts.get("attention") or "flash")
    if opts.get("template") == "analytic":
        return first_principles_template(model, attention), warnings
    if source:
        return template_from_source(source, model), warnings
    bundle = default_bundle(model.family)
    if bundle is not None:
        try:
            return _stored_template(str(bundle), _files_stamp(bundle)), warnings
        except InputError as exc:
            warnings.append(f"default template {bundle} unusable ({exc.message}); using first principles")
    return first_principles_template(model, attention), warnings


@dataclass
class RetargetRun:
    """Everything one retarget replay produced (for reports that need more than the dict).

    Attributes:
        result: the ``replay --json`` object (what :func:`run_retarget` returns).
        graph: the replayed task graph.
        replay: the engine's per-task start / end times (ns).
        comm: the communication model the engine talked to.
        network: the flow-level :class:`~tracesim.network.model.NetworkModel` (also behind
            ``comm`` for estimates, but then it carried no flows).
        links: the per-link traffic recorder when ``record_links`` was asked for and the
            network was simulated flow by flow, else None.
        per_rank: breakdown of every simulated rank (seconds; sums to the iteration time).
        op_methods: scaling method of each template op, by op name (see
            :meth:`task_methods`).
    """

    result: dict
    graph: Any
    replay: Any
    comm: Any
    network: Any
    links: Any = None
    per_rank: dict = field(default_factory=dict)
    op_methods: dict = field(default_factory=dict)

    def task_methods(self) -> np.ndarray:
        """Per task (row order), how its duration was obtained: ``measured`` | ``scaled`` |
        ``model`` for compute (``mixed`` for a merged task whose parts differ), ``flow`` or
        ``estimate`` (the network model used) for communication."""
        return _task_methods(self.graph, self.op_methods, str(self.result["replay"]["network"]))


#: progress callback: (stage, done, total)
ProgressFn = Callable[[str, int, int], None]


def run_retarget(source: str | None, opts: Mapping[str, object]) -> dict:
    """Predict an iteration of ``--model`` on ``--cluster`` with the given layout.

    Args:
        source: a bundle, trace or workload directory whose template to use, or None.
        opts: the replay flags: model, cluster, tp, pp, dp, cp, ep, sp, vpp, zero, fsdp,
            micro_batch, global_batch, seq_len, schedule, recompute, dtype, strict, full;
            optional: template (``analytic`` forces the first-principles template),
            attention (``flash`` | ``unfused``, for the first-principles template), network
            (``flow`` | ``estimate``).

    Returns:
        The ``replay --json`` object (DESIGN.md): iteration_time_s, tokens_per_s,
        tflops_per_gpu, mfu, gpus, model, parallel, cluster, breakdown, memory_gib_per_gpu,
        warnings, and details (memory parts, template, duration methods, replay size).
    """
    return simulate_retarget(source, opts).result


def _method_recorder(op_time: Callable, methods: Counter) -> tuple[Callable, dict[str, str]]:
    """Wrap ``op_time`` to remember the scaling method of each template op, by op name."""
    by_name: dict[str, str] = {}

    def wrapped(op_class: str, flops: float, nbytes: float, op: Any, units: float = 1.0) -> int:
        before = dict(methods)
        ns = op_time(op_class, flops, nbytes, op, units)
        got = [k for k, v in methods.items() if v != before.get(k, 0)]
        if got:
            name = str(getattr(op, "name", ""))
            prev = by_name.get(name)
            by_name[name] = got[0] if prev in (None, got[0]) else "mixed"
        return ns

    return wrapped, by_name


def _task_methods(graph: Any, by_name: Mapping[str, str], comm_method: str) -> np.ndarray:
    """Per-task scaling method (see :meth:`RetargetRun.task_methods`)."""
    t = graph.tasks
    names = t["name"].astype(str)
    uniq = names.unique()
    table = {}
    for name in uniq.tolist():
        parts = {by_name.get(p.split(":")[0], "") for p in name.split("..")}
        parts.discard("")
        table[name] = parts.pop() if len(parts) == 1 else ("mixed" if parts else "model")
    out = names.map(table).to_numpy(dtype=object)
    comm = ~t["kind"].isin(["gpu", "cpu"]).to_numpy()
    out[comm] = comm_method
    return out


def simulate_retarget(source: str | None, opts: Mapping[str, object], *,
                      record_links: bool = False,
                      progress: ProgressFn | None = None,
                      per_op: bool | None = None) -> RetargetRun:
    """:func:`run_retarget`, returning the graph, replay and models along with the result.

    Args:
        source, opts: as :func:`run_retarget`.
        record_links: record every flow's bytes per link (for ``links.parquet`` and the
            link heat map); only a flow-level replay has flows.
        progress: called with (stage, done, total) while building and replaying.
        per_op: keep one task per template op in a full replay (for per-op outputs: the
            result directory's ``ops.parquet``, timeline and critical path by op name and
            class); default: when ``record_links`` (a result directory is being written).
            Otherwise a full replay merges runs of compute tasks that nothing can interleave
            with (:meth:`~tracesim.build.units.Unit.compacted`), which changes no simulated
            time: a merged task starts when the run's first part would and lasts the sum of
            the parts. Symmetry-reduced replays always merge.
    """
    from tracesim.build.builder import build_graph
    from tracesim.catalog import load_cluster
    from tracesim.engine.replay import replay
    from tracesim.engine.symmetry import EstimateComm, SymmetricComm
    from tracesim.hardware.device import get_device
    from tracesim.network.model import NetworkModel
    from tracesim.report.breakdown import mean_breakdown, rank_breakdowns
    from tracesim.report.memory import estimate_memory
    from tracesim.specs.cluster import ClusterSpec
    from tracesim.template.durations import make_op_time
    from tracesim.template.resolve import model_flops_per_iteration

    t_wall = time.perf_counter()
    warnings: list[str] = []
    model = _load_model(source, opts)
    if not opts.get("cluster"):
        raise InputError("retargeting needs --cluster (a cluster spec)", "--cluster")
    cluster = load_cluster(opts["cluster"] if isinstance(opts["cluster"], ClusterSpec) else str(opts["cluster"]))
    device = get_device(cluster.device)
    par: ParallelSpec = parallel_from_options(opts, model, cluster.gpus)
    if par.world > cluster.gpus:
        raise InputError(
            f"tp {par.tp} x pp {par.pp} x dp {par.dp} x cp {par.cp} = {par.world} GPUs, but "
            f"cluster {cluster.name} has {cluster.gpus}", "--dp")
    if par.world < cluster.gpus:
        warnings.append(f"the layout uses {par.world} of the cluster's {cluster.gpus} GPUs "
                        f"(ranks 0..{par.world - 1})")
    if model.is_moe and par.tp > 1 and par.sp and opts.get("sp") is None:
        warnings.append("sequence parallelism switched on: MoE with tp > 1 needs it (as Megatron-core)")
    template, w = choose_template(source, model, opts)
    warnings += w
    op_time, methods = make_op_time(template, device, par.dtype)
    if cluster.host_contention is not None:  # co-located CPU ranks slow each other
        from tracesim.hardware.contention import scaled_op_time

        op_time = scaled_op_time(op_time, cluster.host_contention.factor(min(par.world, cluster.gpus_per_node)))
    op_time, by_name = _method_recorder(op_time, methods)
    if progress:
        progress("build", 0, 1)
    symmetric = not opts.get("full") and par.world >= SYMMETRY_MIN_GPUS
    merged = symmetric or not (record_links if per_op is None else per_op)
    built = build_graph(model, par, template, op_time, representatives=symmetric,
                        merge_compute=merged)
    graph = built.graph
    net = NetworkModel(cluster, keep_records=False)  # nothing here reads them
    recorder = None
    # a symmetric replay has only the representatives' flows, so flow-level contention is not
    # modelled faithfully anyway: charge each collective its uncongested time instead
    network = str(opts.get("network") or ("estimate" if symmetric else "flow"))
    base = EstimateComm(net) if network == "estimate" else net
    comm = SymmetricComm(base, graph) if symmetric else base
    if record_links and network == "flow":
        from tracesim.report.links import LinkRecorder

        recorder = LinkRecorder.install(net)
    observers = []
    if progress:
        n_tasks = graph.n_tasks
        step = max(1, n_tasks // 200)
        done = [0]

        def _tick(_t: int, _s: int, _e: int) -> None:
            done[0] += 1
            if done[0] % step == 0 or done[0] == n_tasks:
                progress("replay", done[0], n_tasks)

        observers.append(_tick)
    t_rep = time.perf_counter()
    result = replay(graph, comm, observers=observers)
    t_rep = time.perf_counter() - t_rep
    iter_s = result.makespan_ns * 1e-9
    per_rank = rank_breakdowns(graph, result.start_ns, result.end_ns, result.makespan_ns)
    breakdown = mean_breakdown(per_rank)
    flops = model_flops_per_iteration(built.resolved, model, par)
    tflops = flops / iter_s / par.world / 1e12 if iter_s > 0 else 0.0
    peak = device.peak_flops(par.dtype) / 1e12
    mem = estimate_memory(model, par, built.stage_params, built.stage_expert_params,
                          flash=template.meta.get("attention", "flash") != "unfused",
                          capacity_gib=float(getattr(device, "hbm_GiB", 0.0) or 0.0))
    if not mem.fits:
        msg = (f"the layout needs {mem.total_gib:.1f} GiB per GPU on pipeline stage "
               f"{mem.worst_stage}, more than the device's {mem.capacity_gib:.0f} GiB")
        if opts.get("strict"):
            raise InputError(msg, "--strict")
        warnings.append(msg)
    res = {
        "mode": "retarget",
        "iteration_time_s": iter_s,
        "tokens_per_s": par.tokens_per_iteration / iter_s if iter_s > 0 else 0.0,
        "tflops_per_gpu": tflops,
        "mfu": tflops / peak if peak else 0.0,
        "gpus": par.world,
        "model": model.to_dict(),
        "parallel": par.to_dict(),
        "cluster": cluster.name,
        "device": device.name,
        "breakdown": breakdown,
        "memory_gib_per_gpu": round(mem.total_gib, 3),
        "memory": mem.to_dict(),
        "model_flops_per_iteration": flops,
        "template": dict(template.meta),
        "duration_methods": methods,
        "replay": {
            "symmetric": symmetric,
            "merged_compute": merged,
            "network": network,
            "tasks": graph.n_tasks,
            "events": result.events,
            "replay_wall_s": round(t_rep, 3),
            "wall_s": round(time.perf_counter() - t_wall, 3),
        },
        "per_stage_breakdown": {str(k): v for k, v in per_rank.items()} if symmetric else {},
        "warnings": warnings,
    }
    return RetargetRun(res, graph, result, comm, net, recorder, per_rank, by_name)
