"""The replay's event loop on SimPy's own queue (:func:`tracesim.engine.replay.replay`
schedules its compute wake-ups there directly and runs the queue in one loop)."""

from __future__ import annotations

from collections.abc import Iterator
from heapq import heappop
from itertools import count

import simpy


def internals(env: simpy.Environment) -> tuple[list | None, Iterator[int]]:
    """SimPy's event queue and event counter (the queue is ``None`` when ``env`` is not a
    plain SimPy 4 environment): the replay schedules its own wake-ups on them directly."""
    queue, eid = getattr(env, "_queue", None), getattr(env, "_eid", None)
    if type(env) is not simpy.Environment or type(queue) is not list or eid is None:
        return None, count()
    return queue, eid


def run_env(env: simpy.Environment) -> None:
    """``env.run()``: process the events in (time, priority, order) until none is left, as
    :meth:`simpy.Environment.step` does but in one loop (no method call per event)."""
    queue, _ = internals(env)
    if queue is None:
        env.run()
        return
    pop = heappop
    while queue:
        env._now, _, _, event = pop(queue)
        callbacks, event.callbacks = event.callbacks, None
        for callback in callbacks:
            callback(event)
        if not event._ok and not hasattr(event, "_defused"):
            exc = type(event._value)(*event._value.args)  # as simpy.Environment.step raises it
            exc.__cause__ = event._value
            raise exc
