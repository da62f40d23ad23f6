"""The cells of a published table's row, read and checked (:mod:`tracesim.pipeline.published`).

A malformed cell (a number that is not one, a true / false that is neither) is bad input:
:class:`~tracesim.errors.InputError`, exit 2. A well-formed cell naming something tracesim has
no model for -- a model it does not ship, a system without a cluster spec, a precision it does
not price -- raises :class:`NotModelled`, which ``tracesim validate published`` reports on that
row ("not replayed: ...") while it replays the others: a newer release's table with a model
or GPU tracesim lacks is still checked on the rows it can replay.

:func:`read_rows` reads a table and tells its format from its header. Rows are numbered as a
spreadsheet numbers them: the header is row 1 and a blank line is a row (without line breaks
inside quoted cells, row N is the file's line N); ``k`` in the functions here is the row's
number less 2 (row ``k + 2``), the first row under the header being ``k`` 0.

:func:`pipeline_split` splits a row's layers over its pipeline chunks where they do not divide
evenly, as the recipes do.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracesim.catalog import cluster_with_nodes, load_model
from tracesim.errors import InputError
from tracesim.options import ReplayOptions
from tracesim.specs.cluster import ClusterSpec
from tracesim.specs.collectives import cta_pairs
from tracesim.specs.model import ModelSpec
from tracesim.specs.ub_config import SHIPPED

#: system name -> the shipped cluster spec of that system (scaled to a row's GPUs)
SYSTEMS = {"DGX-H100": "h100x1024", "DGX-B200": "dgx-b200", "DGX-GB200": "gb200-nvl72",
           "DGX-GB300": "gb300-nvl72", "DGX-A100": "a100-selene", "DGX-H200": "h200x8",
           "DGX-B300": "dgx-b300"}
#: systems whose shipped spec is one GB200 / GB300 NVL72 rack per node: a job of more than
#: 18 trays uses the GPUs of its slurm segments per rack (:func:`segment_gpus`)
NVL72_SYSTEMS = ("DGX-GB200", "DGX-GB300")
#: GPUs one job uses per GB200 / GB300 NVL72 rack: scripts/performance/utils/executors.py
#: (v0.2.0) passes ``--segment`` = the largest divisor of the node count up to 18 when a
#: 4-GPU-node job has more than 18 nodes; 64 nodes (256 GPUs) -> segments of 16 trays = 64
#: GPUs per NVLink domain. Jobs of up to 18 nodes get no segment (placement not constrained).
NVL72_TRAYS = 18


def segment_gpus(gpus: int, gpus_per_tray: int = 4) -> int | None:
    """GPUs per NVLink domain of a GB200 / GB300 job of ``gpus`` GPUs as the performance
    scripts place it (``slurm --segment``), or None when they set no segment."""
    nodes = -(-gpus // gpus_per_tray)
    if nodes <= NVL72_TRAYS:
        return None
    seg = next(s for s in range(NVL72_TRAYS, 0, -1) if nodes % s == 0)
    return seg * gpus_per_tray


#: precision column -> (dtype, FP8 recipe); ``fp8-sc``: sub-channel (blockwise) scaling,
#: Megatron-Bridge's ``fp8_sc`` (``bf16_with_fp8_subchannel_scaling_mixed``)
PRECISIONS = {"bf16": ("bf16", None), "fp16": ("fp16", None), "fp8-cs": ("fp8", "current"),
              "fp8-ds": ("fp8", "delayed"), "fp8-mx": ("fp8", "mxfp8"), "nvfp4": ("fp8", "nvfp4"),
              "fp8-sc": ("fp8", "blockwise")}


BRIDGE_COLUMNS = ("system", "model", "gpus", "precision", "gbs", "mbs", "seq_len", "tp", "pp",
                  "tokens_per_s_per_gpu")
TITAN_COLUMNS = ("system", "model", "gpus", "precision", "local_batch", "seq_len", "tp", "ac",
                 "compile", "tokens_per_s_per_gpu")
SC21_COLUMNS = ("params_billion", "hidden", "layers", "tp", "pp", "gpus", "global_batch",
                "tflops_per_gpu")
MCORE_COLUMNS = ("system", *SC21_COLUMNS, "heads", "seq_len", "vocab")
#: format -> (what it is, the columns it needs), in the order a header is matched
FORMATS = {"bridge": ("a Megatron-Bridge performance table", BRIDGE_COLUMNS),
           "titan": ("a torchtitan table", TITAN_COLUMNS),
           "mcore": ("a Megatron-Core GPT table", MCORE_COLUMNS),
           "sc21": ("SC'21 Table 1", SC21_COLUMNS)}


def tables(paths: Sequence[str | Path]) -> list[Path]:
    """The tables at ``paths``, each once: a table given twice (the same file, however its
    path is written) is read once, where it is first given."""
    seen: set[Path] = set()
    out = []
    for path in paths:
        p = Path(path)
        if (key := p.resolve()) not in seen:
            seen.add(key)
            out.append(p)
    return out


def table_names(paths: Sequence[Path]) -> dict[Path, str]:
    """Each table's name in results and summaries: its file name, or where two tables
    share one (``d1/runs.csv``, ``d2/runs.csv``) its path as given."""
    count = Counter(p.name for p in paths)
    return {p: p.name if count[p.name] == 1 else str(p) for p in paths}


#: replay option -> the table column it comes from, where not the option's own name (a
#: format's own first); an option of no column is named as the row's setting
OPTION_COLUMNS = {"titan": {"micro_batch": "mbs", "global_batch": "local_batch", "recompute": "ac",
                            "pp_rounds": "ga", "fp8_param_gather": "fsdp_fp8_all_gather"},
                  "mcore": {"dp": "gpus"}, "sc21": {"dp": "gpus"},
                  "": {"micro_batch": "mbs", "global_batch": "gbs", "dp": "gpus", "vpp": "vp",
                       "recompute_modules": "recompute", "recompute_layers": "recompute",
                       "moe_dispatcher": "dispatcher", "moe_routing": "routing",
                       "tp_comm_overlap_cfg": "ub_cfg", "fsdp_reshard": "reshard_after_forward",
                       "grad_reduce_fp32": "grad_reduce", "fp8_amax_tp_only": "tp_only_amax_red"}}


def check_options(fmt: str, row: dict[str, str], opts: dict[str, Any], path: Path, k: int) -> None:
    """Check a row's replay options as a replay checks them: a value no replay takes is an
    InputError naming the row and the column it comes from (:data:`OPTION_COLUMNS`)."""
    try:
        ReplayOptions.from_mapping(opts, path, f"row {k + 2}")
    except InputError as exc:
        key = (exc.where or "").rpartition(".")[2]
        col = OPTION_COLUMNS.get(fmt, {}).get(key) or OPTION_COLUMNS[""].get(key, key)
        raise InputError(exc.message, path,
                         f"row {k + 2}: {col if col in row else f'{key} (from its cells)'}") from None


def read_rows(path: str | Path) -> tuple[str, list[tuple[int, dict[str, str]]]]:
    """(format, [(k, row)]) of a published table (:mod:`tracesim.pipeline.published`): each
    row as column -> cell, the columns as the header names them in lower case and without
    spaces around them (``System``: ``system``), a missing trailing cell empty; ``k``: the
    row's number less 2 (module docstring). A blank row (no cell with text) is skipped; a UTF-8
    byte-order mark (Excel's "CSV UTF-8") is read. An empty table, a header that names a column
    twice or no format (or lacks columns of the format it is closest to), a row with more
    cells than the header and a table without rows are InputErrors."""
    p = Path(path)
    try:
        with p.open(newline="", encoding="utf-8-sig") as fh:
            records = list(csv.reader(fh))
    except FileNotFoundError:
        raise InputError("file not found", p) from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"not a readable CSV table ({exc})", p) from None
    first = next((i for i, rec in enumerate(records) if any(c.strip() for c in rec)), None)
    if first is None:
        raise InputError("empty: no header and no rows", p)
    header = [c.strip().lower() for c in records[first]]
    if twice := sorted({c for c in header if c and header.count(c) > 1}):
        raise InputError(f"column {', '.join(twice)} twice", p, "header")
    fmt = table_format(header, p)
    rows = []
    for i in range(first + 1, len(records)):
        rec = records[i]
        if len(rec) > len(header):
            raise InputError(f"{len(rec)} cells, more cells than the header ({len(header)}; quote a "
                             "cell that holds a comma)", p, f"row {i + 1}")
        if any(c.strip() for c in rec):
            rows.append((i - 1, dict(zip(header, [*rec, *[""] * (len(header) - len(rec))], strict=True))))
    if not rows:
        raise InputError("no rows: the table has a header only", p)
    return fmt, rows


def table_format(header: list[str], path: Path) -> str:
    """The format (:data:`FORMATS`) a table's header names: the first whose columns it has
    (a table of one's own runs may give ``step_time_s`` or ``model_tflops_per_gpu`` for
    ``tokens_per_s_per_gpu``; one with a ``system``, ``seq_len`` or ``vocab`` column is no SC'21
    table, which names neither). A header without all the columns of any: an InputError naming
    those missing from the format whose columns it has the most of (at least half of them)."""
    cols = set(header)
    if cols & {"step_time_s", "model_tflops_per_gpu"}:
        cols.add("tokens_per_s_per_gpu")
    formats = {f: v for f, v in FORMATS.items()
               if not (f == "sc21" and cols & {"system", "seq_len", "vocab"})}
    for fmt, (_, need) in formats.items():
        if set(need) <= cols:
            return fmt
    what, need = max(formats.values(), key=lambda v: len(cols & set(v[1])))
    if 2 * len(cols & set(need)) >= len(need):
        missing = [c for c in need if c not in cols]
        raise InputError(f"{what} without the column{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(missing)} (its columns: {', '.join(need)})", path, "header")
    raise InputError("neither " + ", ".join(f"{what} (columns {', '.join(need)})"
                                           for what, need in list(FORMATS.values())[:-1])
                     + f" nor {FORMATS['sc21'][0]} (columns {', '.join(SC21_COLUMNS)})", path, "header")


class NotModelled(InputError):
    """A row names a model, system or precision that tracesim has no model for (module
    docstring): not replayed, not fatal to the table."""


def model_cell(row: dict[str, str], path: Path, k: int) -> tuple[str, ModelSpec]:
    """The row's model as given (a shipped name or a spec path) and its spec. A name that
    is not shipped: :class:`NotModelled`; a spec path that is missing or wrong: InputError."""
    name = (row.get("model") or "").strip()
    try:
        return name, load_model(name)
    except InputError as exc:
        spec_path = "/" in name or name.endswith((".yaml", ".yml"))
        cls = InputError if spec_path or not name else NotModelled
        raise cls(exc.message, path, f"row {k + 2}: model") from None


def known_cell(row: dict[str, str], key: str, known: tuple[str, ...], path: Path, k: int) -> str:
    """The row's ``key`` cell, one of ``known`` (another: :class:`NotModelled`; empty:
    InputError)."""
    value = (row.get(key) or "").strip()
    if value not in known:
        cls = NotModelled if value else InputError
        raise cls(f"unknown {key} {value!r} (known: {', '.join(known)})", path, f"row {k + 2}: {key}")
    return value


def system_cell(row: dict[str, str], path: Path, k: int) -> str:
    """The row's system, one of :data:`SYSTEMS` (spelt in any case: :func:`system_name`)."""
    return known_cell({**row, "system": system_name(row.get("system") or "")}, "system",
                      tuple(SYSTEMS), path, k)


