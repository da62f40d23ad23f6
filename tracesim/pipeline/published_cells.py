"""The cells of a published table's row, read and checked (:mod:`tracesim.pipeline.published`).

A malformed cell (a number that is not one, a true / false that is neither) is bad input:
:class:`~tracesim.errors.InputError`, exit 2. A well-formed cell naming something tracesim has
no model for -- a model it does not ship, a system without a cluster spec, a precision it does
not price -- raises :class:`NotModelled`, which ``tracesim validate published`` reports on that
row ("not replayed: ...") while it replays the others: a newer release's table with a model
or GPU tracesim lacks is still checked on the rows it can replay.

:func:`pipeline_split` splits a row's layers over its pipeline chunks where they do not divide
evenly, as the recipes do.
"""

from __future__ import annotations

from pathlib import Path

from tracesim.catalog import load_model
from tracesim.errors import InputError
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
    """The row's system, one of :data:`SYSTEMS`."""
    return known_cell(row, "system", tuple(SYSTEMS), path, k)


def int_cell(row: dict[str, str], key: str, path: Path, k: int, default: int | None = None) -> int:
    """A whole-number cell (empty: ``default`` where there is one)."""
    text = (row.get(key) or "").strip()
    if not text and default is not None:
        return default
    try:
        return int(float(text))
    except ValueError:
        raise InputError(f"expected a number, got {text!r}", path, f"row {k + 2}: {key}") from None


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
