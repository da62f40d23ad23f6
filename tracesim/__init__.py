"""tracesim: trace-driven replay simulator for distributed training.

The Python API (:mod:`tracesim.api`) is available from the package itself, loaded on first
use so that ``import tracesim`` stays cheap::

    import tracesim
    p = tracesim.replay(model="llama3-8b", cluster="h100x8", tp=8)
    print(p.iteration_time_s, p.to_dict()["breakdown"])

Names: :func:`replay`, :func:`write_result`, :func:`validate_self_replay`, :func:`extract`,
:func:`convert`, :func:`netbench`, :func:`calibrate`, :func:`collect`, :func:`compare`,
:func:`list_shipped`, :class:`ReplayOptions`, :class:`Prediction` (see :mod:`tracesim.api`);
:func:`record` (``with tracesim.record("bundle"): <training loop>``, see
:mod:`tracesim.collectors.record`; torch is imported only when the block is entered).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_API = ("replay", "write_result", "validate_self_replay", "extract", "convert", "netbench",
        "calibrate", "collect", "compare", "list_shipped", "ReplayOptions", "Prediction",
        "SelfReplayCheck", "ExtractResult", "ConvertResult", "NetbenchResult", "CompareResult")
#: where each lazily exported name lives
_LAZY = {**{name: "tracesim.api" for name in _API}, "record": "tracesim.collectors.record"}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tracesim' has no attribute {name!r}")
