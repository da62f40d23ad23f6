"""The interface between the replay engine and a communication model.

The engine calls a :class:`CommModel` when every member of a collective (or both ends of a
send/recv pair) is ready; the model returns a SimPy event that fires when the operation has
finished on the simulated network. Ranks are global ranks; rank ``r`` runs on GPU ``r`` of
the cluster (node ``r // gpus_per_node``). Sizes are bytes; simulated time is integer ns.

A model may also have ``bind_activity(active)``: the engine then passes it a callable that
says whether the job has anything in flight (timeouts or operations), so that traffic the
model generates on its own (a second job's collectives, :mod:`tracesim.network.background`)
stops when the job has ended or stalled instead of running forever.
"""

from __future__ import annotations

from typing import Protocol

import simpy


class CommModel(Protocol):
    def attach(self, env: simpy.Environment) -> None:
        """Bind the model to the engine's environment (called once before the replay)."""

    def collective(
        self, collective: str, ranks: tuple[int, ...], msg_bytes: int, group_kind: str = "",
        algorithm: str = "", chunks: int = 1,
    ) -> simpy.Event:
        """Start a collective over ``ranks`` now; the event fires when it has completed.

        ``collective`` is one of all_reduce, all_gather, reduce_scatter, all_to_all,
        broadcast, reduce, barrier. ``msg_bytes`` is the per-rank buffer size in the
        nccl-tests convention (all_gather: the gathered output size). ``algorithm``: the
        task's ``algorithm`` column (e.g. ``userbuffers``, Transformer Engine's transfers
        that bypass NCCL); the engine passes it only when the task names one. ``chunks``:
        the task's ``chunks`` column, passed only when above 1: the task stands for
        ``chunks`` operations of ``msg_bytes / chunks`` run back to back (the merged
        communication chunks of a Transformer Engine overlapped GEMM), each paying its own
        latency.
        """
        ...

    def p2p(self, src: int, dst: int, nbytes: int, group_kind: str = "") -> simpy.Event:
        """Start a point-to-point transfer now; the event fires when the last byte arrived.
        ``group_kind``: the kind of the communicator it runs on (``pp``, ``cp``; "" unknown)."""
        ...