def system_name(text: str) -> str:
    """The :data:`SYSTEMS` name ``text`` stands for in any case (``dgx-h100``: ``DGX-H100``);
    another name as given."""
    text = text.strip()
    return next((s for s in SYSTEMS if s.lower() == text.lower()), text)


def row_cluster(system: str, gpus: int, path: Path, k: int, per_domain: int | None = None,
                domain_column: str = "gpus") -> ClusterSpec:
    """The shipped cluster spec of ``system`` with as many nodes as the row's ``gpus`` need
    (``per_domain``: GPUs used per NVLink domain); a count the spec cannot take is an
    InputError naming the row's ``gpus`` cell (or ``domain_column``, for ``per_domain``)."""
    try:
        return cluster_with_nodes(SYSTEMS[system], gpus, per_domain)
    except InputError as exc:
        column = domain_column if exc.where == "gpus_per_node" else "gpus"
        raise InputError(exc.message, path, f"row {k + 2}: {column}") from None


def int_cell(row: dict[str, str], key: str, path: Path | None, k: int, default: int | None = None) -> int:
    """A whole-number cell (``8``, or ``8.0`` written as a decimal; empty: ``default`` where
    there is one); a fraction, an infinity or text is an InputError naming the row and column."""
    text = (row.get(key) or "").strip()
    if not text and default is not None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value.is_integer()):
        raise InputError(f"expected a whole number, got {text!r}", path, f"row {k + 2}: {key}")
    return int(value)


