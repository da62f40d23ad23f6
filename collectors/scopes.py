"""Module scopes and phase annotations for eager PyTorch traces.

``torch.profiler``'s ``with_modules`` only covers TorchScript, so eager module calls are
annotated here: a forward pre-hook enters ``record_function("nn.Module: <path>")`` and the
forward hook leaves it, so every ``cpu_op`` of a module's forward nests inside a
``user_annotation`` event named after the module's dotted path (``nn.Module: blocks.0.attn.qkv``).
The root module is not annotated; the training step is split into phases by
``tracesim.phase: <forward|backward|optimizer>`` annotations instead (see docs/collect.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

#: prefix of module-scope annotations (the extractor matches on it)
MODULE_PREFIX = "nn.Module: "
#: prefix of phase annotations
PHASE_PREFIX = "tracesim.phase: "
PHASES = ("forward", "backward", "optimizer")


class ModuleScopes:
    """Forward hooks that wrap every named submodule's forward in a ``record_function``.

    Paths are relative to the module passed in (so wrap the bare model, before DDP, to get
    ``blocks.0.attn`` rather than ``module.blocks.0.attn``). ``remove()`` takes the hooks off.
    """

    def __init__(self, model: nn.Module):
        self._stack: list[torch.profiler.record_function] = []
        self._handles = []
        for path, module in model.named_modules():
            if not path:
                continue
            self._handles.append(module.register_forward_pre_hook(self._enter(path)))
            self._handles.append(module.register_forward_hook(self._exit(path), always_call=True))

    def _enter(self, path: str):
        name = MODULE_PREFIX + path

        def hook(module: nn.Module, args: object) -> None:
            rf = torch.profiler.record_function(name)
            rf.__enter__()
            self._stack.append(rf)

        return hook

    def _exit(self, path: str):
        def hook(module: nn.Module, args: object, output: object) -> None:
            if self._stack:
                self._stack.pop().__exit__(None, None, None)

        return hook

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Annotate one phase of the training step (``forward``, ``backward`` or ``optimizer``)."""
    if name not in PHASES:
        raise ValueError(f"unknown phase {name!r}")
    with torch.profiler.record_function(PHASE_PREFIX + name):
        yield
