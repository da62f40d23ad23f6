"""The Python API: what every ``tracesim`` command runs, with typed options in and typed
results out. The commands only parse flags, call these functions and print.

    >>> import tracesim
    >>> p = tracesim.replay(model="gpt3-1.7b", cluster="h100x8", tp=2, pp=2, dp=2,
    ...                     micro_batch=1, global_batch=8)
    >>> round(p.iteration_time_s, 3), p.breakdown["compute_s"] > 0
    (0.092, True)

Options are :class:`~tracesim.options.ReplayOptions` (or the same names as keyword
arguments); results are :class:`~tracesim.report.result.Prediction` and the small result
classes below, each with ``to_dict()``. Bad input raises :class:`~tracesim.errors.InputError`
naming the file (or option) and the field. Times are seconds, sizes bytes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracesim.catalog import Entry, load_cluster, shipped
from tracesim.errors import InputError
from tracesim.graph.taskgraph import TaskGraph
from tracesim.options import ReplayOptions
from tracesim.pipeline import build, predict, replay_graph
from tracesim.report.result import Prediction
from tracesim.report.steps import StepResult, UnprofiledSummary

__all__ = [
    "CompareResult", "ConvertResult", "ExtractResult", "NetbenchResult", "Prediction",
    "ReplayOptions", "SelfReplayCheck", "calibrate", "collect", "collect_command", "compare",
    "convert", "extract", "import_traces", "list_shipped", "netbench", "replay",
    "validate_self_replay", "write_result",
]


def replay(source: str | Path | None = None, options: ReplayOptions | None = None, *,
           detail: bool = False, progress: Callable[[str, int, int], None] | None = None,
           **option_values: Any) -> Prediction:
    """Predict one training iteration (``tracesim replay``).

    Args:
        source: a bundle, trace, op table or workload directory; None to build
            ``model`` from its family's default template.
        options: the replay options; ``option_values`` (the same names as keyword
            arguments, ``tp=8``) are applied on top. An unknown name is an InputError.
        detail: keep per-link traffic and per-task scaling methods (for a result
            directory, :func:`write_result`).
        progress: called with (stage, done, total) while building and replaying.
    """
    opts = options or ReplayOptions()
    if option_values:
        opts = opts.replace(**option_values)
    return predict(source, opts, detail=detail, progress=progress)


def write_result(prediction: Prediction, out: str | Path, *, plots: bool = True,
                 progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Write a result directory (``replay -o OUT``: result.json, timeline, Parquet, PNGs;
    docs/formats.md); returns the ``result.json`` object. ``progress``: called as
    ``("write", files written, files to write)``."""
    from tracesim.report.resultdir import write_result_dir

    if not isinstance(prediction, Prediction):
        raise InputError(f"write_result takes a Prediction (what tracesim.replay returns), got "
                         f"{type(prediction).__name__}", "prediction")
    return write_result_dir(out, prediction, plots=plots, progress=progress)


@dataclass(frozen=True)
class SelfReplayCheck:
    """``validate self-replay``: every recorded step replayed with its own durations.

    ``results``: per (source, rank, step) the measured and predicted step time;
    ``unprofiled``: per bundle and rank, the median of the steady steps' predictions of the
    unprofiled step against the measured unprofiled median."""

    results: tuple[StepResult, ...]
    unprofiled: tuple[UnprofiledSummary, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"results": [r.to_dict() for r in self.results],
                "unprofiled": [u.to_dict() for u in self.unprofiled]}


def validate_self_replay(*sources: str | Path) -> SelfReplayCheck:
    """Replay each recorded step of ``sources`` (traces or bundles) with its own durations."""
    from tracesim.report.steps import self_replay, unprofiled_summary
    from tracesim.trace.sources import load_source

    results: list[StepResult] = []
    for s in sources:
        results.extend(self_replay(load_source(s)))
    return SelfReplayCheck(tuple(results), tuple(unprofiled_summary(results)))


@dataclass(frozen=True)
class ExtractResult:
    """``extract``: what was written to the workload directory ``out``."""

    out: str
    events: int
    tasks: int
    edges: int
    lanes: int
    ranks: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def extract(source: str | Path, out: str | Path) -> ExtractResult:
    """A bundle or trace -> its op table and task graph in the workload directory ``out``
    (written whole or not at all)."""
    from tracesim.trace.extract import extract_to_directory

    return ExtractResult(**extract_to_directory(source, out))


