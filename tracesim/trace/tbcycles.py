"""Which of a ``torch.profiler.tensorboard_trace_handler`` worker's files a folder read takes.

The handler writes one file per profiler cycle, ``{worker}.{ts}.pt.trace.json[.gz]``. A job
that stops in the middle of a cycle (the usual ``schedule(wait, warmup, active)`` with a
step count that is not a whole number of cycles) leaves a last file whose steps hold no
operators: only the ``ProfilerStep#N`` annotation of the step the profiler was stopped in.
The latest cycle is taken unless a cycle is asked for; the latest one that recorded
operators when that last file holds none (docs/import.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tracesim.errors import InputError

TB_RE = re.compile(r"^(?P<worker>.+)\.(?P<ts>\d{10,})\.pt\.trace\.json(?:\.gz)?$")


def natural(s: str) -> list[Any]:
    """A sort key that orders ``rank2`` before ``rank10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def tb_ts(p: Path) -> int:
    m = TB_RE.match(p.name)
    return int(m["ts"]) if m else 0


def select_cycles(traces: list[Path], cycle: int
                  ) -> tuple[list[Path], list[Path], dict[Path, list[Path]]]:
    """One file per worker: its ``cycle``-th by timestamp. Returns the files taken, the
    files not taken and, per file taken as the default latest cycle (``cycle`` -1), the
    worker's earlier files, latest first (:func:`has_ops` decides whether to fall back)."""
    groups: dict[tuple[Path, str], list[Path]] = {}
    keep: list[Path] = []
    for p in traces:
        m = TB_RE.match(p.name)
        if m:
            groups.setdefault((p.parent, m["worker"]), []).append(p)
        else:
            keep.append(p)
    skipped: list[Path] = []
    earlier: dict[Path, list[Path]] = {}
    for (_, worker), paths in groups.items():
        paths.sort(key=tb_ts)
        if not -len(paths) <= cycle < len(paths):
            raise InputError(f"worker {worker!r} has {len(paths)} trace(s); there is no cycle {cycle}",
                             paths[0].parent)
        keep.append(paths[cycle])
        skipped.extend(p for p in paths if p is not paths[cycle])
        if cycle == -1 and len(paths) > 1:
            earlier[paths[-1]] = paths[-2::-1]
    return (sorted(keep, key=lambda p: natural(str(p))), sorted(skipped, key=lambda p: natural(str(p))),
            earlier)


def has_ops(data: Mapping[str, Any]) -> bool:
    """Whether a loaded Kineto trace recorded any operator (a ``cpu_op`` event)."""
    return any(isinstance(ev, dict) and str(ev.get("cat", "")).lower() == "cpu_op"
               for ev in data.get("traceEvents") or ())
