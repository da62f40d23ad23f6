"""The GPUs of one job are not equal: a synchronous job runs at its slowest one.

Under a training step's sustained load every GPU sits at its board power limit, and the clock
it holds there differs from GPU to GPU: each die has its own voltage-frequency curve (the
silicon lottery), each slot its own cooling, and the GPUs of a node share the board's power
and cooling budget. A device profile's ``sustained_clock`` is one GPU measured alone with its
siblings idle. A data-parallel step ends when the last replica's gradients are reduced, a
tensor-parallel layer when its slowest rank's GEMM is done, a pipeline at its slowest stage:
a job of ``N`` GPUs that compute alike runs at the rate of the slowest of them.

The spread has two parts. A die's own rate lasts (``chip_sigma``); and with its siblings busy,
one GPU's rate also moves from run to run (``run_sigma``: the board's shared power and
cooling budget moves its clock; one GPU's repeated runs while the others run spread wider
than alone). A job waits at every collective for the GPU that is slowest at that moment, so
both count: at a given moment the GPUs' rates spread about the node's mean with a standard
deviation ``sigma = sqrt(chip_sigma^2 + run_sigma^2)`` (the two independent).

A profile's ``sustained_fleet`` says how its GPUs vary, from measurements of every GPU of a
node saturated at once::

    sustained_fleet:
      concurrent: 0.980     # mean saturated rate, all GPUs of the node at once, over one alone
      chip_sigma: 0.030     # standard deviation of one GPU's saturated rate, relative
      run_sigma: 0.008      # standard deviation of one GPU's runs with its siblings busy

and :meth:`Fleet.factor` gives the job's compute rate over the profile's: 1 for one GPU, else
``concurrent x (1 - E[max of N standard normals] x sigma)``, the expected slowest of
``N`` GPUs drawn from the node's distribution (a job of 2 to 7 GPUs takes the whole node's
``concurrent`` too: its siblings are taken as busy, as a shared node's are). It multiplies the sustained clock
(:meth:`tracesim.hardware.device.DeviceProfile.for_job`), so it slows compute and leaves
memory-bound time alone, as the clock does. The normal tail is this model's assumption
beyond the measured node (docs/devices.md, "The slowest GPU of a job").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from tracesim.errors import InputError
from tracesim.strict import check_keys, get_number

#: the integration grid of :func:`expected_max` (standard normal units)
_GRID = np.linspace(-9.0, 9.0, 18_001)
#: a chip_sigma above this is not a spread of one part's binned dies
MAX_SIGMA = 0.2


@cache
def _cdf() -> np.ndarray:
    return np.array([0.5 * (1.0 + math.erf(x / math.sqrt(2.0))) for x in _GRID])


@cache
def expected_max(n: int) -> float:
    """E[max of ``n`` independent standard normal draws] (0 for one draw): the integral of
    ``x n phi(x) Phi(x)^(n-1)`` on a fine grid (to 1e-6)."""
    if n <= 1:
        return 0.0
    x, cdf = _GRID, _cdf()
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    y = x * n * pdf * np.power(cdf, n - 1)
    return float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2.0)  # the trapezoid rule


@dataclass(frozen=True)
class Fleet:
    """How the saturated rate of a profile's GPUs varies (module docstring)."""

    concurrent: float = 1.0
    chip_sigma: float = 0.0
    run_sigma: float = 0.0

    @property
    def sigma(self) -> float:
        """A GPU's rate at one moment about the node's mean: its die's lasting offset and its
        run-to-run motion, independent (relative standard deviation)."""
        return math.hypot(self.chip_sigma, self.run_sigma)

    def factor(self, gpus: int) -> float:
        """A job of ``gpus`` GPUs: the expected rate of its slowest GPU over one GPU alone."""
        if gpus <= 1:
            return 1.0
        return self.concurrent * max(0.0, 1.0 - expected_max(gpus) * self.sigma)

    def to_dict(self) -> dict[str, float]:
        return {"concurrent": self.concurrent, "chip_sigma": self.chip_sigma,
                "run_sigma": self.run_sigma}


def parse_fleet(data: Any, file: str | Path | None, where: str) -> Fleet | None:
    """``sustained_fleet`` of a profile (None when absent or null)."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise InputError(f"expected a mapping with concurrent, chip_sigma and run_sigma, got "
                         f"{type(data).__name__}", file, where)
    check_keys(data, ("concurrent", "chip_sigma"), ("run_sigma",), file=file, where=where)
    conc = get_number(data, "concurrent", file=file, where=where)
    if conc > 1.0:
        raise InputError(f"must be in (0, 1], got {conc!r}", file, f"{where}.concurrent")
    sigmas = []
    for key in ("chip_sigma", "run_sigma"):
        sigma = get_number(data, key, file=file, where=where, allow_zero=True, default=0.0)
        if sigma > MAX_SIGMA:
            raise InputError(f"must be in [0, {MAX_SIGMA}], got {sigma!r}", file, f"{where}.{key}")
        sigmas.append(sigma)
    return Fleet(conc, *sigmas)
