"""Run a sweep on Dask: one replay per point, results streamed into ``results.parquet``.

:func:`run_sweep` expands the space, skips points whose key is already in the results
table (resume), submits the rest as tasks to a ``dask.distributed`` cluster -- a
``LocalCluster`` of ``workers`` single-threaded processes by default, or the scheduler at
``scheduler`` (``tcp://HOST:8786``) -- and rewrites the table atomically after every batch
of finished points. Progress goes to a callback (the CLI prints it on stderr); Ctrl-C
writes what has finished, cancels the rest and re-raises ``KeyboardInterrupt``.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.fileio import output_dir, write_json
from tracesim.sweep.space import (
    Expansion,
    SweepPoint,
    SweepSpace,
    expand_space,
    write_spec_files,
)
from tracesim.sweep.store import build_table, done_keys, read_results, write_results
from tracesim.sweep.task import base_row, run_point


@dataclass(frozen=True)
class Progress:
    """Where a running sweep stands. ``rate_per_s`` is points per second since the first
    task was submitted; ``eta_s`` the time left at that rate (None before the first point)."""

    done: int
    total: int
    failed: int
    elapsed_s: float

    @property
    def rate_per_s(self) -> float:
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        return (self.total - self.done) / self.rate_per_s if self.rate_per_s > 0 else None

    def line(self) -> str:
        """``sweep: 37/48 points (2 failed), 5.1 points/s, ETA 2s``."""
        eta = "--" if self.eta_s is None else _duration(self.eta_s)
        failed = f" ({self.failed} failed)" if self.failed else ""
        return (f"sweep: {self.done}/{self.total} points{failed}, {self.rate_per_s:.2f} points/s, "
                f"elapsed {_duration(self.elapsed_s)}, ETA {eta}")


def _duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else (
        f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s")


@dataclass(frozen=True)
class SweepSummary:
    """What a sweep run did. ``points`` is the size of the space after constraints;
    ``computed`` the replays run now; ``reused`` the points found in the results table."""

    points: int
    excluded: int
    duplicates: int
    reused: int
    computed: int
    ok: int
    failed: int
    skipped: int
    wall_s: float
    workers: int | None
    scheduler: str
    interrupted: bool
    results: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_workers() -> int:
    """One worker process per CPU core."""
    return max(1, os.cpu_count() or 1)


def _connect(workers: int, scheduler: str | None) -> tuple[Any, Any]:
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise InputError("tracesim sweep needs dask.distributed: pip install 'tracesim[sweep]'",
                         "--scheduler" if scheduler else "--workers") from None
    if scheduler:
        try:
            return Client(scheduler, timeout="20s"), None
        except (OSError, TimeoutError) as exc:
            raise InputError(f"cannot reach the Dask scheduler ({exc})", "--scheduler", scheduler) from None
    # Worker processes start with SIGINT ignored (the disposition survives exec), so Ctrl-C
    # reaches only this process, which writes the finished points and closes the cluster.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    if main:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=logging.CRITICAL)
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
    return Client(cluster), cluster


def run_sweep(space: SweepSpace, sweep_dir: str | Path, *, workers: int | None = None,
              scheduler: str | None = None, retry_failed: bool = False,
              progress: Callable[[Progress], None] | None = None,
              batch_size: int = 16, flush_interval_s: float = 2.0,
              expansion: Expansion | None = None) -> SweepSummary:
    """Run every point of ``space`` not yet in ``SWEEP_DIR/results.parquet``.

    Args:
        space: the parsed space (:func:`tracesim.sweep.space.load_space`).
        sweep_dir: output directory (created); holds ``results.parquet``, ``clusters/``,
            ``models/`` and ``summary.json``.
        workers: local worker processes (default: one per core, at most one per point);
            ignored with ``scheduler``.
        scheduler: address of a running Dask scheduler (``tcp://host:8786``); its workers
            need tracesim installed and, for ``source`` bundles, the same paths.
        retry_failed: recompute points stored as ``failed``.
        progress: called after each finished point (and once at the start).
        batch_size, flush_interval_s: the table is rewritten after this many finished points
            or this many seconds, whichever comes first, and at the end.
        expansion: ``expand_space(space, sweep_dir)`` when the caller has it already.

    Returns:
        A :class:`SweepSummary`. ``KeyboardInterrupt`` is re-raised after the finished
        points are written.
    """
    t0 = time.perf_counter()
    sweep_dir = output_dir(sweep_dir)
    exp = expansion if expansion is not None else expand_space(space, sweep_dir)
    write_spec_files(exp.points)
    previous = read_results(sweep_dir)
    skip = done_keys(previous, retry_failed)
    order = [p.key for p in exp.points]
    pending = [p for p in exp.points if p.key not in skip]
    rows: dict[str, dict[str, Any]] = {}
    n_workers = None if scheduler else min(workers or default_workers(), max(len(pending), 1))
    interrupted = False
    if pending:
        try:
            _compute(pending, rows, workers=n_workers or 1, scheduler=scheduler,
                     progress=progress, batch_size=batch_size, flush_interval_s=flush_interval_s,
                     flush=lambda: write_results(build_table(rows, order, previous, space.prices),
                                                 sweep_dir))
        except KeyboardInterrupt:
            interrupted = True
            raise
        finally:
            table = build_table(rows, order, previous, space.prices)
            write_results(table, sweep_dir)
            summary = _summary(exp, table, order, rows, t0, n_workers, scheduler, interrupted,
                               sweep_dir, len(exp.points) - len(pending))
            write_json(sweep_dir / "summary.json", summary.to_dict())
    else:
        table = build_table(rows, order, previous, space.prices)
        if previous is None or list(table.columns) != list(previous.columns) or len(table) != len(previous):
            write_results(table, sweep_dir)
        summary = _summary(exp, table, order, rows, t0, None, scheduler, False, sweep_dir,
                           len(exp.points))
        write_json(sweep_dir / "summary.json", summary.to_dict())
    return summary


def _summary(exp: Any, table: Any, order: list[str], rows: dict, t0: float, workers: int | None,
             scheduler: str | None, interrupted: bool, sweep_dir: Path, reused: int) -> SweepSummary:
    current = table[table["key"].isin(order)] if len(table) else table
    counts = current["status"].value_counts().to_dict() if len(current) else {}
    return SweepSummary(points=len(exp.points), excluded=exp.excluded, duplicates=exp.duplicates,
                        reused=reused, computed=len(rows), ok=int(counts.get("ok", 0)),
                        failed=int(counts.get("failed", 0)), skipped=int(counts.get("skipped", 0)),
                        wall_s=round(time.perf_counter() - t0, 3), workers=workers,
                        scheduler=scheduler or "local", interrupted=interrupted,
                        results=str(sweep_dir / "results.parquet"))


def _compute(pending: list[SweepPoint], rows: dict[str, dict[str, Any]], *, workers: int,
             scheduler: str | None, progress: Callable[[Progress], None] | None,
             batch_size: int, flush_interval_s: float, flush: Callable[[], Any]) -> None:
    from dask.distributed import as_completed

    client, cluster = _connect(workers, scheduler)
    t_start = time.perf_counter()
    failed = 0
    futures: list[Any] = []
    try:
        by_key = {p.key: p for p in pending}
        futures = [client.submit(run_point, p, key=f"tracesim-sweep-{p.key}", pure=False)
                   for p in pending]
        if progress:
            progress(Progress(0, len(pending), 0, 0.0))
        since_flush, t_flush = 0, time.perf_counter()
        for fut in as_completed(futures):
            key = str(fut.key).removeprefix("tracesim-sweep-")
            try:
                row = fut.result()
            except Exception as exc:  # the worker died or the task could not run
                row = base_row(by_key[key])
                row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
            rows[row["key"]] = row
            failed += row["status"] == "failed"
            since_flush += 1
            if since_flush >= batch_size or time.perf_counter() - t_flush >= flush_interval_s:
                flush()
                since_flush, t_flush = 0, time.perf_counter()
            if progress:
                progress(Progress(len(rows), len(pending), failed, time.perf_counter() - t_start))
    finally:
        for fut in futures:
            if not fut.done():
                fut.cancel()
        client.close()
        if cluster is not None:
            cluster.close()
