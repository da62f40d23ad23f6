"""A recorded run replayed elsewhere: its own graph, transformed for the target.

The graph step is the extractor's (as a self-replay: the profiler's per-event cost taken
out where the bundle measured it); the transforms change only what the options change:

* ``device`` (or the cluster's device): GPU kernel times scaled by the cost model's ratio
  between the target and the recorded device (:mod:`tracesim.transform.retime`);
  a recording made on a CPU is moved onto the GPU first (:mod:`tracesim.transform.transplant`);
* ``host_speed``: recorded host time divided by it;
* ``cluster`` / ``dp``: collectives and point-to-point transfers re-timed on the cluster's
  network over their full groups, data-parallel groups grown to ``dp`` ranks
  (:mod:`tracesim.transform.comms`).

With the recorded device as the target and no cluster, nothing changes and the answer is the
self-replay's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tracesim.catalog import load_cluster
from tracesim.engine.replay import replay
from tracesim.errors import InputError
from tracesim.hardware.device import DeviceProfile, get_device
from tracesim.options import ReplayOptions
from tracesim.pipeline.perturbed import fabric_cluster
from tracesim.report.result import Prediction
from tracesim.specs.cluster import ClusterSpec
from tracesim.trace.traceinfo import whole_trace_warnings
from tracesim.transform.comms import GroupComm, network_comms
from tracesim.transform.retime import retime

#: warn when more than this share of the GPU compute time could not be scaled from shapes
INFERRED_WARN_SHARE = 0.5
#: warn when more than this share of the GPU compute time is in unclassified kernels
OTHER_WARN_SHARE = 0.2


def recorded_device(name: str, given: str | None) -> DeviceProfile:
    """The profile of the device a source was recorded on (``given`` overrides it)."""
    if given:
        return get_device(given, where="--source-device")
    if not name:
        raise InputError("the source does not say which device recorded it; give "
                         "--source-device", "--source-device")
    if name.lower() in ("cpu", "host-cpu"):
        return get_device("host-cpu")
    try:
        return get_device(name, recorded=True)  # a trace's device string
    except InputError:
        raise InputError(f"the recorded device {name!r} has no profile; give --source-device "
                         "(a shipped profile or a profile YAML)", "--source-device") from None


#: devices that come with a Grace CPU on their board: a trace recorded on one ran its host
#: code there, not on an x86 server
GRACE_HOSTED = ("gb200", "gb300", "gh200")


def _host_speed(opts: ReplayOptions, cluster: ClusterSpec | None, src_dev: DeviceProfile,
                warnings: list[str]) -> float:
    """What divides the recorded host time: ``--host-speed``; else, on a cluster whose spec
    names a slower host CPU (``host_cpu``: Grace on the NVL72 racks), its speed, the
    recording taken to have run on an x86 server unless its device comes with a Grace CPU
    (said in a warning); else 1 (as recorded)."""
    if opts.host_speed:
        return float(opts.host_speed)
    cpu = cluster.host_cpu if cluster is not None else None
    if cpu is None or src_dev.name.lower().startswith(GRACE_HOSTED):
        return 1.0
    warnings.append(f"recorded host time divided by {cpu.speed:g}, the speed of the target's "
                    f"host CPU ({cpu.name}, cluster spec host_cpu) against the x86 server the "
                    "recording is taken to have run on (--host-speed sets it)")
    return float(cpu.speed)


def load_recorded(source: str | Path) -> tuple[Any, Any, tuple[float, float]]:
    """(the source, its graph, the profiler overhead taken out per op and per annotation).

    A bundle, trace, folder or op table is extracted with the profiler's cost taken out
    where the bundle measured it; a workload directory written by ``tracesim extract`` is
    read back with its op table, its graph as extracted (the same cost taken out, its
    ``profiler_overhead_removed_ns``)."""
    from tracesim.trace.sources import gc_paused

    with gc_paused():
        return _load_recorded(source)


def _load_recorded(source: str | Path) -> tuple[Any, Any, tuple[float, float]]:
    from tracesim.trace.extract import extract_source
    from tracesim.trace.overhead import profiler_overhead
    from tracesim.trace.sources import Source, load_source, source_kind

    if source_kind(source) == "workload":
        from tracesim.graph.io import load_graph
        from tracesim.trace.schema import read_op_table

        graph = load_graph(source)
        meta = graph.meta.get("bundle_meta") if isinstance(graph.meta.get("bundle_meta"), dict) else {}
        src = Source(Path(source), "workload", read_op_table(Path(source) / "ops.parquet"),
                     dict(meta or {}), str(graph.meta.get("device", "")))
        removed = graph.meta.get("profiler_overhead_removed_ns")
        removed = removed if isinstance(removed, dict) else {}
        return src, graph, (float(removed.get("per_op") or 0.0),
                            float(removed.get("per_annotation") or 0.0))
    src = load_source(source)
    overhead = profiler_overhead(src.meta) or (0.0, 0.0)
    return src, extract_source(src, overhead), overhead


def replay_recorded(source: str | Path, opts: ReplayOptions, detail: bool = False,
                    progress: Any = None) -> Prediction:
    """Replay a bundle, trace, folder or op table as ``opts`` say (module docstring)."""
    from tracesim.report.selfresult import cpu_mfu_note, self_result

    t_wall = time.perf_counter()
    if progress:
        progress("extract", 0, 1)
    src, graph, overhead = load_recorded(source)
    cluster = fabric_cluster(load_cluster(opts.cluster), opts) if opts.cluster else None
    if cluster is None and (opts.degrade_link or opts.background):
        raise InputError("a degraded link or background traffic needs a network: give --cluster",
                         "--degrade-link" if opts.degrade_link else "--background")
    src_dev = recorded_device(src.device or str((src.meta or {}).get("device", "")),
                              opts.source_device)
    dst_dev = (get_device(opts.device, where="--device") if opts.device
               else get_device(cluster.device) if cluster else src_dev)
    warnings = whole_trace_warnings(src.meta)
    if src_dev.kind == "cpu" and dst_dev.kind == "cpu" and dst_dev.name != src_dev.name:
        warnings.append(f"--device {dst_dev.name} is a CPU profile: the ops of a CPU recording "
                        "keep their recorded times on it (the host runs them; --host-speed "
                        "scales them); only the MFU is taken against its peak")
    transplanted = None
    if src_dev.kind == "cpu" and dst_dev.kind != "cpu":
        from tracesim.transform.transplant import to_gpu

        transplanted = to_gpu(graph, src.op_table, dst_dev)
        graph = transplanted.graph
        warnings.append("recorded on a CPU: each compute op became a kernel launch and a GPU "
                        "kernel timed by the cost model on " + dst_dev.name)
    host_speed = _host_speed(opts, cluster, src_dev, warnings)
    rt = retime(graph, src_dev, dst_dev, op_table=src.op_table, host_speed=host_speed,
                modelled=transplanted.kernel_ids if transplanted is not None else None)
    graph = rt.graph
    comm = None
    comms = None
    recorder = None
    world = _world(src.meta)
    if transplanted is not None and cluster is None and graph.ranks and len(graph.ranks) > 1:
        raise InputError("a multi-rank CPU recording moved onto a GPU needs a network for its "
                         "collectives: give --cluster", "--cluster")
    if opts.dp is not None and cluster is None:
        raise InputError("a data-parallel what-if needs a network: give --cluster too", "--dp")
    if cluster is not None:
        comms = network_comms(graph, op_table=src.op_table, world=world, dp=opts.dp)
        if comms.world > cluster.gpus:
            raise InputError(f"the job has {comms.world} ranks but cluster {cluster.name} has "
                             f"{cluster.gpus} GPUs", "--cluster")
        graph = comms.graph
        comm = _network(cluster, opts.network, comms.groups)
        if detail and opts.network != "estimate":  # per-link traffic (links.parquet)
            from tracesim.report.links import LinkRecorder

            recorder = LinkRecorder.install(comm.inner)
    from tracesim.pipeline.perturbed import perturbation_step

    def _iteration(r: Any) -> float:
        g = plain_kinds(graph) if comms is not None else graph
        return float(self_result(src, g, r, unprofiled=any(overhead), completion=True)[0]
                     ["iteration_time_s"])

    graph, perturbed = perturbation_step(
        graph, opts, cluster, lambda c: _network(c, opts.network, comms.groups) if comms else None,
        _iteration)
    t0 = time.perf_counter()
    result = replay(graph, comm)
    t_rep = time.perf_counter() - t0
    if comms is not None:
        graph = plain_kinds(graph)
    res, per_rank = self_result(src, graph, result, unprofiled=any(overhead), completion=True)
    if result.fallbacks:
        warnings.append(result.fallback_summary())
    warnings += _warnings(rt.shares(), rt.by_class, rt.dtype_assumed_ns, comms,
                          "bf16" if src_dev.peak_tflops.get("bf16") else "fp32")
    unlaunched = _unlaunched_share(graph)
    if unlaunched > 0.5 and src_dev.name != dst_dev.name:
        warnings.append(f"{unlaunched:.0%} of the GPU time is in kernels the trace does not link "
                        "to the calls that launched them (no launch calls or correlation ids in "
                        "the trace): they keep the recorded gaps between them, so a faster "
                        "device shows little change")
    gpus = comms.world if comms is not None else res["gpus"]
    grow = gpus / max(res["gpus"], 1) if opts.dp else 1.0
    it = res["iteration_time_s"]
    tokens = res["tokens_per_s"] * grow if res["tokens_per_s"] else None
    tflops = res["tflops_per_gpu"]
    mfu_dtype = str(res.get("mfu_dtype") or _dtype(src.meta))
    peak = dst_dev.peak_flops(mfu_dtype) / 1e12
    note = cpu_mfu_note(dst_dev, mfu_dtype)
    if note:
        peak = 0.0
        if tflops:
            warnings.append(note)
    details: dict[str, Any] = {
        "source": str(source),
        "recorded": {"device": src_dev.name,
                     "measured_step_time_s": res["measured_step_time_s"],
                     "ranks": res["gpus"]},
        "prediction": res["prediction"],
        "scaling": {
            "gpu_time_shares": {k: round(v, 4) for k, v in rt.shares().items()},
            "recorded_gpu_s_by_class": {k: v / 1e9 for k, v in sorted(rt.by_class.items())},
            "gpu_time_ratio": round(rt.ratio, 4),
            "host_speed": host_speed,
        },
        "steps": res["steps"],
        "fallbacks": dict(result.fallbacks),
        "replay": {"tasks": graph.n_tasks, "events": result.events,
                   "network": (opts.network or "flow") if cluster else "recorded",
                   "replay_wall_s": round(t_rep, 3),
                   "wall_s": round(time.perf_counter() - t_wall, 3)},
    }
    if transplanted is not None:
        details["transplant"] = transplanted.summary()
    if perturbed is not None:
        details["perturbation"] = perturbed.report(graph, result, it, net=comm)
    if comms is not None:
        details["communication"] = {"operations": dict(comms.counts),
                                    "kept_recorded_s": comms.kept_ns / 1e9,
                                    "groups": len(comms.groups)}
    methods = np.where(rt.methods == "comm", (opts.network or "flow") if cluster else "measured",
                       rt.methods).astype(object)
    return Prediction(
        mode="replay-trace", iteration_time_s=it, gpus=gpus,
        cluster=cluster.name if cluster else "recorded", device=dst_dev.name,
        breakdown=res["breakdown"], tokens_per_s=tokens, tflops_per_gpu=tflops,
        mfu=(tflops / peak if tflops and peak else None),
        model=res["model"] or Path(str(source)).name,
        parallel=_parallel((src.meta or {}).get("parallel"), opts.dp), memory_gib_per_gpu=None,
        warnings=tuple(warnings), details=details, makespan_ns=result.makespan_ns, graph=graph,
        start_ns=result.start_ns, end_ns=result.end_ns, methods=methods, per_rank=per_rank,
        links=recorder, topology=getattr(comm, "topology", None))


def plain_kinds(graph: Any) -> Any:
    """The graph with ``group_kind`` back to plain parallel dimensions (the ``@<index>`` the
    engine's communication model read dropped; the default group of the job is ``dp``)."""
    gk = graph.tasks["group_kind"].astype(str)
    if not gk.str.contains("@", regex=False).any():
        return graph
    base = gk.str.partition("@")[0].replace({"world": "dp", "pg": ""})
    return graph.replace(tasks=graph.tasks.assign(group_kind=base.to_numpy(dtype=object)))


def _unlaunched_share(graph: Any) -> float:
    """Share of the GPU task time in tasks with no ``launch`` edge into them."""
    t = graph.tasks
    gpu = t["kind"].to_numpy() == "gpu"
    dur = t["dur_ns"].to_numpy()
    total = float(dur[gpu].sum())
    if not total:
        return 0.0
    e = graph.edges
    launched = np.zeros(len(t), dtype=bool)
    launched[e["dst"].to_numpy()[(e["kind"].astype(str) == "launch").to_numpy()]] = True
    return float(dur[gpu & ~launched].sum()) / total


def _network(cluster: Any, network: str | None, groups: Any) -> Any:
    from tracesim.engine.symmetry import EstimateComm
    from tracesim.network.model import replay_network

    net = replay_network(cluster, network)
    base = EstimateComm(net) if network == "estimate" else net
    return GroupComm(base, groups)


def _world(meta: Any) -> int | None:
    w = (meta or {}).get("world_size")
    if isinstance(w, int) and w > 0:
        return w
    ranks = (meta or {}).get("ranks")
    return ranks if isinstance(ranks, int) and ranks > 0 else None


def _dtype(meta: Any) -> str:
    model = (meta or {}).get("model")
    return str(model.get("dtype", "bf16")) if isinstance(model, dict) else "bf16"


def _parallel(par: Any, dp: int | None) -> Any:
    """The recorded layout (None where the recording does not say), ``dp`` grown."""
    if dp is None:
        return par if isinstance(par, dict) else None
    return {**(par if isinstance(par, dict) else {}), "dp": dp}


def _warnings(shares: Mapping[str, float], by_class: Mapping[str, int], assumed_ns: int,
              comms: Any, assumed_dtype: str) -> list[str]:
    out = []
    total = sum(by_class.values())
    if shares.get("inferred", 0.0) > INFERRED_WARN_SHARE:
        out.append(f"{shares['inferred']:.0%} of the GPU compute time has no recorded shapes: its "
                   "work was inferred from the measured time (record with record_shapes=True "
                   "for shape-based scaling)")
    if total and by_class.get("other", 0) / total > OTHER_WARN_SHARE:
        out.append(f"{by_class['other'] / total:.0%} of the GPU compute time is in kernels "
                   "tracesim does not classify; they were scaled as memory-bound")
    if total and assumed_ns / total > 0.1:
        out.append(f"{assumed_ns / total:.0%} of the GPU compute time is in matrix kernels whose "
                   f"dtype nothing recorded; {assumed_dtype} was assumed")
    if shares.get("kept", 0.0) > 0.2:
        out.append(f"{shares['kept']:.0%} of the GPU time is host<->device copies, kept as "
                   "recorded")
    if comms is not None and comms.counts.get("kept"):
        out.append(f"{comms.counts['kept']} communication operations have no process-group "
                   f"metadata and kept their recorded time ({comms.kept_ns / 1e9:.4g} s)")
    return out
