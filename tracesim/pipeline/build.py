"""The graph step of a retarget: a model, a cluster and a layout -> per-rank task graphs.

1. the model spec (``model``, else the source bundle's), the cluster spec and the layout
   (:func:`tracesim.specs.layout_options.parallel_from_options`);
2. the software stack (:mod:`tracesim.template.stacks`; megatron-core on a GPU, eager on a
   CPU or for a recorded source) and its defaults for the layout; the layer template: the
   source's recorded ops, the model family's stored bundle (``eager``), or the stack's
   kernels (:func:`tracesim.template.stacks.stack_template`), with FP8's GEMMs and casts;
3. each template op's duration on the cluster's device (:mod:`tracesim.template.durations`):
   measured on the same device -> the measurement (scaled by the cost model's ratio when the
   shapes changed); measured on another GPU -> scaled; measured on a CPU or not measured ->
   the cost model; co-located CPU ranks slow each other (``host_contention``);
4. the task graph (:func:`tracesim.build.builder.build_graph`): every rank, or from
   :data:`SYMMETRY_MIN_GPUS` GPUs up, or on fewer with many micro-batches
   (:func:`tracesim.engine.symmetry.reduces`; unless ``full``), one representative rank per
   pipeline stage.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tracesim.build.a2a_overlap import why_not as a2a_why_not
from tracesim.build.builder import BuildResult, build_graph
from tracesim.build.offload import Offload
from tracesim.build.shared_overlap import why_not as shared_why_not
from tracesim.catalog import default_bundle, load_cluster, load_model
from tracesim.engine.symmetry import SYMMETRY_MIN_GPUS, check_graph_memory, reduces
from tracesim.errors import InputError
from tracesim.fileio import read_yaml
from tracesim.graph.taskgraph import TaskGraph
from tracesim.hardware.device import DeviceProfile, get_device
from tracesim.options import ReplayOptions
from tracesim.pipeline.perturbed import fabric_cluster
from tracesim.report.memory import layer_activation_bytes
from tracesim.specs import ub_config
from tracesim.specs.cluster import ClusterSpec
from tracesim.specs.ignored import ignored_options
from tracesim.specs.layout_options import parallel_from_options
from tracesim.specs.model import ModelSpec, model_from_dict
from tracesim.specs.parallel import ParallelSpec
from tracesim.template.choose import choose_template
from tracesim.template.durations import make_op_time
from tracesim.template.fp8 import fp8_template, is_fused_attention
from tracesim.template.layer import LayerTemplate
from tracesim.template.moe_padding import align_size
from tracesim.template.stacks import (
    Stack,
    check_stack,
    default_stack,
    get_stack,
    stack_defaults,
    stack_info,
    stack_template,
    with_cross_entropy,
)


@dataclass(frozen=True)
class Built:
    """What the graph step of a retarget made, and from what.

    ``op_methods``: how each template op's duration was obtained, by op name (``measured``,
    ``scaled``, ``model``, ``mixed``); ``duration_methods``: counts of the same per method.
    """

    model: ModelSpec
    par: ParallelSpec
    cluster: ClusterSpec
    device: DeviceProfile
    template: LayerTemplate
    built: BuildResult
    symmetric: bool
    merged: bool
    op_methods: Mapping[str, str]
    duration_methods: Mapping[str, int]
    warnings: tuple[str, ...] = field(default=())
    stack: Mapping[str, Any] = field(default_factory=dict)

    @property
    def graph(self) -> TaskGraph:
        return self.built.graph

    def task_methods(self, comm_method: str) -> np.ndarray:
        """Per task (row order), how its duration was obtained: ``measured`` | ``scaled`` |
        ``model`` for compute (``mixed`` for a merged task whose parts differ), the network
        model's name (``flow`` | ``estimate``) for communication."""
        t = self.graph.tasks
        names = t["name"].astype(str)
        table = {}
        for name in names.unique().tolist():
            parts = {self.op_methods.get(p.split(":")[0], "") for p in name.split("..")}
            parts.discard("")
            table[name] = parts.pop() if len(parts) == 1 else ("mixed" if parts else "model")
        out = names.map(table).to_numpy(dtype=object)
        out[~t["kind"].isin(["gpu", "cpu"]).to_numpy()] = comm_method
        return out


