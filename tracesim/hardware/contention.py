"""Co-location slowdown: ranks that share one host slow each other down (CPU runs).

Several training processes on one CPU host share its last-level cache, memory bandwidth and
(on a VM) whatever the hypervisor gives them, so each runs its compute slower than it did
alone. A 1-rank trace cannot show that. It is measured separately, on the host the
prediction is for, by ``python -m benchmarks.cpu.contention`` (a fixed probe, by default a
small GPT training step, run by 1 process alone and by N processes at once, interleaved;
never the training job it is later used to predict) and stored in the cluster spec::

    host_contention:
      slowdown: {2: 1.12}     # compute-time factor when 2 ranks run on one node
      method: "..."           # optional free text: how it was measured (load average etc.)

A retarget replay of several ranks per node multiplies every compute op's duration by
:meth:`HostContention.factor` of the ranks it places on a node (communication is not
scaled: the network model has its own numbers). No key means no slowdown (GPUs do not share
their compute).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tracesim.errors import InputError
from tracesim.strict import check_keys

_F = TypeVar("_F", bound=Callable[..., int])


@dataclass(frozen=True)
class HostContention:
    """Measured compute-time factors: ``slowdown`` holds (ranks on one node, factor) pairs,
    sorted by rank count (a factor of 1.2 means 20% longer compute per op); ``method`` says
    how they were measured (free text, for reports).
    """

    slowdown: tuple[tuple[int, float], ...] = ()
    method: str = ""

    def factor(self, ranks: int) -> float:
        """Compute-time factor for ``ranks`` processes on one node: 1 for one rank; between
        measured counts linear; beyond the largest measured count, the largest's factor."""
        if ranks <= 1 or not self.slowdown:
            return 1.0
        pts = [(1, 1.0), *sorted(self.slowdown)]
        for (n0, f0), (n1, f1) in zip(pts, pts[1:], strict=False):
            if n0 <= ranks <= n1:
                return f0 + (f1 - f0) * (ranks - n0) / (n1 - n0)
        return pts[-1][1]

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"slowdown": {n: f for n, f in self.slowdown}}
        if self.method:
            d["method"] = self.method
        return d


def contention_from_dict(data: Any, file: str | Path | None, where: str = "host_contention") -> HostContention:
    """Parse a ``host_contention`` mapping (module doc); bad values raise InputError."""
    if not isinstance(data, Mapping):
        raise InputError("expected a mapping", file, where)
    check_keys(data, ("slowdown",), ("method", "detail"), file=file, where=where)
    raw = data["slowdown"]
    if not isinstance(raw, Mapping) or not raw:
        raise InputError("expected a non-empty mapping {ranks: factor}", file, f"{where}.slowdown")
    pairs = []
    for key, value in raw.items():
        place = f"{where}.slowdown.{key}"
        try:
            n = int(key)
        except (TypeError, ValueError):
            raise InputError(f"rank count must be an integer, got {key!r}", file, place) from None
        if n < 2 or str(n) != str(key).strip():
            raise InputError(f"rank count must be an integer >= 2, got {key!r}", file, place)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.5 <= value <= 10:
            raise InputError(f"factor must be a number in [0.5, 10], got {value!r}", file, place)
        pairs.append((n, float(value)))
    method = data.get("method", "")
    if not isinstance(method, str):
        raise InputError(f"expected text, got {method!r}", file, f"{where}.method")
    return HostContention(tuple(sorted(pairs)), method)


def scaled_op_time(op_time: _F, factor: float) -> _F:
    """``op_time`` with every duration multiplied by ``factor`` (itself when it is 1)."""
    if factor == 1.0:
        return op_time

    def scaled(*args: Any, **kwargs: Any) -> int:
        return int(round(op_time(*args, **kwargs) * factor))

    return scaled  # type: ignore[return-value]
