"""``tracesim.record``: record the training loop of the running process into a bundle.

For those who prefer code to ``tracesim collect -- CMD``; the same recording
(:mod:`tracesim.collectors.recorder`: W warm-up steps, M timed unprofiled steps, 1 profiler
warm-up step, K profiled steps) and the same version-2 bundle::

    import tracesim

    with tracesim.record("runs/mine", steps=4, warmup=3, measure=8):
        for tokens, labels in loader:          # steps: optimizer.step() calls (torch.optim)
            ...
            opt.step()

    with tracesim.record("runs/mine") as rec:  # a loop without torch.optim
        for batch in loader:
            train_step(batch)
            rec.step()                         # the end of one training step

Steps are counted by a global optimizer-step hook (the first optimizer instance that steps)
until :meth:`Recording.step` is called; from then on only ``.step()`` counts (mixing the
two is an error). The loop must run at least W + M + 1 + K steps inside the block. On leaving
the block the bundle is written at ``out`` (an old bundle there is replaced): by the one
process, or, when ``torch.distributed`` is initialized, each rank writes its own
``rank{R}/`` and rank 0 writes ``meta.yaml`` after a barrier. torch is imported when the
block is entered, not before.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import TracebackType
from typing import Any

from tracesim.collectors.assemble import bundle_meta, read_rank_infos
from tracesim.collectors.launch import check_output
from tracesim.collectors.recorder import OptimizerSteps, Plan, Recorder, current_rank

from tracesim.errors import InputError
from tracesim.fileio import replace_dir, write_yaml


class Recording:
    """The context manager :func:`record` returns (module docstring)."""

    def __init__(self, out: str | Path, *, steps: int, warmup: int, measure: int) -> None:
        for name, value, low in (("steps", steps, 1), ("warmup", warmup, 0),
                                 ("measure", measure, 1)):
            if not isinstance(value, int) or value < low:
                raise InputError(f"must be an integer >= {low}, got {value!r}", name)
        self.out = Path(out)
        check_output(self.out)
        self.plan = Plan(steps=steps, warmup=warmup, measure=measure)
        self.work = self.out.resolve().parent / f".{self.out.name}.tmp-record"
        self._recorder: Recorder | None = None
        self._hook: OptimizerSteps | None = None
        self._mode: str | None = None  # "optimizer" | "manual"

    @property
    def done(self) -> bool:
        """Whether this rank's steps are recorded (the bundle is written on leaving the block)."""
        return self._recorder is not None and self._recorder.done

    def __enter__(self) -> Recording:
        if self._recorder is not None:
            raise RuntimeError("a Recording can be entered once")
        rank, _, world = current_rank()
        if world == 1:  # one process: a stale working directory is its own
            shutil.rmtree(self.work, ignore_errors=True)
        self._recorder = Recorder(self.work, self.plan)
        self._hook = OptimizerSteps(self._optimizer_stepped).install()
        return self

    def step(self) -> None:
        """The end of one training step (for loops without torch.optim)."""
        if self._recorder is None or self._hook is None:
            raise RuntimeError("call step() inside the `with tracesim.record(...)` block")
        if self._mode == "optimizer":
            raise RuntimeError("this recording counts optimizer steps (torch.optim) already; "
                               "call .step() only in loops that do not step an optimizer")
        if self._mode is None:
            self._mode = "manual"
            self._recorder.manual = True
            self._hook.remove()
        self._recorder.step()

    def _optimizer_stepped(self, optimizer: Any) -> None:
        rec, hook = self._recorder, self._hook
        if rec is None or hook is None or self._mode == "manual":
            return
        self._mode = "optimizer"
        if rec.optimizer is None:
            rec.optimizer = type(optimizer).__name__
        rec.step()
        if rec.done:
            hook.remove()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        rec, hook = self._recorder, self._hook
        assert rec is not None and hook is not None
        hook.remove()
        if exc_type is not None or not rec.done:
            rec.abort()
            if current_rank()[2] == 1:
                shutil.rmtree(self.work, ignore_errors=True)
            if exc_type is not None:
                return
            raise InputError(rec.shortfall(), self.out)
        self._write()

    def _write(self) -> None:
        """Rank 0 (the one process) makes the bundle; with torch.distributed between two
        barriers, so that every rank's files are there and no rank leaves before the bundle."""
        import torch.distributed as dist

        distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        rank, _, world = current_rank()
        if distributed:
            dist.barrier()
        try:
            if rank == 0:
                infos = [i for i in read_rank_infos(self.work) if int(i["rank"]) < world]
                missing = sorted(set(range(world)) - {int(i["rank"]) for i in infos})
                if missing:
                    raise InputError(f"rank {missing[0]} wrote no recording into {self.work}",
                                     self.out)
                for stale in self.work.glob("rank*"):
                    if stale.name not in {f"rank{r}" for r in range(world)}:
                        shutil.rmtree(stale, ignore_errors=True)
                write_yaml(self.work / "meta.yaml", bundle_meta(infos, source="record"))
                replace_dir(self.work, self.out)
        finally:
            if distributed:
                dist.barrier()


def record(out: str | Path, *, steps: int = 4, warmup: int = 3, measure: int = 8) -> Recording:
    """Record ``steps`` profiled training steps of this process (after ``warmup`` untouched
    and ``measure`` timed unprofiled steps, plus one profiler warm-up step) into the bundle
    ``out``; use as ``with tracesim.record(out): <training loop>`` (module docstring)."""
    return Recording(out, steps=steps, warmup=warmup, measure=measure)