@dataclass(frozen=True)
class ConvertResult:
    """``convert``: what was read and written, and the replay of the converted workload when
    one was asked for."""

    source: str | None
    source_format: str
    to: str
    written: tuple[str, ...]
    ranks: int
    tasks: int
    warnings: tuple[str, ...] = ()
    replay: Prediction | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "from": self.source_format, "to": self.to,
               "written": list(self.written), "ranks": self.ranks, "tasks": self.tasks,
               "warnings": list(self.warnings)}
        if self.replay is not None:
            out["replay"] = self.replay.to_dict()
        return out


def convert(source: str | Path | None, out: str | Path, to: str, *, source_format: str = "auto",
            options: ReplayOptions | None = None, comm_groups: str | Path | None = None,
            chakra_plain: bool = False, aicb_one_rank: bool = False, aicb_rank: int | None = None,
            replay_on: str | None = None, system: str | Path | None = None) -> ConvertResult:
    """Convert a workload between formats (``tracesim``, ``chakra``, ``aicb``), or build one.

    Args:
        source: a workload directory, bundle, trace, Chakra ET prefix or AICB file; None to
            build every rank of ``options.model`` on ``options.cluster``.
        out: where to write (see ``tracesim convert --help``).
        to: the output format.
        source_format: the input format (``auto``: from the path).
        comm_groups, chakra_plain: Chakra input options; aicb_one_rank: AICB input, rank 0
            only (replayed symmetrically); aicb_rank: AICB output, the rank written.
        replay_on, system: replay the converted workload on this cluster (with an ASTRA-sim
            system JSON applied to it).
    """
    from tracesim.interop.formats import load_workload, save_workload, save_workload_parts

    opts = options or ReplayOptions()
    if source is None:
        if not opts.given():
            raise InputError("give a SOURCE to convert, or --model and --cluster to build one",
                             "SOURCE")
        if system is not None and not replay_on:
            raise InputError("--system applies to the --replay-on cluster; give --replay-on", "--system")
        if not replay_on:  # written rank by rank where the format allows: never every rank at once
            parts, meta = workload_parts(opts)
            saved = save_workload_parts(parts, meta, out, to)
            if saved is not None:
                return ConvertResult(None, "built", to, tuple(str(p) for p in saved[0]),
                                     len(saved[1]), sum(saved[1].values()))
        graph, src_fmt = build_workload(opts), "built"
    else:
        extra = sorted(k for k in opts.given() if k != "cluster")
        if extra:
            flag = f"--{extra[0].replace('_', '-')}"
            raise InputError(f"{flag} builds a workload; it cannot be combined with a SOURCE", flag)
        # a tracesim workload holds a symmetry-reduced graph; the other formats, every rank
        graph, src_fmt = load_workload(source, source_format, comm_groups=comm_groups,
                                        plain=chakra_plain, one_rank=aicb_one_rank,
                                        symmetric=None if to == "tracesim" else False)
    if system is not None and not replay_on:
        raise InputError("--system applies to the --replay-on cluster; give --replay-on", "--system")
    # replayed before anything is written: a replay that cannot finish leaves no output
    rep = replay_graph(graph, replay_on, system) if replay_on else None
    written, warnings = save_workload(graph, out, to, rank=aicb_rank)
    if source is not None and graph.meta.get("representatives") and graph.meta.get("world"):
        warnings.append(f"every rank runs its pipeline stage's program: {len(graph.ranks)} "
                        f"representative rank(s) of {graph.meta['world']} kept (a symmetric replay)")
    return ConvertResult(str(source) if source else None, src_fmt, to,
                         tuple(str(p) for p in written),
                         int(graph.meta.get("world") or len(graph.ranks)), graph.n_tasks,
                         tuple(warnings), rep)


def build_workload(options: ReplayOptions) -> TaskGraph:
    """Every rank's task graph of ``options.model`` on ``options.cluster`` (as a retarget
    builds it, without the symmetry reduction: an exported workload needs every rank)."""
    if not options.model or not options.cluster:
        raise InputError("building a workload needs --model and --cluster (or give a SOURCE)",
                         "--model")
    b = build(None, options.replace(full=True), per_op=True)
    return b.graph.replace(meta={**b.graph.meta, "cluster": b.cluster.name,
                                 "device": b.device.name})


