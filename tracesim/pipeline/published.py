"""Published end-to-end measurements, replayed row by row: ``tracesim validate published``.

Four table formats are read (the columns decide):

* **Megatron-Bridge performance summary** (NeMo 25.11 on DGX H100, DGX B200, GB200 and
  GB300 NVL72): ``system, model, gpus, precision, gbs, mbs, seq_len, fsdp, tp, pp, cp, vp,
  ep, ga, tokens_per_s_per_gpu`` (or ``step_time_s``, or Megatron's ``model_tflops_per_gpu``);
  compared on tokens/s per GPU (``segment``: the run's slurm segment in 4-GPU trays). Every row is replayed with
  the Megatron-Core stack on the system's cluster spec (``DGX-H100`` -> ``h100x1024``,
  ``DGX-B200`` -> ``dgx-b200``, ``DGX-B300`` -> ``dgx-b300``, ``DGX-GB200`` -> ``gb200-nvl72``,
  ``DGX-GB300`` -> ``gb300-nvl72``, with as many nodes as the row's GPUs need), the row's layout, batch and
  precision (``fp8-cs``: FP8 with current scaling, ``fp8-mx``: MXFP8, ``fp8-sc``: FP8 with
  sub-channel (blockwise) scaling; ``fsdp`` > 0: FSDP;
  ``fp8_attention`` true: FP8 dot-product attention, the attention in FP8 too; ``attention``
  ``flash2``: FlashAttention-2 where the run's Transformer Engine picked it over cuDNN;
  ``fp8_param_gather`` true / false: FP8 parameters for the data-parallel all-gather;
  ``tp_only_amax_red`` true / false: delayed scaling's amaxes reduced over TP x CP only,
  ``--fp8-amax-tp-only`` (ignored for the other recipes, which reduce no amax history);
  ``grad_nan_check`` true / false: Megatron-Core's NaN check of each gradient bucket,
  ``--grad-nan-check``, with ``grad_nan_syncs`` host syncs per bucket (0-2, by
  Megatron-Core version, ``--grad-nan-syncs``; empty: 2); ``bucket_params``: the run's
  gradient bucket size in parameters (Megatron-Core's ``bucket_size``, ``--bucket-params``);
  ``cudnn``: the cuDNN version the run's container had, ``--cudnn``; ``ub_cfg``: the run's
  userbuffers configuration, a shipped name or a YAML file beside the table,
  ``--tp-comm-overlap-cfg``);
  layers that do not split evenly over the pipeline chunks are split as the recipes do
  (:func:`pipeline_split`). A row of the 25.11 table also gets what its performance recipe
  sets and tracesim can express (:mod:`tracesim.pipeline.recipes`, docs/published_configs.md):
  a pipeline layout string, the overlaps the recipe turns off, NVLink SHARP off
  (``NCCL_NVLS_ENABLE=0``) and, on GB200 / GB300 past 18 trays, 64 GPUs per NVL72 rack
  (slurm segments of 16 trays); the recipe settings without a mechanism are listed per row.
  A table whose rows give their own run settings (columns ``recompute``, ``dispatcher``,
  ``a2a_overlap``, ``cuda_graph``, ``etp``, ``pp_layout``, ``mtp_layers``:
  :func:`tracesim.pipeline.recipes.row_recipe`)
  takes those instead of the 25.11 recipes.
* **Megatron-Core GPT tables** (Megatron-LM's H100 weak-scaling table): ``system,
  params_billion, heads, hidden, layers, tp, pp, gpus, global_batch, seq_len, vocab,
  tflops_per_gpu``, optional ``dp`` (which must be gpus / (tp x pp)); compared on TFLOP/s
  per GPU with Megatron-LM's formula (:func:`mcore_flops`), replayed as a GPT (MLP 4h, GELU,
  LayerNorm, untied embeddings) in BF16 on the system's cluster spec with the megatron-core stack, micro-batch 1, the
  distributed optimizer and, with a pipeline, the interleaved schedule (its default chunks):
  the table gives neither micro-batch nor chunks, and its overlapped pipeline transfers are
  the interleaved schedule's; Megatron-LM's defaults where the table names no flag (fp32
  gradients, the unfused cross-entropy, the gradient NaN check with one host sync per
  bucket: :func:`tracesim.pipeline.published_gpt.mcore_options`).
* **torchtitan runs** (``system, model, gpus, precision, local_batch, seq_len, tp, ac,
  compile, tokens_per_s_per_gpu``, optional ``attention``, ``fsdp_fp8_all_gather``,
  ``stack``, ``optimizer``, ``loss_fp32``, ``cudnn``, and for PyTorch-native trainers with
  pipelines, experts and gradient accumulation such as NeMo AutoModel ``ga``, ``mbs``, ``pp``,
  ``vp``, ``ep``, ``dispatcher``, ``reshard_after_forward`` and ``defer_sync``): compared on
  tokens/s per GPU, replayed with the torchtitan stack (or the row's ``stack``:
  ``transformers``, with DDP), FSDP over the GPUs TP and PP leave, the local batch as one
  micro-batch (or micro-batches of ``mbs`` through the pipeline, its schedule run once per
  local batch), the row's activation checkpointing (``none``, ``op``, ``full``),
  torch.compile and attention kernel, torchao float8 (``fp8-cs``) as FP8 current scaling
  (:func:`titan_options`).
* **Megatron-LM SC'21 Table 1** (GPT on A100 Selene): ``params_billion, heads, hidden,
  layers, tp, pp, gpus, global_batch, tflops_per_gpu``, optional ``heads``; compared on TFLOP/s
  per GPU with the paper's FLOP formula, replayed as the GPT of the row's columns
  (:func:`~tracesim.pipeline.published_gpt.sc21_model`) with the 2021 stack (unfused
  attention, full recomputation) and each row's run as NVIDIA's reproduction script set it (:data:`SC21_RUNS`: micro-batch
  size, interleaved or 1F1B schedule, gradients reduced during or after the backward pass).

Nothing here is fitted: each row's options follow from the row, its recipe and the stack. The same
rules apply to tables not in the repository. In every format the row's GPUs must split into
its model-parallel groups (dp = gpus / (tp x pp x cp)) and its global batch into micro-batches
over dp; every cell is checked before the first replay (a malformed one, or a value no replay
takes, is an InputError naming the row and the column; rows are numbered as
:mod:`~tracesim.pipeline.published_cells` says), systems are read in any case (``dgx-h100``),
a table given twice is read once, and two tables of the same file name are told apart by
their paths (:func:`table_names`).
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracesim.catalog import model_name
from tracesim.errors import InputError
from tracesim.options import check_value
from tracesim.pipeline.mflops import megatron_flops_per_token
from tracesim.pipeline.published_cells import (
    BRIDGE_COLUMNS,
    MCORE_COLUMNS,
    NVL72_SYSTEMS,
    PRECISIONS,
    SC21_COLUMNS,
    SYSTEMS,
    TITAN_COLUMNS,
    NotModelled,
    batch_split,
    check_options,
    ctas_cell,
    flag_cell,
    int_cell,
    known_cell,
    layout_dp,
    model_cell,
    pipeline_split,
    positive_cell,
    read_rows,
    row_cluster,
    segment_gpus,
    system_cell,
    system_name,
    table_names,
    tables,
    ub_cell,
)
from tracesim.pipeline.published_gpt import mcore_flops, mcore_options, sc21_flops, sc21_options
from tracesim.pipeline.published_titan import titan_options
from tracesim.pipeline.recipe_spec import nemo_cudnn
from tracesim.pipeline.recipes import ROW_RECIPE_COLUMNS, recipe_options, row_run, row_unmodelled
from tracesim.pipeline.steady import steady_iteration_s
from tracesim.specs.names import recompute_modules

__all__ = ["BRIDGE_COLUMNS", "MCORE_COLUMNS", "SC21_COLUMNS", "TITAN_COLUMNS", "PublishedRow",
           "bridge_options", "pipeline_split", "published_value", "read_table", "row_options",
           "row_unmodelled", "summary", "table_rows", "validate_rows"]
#: table formats compared on tokens/s per GPU (the others on TFLOP/s per GPU)
TOKEN_FORMATS = ("bridge", "titan")
@dataclass(frozen=True)
class PublishedRow:
    """One published row, its replay and the comparison.

    ``metric``: what is compared (``tokens_per_s_per_gpu`` or ``tflops_per_gpu``);
    ``rel_error`` = predicted / published - 1. ``wall_s``: the replay's wall time.
    ``error``: why the row was not replayed (a layout tracesim cannot express), else "";
    such a row has no prediction and is left out of :func:`summary`'s errors.
    ``unmodelled``: settings of the row's recipe the replay has no mechanism for
    (:func:`tracesim.pipeline.recipes.unmodelled`). ``known``: for a row not replayed for an
    unknown system, the systems tracesim has (the CLI lists them on the row's line).
    ``table``: the table's file name, or its path as given where two tables share a name.
    """

    table: str
    label: str
    options: dict[str, Any]
    metric: str
    published: float
    predicted: float
    rel_error: float
    iteration_time_s: float
    wall_s: float
    warnings: tuple[str, ...] = ()
    error: str = ""
    unmodelled: tuple[str, ...] = ()
    known: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields; a number a row does not have (NaN: not replayed) is None."""
        def num(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {"table": self.table, "row": self.label, "options": _jsonable(self.options),
                "metric": self.metric, "published": num(self.published),
                "predicted": num(self.predicted), "rel_error": num(self.rel_error),
                "iteration_time_s": num(self.iteration_time_s), "wall_s": self.wall_s,
                "warnings": list(self.warnings), "error": self.error,
                "unmodelled": list(self.unmodelled), "known": list(self.known)}


def _jsonable(opts: dict[str, Any]) -> dict[str, Any]:
    return {k: (getattr(v, "name", v) if not isinstance(v, (int, float, str, bool)) else v)
            for k, v in opts.items()}


def read_table(path: str | Path) -> tuple[str, list[dict[str, str]]]:
    """(format, rows) of a published table: ``bridge``, ``titan``, ``mcore`` or ``sc21``
    (module docstring; :func:`~tracesim.pipeline.published_cells.read_rows` without the
    rows' numbers)."""
    fmt, rows = read_rows(path)
    return fmt, [row for _, row in rows]


def bridge_options(row: dict[str, str], path: Path, k: int) -> dict[str, Any]:
    """The replay options of a Megatron-Bridge row (module docstring). The layout must
    split the row's GPUs (dp = gpus / (tp x pp x cp)) and the global batch its micro-batches
    over dp; the numbers are checked before the names (a malformed cell is bad input on a
    row that names an unknown system too)."""
    gpus = positive_cell(row, "gpus", path, k)
    tp, pp = positive_cell(row, "tp", path, k), positive_cell(row, "pp", path, k)
    cp, ep = positive_cell(row, "cp", path, k, 1), positive_cell(row, "ep", path, k, 1)
    vp, fsdp = positive_cell(row, "vp", path, k, 1), int_cell(row, "fsdp", path, k, 0)
    dp = layout_dp(row, gpus, {"tp": tp, "pp": pp, "cp": cp}, path, k)
    mbs, gbs = positive_cell(row, "mbs", path, k), positive_cell(row, "gbs", path, k)
    seq = positive_cell(row, "seq_len", path, k)
    system = system_cell(row, path, k)
    prec = known_cell(row, "precision", tuple(PRECISIONS), path, k)
    dtype, recipe = PRECISIONS[prec]
    run = row_run(row, path, k)
    per_domain = segment_gpus(gpus) if system in NVL72_SYSTEMS else None
    if (row.get("segment") or "").strip():  # the run's slurm --segment, in 4-GPU trays
        if system not in NVL72_SYSTEMS:
            raise InputError(f"a slurm segment applies to {' and '.join(NVL72_SYSTEMS)} racks, not "
                             f"{system}", path, f"row {k + 2}: segment")
        per_domain = 4 * positive_cell(row, "segment", path, k)
    cluster = row_cluster(system, gpus, path, k, per_domain, "segment")
    # the runs set NCCL_NVLS_ENABLE=0 ("Disable NVLink SHARP to save memory"; Megatron-Bridge
    # v0.2.0 scripts/performance/utils/executors.py PERF_ENV_VARS)
    cluster = cluster.replace(intra_node=dataclasses.replace(cluster.intra_node, nvls=False))
    if (row.get("max_ctas") or "").strip():  # the run's NCCL communicator config
        cluster = cluster.replace(collectives=dataclasses.replace(
            cluster.collectives, max_ctas=ctas_cell(row, path, k)))
    model, spec = model_cell(row, path, k)
    opts: dict[str, Any] = {
        "model": model, "cluster": cluster,
        "tp": tp, "pp": pp, "cp": cp, "ep": ep, "dp": dp,
        "micro_batch": mbs, "global_batch": gbs, "seq_len": seq, "dtype": dtype, "stack": "megatron-core",
        "template": "analytic",
    }
    if recipe:
        opts["fp8_recipe"] = recipe
    if flag_cell(row, "fp8_attention", path, k):  # the run's FP8 dot-product attention
        if not recipe:
            raise InputError(f"FP8 attention needs an FP8 or NVFP4 precision, not {prec}", path,
                             f"row {k + 2}: fp8_attention")
        opts["fp8_attention"] = True
    if (row.get("attention") or "").strip():  # the run's attention kernel, where not the stack's
        opts["attention"] = known_cell(row, "attention", ("flash", "flash2"), path, k)
    if (row.get("cudnn") or "").strip():  # the cuDNN version the run's container had
        opts["cudnn"] = check_value("cudnn", row["cudnn"].strip(), path, f"row {k + 2}: cudnn")
    if vp > 1:
        opts["vpp"] = vp
    split = pipeline_split(spec.layers, pp, max(vp, 1))
    if split is not None:
        opts["stage_layers"] = split
    if fsdp > 0:
        opts["fsdp"] = True
    elif opts["dp"] > 1:
        opts["zero"] = 1  # Megatron's distributed optimizer
    if (row.get("fp8_param_gather") or "").strip() and recipe:  # FP8 parameters gathered
        opts["fp8_param_gather"] = flag_cell(row, "fp8_param_gather", path, k)
    if (row.get("tp_only_amax_red") or "").strip() and recipe == "delayed":  # others reduce none
        opts["fp8_amax_tp_only"] = flag_cell(row, "tp_only_amax_red", path, k)
    if (row.get("grad_nan_check") or "").strip():  # Megatron-Core's check of each bucket
        opts["grad_nan_check"] = flag_cell(row, "grad_nan_check", path, k)
    if (row.get("grad_nan_syncs") or "").strip() and opts.get("grad_nan_check"):
        opts["grad_nan_syncs"] = int_cell(row, "grad_nan_syncs", path, k)
    if (row.get("bucket_params") or "").strip():  # the run's gradient bucket size, parameters
        opts["bucket_params"] = int_cell(row, "bucket_params", path, k)
    if (row.get("grad_reduce") or "").strip():  # the run's gradient reduction dtype
        opts["grad_reduce_fp32"] = known_cell(row, "grad_reduce", ("fp32", "bf16"), path, k) == "fp32"
    if (row.get("ub_cfg") or "").strip():  # the run's userbuffers configuration
        opts["tp_comm_overlap_cfg"] = ub_cell(row, path, k)
    release = (row.get("release") or "25.11").strip()
    # a Megatron-Bridge table's row ran its release's NeMo container and that container's cuDNN
    # (a table of one's own runs, with its own settings' columns, gives a cudnn column instead)
    own_settings = any(c in row for c in ROW_RECIPE_COLUMNS)
    if "cudnn" not in opts and not own_settings and (ver := nemo_cudnn(release)):
        opts["cudnn"] = ver
    rec = (row.get("recompute") or "").strip()
    if rec.startswith("selective:"):  # the modules named (the form is checked with the recipe)
        try:
            recompute_modules(rec.split(":", 1)[1])
        except InputError as exc:
            raise InputError(exc.message, path, f"row {k + 2}: recompute") from None
    opts = recipe_options(run, opts, spec.layers, release) if run is not None else opts
    batch_split(opts["global_batch"], opts["micro_batch"], opts["dp"], path, k, "gbs")
    return opts


def row_options(fmt: str, row: dict[str, str], p: Path, k: int) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    """(replay options, label, recipe settings without a mechanism) of a row of a ``fmt``
    table. The options are checked as a replay checks them: a value no replay takes is an
    InputError naming the row and the column it comes from (:data:`OPTION_COLUMNS`)."""
    opts, label, gaps = _row_options(fmt, row, p, k)
    check_options(fmt, row, opts, p, k)
    return opts, label, gaps


def _row_options(fmt: str, row: dict[str, str], p: Path, k: int) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    """:func:`row_options` before the check."""
    gpus = positive_cell(row, "gpus", p, k)  # as a number in the label: 8.0 is 8
    if fmt == "bridge":
        opts = bridge_options(row, p, k)
        return opts, (f"{row['system']} {row['model']} {row['precision']} {gpus} GPUs "
                      f"tp{opts['tp']} pp{opts['pp']} cp{opts['cp']} ep{opts['ep']}"), row_unmodelled(row, p, k)
    if fmt == "titan":
        opts = titan_options(row, p, k)
        if opts["stack"] != "torchtitan":
            return opts, (f"{row['system']} {row['model']} {row['precision']} {opts['stack']} "
                          f"{gpus} GPUs {opts['micro_batch']}x{opts['seq_len']} "
                          f"{opts.get('attention', 'flash')}"), ()
        return opts, (f"{row['system']} {row['model']} {row['precision']} {gpus} GPUs "
                      f"tp{opts['tp']}{' pp' + str(opts['pp']) if opts['pp'] > 1 else ''}"
                      f"{' cp' + str(opts['cp']) if opts['cp'] > 1 else ''} "
                      f"fsdp{opts['dp']}{' ep' + str(opts['ep']) if 'ep' in opts else ''} "
                      f"ac {opts['recompute']}{' compiled' if opts['compile'] else ''}"), ()
    if fmt == "mcore":
        opts = mcore_options(row, p, k)
        return opts, (f"{row['system'].removeprefix('DGX-')} {opts['model'].name} {gpus} GPUs "
                      f"tp{opts['tp']} pp{opts['pp']}"), ()
    opts = sc21_options(row, p, k)
    model = getattr(opts["model"], "name", opts["model"])  # a shipped name or a spec
    return opts, f"A100 {model} {gpus} GPUs tp{opts['tp']} pp{opts['pp']}", ()


def table_rows(paths: Sequence[str | Path], only: Callable[[str], bool] | None = None,
               skip_unmodelled: bool = False,
               ) -> Iterator[tuple[Path, int, str, dict[str, str], dict[str, Any], str, tuple[str, ...]]]:
    """(table path, ``k`` (the row's number less 2: :mod:`~tracesim.pipeline.published_cells`),
    format, row, replay options, label, settings without a mechanism) of every row of the
    tables at ``paths`` (each once) whose label ``only`` accepts; a row naming what tracesim
    has no model for raises :class:`NotModelled`, or with ``skip_unmodelled`` is left out."""
    for p, k, fmt, row, opts, label, gaps in _rows(paths, only, keep=skip_unmodelled):
        if opts is not None:
            yield p, k, fmt, row, opts, label, gaps


def _rows(paths: Sequence[str | Path], only: Callable[[str], bool] | None, keep: bool,
          ) -> Iterator[tuple[Path, int, str, dict[str, str], dict[str, Any] | None, str, tuple[str, ...]]]:
    """:func:`table_rows`; with ``keep``, a row tracesim has no model for comes with options
    None and, as its settings, why (without the list of known names) and the whole error."""
    for p in tables(paths):
        fmt, rows = read_rows(p)
        for k, row in rows:
            if "system" in row:  # spelt in any case: DGX-H100, dgx-h100
                row = {**row, "system": system_name(row["system"])}
            if fmt in ("bridge", "titan"):  # NVIDIA's spellings: LLAMA3_70B, DeepSeekV3, MXFP8
                prec = (row.get("precision") or "").strip().lower()
                row = {**row, "model": model_name((row.get("model") or "").strip()),
                       "precision": SPELLINGS.get(prec, prec)}
            try:
                opts, label, gaps = row_options(fmt, row, p, k)
            except NotModelled as exc:
                if not keep:
                    raise
                # the reason without the list of known names, which every such row repeats
                why = re.sub(r" \(known: [^)]*\)", "", exc.line())
                opts, label, gaps = None, _cells_label(fmt, row), (why, exc.line())
            if only is None or only(label):
                yield p, k, fmt, row, opts, label, gaps


#: precisions as the tables after 25.11 write them: "FP8" is the recipes' FP8 with current
#: scaling (25.11's "FP8-CS"; torchtitan's float8 scales per tensor at each use too)
SPELLINGS = {"mxfp8": "fp8-mx", "fp8": "fp8-cs"}


def _cells_label(fmt: str, row: dict[str, str]) -> str:
    """The label of a row that has no replay options, from its cells as written."""
    def cell(key: str, default: str = "1") -> str:
        return (row.get(key) or "").strip() or default

    if fmt in ("mcore", "sc21"):
        name = f"gpt{'3' if fmt == 'sc21' else ''}-{cell('params_billion', '?')}b"
        return (f"{'A100' if fmt == 'sc21' else cell('system', '?').removeprefix('DGX-')} {name} "
                f"{cell('gpus', '?')} GPUs tp{cell('tp')} pp{cell('pp')}")
    return (f"{cell('system', '?')} {cell('model', '?')} {cell('precision', '?')} "
            f"{cell('gpus', '?')} GPUs tp{cell('tp')} pp{cell('pp')} cp{cell('cp')} ep{cell('ep')}")


def predicted_metric(fmt: str, row: dict[str, str], opts: Mapping[str, Any],
                     iteration_s: float) -> float:
    """The row's metric at an iteration time of ``iteration_s``: tokens/s per GPU
    (Megatron-Bridge and torchtitan tables) or TFLOP/s per GPU by the table's own FLOP
    formula."""
    gpus = positive_cell(row, "gpus", None, 0)  # checked with the row's options
    if fmt in TOKEN_FORMATS:
        return int(opts["global_batch"]) * int(opts["seq_len"]) / iteration_s / gpus
    flops = mcore_flops(row) if fmt == "mcore" else sc21_flops(row)
    return flops / (iteration_s * gpus) / 1e12 if iteration_s > 0 else 0.0


def metric_of(fmt: str) -> str:
    return "tokens_per_s_per_gpu" if fmt in TOKEN_FORMATS else "tflops_per_gpu"


def published_value(row: dict[str, str], metric: str, path: Path, k: int) -> float:
    """The row's published ``metric``; a Megatron-Bridge-format row without tokens/s per
    GPU may give its step time (``step_time_s``: tokens/s per GPU = gbs x seq_len / step
    time / GPUs) or Megatron's TFLOP/s per GPU (``model_tflops_per_gpu``: over Megatron's
    FLOPs per token, :mod:`tracesim.pipeline.mflops`, with the run's MTP layers)."""
    def cell(name: str) -> str:
        return (row.get(name) or "").strip()

    key = metric
    if metric == "tokens_per_s_per_gpu" and not cell(metric):
        key = next((alt for alt in ("step_time_s", "model_tflops_per_gpu") if cell(alt)), metric)
    text = cell(key)
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise InputError(f"expected a positive number, got {text!r}", path, f"row {k + 2}: {key}")
    if key == "step_time_s":
        return int_cell(row, "gbs", path, k) * int_cell(row, "seq_len", path, k) / value / int_cell(row, "gpus", path, k)
    if key == "model_tflops_per_gpu" and metric == "tokens_per_s_per_gpu":
        run = row_run(row, path, k)
        per_token = megatron_flops_per_token(model_cell(row, path, k)[1], int_cell(row, "seq_len", path, k),
                                             run.mtp_layers if run is not None else 0)
        return value * 1e12 / per_token
    return value


def _published_or_nan(row: dict[str, str], metric: str, path: Path, k: int) -> float:
    """:func:`published_value`; NaN where converting it needs a model tracesim does not ship."""
    try:
        return published_value(row, metric, path, k)
    except NotModelled:
        return float("nan")


def validate_rows(paths: list[str | Path], *, only: Callable[[str], bool] | None = None,
                  network: str | None = None, jobs: int = 1) -> Iterator[PublishedRow]:
    """Replay every row of the tables at ``paths`` (those whose label ``only`` accepts); every
    row is read and checked (InputError) before the first replay; a row naming a model, system
    or precision tracesim has no model for comes back not replayed, with why (``error``), unless
    no row is left to replay (then the first such row's InputError).
    ``network``: the replays' network model (``flow``, ``flow-relays``, ``flow-steps`` or
    ``estimate``; None: the replay default). ``jobs``: rows replayed at once in worker processes
    (the rows still come in table order, each as soon as it and the rows before it are done;
    ``wall_s`` is each row's own replay time). A table given twice is read once; each row's
    ``table`` is :func:`table_names`'s name of its table."""
    extra = {"network": network} if network else {}
    names = table_names(tables(paths))
    checked = [(names[p], p, k, fmt, row, None if opts is None else {**opts, **extra}, label, gaps,
                _published_or_nan(row, metric_of(fmt), p, k))
               for p, k, fmt, row, opts, label, gaps in _rows(paths, only, keep=True)]
    if checked and all(c[5] is None for c in checked):  # nothing to replay: say the first
        raise InputError(checked[0][7][1])
    if jobs <= 1 or len(checked) <= 1:
        yield from map(_replay_row, checked)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawn: the workers start clean (no copy of a parent's SimPy or thread state)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(checked)), mp_context=ctx) as pool:
        yield from pool.map(_replay_row, checked)


def _replay_row(item: tuple) -> PublishedRow:
    """One checked row of :func:`validate_rows`, replayed and compared."""
    name, p, k, fmt, row, opts, label, gaps, published = item
    metric = metric_of(fmt)
    if opts is None:  # nothing in tracesim models what the row names (an unknown system first)
        known = tuple(SYSTEMS) if "system" in row and row["system"] not in SYSTEMS else ()
        return PublishedRow(name, label, {}, metric, published, float("nan"), float("nan"),
                            float("nan"), 0.0, (), gaps[0], (), known)
    t0 = time.perf_counter()
    try:  # the row's cells are checked: what is left is a layout tracesim cannot express
        it, warns = steady_iteration_s(opts, p, f"row {k + 2}")
    except (InputError, OverflowError) as exc:  # said, not fatal
        why = str(exc) if isinstance(exc, InputError) else (
            f"{p}: row {k + 2}: its sizes overflow the replay's integer times and counts ({exc})")
        return PublishedRow(name, label, opts, metric, published, float("nan"), float("nan"),
                            float("nan"), time.perf_counter() - t0, (), why, gaps)
    wall = time.perf_counter() - t0
    predicted = predicted_metric(fmt, row, opts, it)
    return PublishedRow(name, label, opts, metric, published, predicted,
                        predicted / published - 1.0 if published else 0.0, it, wall,
                        warns, "", gaps)


def summary(rows: list[PublishedRow]) -> dict[str, Any]:
    """Mean absolute error, the mean signed error (positive: the replay predicts more
    throughput than published), the largest error and how many rows are within 10% and 20%."""
    done = [r for r in rows if not r.error]
    errs = [abs(r.rel_error) for r in done]
    if not errs:
        return {"rows": 0, "not_replayed": len(rows)}
    return {"rows": len(errs), "not_replayed": len(rows) - len(done), "mean_abs_error": sum(errs) / len(errs),
            "mean_error": sum(r.rel_error for r in done) / len(done), "max_abs_error": max(errs),
            "within_10pct": sum(e <= 0.10 for e in errs), "within_20pct": sum(e <= 0.20 for e in errs),
            "max_wall_s": max(r.wall_s for r in done)}
