"""Megatron-Core DDP settings of an MLPerf Training submission, read by ``mlperf_training.py``:
the gradient NaN check (the ``grad_nan_check`` and ``grad_nan_syncs`` cells of its row;
docs/stacks.md, "Gradient NaN check") and the gradient bucket size (``bucket_params``).

Whether the run checked: the ``DistributedDataParallelConfig(... check_for_nan_in_grad=...)``
its log prints, else the value the submission's ``pretrain.py`` passes (``True``, ``False``,
or ``not config.model.full_cuda_graph``: off with ``FULL_CUDA_GRAPH``); neither (the GPT-3
submissions, whose NeMo 1 runs Apex's ``distributed_fused_adam`` without Megatron-Core's
DDP): empty cells. Host syncs per bucket from the Megatron-Core release the submission's
``Dockerfile`` checks out (``ARG MCORE_REVISION=core_r0.11.0``): 1 up to 0.9, 0 for 0.10 and
0.11 (the disabled rerun state machine returns before the test), 2 from 0.12.

Bucket size: the ``bucket_size`` of the printed ``DistributedDataParallelConfig``, else
``model.optim.bucket_size`` of the submission's ``conf/custom.yaml`` resolved with the
config's exports (``${oc.decode:${oc.env:BUCKET_SIZE,134217728}}``; the value is parameters,
which ``pretrain.py`` passes to Megatron-Core unchanged); empty where the run has no
Megatron-Core DDP (the GPT-3 rows).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from tracesim.specs.omegaconf_env import resolve


def syncs_of(minor: int) -> int:
    """Host syncs per bucket of Megatron-Core ``0.<minor>``'s check (module docstring)."""
    return 1 if minor <= 9 else 0 if minor <= 11 else 2


def nan_cells(show: Callable[[str], str], impl: str | None, log: str, full_graph: bool) -> tuple[str, str]:
    """(``grad_nan_check``, ``grad_nan_syncs``) of a run: ``show`` reads a file of the
    submission repository ("" when absent), ``impl`` its implementation folder (None: the
    logs alone), ``log`` one of its logs, ``full_graph`` whether it captured the whole
    iteration in a CUDA graph."""
    printed = re.search(r"check_for_nan_in_grad=(True|False)\b", log)
    src = show(f"{impl}/pretrain.py") if impl else ""
    given = re.search(r"check_for_nan_in_grad=([^,\n]+),", src)
    if printed:
        on = printed.group(1) == "True"
    elif given is None:
        return "", ""
    elif given.group(1).strip() in ("True", "False"):
        on = given.group(1).strip() == "True"
    elif given.group(1).strip() == "not config.model.full_cuda_graph":
        on = not full_graph
    else:
        raise SystemExit(f"{impl}/pretrain.py: check_for_nan_in_grad={given.group(1)} is not read")
    if not on:
        return "false", ""
    docker = show(f"{impl}/Dockerfile") if impl else ""
    rev = re.search(r"ARG MCORE_REVISION=core_[rv]0\.(\d+)", docker)
    if rev is None:
        raise SystemExit(f"{impl or 'a logged run'}: check_for_nan_in_grad on, Megatron-Core version unknown")
    return "true", str(syncs_of(int(rev.group(1))))


def bucket_cell(log: str, yamls: Sequence[str], env: Mapping[str, str]) -> str:
    """``bucket_params`` of a run with Megatron-Core's DDP (module docstring): ``log`` one of
    its logs, ``yamls`` the text of the ``conf/custom.yaml`` files that may set it (first
    match wins), ``env`` the config's exports; "" when neither says."""
    printed = re.search(r"DistributedDataParallelConfig\([^)]*?bucket_size=(\d+)", log)
    if printed:
        return printed.group(1)
    for text in yamls:
        m = re.search(r"^\s*bucket_size:\s*(\S+)", text, re.M)
        if m:
            value = resolve(m.group(1), None, "model.optim.bucket_size", env)
            if not str(value).isdigit():
                raise SystemExit(f"model.optim.bucket_size {value!r} is not a parameter count")
            return str(value)
    return ""