#: tasks in each graph :func:`workload_parts` yields (about; whole ranks)
PART_TASKS = 500_000


def workload_parts(options: ReplayOptions) -> tuple[Callable[[], Iterator[TaskGraph]], dict[str, Any]]:
    """:func:`build_workload` a few ranks at a time: a function yielding the graphs of
    consecutive ranks (about :data:`PART_TASKS` tasks each; the ranks of all of them are
    rank for rank those of :func:`build_workload`'s graph), and the workload's meta."""
    if not options.model or not options.cluster:
        raise InputError("building a workload needs --model and --cluster (or give a SOURCE)",
                         "--model")
    b = build(None, options.replace(full=True), per_op=True, ranks=())
    progs = b.built.programs
    assert progs is not None
    meta = {**progs.meta, "representatives": False, "cluster": b.cluster.name,
            "device": b.device.name}
    per_rank = max(len(p["lane"]) for p in progs.progs) or 1
    return (lambda: progs.rank_graphs(max(1, PART_TASKS // per_rank), meta)), meta


@dataclass(frozen=True)
class NetbenchResult:
    """``netbench``: one collective's time, algbw and busbw per message size (nccl-tests'
    conventions); ``rows`` as ``netbench --json`` prints them."""

    cluster: str
    nodes: int
    device: str
    rows: tuple[Mapping[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "nodes": self.nodes, "rows": [dict(r) for r in self.rows]}


def netbench(cluster: str | Path, collective: str = "all_reduce", ranks: int | None = None,
             nodes: int | None = None, sizes: str | Sequence[int] = "8:8G:4",
             algo: str | None = None, protocol: str | None = None) -> NetbenchResult:
    """Simulated nccl-tests (``tracesim netbench``) on ``cluster``'s network model.

    ``ranks``: number of ranks (default every GPU); ``nodes``: spread them evenly over this
    many nodes (a spec with fewer nodes and an inter-node fabric is scaled to them); ``sizes``: bytes, or a text of sizes and ``MIN:MAX[:FACTOR]`` ranges
    (binary units K, M, G); ``algo``: an algorithm or a preference list (default: the
    cluster spec's choice); ``protocol``: the NCCL protocols ring and tree may use (``LL``,
    ``LL128``, ``Simple``, a comma list or ``auto``, as NCCL_PROTO; default: the spec's).
    """
    from tracesim.network.bench import bench_ranks, parse_sizes, run_netbench

    spec = load_cluster(cluster)
    if nodes is not None and nodes > spec.nodes and spec.inter_node is not None:
        spec = spec.replace(nodes=nodes)  # a one-node spec scaled, as ``replay --nodes`` does
    members = bench_ranks(spec, ranks, nodes)
    size_list = parse_sizes(sizes) if isinstance(sizes, str) else [int(s) for s in sizes]
    rows = run_netbench(spec, collective, members, size_list, algo, protocol)
    n_nodes = len({r // spec.gpus_per_node for r in members})
    device = spec.device if isinstance(spec.device, str) else "inline device"
    return NetbenchResult(spec.name, n_nodes, device, tuple(rows))


def calibrate(device: str = "cpu", *, quick: bool = False, threads: int | None = None,
              name: str | None = None, aliases: Sequence[str] = (), out: str | Path | None = None,
              log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Measure the device at hand with torch and return a device profile (``tracesim
    calibrate``); with ``out``, also write it as YAML. Needs torch."""
    import importlib.util

    from tracesim.fileio import write_yaml
    from tracesim.hardware.device import parse_profile

    if importlib.util.find_spec("torch") is None:
        raise InputError(TORCH_MISSING, "--device")
    if threads is not None and threads < 1:
        raise InputError(f"must be >= 1, got {threads}", "--threads")
    from tracesim.collectors.calibrate import calibrate as measure

    prof = measure(device, quick=quick, threads=threads, name=name, log=log)
    if aliases:
        prof["aliases"] = list(aliases)
    parse_profile(prof, out)  # the profile must load
    if out is not None:
        write_yaml(out, prof)
    return prof


TORCH_MISSING = "torch is not installed: pip install 'tracesim[collect]' (torch==2.13.0)"


def collect(workload: str | Path, out: str | Path, *, device: str = "cpu", ranks: int | None = None,
            steps: int = 8, warmup: int = 3, measure: int = 16, calibration_cycles: int = 16,
            batch: int = 8, seq_len: int | None = None, threads: int | None = None,
            log: Callable[[str], None] | None = None) -> Path:
    """Record training steps of a built-in model under torch.profiler into a bundle
    (``tracesim collect``); returns the bundle's path. Needs torch."""
    import importlib.util

    from tracesim.collectors.launch import check_output, resolve_workload, run_collector

    _spec, spec_path = resolve_workload(str(workload))
    out = Path(out)
    check_output(out)
    if importlib.util.find_spec("torch") is None:
        raise InputError(TORCH_MISSING)
    argv = ["--model", str(spec_path), "--device", device, "--ranks", str(ranks or 1),
            "--steps", str(steps), "--warmup", str(warmup), "--measure", str(measure),
            "--calibration-cycles", str(calibration_cycles), "--batch", str(batch), "-o", str(out)]
    if seq_len is not None:
        argv += ["--seq-len", str(seq_len)]
    if threads is not None:
        argv += ["--threads", str(threads)]
    run_collector(argv, log)
    return out


@dataclass(frozen=True)
class CompareResult:
    """``compare``: the runs' results side by side, one row per metric with the winner and
    the ratio winner / runner-up (``table``, a DataFrame)."""

    labels: tuple[str, ...]
    results: tuple[Mapping[str, Any], ...]
    table: Any = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"labels": list(self.labels),
                "metrics": json.loads(self.table.to_json(orient="records")),
                "results": [dict(r) for r in self.results]}


def compare(runs: Sequence[Prediction | Mapping[str, Any] | str | Path],
            labels: Sequence[str] | None = None,
            names: Sequence[str] | None = None) -> CompareResult:
    """Compare predictions, result dicts or result directories side by side.

    ``labels``: one per run; default: what differs between the runs (model, cluster,
    layout), else ``names`` (else the runs' models or directory names)."""
    from tracesim.report.compare import check_metrics, compare_table, default_labels
    from tracesim.report.resultdir import load_result

    results: list[Mapping[str, Any]] = []
    fallback: list[str] = []
    for r in runs:
        if isinstance(r, Prediction):
            results.append(r.to_dict(critical_path=True))
            fallback.append(str(r.model.get("name") if isinstance(r.model, Mapping) else r.model))
        elif isinstance(r, Mapping):
            check_metrics(r, f"run {len(results) + 1}")
            results.append(r)
            fallback.append(str(r.get("cluster", "run")))
        else:
            results.append(load_result(r))
            fallback.append(Path(r).name)
    if labels is not None:
        if len(labels) != len(results):
            raise InputError(f"--labels has {len(labels)} labels for {len(results)} runs", "--labels")
        names = [str(x) for x in labels]
    else:
        names = default_labels(results, list(names) if names is not None else fallback)
    if len(set(names)) != len(names):
        names = [f"{i + 1}: {n}" for i, n in enumerate(names)]
    return CompareResult(tuple(names), tuple(results), compare_table(results, names))


def list_shipped(kind: str) -> list[Entry]:
    """What ships with tracesim (``tracesim list``): ``models``, ``clusters`` or ``devices``."""
    return shipped(kind)


def collect_command(command: Sequence[str], out: str | Path, *, steps: int = 4, warmup: int = 3,
                    measure: int = 8, log: Callable[[str], None] | None = None) -> Path:
    """Record the user's own training job (``tracesim collect -o OUT -- python train.py ...``
    or ``-- torchrun ...``): the profiler is injected into every rank; after ``warmup``
    optimizer steps, ``measure`` unprofiled steps are timed and ``steps`` steps profiled on
    every rank. Returns the bundle's path (a version-2 bundle). Needs torch in the job's
    environment."""
    from tracesim.collectors.wrap import run_command

    return run_command(list(command), Path(out), steps=steps, warmup=warmup, measure=measure,
                       log=log)


def import_traces(source: str | Path, out: str | Path) -> Path:
    """Turn trace files recorded elsewhere (a folder of per-rank Kineto traces, with or
    without execution traces: ``tensorboard_trace_handler`` output, torchtitan's
    ``profile_trace/iteration_N/rankR_trace.json``, ...) into a bundle (``tracesim import``);
    returns its path."""
    from tracesim.trace.folders import import_folder

    return import_folder(Path(source), Path(out))
