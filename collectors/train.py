"""The training step the collector records, and the profiler configuration it uses.

Shared by the real run (:mod:`tracesim.collectors.worker`) and the overhead calibration
(:mod:`tracesim.collectors.overhead`) so that both run exactly the same code under exactly the same
profiler settings.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule
from tracesim.collectors.models import build_model
from tracesim.collectors.scopes import MODULE_PREFIX, ModuleScopes, phase

from tracesim.specs.model import ModelSpec


def timed(fn: Callable[[], Any]) -> tuple[int, Any]:
    """(wall-clock ns the call took, what it returned)."""
    t0 = time.perf_counter_ns()
    out = fn()
    return time.perf_counter_ns() - t0, out


def sync(device: torch.device) -> None:
    """Wait for the device (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Training:
    """A model, its optimizer and one fixed batch; ``step()`` runs one training step and
    returns its (detached) loss."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scopes: ModuleScopes
    step: Callable[[], torch.Tensor]


def make_training(spec: ModelSpec, batch: int, device: torch.device, seed: int = 0,
                  wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None) -> Training:
    """Build model (with module scopes), AdamW and a random batch of ``batch`` sequences.

    ``wrap`` (e.g. DDP) is applied after the module-scope hooks are installed, so scope paths
    stay relative to the bare model. The step is forward, backward, optimizer (step then
    ``zero_grad``), each inside its phase annotation, then a device synchronisation.
    """
    bare = build_model(spec, str(device))
    scopes = ModuleScopes(bare)
    model = wrap(bare) if wrap is not None else bare
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(4321 + seed)
    data = torch.randint(0, spec.vocab, (batch, spec.seq_len + 1), generator=gen)
    tokens = data[:, :-1].contiguous().to(device)
    targets = data[:, 1:].contiguous().to(device)

    def step() -> torch.Tensor:
        with phase("forward"):
            loss = model(tokens, targets)
        with phase("backward"):
            loss.backward()
        with phase("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        sync(device)
        return loss.detach()

    return Training(model=model, optimizer=opt, scopes=scopes, step=step)


def activities(device: torch.device) -> list[ProfilerActivity]:
    acts = [ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(ProfilerActivity.CUDA)
    return acts


def make_profiler(device: torch.device, steps: int | None, et_file: Path,
                  on_trace_ready: Callable[[Any], None] | None = None,
                  step_schedule: Callable[[int], Any] | None = None) -> profile:
    """The collector's profiler: 1 warm-up step, then ``steps`` active steps, recording
    shapes and FLOPs, with an execution-trace observer writing ``et_file`` over the same steps.
    Call ``step()`` of the returned profiler after every training step (``1 + steps`` times).
    With ``steps=None`` there is no schedule: it records from entry to exit, unless
    ``step_schedule`` (a ``torch.profiler`` schedule: step number -> action) is given.
    """
    et = ExecutionTraceObserver().register_callback(str(et_file))
    if steps is not None:
        step_schedule = schedule(wait=0, warmup=1, active=steps, repeat=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return profile(
            activities=activities(device),
            schedule=step_schedule,
            on_trace_ready=on_trace_ready,
            record_shapes=True,
            with_flops=True,
            execution_trace_observer=et,
        )


def count_step_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """Per ``ProfilerStep#N`` of a Chrome trace: its duration and the CPU events inside it.

    Counts complete (``ph: X``) events whose start lies in the step, on any CPU thread:
    ``cpu_ops`` (cat ``cpu_op``), ``module_scopes`` (``nn.Module: ...`` annotations) and
    ``annotations`` (other user annotations: phases, optimizer, communication), and their
    sum ``events``, the count that ``profiler_overhead.per_event_ns`` applies to.
    """
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    steps = sorted(
        (e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")),
        key=lambda e: float(e["ts"]),
    )
    out = []
    for st in steps:
        t0, t1 = float(st["ts"]), float(st["ts"]) + float(st.get("dur", 0))
        counts = {"cpu_ops": 0, "module_scopes": 0, "annotations": 0}
        for e in events:
            if e is st or not t0 <= float(e["ts"]) <= t1:
                continue
            cat, name = e.get("cat"), str(e.get("name", ""))
            if cat == "cpu_op":
                counts["cpu_ops"] += 1
            elif cat == "user_annotation" and not name.startswith("ProfilerStep#"):
                counts["module_scopes" if name.startswith(MODULE_PREFIX) else "annotations"] += 1
        out.append({"step": st["name"], "dur_us": float(st.get("dur", 0)), **counts,
                    "events": sum(counts.values())})
    return out
