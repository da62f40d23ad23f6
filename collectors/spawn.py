"""Spawned helper processes of the small measurement tools (loopback, paired_gloo)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from typing import Any


def free_port() -> int:
    """A free TCP port on the loopback interface (for a gloo rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_spawned(target: Callable[..., None], args_per_proc: Sequence[tuple], timeout_s: float = 600) -> list[Any]:
    """Start one spawned process per ``args_per_proc`` entry running ``target(*args, queue)``;
    return what each put on the queue (in arrival order). Raises RuntimeError when a process
    exits with an error."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, queue), daemon=True) for a in args_per_proc]
    for p in procs:
        p.start()
    try:
        results = [queue.get(timeout=timeout_s) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.terminate()
    bad = [p.exitcode for p in procs if p.exitcode]
    if bad:
        raise RuntimeError(f"a spawned worker failed (exit codes {bad})")
    return results