def positive_cell(row: dict[str, str], key: str, path: Path | None, k: int, default: int | None = None) -> int:
    """A whole-number cell that must be at least 1 (a GPU count, a batch, a parallel degree,
    a model size): 0 or less is a malformed cell, InputError naming the row and column."""
    value = int_cell(row, key, path, k, default)
    if value < 1:
        raise InputError(f"must be >= 1, got {value}", path, f"row {k + 2}: {key}")
    return value


def number_cell(row: dict[str, str], key: str, path: Path, k: int) -> float:
    """A positive finite number cell (``params_billion``: 7.1)."""
    text = (row.get(key) or "").strip()
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"expected a positive number, got {text!r}", path, f"row {k + 2}: {key}")
    return value


def layout_dp(row: dict[str, str], gpus: int, split: dict[str, int], path: Path, k: int) -> int:
    """The data-parallel size of a row of ``gpus`` GPUs whose model is split over ``split``
    (column -> degree: tp, pp, cp): the GPUs over their product, which must divide them
    (else an InputError naming the row's ``gpus``); a ``dp`` cell, where the table has one,
    must agree (else an InputError naming ``dp``)."""
    per = math.prod(split.values())
    if gpus % per:
        names = " x ".join(split)
        raise InputError(f"{gpus} GPUs do not split into groups of {names} = "
                         f"{' x '.join(map(str, split.values()))} GPUs", path, f"row {k + 2}: gpus")
    dp = gpus // per
    if (row.get("dp") or "").strip() and int_cell(row, "dp", path, k) != dp:
        raise InputError(f"dp {int_cell(row, 'dp', path, k)}, but the row's {gpus} GPUs over "
                         f"{' x '.join(split)} = {per} give dp {dp}", path, f"row {k + 2}: dp")
    return dp


