"""One sweep point as one task: replay it and turn the result into a flat row.

:func:`run_point` runs on a Dask worker. It never raises for a bad point: the row says
``status`` ``ok`` | ``failed`` | ``skipped`` and carries the error text, so one impossible
layout does not stop a sweep.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tracesim import __version__
from tracesim.sweep.space import SweepPoint

#: bookkeeping columns of every row, before the settings and the metrics
META_COLUMNS = ("key", "status", "error", "tracesim_version", "cluster_name", "cluster_gpus",
                "task_wall_s")
STATUSES = ("ok", "failed", "skipped")


def flatten(obj: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings to dotted keys (``breakdown.exposed_comm_s.tp``); lists become JSON
    text (``warnings``: the messages joined by ``; ``); numpy scalars become Python ones."""
    out: dict[str, Any] = {}
    for k, v in obj.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            if v:
                out.update(flatten(v, f"{name}."))
            else:
                out[name] = None
        elif isinstance(v, (list, tuple)):
            if name == "warnings" and all(isinstance(x, str) for x in v):
                out[name] = "; ".join(v)
            else:
                out[name] = json.dumps(v, default=_plain)
        else:
            out[name] = _plain(v)
    return out


def _plain(v: Any) -> Any:
    if hasattr(v, "item") and callable(v.item):
        return v.item()
    return v


def result_columns(result: Mapping[str, Any], reserved: Iterable[str]) -> dict[str, Any]:
    """The flattened replay result; a metric whose name is already an input column
    (``cluster``) is stored as ``result.<name>``."""
    taken = set(reserved)
    flat = flatten(result)
    return {(f"result.{k}" if k in taken else k): v for k, v in flat.items()}


def _local_file(path: str, spec: Mapping[str, Any] | None, kind: str) -> str:
    """``path`` if this machine sees it (shared disk, local cluster), else a copy of
    ``spec`` written once into the worker's temporary directory."""
    if Path(path).exists() or spec is None:
        return path
    from tracesim.fileio import write_yaml

    local = Path(tempfile.gettempdir()) / "tracesim-sweep" / kind / Path(path).name
    if not local.exists():
        write_yaml(local, dict(spec))
    return str(local)


def replay_options(point: SweepPoint) -> dict[str, Any]:
    """The replay options of ``point`` (:class:`tracesim.options.ReplayOptions` fields) with
    the model / cluster files that this machine can read."""
    opts = dict(point.opts)
    opts["cluster"] = _local_file(point.cluster_file, point.cluster_spec, "clusters")
    if point.model_file is not None:
        opts["model"] = _local_file(point.model_file, point.model_spec, "models")
    return opts


def base_row(point: SweepPoint) -> dict[str, Any]:
    """The row of ``point`` before replay: bookkeeping columns and its settings."""
    row: dict[str, Any] = {"key": point.key, "status": "", "error": "",
                           "tracesim_version": __version__, "cluster_name": point.cluster_name,
                           "cluster_gpus": point.cluster_spec["nodes"] * point.cluster_spec["gpus_per_node"],
                           "task_wall_s": 0.0}
    row.update(point.settings)
    return row


def run_point(point: SweepPoint) -> dict[str, Any]:
    """Replay one point (:func:`tracesim.pipeline.predict`) and return its row.

    Columns: :data:`META_COLUMNS`, the point's settings, every metric of the replay result
    flattened (:func:`flatten`), and ``tokens_per_s_per_gpu``. A point whose replay raises
    is ``failed`` with ``error`` = ``"<ExceptionType>: <message>"``; with the space's memory
    filters a replayed point over budget is ``skipped`` (its metrics kept).
    """
    from tracesim.options import ReplayOptions
    from tracesim.pipeline import predict

    t0 = time.perf_counter()
    row = base_row(point)
    try:
        result = predict(point.source, ReplayOptions.from_mapping(replay_options(point))).to_dict()
    except Exception as exc:  # recorded, never raised: one bad point must not stop a sweep
        row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
        row["task_wall_s"] = time.perf_counter() - t0
        return row
    row.update(result_columns(result, reserved=row))
    gpus = result.get("gpus") or 0
    tps = result.get("tokens_per_s")  # None for a recording that does not say its tokens
    row["tokens_per_s_per_gpu"] = tps / gpus if gpus and tps is not None else None
    row["status"] = "ok"
    mem = result.get("memory") or {}
    need = float(result.get("memory_gib_per_gpu") or 0.0)
    if point.fits_memory and mem.get("fits") is False:
        row["status"] = "skipped"
        row["error"] = (f"does not fit: {need:.1f} GiB per GPU, the device has "
                        f"{float(mem.get('capacity') or 0):.0f} GiB")
    elif point.max_memory_gib is not None and need > point.max_memory_gib:
        row["status"] = "skipped"
        row["error"] = f"over budget: {need:.1f} GiB per GPU > max_memory_gib {point.max_memory_gib:g}"
    row["task_wall_s"] = time.perf_counter() - t0
    return row
