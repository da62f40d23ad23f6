"""Injected by ``tracesim collect -- CMD`` into every Python process of the command.

``tracesim.collectors.wrap`` copies this file and ``collectors/recorder.py`` (as
``_tracesim_recorder.py``) into a temporary directory that it puts first on ``PYTHONPATH``,
so Python runs this file at start-up (the ``site`` module imports ``sitecustomize``). It:

* chains to the next ``sitecustomize`` on ``sys.path`` (the one this one hides), if any;
* when ``TRACESIM_RECORD_DIR`` is set, installs a ``sys.meta_path`` finder that waits for
  ``torch.optim.optimizer`` to be imported, and then (torch is not imported here, and not at
  all in a process that never imports it) hands that module to
  ``_tracesim_recorder.activate``, which registers the global optimizer-step hook, unless
  the process is a launcher (torchrun's agent) whose workers are the ranks.

Nothing here may break the user's process: a failure prints one line to stderr.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from typing import Any

_TARGET = "torch.optim.optimizer"
_HERE = os.path.dirname(os.path.abspath(__file__))


def _after_exec(loader: Any) -> None:
    """Make ``loader`` (the real one, of this one module) run :func:`_activate` after it has
    executed the module; the loader keeps its type, so ``inspect`` and friends still work."""
    run = loader.exec_module

    def exec_module(module: Any) -> None:
        run(module)
        try:
            _activate(module)
        except Exception as exc:  # noqa: BLE001 - never break the user's import
            print(f"tracesim: warning: recording not started: {type(exc).__name__}: {exc}",
                  file=sys.stderr)

    loader.exec_module = exec_module


class _OptimizerImported(importlib.abc.MetaPathFinder):
    """Finds ``torch.optim.optimizer`` through the other finders, once, and hooks its loader."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != _TARGET:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None:
                    _after_exec(spec.loader)
                return spec
        return None


def _activate(module: Any) -> None:
    import _tracesim_recorder

    _tracesim_recorder.activate(module)


def _chain() -> None:
    """Run the ``sitecustomize`` that this one hides (the next one on ``sys.path``)."""
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if os.environ.get("TRACESIM_RECORD_DIR") and "torch.optim.optimizer" not in sys.modules:
    sys.meta_path.insert(0, _OptimizerImported())
_chain()