def batch_split(gbs: int, mbs: int, dp: int, path: Path, k: int, column: str) -> None:
    """The global batch ``gbs`` must split into micro-batches of ``mbs`` on each of ``dp``
    data-parallel ranks (Megatron's check): else an InputError naming the row's ``column``."""
    if gbs % (mbs * dp):
        raise InputError(f"global batch {gbs} is not a multiple of micro-batch {mbs} x dp {dp} "
                         f"= {mbs * dp}", path, f"row {k + 2}: {column}")


def flag_cell(row: dict[str, str], key: str, path: Path, k: int) -> bool:
    """A true / false column (empty: false)."""
    text = (row.get(key) or "").strip().lower()
    if text not in ("", "true", "false"):
        raise InputError(f"expected true or false, got {text!r}", path, f"row {k + 2}: {key}")
    return text == "true"


def ctas_cell(row: dict[str, str], path: Path, k: int) -> tuple[tuple[str, int], ...]:
    """The run's NCCL CTA caps (``max_ctas``: Megatron-Core communicator names and counts,
    ``dp_cp=8 cp=1 pp=2``), as a cluster spec's ``collectives.max_ctas``."""
    return cta_pairs(row.get("max_ctas") or "", path, f"row {k + 2}: max_ctas")


def ub_cell(row: dict[str, str], path: Path, k: int) -> str:
    """The run's userbuffers configuration (``ub_cfg``): a shipped name
    (:data:`tracesim.specs.ub_config.SHIPPED`) or a YAML file named relative to the table."""
    value = (row.get("ub_cfg") or "").strip()
    if value in SHIPPED:
        return value
    f = path.parent / value
    if not f.is_file():
        raise InputError(f"no userbuffers configuration {value!r} (a shipped name: "
                         f"{', '.join(SHIPPED)}; or a YAML file beside the table)", path,
                         f"row {k + 2}: ub_cfg")
    return str(f)


def pipeline_split(layers: int, pp: int, vp: int) -> tuple[int, ...] | None:
    """Transformer layers per model chunk (``pp * vp`` entries, pipeline order) when
    ``layers`` do not split evenly, else None. As Megatron-Bridge's recipes for such models
    (``account_for_embedding_in_pipeline_split`` and ``account_for_loss_in_pipeline_split``):
    the embedding and the loss count as one layer each, so the first and the last chunk run
    one transformer layer fewer; where ``layers + 2`` does not divide either, the earlier
    chunks take one more (Llama 3.1 405B's 126 layers on pp 8 x vp 8: 1, 2, ..., 2, 1).
    Where ``layers + 2`` is exactly one per chunk, the first chunk runs the embedding alone
    and the last the loss alone (126 layers on pp 16 x vp 8: 0, 1, ..., 1, 0). Other splits
    that would leave a chunk empty spread the layers alone that way (DeepSeek-V3's 61 on 32
    chunks: 29 of 2, 3 of 1)."""
    n = pp * vp
    if n <= 1 or layers % n == 0 or layers + 2 < n or layers < n and (layers + 2) % n:
        return None  # even, or fewer layers than chunks (the layout check says so)
    base, rem = divmod(layers + 2, n)
    out = [base + (1 if i < rem else 0) for i in range(n)]
    out[0] -= 1
    out[-1] -= 1
    if min(out) < 1 and not (rem == 0 and n > 2 and min(out[1:-1]) >= 1):
        base, rem = divmod(layers, n)
        out = [base + (1 if i < rem else 0) for i in range(n)]
    return tuple(out)
