"""Pipeline schedules, registered by decorator (house style rule 5).

A schedule is a function ``(pp, stage, num_micro, vpp) -> list[Item]`` giving the order in
which one pipeline rank runs the forward (``F``) and backward (``B``) passes of its model
chunks over the micro-batches of one iteration. ``Item.chunk`` is the rank's local model
chunk (0..vpp-1; rank ``stage``'s chunk ``c`` is global model chunk ``c * pp + stage``).

Every stage runs its forwards in the same (chunk, micro-batch) order and its backwards in the
same order, so point-to-point transfers on a link are produced and consumed in one order.

* ``gpipe``: all forwards, then all backwards (Huang et al. 2019).
* ``1f1b``: PipeDream-flush / Megatron 1F1B: ``pp - stage - 1`` warm-up forwards, then
  one forward / one backward, then the remaining backwards.
* ``interleaved``: Megatron's interleaved 1F1B over ``vpp`` model chunks (Narayanan et al.
  2021); needs ``num_micro % pp == 0``.

:func:`iteration_items` runs a schedule ``rounds`` times per iteration, each run over its
own share of the micro-batches with its own warm-up and drain (``--pp-rounds``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from tracesim.errors import InputError


class Item(NamedTuple):
    """One pass of a schedule: ``kind`` F or B, local ``chunk``, micro-batch ``mb``."""

    kind: str
    chunk: int
    mb: int


ScheduleFn = Callable[[int, int, int, int], list[Item]]
SCHEDULES: dict[str, ScheduleFn] = {}


def register_schedule(name: str) -> Callable[[ScheduleFn], ScheduleFn]:
    """Register a schedule function under ``name``."""

    def deco(fn: ScheduleFn) -> ScheduleFn:
        SCHEDULES[name] = fn
        return fn

    return deco


def get_schedule(name: str) -> ScheduleFn:
    try:
        return SCHEDULES[name]
    except KeyError:
        raise InputError(
            f"unknown schedule {name!r} (known: {', '.join(sorted(SCHEDULES))})", "--schedule"
        ) from None


def iteration_items(name: str, pp: int, stage: int, num_micro: int, vpp: int,
                    rounds: int = 1) -> list[Item]:
    """A stage's passes over one iteration: the schedule ``name`` run ``rounds`` times, each
    over ``num_micro // rounds`` consecutive micro-batches (a trainer that accumulates
    gradients over local batches, each through the whole pipeline schedule)."""
    per = num_micro // rounds
    one = get_schedule(name)(pp, stage, per, vpp)
    return [Item(it.kind, it.chunk, it.mb + r * per) for r in range(rounds) for it in one]


@register_schedule("gpipe")
def gpipe(pp: int, stage: int, num_micro: int, vpp: int = 1) -> list[Item]:
    return [Item("F", 0, m) for m in range(num_micro)] + [Item("B", 0, m) for m in range(num_micro)]


@register_schedule("1f1b")
def one_f_one_b(pp: int, stage: int, num_micro: int, vpp: int = 1) -> list[Item]:
    warmup = min(pp - stage - 1, num_micro)
    items = [Item("F", 0, m) for m in range(warmup)]
    for i in range(num_micro - warmup):
        items.append(Item("F", 0, warmup + i))
        items.append(Item("B", 0, i))
    items += [Item("B", 0, m) for m in range(num_micro - warmup, num_micro)]
    return items


@register_schedule("interleaved")
def interleaved(pp: int, stage: int, num_micro: int, vpp: int = 2) -> list[Item]:
    if num_micro % pp:
        raise InputError(
            f"interleaved 1F1B needs micro-batches ({num_micro}) divisible by pp {pp}", "--global-batch"
        )
    total = num_micro * vpp
    group = pp * vpp

    def fwd(k: int) -> Item:
        return Item("F", (k % group) // pp, (k // group) * pp + k % pp)

    def bwd(k: int) -> Item:
        return Item("B", vpp - 1 - (k % group) // pp, (k // group) * pp + k % pp)

    if num_micro == pp:
        warmup = total
    else:
        warmup = min((pp - stage - 1) * 2 + (vpp - 1) * pp, total)
    items = [fwd(k) for k in range(warmup)]
    for k in range(total - warmup):
        items.append(fwd(warmup + k))
        items.append(bwd(k))
    items += [bwd(k) for k in range(total - warmup, total)]
    return items
