"""The result directory of ``tracesim replay ... -o OUT`` (schema in docs/formats.md).

=======================  =================================================================
file                     what
=======================  =================================================================
``result.json``          the ``replay --json`` object, plus ``files`` (this table) and,
                         when the task graph is at hand, ``per_rank_breakdown`` and
                         ``critical_path``
``timeline.json.gz``     Chrome / Kineto trace of the simulated iteration
                         (:mod:`tracesim.report.timeline`)
``kineto/rank<R>.json.gz`` the same, one file per rank, for Holistic Trace Analysis
``ops.parquet``          every simulated task: start, end, lane, class, scaling method
``links.parquet``        per-link bytes and utilisation over time (:mod:`.links`)
``breakdown.png``        where the iteration goes, per rank
``gantt.png``            per-rank Gantt chart of the iteration
``links.png``            link utilisation heat map (flow-level replays)
=======================  =================================================================

Times in files are integer nanoseconds (``*_ns``) or seconds (``*_s``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracesim.graph.taskgraph import COMM_KINDS, TaskGraph
from tracesim.report.compare import check_metrics
from tracesim.report.result import Prediction

FILES = {
    "result.json": "the replay --json object (docs/formats.md)",
    "timeline.json.gz": "Chrome/Kineto trace of the simulated iteration (Perfetto, chrome://tracing)",
    "kineto": "one Kineto trace per rank (Holistic Trace Analysis: TraceAnalysis(trace_dir=...))",
    "ops.parquet": "every simulated task: start/end ns, lane, class, scaling method",
    "links.parquet": "per-link bytes and utilisation per time bin",
    "breakdown.png": "where the iteration goes, per rank",
    "gantt.png": "Gantt chart of the iteration, lanes coloured by class",
    "links.png": "link utilisation heat map",
}


def check_result_dir(out: str | Path, flag: str = "-o") -> Path:
    """``out`` as a place for a result directory: absent, empty, or a result directory
    written before (only the files of :data:`FILES`), which a new result replaces; anything
    else there (a workload, a bundle, the user's own files) is never overwritten: an
    InputError naming ``flag`` and the path. Checks that the place can be created too."""
    from tracesim.errors import InputError
    from tracesim.fileio import output_dir

    if str(out) == "":
        raise InputError(f"{flag}: an empty path (give the result directory to write)")
    p = output_dir(out, flag, create=False)
    if p.is_dir():
        foreign = sorted(q.name for q in p.iterdir()
                         if q.name not in FILES and not q.name.startswith("."))
        if foreign:
            raise InputError(f"{flag}: exists and is not a tracesim result directory (it holds "
                             f"{foreign[0]}{' and more' if len(foreign) > 1 else ''}); "
                             "refusing to overwrite it", p)
    return p


def ops_table(graph: TaskGraph, start_ns: np.ndarray, end_ns: np.ndarray,
              methods: np.ndarray | None = None) -> pd.DataFrame:
    """``ops.parquet``: one row per task (columns in docs/formats.md)."""
    t = graph.tasks
    lanes = graph.lanes
    lane = t["lane"].to_numpy()
    comm = np.isin(t["kind"].to_numpy(), COMM_KINDS)
    gk = t["group_kind"].astype(str).to_numpy()
    cls = t["op_class"].astype(str).to_numpy().astype(object)
    cls[comm] = np.where(gk[comm] != "", gk[comm], "comm")
    return pd.DataFrame({
        "task_id": t["task_id"].to_numpy(np.int64),
        "rank": t["rank"].to_numpy(np.int32),
        "lane": lanes["name"].astype(str).to_numpy()[lane],
        "lane_kind": lanes["kind"].astype(str).to_numpy()[lane],
        "kind": t["kind"].astype(str).to_numpy(),
        "name": t["name"].astype(str).to_numpy(),
        "class": cls.astype(str),
        "op_class": t["op_class"].astype(str).to_numpy(),
        "phase": t["phase"].astype(str).to_numpy(),
        "layer": t["layer"].to_numpy(np.int32),
        "collective": t["collective"].astype(str).to_numpy(),
        "group_kind": gk,
        "msg_bytes": t["msg_bytes"].to_numpy(np.int64),
        "flops": t["flops"].to_numpy(np.float64),
        "start_ns": np.asarray(start_ns, dtype=np.int64),
        "end_ns": np.asarray(end_ns, dtype=np.int64),
        "dur_ns": np.asarray(end_ns, dtype=np.int64) - np.asarray(start_ns, dtype=np.int64),
        "method": (np.asarray(methods, dtype=object).astype(str) if methods is not None
                   else np.full(len(t), "", dtype=object)),
    })


def write_result_dir(out: str | Path, rep: Prediction, *, bins: int = 200,
                     max_ranks: int | None = None, plots: bool = True,
                     progress: Callable[[str, int, int], None] | None = None) -> dict:
    """Write the result directory (module docstring); returns the result dict written.

    Args:
        out: the directory (created).
        rep: the replay to write (with its graph and simulated times, when kept).
        bins: time bins of ``links.parquet``.
        max_ranks: ranks in the timeline (default :data:`tracesim.report.timeline.MAX_RANKS`).
        plots: write the PNGs (needs matplotlib; without it they are skipped with a warning).
        progress: called as ``("write", files written, files to write)`` before each file.
    """
    from tracesim.fileio import atomic_path, output_dir, write_json
    from tracesim.report import timeline as tl
    from tracesim.report.links import link_utilisation

    check_result_dir(out, "out")
    out = output_dir(out)
    done = [0]

    def tick(n: int = 1) -> None:  # ``n`` files about to be written
        if progress:
            progress("write", done[0], len(FILES))
        done[0] += n

    res = rep.to_dict(critical_path=True)
    written: dict[str, Any] = {"dir": str(out)}
    g = rep.graph
    links_df = None
    if g is not None and rep.start_ns is not None and rep.end_ns is not None:
        mr = max_ranks or tl.MAX_RANKS
        tick(2)
        info = tl.write_timeline(out / "timeline.json.gz", g, rep.start_ns, rep.end_ns,
                                 max_ranks=mr, methods=rep.methods,
                                 meta={"result": {k: res.get(k) for k in ("mode", "cluster", "gpus")}},
                                 kineto=out / "kineto")
        written["timeline.json.gz"] = FILES["timeline.json.gz"]
        written["kineto"] = FILES["kineto"]
        res["timeline"] = info
        t0 = int(min(0, int(rep.start_ns.min()))) if len(rep.start_ns) else 0
        t1 = int(rep.end_ns.max()) if len(rep.end_ns) else 0
        tick()
        ops = ops_table(g, rep.start_ns, rep.end_ns, rep.methods)
        with atomic_path(out / "ops.parquet") as tmp:
            ops.to_parquet(tmp, index=False)
        written["ops.parquet"] = FILES["ops.parquet"]
        if rep.topology is not None:
            tick()
            links_df = link_utilisation(rep.links, rep.topology, t1 - t0, bins=bins)
            with atomic_path(out / "links.parquet") as tmp:
                links_df.to_parquet(tmp, index=False)
            written["links.parquet"] = FILES["links.parquet"]
            if links_df.empty:
                estimate = (res.get("replay") or {}).get("network") == "estimate"
                res.setdefault("warnings", []).append(
                    "links.parquet is empty: the estimate network model simulates no flows "
                    "(use --network flow for per-link traffic)" if estimate else
                    "links.parquet is empty: no transfer crossed a network link")
    if plots:
        try:
            from tracesim.report import plots as pl

            per_rank = rep.per_rank or {}
            tick()
            pl.save(pl.breakdown_figure(res, per_rank), out / "breakdown.png")
            written["breakdown.png"] = FILES["breakdown.png"]
            if g is not None and rep.start_ns is not None and rep.end_ns is not None:
                tick()
                pl.save(pl.gantt_figure(g, rep.start_ns, rep.end_ns, title=pl._title(res)),
                        out / "gantt.png")
                written["gantt.png"] = FILES["gantt.png"]
            if links_df is not None and not links_df.empty:
                tick()
                pl.save(pl.links_figure(links_df, title=pl._title(res)), out / "links.png")
                written["links.png"] = FILES["links.png"]
        except ImportError:
            res.setdefault("warnings", []).append(
                "matplotlib is not installed: no PNGs written (pip install 'tracesim[plot]')")
    res["files"] = written
    for name in FILES:  # a result written before: its files this one does not have
        old = out / name
        if name not in written and name != "result.json" and old.exists():
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    tick()
    write_json(out / "result.json", json.loads(json.dumps(res, default=json_default)))
    if progress:
        progress("write", len(FILES), len(FILES))
    return res


def json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, Mapping):
        return dict(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def load_result(path: str | Path) -> dict:
    """A result dict from a result directory or a ``result.json`` file, its metrics checked
    (:func:`~tracesim.report.compare.check_metrics`)."""
    from tracesim.errors import InputError

    p = Path(path)
    f = p / "result.json" if p.is_dir() else p
    if not f.exists():
        raise InputError(f"no result.json in {p} (write one with tracesim replay ... -o DIR)", p)
    try:
        data = json.loads(f.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg}", f, f"line {exc.lineno}") from None
    if not isinstance(data, dict) or "iteration_time_s" not in data:
        raise InputError("not a tracesim result (no iteration_time_s)", f, "iteration_time_s")
    check_metrics(data, f)
    return data