def bundle_model(source: str | Path | None) -> ModelSpec | None:
    """The model spec recorded in a source bundle's ``meta.yaml``, if any."""
    if not source:
        return None
    meta_path = Path(source) / "meta.yaml"
    if not (Path(source).is_dir() and meta_path.is_file()):
        return None
    meta = read_yaml(meta_path)
    if isinstance(meta, Mapping) and isinstance(meta.get("model"), Mapping):
        return model_from_dict(meta["model"], meta_path)
    return None


def recorded_defaults(source: str | Path | None, options: ReplayOptions) -> dict[str, Any]:
    """What a bundle recorded and ``options`` leave open: ``micro_batch`` (the bundle's
    per-rank batch), ``seq_len`` and the model-parallel degrees ``tp`` / ``pp`` / ``cp`` /
    ``ep`` (``dp`` stays: it fills the cluster)."""
    if not source or not (Path(source) / "meta.yaml").is_file():
        return {}
    meta = read_yaml(Path(source) / "meta.yaml")
    if not isinstance(meta, Mapping):
        return {}
    out: dict[str, Any] = {}
    if options.micro_batch is None and options.global_batch is None \
            and isinstance(meta.get("batch"), int) and meta["batch"] > 0:
        out["micro_batch"] = meta["batch"]
    if options.seq_len is None and isinstance(meta.get("seq_len"), int) and meta["seq_len"] > 0:
        out["seq_len"] = meta["seq_len"]
    par = meta.get("parallel")
    if isinstance(par, Mapping):
        for k in ("tp", "pp", "cp", "ep"):
            v = par.get(k)
            if getattr(options, k) is None and isinstance(v, int) and v > 1:
                out[k] = v
    return out


