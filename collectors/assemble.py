"""A version-2 bundle from the rank directories of a recording (no torch here).

The ranks of ``tracesim collect -- CMD`` and of :func:`tracesim.record` each write
``rank{R}/trace.json.gz``, ``et.json.gz`` and ``rank.json`` (:mod:`tracesim.collectors.recorder`);
:func:`bundle_meta` makes ``meta.yaml`` from the ``rank.json`` files;
:func:`tracesim.fileio.replace_dir` moves the finished directory onto the output.
"""

from __future__ import annotations

import datetime
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracesim.collectors.recorder import RANK_FILE

from tracesim.trace.bundle import BUNDLE_FORMAT

BUNDLE_VERSION = 2
#: the per-rank keys of rank.json that go into meta.yaml's per_rank entries
PER_RANK_KEYS = ("rank", "local_rank", "host", "pid", "device", "threads", "optimizer",
                 "step_times_s", "profiler_warmup_step_s", "profiled_step_times_s",
                 "profiled_step_events", "profiler_overhead")


def read_rank_infos(work: Path) -> list[dict[str, Any]]:
    """The ``rank{R}/rank.json`` files under ``work``, by rank."""
    infos = []
    for path in work.glob(f"rank*/{RANK_FILE}"):
        with open(path) as fh:
            infos.append(json.load(fh))
    return sorted(infos, key=lambda i: int(i["rank"]))


def summary(times_s: Sequence[float]) -> dict[str, Any]:
    """``{median, min, max, n}`` of step times (seconds)."""
    return {"median": float(statistics.median(times_s)), "min": float(min(times_s)),
            "max": float(max(times_s)), "n": len(times_s)}


def bundle_meta(infos: Sequence[dict[str, Any]], *, source: str,
                command: Sequence[str] | None = None) -> dict[str, Any]:
    """``meta.yaml`` (version 2) of the recorded ranks ``infos`` (rank.json contents);
    top-level figures are the lowest recorded rank's (rank 0 in a complete recording)."""
    r0 = infos[0]
    ranks = [int(i["rank"]) for i in infos]
    meta: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "source": source,
    }
    if command is not None:
        meta["command"] = list(command)
    meta.update({
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": str(r0["device"]),
        "torch_version": str(r0["torch_version"]),
        "host": r0.get("host"),
        "threads": int(r0["threads"]),
        "ranks": len(ranks) if ranks == list(range(len(ranks))) else ranks,
        "world_size": int(r0["world_size"]),
        "backend": r0.get("backend"),
        "process_groups": r0.get("process_groups") or [],
        "warmup_steps": int(r0["warmup_steps"]),
        "measured_steps": int(r0["measured_steps"]),
        "profiled_steps": int(r0["profiled_steps"]),
        "measured_step_time_s": summary(r0["step_times_s"]),
        "profiled_step_time_s": summary(r0["profiled_step_times_s"]),
        "profiler_overhead": dict(r0["profiler_overhead"]),
        "per_rank": [
            {**{k: i.get(k) for k in PER_RANK_KEYS},
             "measured_step_time_s": summary(i["step_times_s"])}
            for i in infos
        ],
    })
    return meta