def build(source: str | Path | None, options: ReplayOptions, *, per_op: bool = False,
          ranks: Sequence[int] | None = None) -> Built:
    """The graph step of a retarget (module docstring). ``per_op``: keep one task per
    template op in a full replay (otherwise runs of compute tasks that nothing can interleave
    with are merged, which changes no simulated time; symmetry-reduced replays always merge).
    ``ranks``: the ranks the graph holds (default: as the replay needs them; ``()`` for none:
    ``Built.built.programs`` then gives every rank's graph, a few ranks at a time)."""
    warnings: list[str] = []
    if source is None and options.template not in (None, "analytic"):
        source = options.template  # a bundle / trace / workload named as the template
    model = load_model(options.model) if options.model else bundle_model(source)
    recorded = {} if options.model else recorded_defaults(source, options)
    if recorded:
        options = options.replace(**recorded)
    if model is None:
        raise InputError("give --model (a model spec), or a source bundle whose meta.yaml has one",
                         "--model")
    if not options.cluster:
        raise InputError("retargeting needs --cluster (a cluster spec)", "--cluster")
    cluster = fabric_cluster(load_cluster(options.cluster), options)
    device = get_device(options.device or cluster.device, where="--device")
    if options.cudnn:
        at = device.with_cudnn(options.cudnn)
        if at is None:
            warnings.append(f"--cudnn {options.cudnn} not applied: the {device.name} profile has "
                            "one attention fit, of no named cuDNN version")
        device = at or device
    par = parallel_from_options(options.given(), model, cluster.gpus)
    if par.world > cluster.gpus:
        raise InputError(
            f"tp {par.tp} x pp {par.pp} x dp {par.dp} x cp {par.cp} = {par.world} GPUs, but "
            f"cluster {cluster.name} has {cluster.gpus}", "--dp")
    device = device.for_job(par.world)  # a synchronous job runs at its slowest GPU
    if par.world < cluster.gpus:
        warnings.append(f"the layout uses {par.world} of the cluster's {cluster.gpus} GPUs "
                        f"(ranks 0..{par.world - 1})")
    if model.is_moe and par.tp > 1 and par.sp and options.sp is None:
        warnings.append("sequence parallelism switched on: MoE with tp > 1 needs it (as Megatron-core)")
    mesh = cluster.intra_node.kind == "nvlink_mesh"
    par, stack, template, w = _stack_and_template(source, options, model, par, device, mesh)
    warnings += w
    op_time, methods = make_op_time(template, device, par.act_dtype)
    if cluster.host_contention is not None:  # co-located CPU ranks slow each other
        from tracesim.hardware.contention import scaled_op_time

        op_time = scaled_op_time(op_time, cluster.host_contention.factor(min(par.world, cluster.gpus_per_node)))
    op_time, by_name = _method_recorder(op_time, methods)
    # every rank differs (a slow rank, a degraded link, traffic from outside on some links)
    perturbed = bool(options.straggler or options.jitter) or cluster.healthy is not cluster
    stage_layers = -(-model.layers // par.pp)
    symmetric = not options.full and not perturbed and reduces(par.world, par.num_micro, stage_layers)
    if ranks is None:  # a graph held at once: refuse one larger than the machine's memory
        check_graph_memory((par.pp if symmetric else par.world) * par.num_micro * stage_layers,
                           reduced=symmetric)
    # a large job's reduced replay merges compute runs; a few GPUs reduced for their many
    # micro-batches keep one task per op where asked (a result directory), as a full replay
    merged = not per_op or (symmetric and par.world >= SYMMETRY_MIN_GPUS)
    offload = _offload(options, model, par, cluster, template)
    cpu, speed = _host_cpu(options, cluster)
    built = build_graph(model, par, template, op_time, representatives=symmetric,
                        merge_compute=merged, sm_count=device.sm_count,
                        blackwell=_blackwell(device),
                        comm_estimate=_comm_estimate(cluster.healthy, par), ranks=ranks,
                        hbm_GBps=device.hbm_GBps,
                        offload=offload, nccl_ctas=cluster.collectives.max_ctas,
                        cpu_speed=speed)
    warnings += _dispatcher_warnings(model, par, cluster)  # the layout is valid by now
    warnings += ignored_options(options.given(), par, model)
    info = stack_info(stack, par, device, template)
    if options.cudnn and device.shape_model and device.shape_model.attention:
        # the version asked for and the fit it runs (the newest fit not newer than it)
        info["cudnn"] = {"given": options.cudnn, "fit": device.shape_model.attention.cudnn}
    if par.tp_comm_overlap:  # the userbuffers configuration the replay ran
        fp8, bw = par.dtype == "fp8", _blackwell(device)
        name = options.tp_comm_overlap_cfg or ub_config.stack_default(fp8, bw)
        info["userbuffers"] = {**ub_config.describe(ub_config.running(par.tp_comm_overlap_cfg, fp8, bw), name),
                               "given": bool(options.tp_comm_overlap_cfg)}
    elif par.tp_comm_overlap_cfg:
        warnings.append("--tp-comm-overlap-cfg ignored: the userbuffers TP overlap is off (it "
                        "needs --tp-comm-overlap, --sp and tp > 1)")
    if par.moe_a2a_overlap and (why := a2a_why_not(par, model)):
        warnings.append(f"--moe-a2a-overlap ignored: {why} (Megatron-Core's conditions)")
    elif par.moe_a2a_overlap:
        info["overlaps"].append("moe_a2a_overlap")
    if par.moe_router_padding and not (model.is_moe and align_size(par)):
        warnings.append("--moe-router-padding ignored: no quantized expert GEMMs to align "
                        "(a MoE model with --dtype fp8 and no capacity factor)")
    if par.fp8_attention and not any(is_fused_attention(o) for o in template.ops):
        warnings.append("--fp8-attention ignored: the template has no fused attention to run in "
                        "FP8 (Transformer Engine's FP8 attention is cuDNN's fused kernel)")
    if par.moe_shared_expert_overlap and (why := shared_why_not(par, model)):
        warnings.append(f"--moe-shared-expert-overlap ignored: {why} (Megatron-Core's conditions)")
    elif par.moe_shared_expert_overlap:
        info["overlaps"].append("moe_shared_expert_overlap")
    if offload is not None:
        waits = [sum(st.get("offload_wait_ns", {}).values()) for st in built.info["stages"]]
        info["offload"] = {"layers": offload.layers, "d2h_GBps": offload.d2h_GBps,
                           "h2d_GBps": offload.h2d_GBps,
                           "gib_per_microbatch": sum(offload.act_bytes) / 2**30,
                           "wait_s_per_microbatch": max(waits, default=0.0) * 1e-9}
    if options.host_speed and not par.host_launch:
        warnings.append("--host-speed ignored: the replay has no host launch model (the eager "
                        "stack or --no-host-launch)")
    if par.host_launch:
        from tracesim.build.host import LAUNCH_US_BWD, LAUNCH_US_FWD

        waits = [st.get("host_wait_ns", {}) for st in built.info["stages"]]
        worst = max((sum(w.values()) for w in waits), default=0.0)
        info["host"] = {"cpu": cpu, "cpu_speed": speed,
                        "launch_us": {"fwd": LAUNCH_US_FWD / speed, "bwd": LAUNCH_US_BWD / speed},
                        "cuda_graphs": list(par.cuda_graphs),
                        "wait_s_per_microbatch": worst * 1e-9}
    return Built(model, par, cluster, device, template, built, symmetric, merged, by_name,
                 methods, tuple(warnings), info)


def _host_cpu(options: ReplayOptions, cluster: ClusterSpec) -> tuple[str, float]:
    """The CPU that launches the kernels and its speed relative to the x86 servers the host
    launch times come from: ``--host-speed`` where given, else the cluster spec's
    ``host_cpu`` (absent: an x86 server, 1)."""
    if options.host_speed:
        return f"--host-speed {options.host_speed:g}", float(options.host_speed)
    if cluster.host_cpu is not None:
        return cluster.host_cpu.name, cluster.host_cpu.speed
    return "x86 server CPU", 1.0


def _blackwell(device: DeviceProfile) -> bool:
    """A Blackwell GPU: its profile has an ``mxfp8`` peak (block-scaled FP8 tensor cores)."""
    return "mxfp8" in device.peak_tflops


def _stack_and_template(source: str | Path | None, options: ReplayOptions, model: ModelSpec,
                        par: ParallelSpec, device: DeviceProfile, mesh: bool = False
                        ) -> tuple[ParallelSpec, Stack, LayerTemplate, list[str]]:
    """The software stack (``options.stack``, else :func:`default_stack`), the layout with
    its defaults, and the layer template: the source's or a named template's recorded ops
    (the user's own kernels) when one is given; the family's stored CPU recording with
    ``eager``; else the stack's kernels (on a GPU they replace the stored eager CPU op list,
    docs/stacks.md); FP8 adds its GEMMs and casts (:mod:`tracesim.template.fp8`)."""
    recorded = bool(source) or options.template not in (None, "analytic")
    stack = with_cross_entropy(get_stack(options.stack or default_stack(device, recorded)),
                               options.cross_entropy_fusion)
    par = par.replace(**stack_defaults(stack, par, options.given(), device, mesh))
    check_stack(stack, par, device)
    warnings: list[str] = []
    if mesh and par.tp > 1 and par.sp and stack.defaults(par, device).get("tp_comm_overlap"):
        warnings.append(
            "tensor-parallel communication overlap (Transformer Engine userbuffers) "
            + ("on as given, but the cluster's GPUs are a full mesh: its ring exchange moves each "
               "step over one link of the mesh" if par.tp_comm_overlap else
               "off: the cluster's GPUs are a full mesh, where its ring exchange would move each "
               "step over one link (TP collectives go through the collective library; "
               "--tp-comm-overlap turns it on)"))
    if recorded or stack.recorded:
        template, w = choose_template(source, model, options.template, options.attention,
                                      default_bundle(model.family))
        warnings += w
        src = Path(str(template.meta.get("source") or "a bundle")).name
        unused = [f"--attention {options.attention}"] if options.attention else []
        unused += ["--compile"] if options.compile else []
        unused += ["--cross-entropy-fusion"] if options.cross_entropy_fusion is not None else []
        unused += ["--optimizer"] if options.optimizer is not None else []
        unused += ["--no-loss-fp32"] if options.loss_fp32 is False else []
        if unused and template.meta.get("source") != "first-principles":
            verb = "are" if len(unused) > 1 else "is"
            warnings.append(f"{' and '.join(unused)} {verb} not used: the template's ops are "
                            f"recorded ({src}); {'they apply' if len(unused) > 1 else 'it applies'} "
                            "to the analytic template")
    else:
        template = stack_template(model, stack, options.attention, bool(options.compile),
                                  options.optimizer, options.loss_fp32 is not False)
        if options.loss_fp32 is False and (stack.fused_ce or stack.megatron_ce):
            warnings.append(f"--no-loss-fp32 is not used: the {stack.name} stack's cross-entropy "
                            "is not PyTorch's (--no-cross-entropy-fusion for Megatron's)")
    warnings += _unmatched_plans(template, par)
    if par.dtype == "fp8":
        # Hopper's FP8 GEMMs take one operand layout (TN) and Transformer Engine writes
        # transposed copies for the others; Blackwell's take either (TE's
        # is_non_tn_fp8_gemm_supported). torchao's float8 (torchtitan) transposes on every
        # GPU: torch._scaled_mm wants its second operand column-major
        template = fp8_template(template, par.fp8_recipe, par.fp8_param_gather, par.gemm_dtype,
                                par.fp8_plan, par.fp8_attention,
                                transposes=not _blackwell(device) or stack.name == "torchtitan")
    return par, stack, template, warnings


def _unmatched_plans(template: LayerTemplate, par: ParallelSpec) -> list[str]:
    """A warning for each ``--fp8-plan`` / ``--tp-plan`` glob that names no module of the
    template (a typo would otherwise change nothing and say nothing)."""
    import fnmatch

    modules = sorted({str(o.module) for o in template.ops if getattr(o, "module", "")})
    out = []
    for flag, plan in (("--fp8-plan", par.fp8_plan if par.dtype == "fp8" else ()),
                       ("--tp-plan", par.tp_plan)):
        for glob, _ in plan:
            if not any(fnmatch.fnmatchcase(m, glob) for m in modules):
                groups = sorted({m.split(".")[0] + (".*" if "." in m else "") for m in modules})
                out.append(f"{flag} {glob}: matches no module of the template (its modules: "
                           f"{', '.join(groups)})")
    return out


def _comm_estimate(cluster: ClusterSpec, par: ParallelSpec) -> Callable[..., float]:
    """Uncongested time (ns) of a collective on the first group of a kind (the cluster's
    network model), for the compute an overlapped collective slows. Sized on the healthy
    fabric (the caller passes ``cluster.healthy``), so that degraded links and background
    traffic change only the network's times, against a reference of the same graph."""
    from tracesim.network.model import NetworkModel
    from tracesim.specs.placement import Placement

    net = NetworkModel(cluster, keep_records=False)
    placement = Placement(par)
    cache: dict[tuple[str, str, int, str], float] = {}

    def estimate(collective: str, gkind: str, nbytes: int, algorithm: str = "") -> float:
        key = (collective, gkind, int(nbytes), algorithm)
        if key not in cache:
            groups = placement.groups(gkind)
            ranks = groups[0] if groups else ()
            more = {"algorithm": algorithm} if algorithm else {}
            cache[key] = (net.estimate_ns(collective, ranks, int(nbytes), group_kind=gkind, **more)
                          if len(ranks) > 1 else 0.0)
        return cache[key]

    return estimate


def _dispatcher_warnings(model: ModelSpec, par: ParallelSpec, cluster: ClusterSpec) -> list[str]:
    """A flex dispatcher whose EP group holds different local GPUs on its nodes: its
    deduplicated all-to-all needs a rail peer on every node, so NCCL's runs instead."""
    if not model.is_moe or par.ep < 2 or par.moe_dispatcher == "alltoall":
        return []
    from tracesim.specs.placement import Placement

    g = cluster.gpus_per_node
    for group in Placement(par).groups("ep"):
        nodes = {r // g for r in group}
        if len({tuple(r % g for r in group if r // g == n) for n in nodes}) > 1:
            return [f"--moe-dispatcher {par.moe_dispatcher}: EP group {list(group)} holds different "
                    "GPUs on its nodes; such groups' all-to-all runs as NCCL's (no deduplication)"]
    return []


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


def _offload(options: ReplayOptions, model: ModelSpec, par: ParallelSpec, cluster: ClusterSpec,
             template: LayerTemplate) -> Offload | None:
    """The activation offloading ``--cpu-offload-layers`` asks for (:mod:`tracesim.build.offload`):
    the offloaded layers' saved activations (the memory estimate's bytes) and the cluster's
    host link; a layout or cluster that cannot run it is an InputError."""
    n = options.cpu_offload_layers or 0
    if not n:
        return None
    if n >= model.layers:
        raise InputError(f"{n} offloaded layers: the model has {model.layers} (Megatron-Core "
                         "offloads fewer than all)", "--cpu-offload-layers")
    if cluster.host_link is None:
        raise InputError(f"cluster {cluster.name} gives no host_link (GPU <-> host copy GB/s per "
                         "GPU, e.g. nvbandwidth's all_to_host_memcpy_ce / host_to_all_memcpy_ce)",
                         options.cluster if isinstance(options.cluster, str) else cluster.name,
                         "host_link")
    flash = template.meta.get("attention", "flash") != "unfused"
    sizes = tuple(layer_activation_bytes(model, par, k, flash=flash) for k in range(n))
    return Offload(n, model.layers, sizes, cluster.host_link.d2h_GBps, cluster.host_link.h2d_GBps)
