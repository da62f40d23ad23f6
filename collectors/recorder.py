"""Recording a training job's steps from the inside: the state machine of one rank.

Shared by ``tracesim collect -- CMD`` and :func:`tracesim.record`. For a command, the
injected ``sitecustomize.py`` (``collectors/inject/``) loads a copy of this file as
``_tracesim_recorder`` in every rank and calls :func:`activate` once ``torch.optim.optimizer``
has been imported; :mod:`tracesim.collectors.record` uses it in-process. So this module is
self-contained: it imports only the standard library, and torch lazily (inside functions).

A rank counts **steps** (one per call of :meth:`Recorder.step`; for a command, one per
``optimizer.step()`` of the first optimizer instance that steps, :class:`OptimizerSteps`):

1. ``warmup`` (W) steps run untouched;
2. ``measure`` (M) steps are timed, unprofiled (wall clock from the end of one step to the
   end of the next, ``torch.cuda.synchronize()`` at each end when CUDA is in use);
3. one ``torch.profiler.profile`` session (CPU [+ CUDA], ``record_shapes``, ``with_flops``,
   an ``ExecutionTraceObserver``) with a schedule of 1 warm-up step and ``steps`` (K) active
   steps; ``prof.step()`` at every step end, so the trace has ``ProfilerStep#1`` ..
   ``ProfilerStep#K``; those K steps are timed too.

After W + M + 1 + K steps the rank writes ``rank{R}/trace.json.gz`` (Kineto),
``rank{R}/et.json.gz`` (execution trace) and ``rank{R}/rank.json`` (its measurements) into
the recording directory and stops counting; the job goes on as if nothing happened.
"""

from __future__ import annotations

import atexit
import gzip
import json
import os
import shutil
import socket
import statistics
import sys
import time
import weakref
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the environment a command's ranks are recorded with (set by tracesim.collectors.wrap)
ENV_DIR = "TRACESIM_RECORD_DIR"
ENV_STEPS = "TRACESIM_RECORD_STEPS"
ENV_WARMUP = "TRACESIM_RECORD_WARMUP"
ENV_MEASURE = "TRACESIM_RECORD_MEASURE"
#: set by a recording process for its children (they record only if they step themselves)
ENV_PARENT = "TRACESIM_RECORD_PARENT"
#: per-process status files of a command's recording: ``<dir>/.status/<pid>.json``
STATUS_DIR = ".status"
RANK_FILE = "rank.json"
#: as ``tracesim.trace.overhead.JOB_METHOD`` (this module imports nothing of tracesim: it runs
#: inside the recorded job)
OVERHEAD_METHOD = "profiled vs unprofiled steps of the job"
#: launchers whose own process is not a rank (their workers are)
LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")
LAUNCHER_SCRIPTS = ("torchrun",)


@dataclass(frozen=True)
class Plan:
    """How many steps a rank warms up (W), times unprofiled (M) and profiles (K)."""

    steps: int
    warmup: int
    measure: int

    @property
    def needed(self) -> int:
        """Steps a rank must run for a complete recording: W + M + 1 (profiler warm-up) + K."""
        return self.warmup + self.measure + 1 + self.steps

    def describe(self) -> str:
        return (f"{self.needed} ({self.warmup} warm-up + {self.measure} timed + 1 profiler "
                f"warm-up + {self.steps} profiled)")

    @classmethod
    def from_env(cls, env: Any = None) -> Plan:
        env = os.environ if env is None else env
        return cls(int(env[ENV_STEPS]), int(env[ENV_WARMUP]), int(env[ENV_MEASURE]))


def current_rank() -> tuple[int, int, int]:
    """(rank, local rank, world size): torch.distributed's when initialized, else the
    ``RANK`` / ``LOCAL_RANK`` / ``WORLD_SIZE`` environment (torchrun), else 0, 0, 1."""
    env = os.environ
    rank, world = int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1))
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        rank, world = int(dist.get_rank()), int(dist.get_world_size())
    return rank, int(env.get("LOCAL_RANK", 0)), world


def _atomic_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def _gzip(src: Path, dst: Path) -> None:
    tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
    with open(src, "rb") as fin, gzip.open(tmp, "wb", compresslevel=6) as fout:
        shutil.copyfileobj(fin, fout)
    os.replace(tmp, dst)
    src.unlink()


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else 0.0


def step_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """Per ``ProfilerStep#N`` (CPU side) of a Chrome trace: its name, duration (us) and the
    events that start inside it on any thread: ``cpu_ops`` (cat ``cpu_op``), ``annotations``
    (``user_annotation`` other than the step markers), ``kernels``; ``events`` = cpu_ops +
    annotations, the count the profiler's per-event cost applies to."""
    xs = [e for e in trace.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"]
    kinds: dict[str, list[float]] = {"cpu_ops": [], "annotations": [], "kernels": []}
    steps = []
    for e in xs:
        cat, name = e.get("cat"), str(e.get("name", ""))
        if name.startswith("ProfilerStep#"):
            if cat == "user_annotation":
                steps.append(e)
        elif cat == "cpu_op":
            kinds["cpu_ops"].append(float(e["ts"]))
        elif cat == "user_annotation":
            kinds["annotations"].append(float(e["ts"]))
        elif cat == "kernel":
            kinds["kernels"].append(float(e["ts"]))
    for ts in kinds.values():
        ts.sort()
    out = []
    for st in sorted(steps, key=lambda e: float(e["ts"])):
        t0 = float(st["ts"])
        t1 = t0 + float(st.get("dur", 0))
        counts = {k: bisect_right(ts, t1) - bisect_left(ts, t0) for k, ts in kinds.items()}
        out.append({"step": str(st["name"]), "dur_us": float(st.get("dur", 0)), **counts,
                    "events": counts["cpu_ops"] + counts["annotations"]})
    return out


class Recorder:
    """One rank's recording (module docstring): call :meth:`step` at the end of every
    training step. ``out_dir`` receives ``rank{R}/``; ``status_dir`` (a command's recording)
    receives this process's status file."""

    def __init__(self, out_dir: str | Path, plan: Plan, *, status_dir: str | Path | None = None,
                 parent: str | None = None) -> None:
        self.out_dir = Path(out_dir)
        self.plan = plan
        self.status_dir = Path(status_dir) if status_dir is not None else None
        self.parent = parent
        self.pid = os.getpid()
        self.count = 0
        self.done = False
        self.error: str | None = None
        self.rank = current_rank()[0]
        self.rank_dir: Path | None = None
        self.optimizer: str | None = None
        self.manual = False  # steps are counted by explicit calls, not by an optimizer hook
        self._cuda = False
        self._resume = time.perf_counter_ns()  # the start of step 1 when W = 0
        self._times: list[int] = []  # M timed, 1 profiler warm-up, K profiled (ns)
        self._prof: Any = None
        self._trace_file: Path | None = None
        self._aborting = False

    # -- counting ---------------------------------------------------------------------------

    def _now(self) -> int:
        if self._cuda:
            import torch

            torch.cuda.synchronize()
        return time.perf_counter_ns()

    def step(self) -> None:
        """The end of one training step."""
        if self.done or self.error is not None:
            return
        self.count += 1
        n, w, m = self.count, self.plan.warmup, self.plan.measure
        if n == 1:
            self.rank = current_rank()[0]
        if n < w:
            return
        if n == w or (w == 0 and n == 1):
            self._cuda = _cuda_in_use()
        end = self._now()
        if n > w:
            self._times.append(end - self._resume)
        if n == w + m:
            self._start_profiler()
        elif n > w + m:
            self._prof.step()
            if n == self.plan.needed:
                self._finish()
                return
        self._resume = time.perf_counter_ns()

    def _start_profiler(self) -> None:
        import warnings

        from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

        self.rank = current_rank()[0]
        self.rank_dir = self.out_dir / f"rank{self.rank}"
        shutil.rmtree(self.rank_dir, ignore_errors=True)
        self.rank_dir.mkdir(parents=True)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self._cuda else [])
        et: Any = ExecutionTraceObserver().register_callback(str(self.rank_dir / "et.json"))
        if not et.is_registered:
            et = None
        self._trace_file = self.rank_dir / "trace.json"

        def ready(p: Any) -> None:
            if not self._aborting:
                p.export_chrome_trace(str(self._trace_file))

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._prof = profile(activities=acts, record_shapes=True, with_flops=True,
                                 schedule=schedule(wait=0, warmup=1, active=self.plan.steps,
                                                   repeat=1),
                                 on_trace_ready=ready, execution_trace_observer=et)
            self._prof.__enter__()

    def _finish(self) -> None:
        prof, self._prof = self._prof, None
        prof.__exit__(None, None, None)  # stops; the observer writes et.json
        assert self.rank_dir is not None and self._trace_file is not None
        with open(self._trace_file) as fh:
            counted = step_events(json.load(fh))
        _gzip(self._trace_file, self.rank_dir / "trace.json.gz")
        et = self.rank_dir / "et.json"
        if et.is_file():
            _gzip(et, self.rank_dir / "et.json.gz")
        _atomic_json(self.rank_dir / RANK_FILE, self._rank_info(counted))
        self.done = True
        self.write_status("done")

    def abort(self) -> None:
        """Stop a profiler session that is still running (the job ended early)."""
        prof, self._prof = self._prof, None
        self._aborting = True  # no trace export
        if prof is not None:
            try:
                prof.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - best effort while giving up
                pass

    # -- results ----------------------------------------------------------------------------

    def _rank_info(self, counted: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        m = self.plan.measure
        plain = [t / 1e9 for t in self._times[:m]]
        profiled = [t / 1e9 for t in self._times[m + 1:]]
        events = [float(c["events"]) for c in counted]
        per_event = (_median(profiled) - _median(plain)) * 1e9 / max(1.0, _median(events))
        _, local_rank, world = current_rank()
        return {
            "rank": self.rank,
            "local_rank": local_rank,
            "world_size": world,
            "pid": self.pid,
            "host": socket.gethostname(),
            "device": torch.cuda.get_device_name(torch.cuda.current_device())
            if self._cuda else "cpu",
            "torch_version": str(torch.__version__),
            "threads": int(torch.get_num_threads()),
            **_distributed(),
            "optimizer": self.optimizer,
            "warmup_steps": self.plan.warmup,
            "measured_steps": m,
            "profiled_steps": self.plan.steps,
            "step_times_s": plain,
            "profiler_warmup_step_s": self._times[m] / 1e9,
            "profiled_step_times_s": profiled,
            "profiled_step_events": counted,
            "profiler_overhead": {
                "per_event_ns": max(0, round(per_event)),
                "method": OVERHEAD_METHOD,
                "unprofiled_step_s": _median(plain),
                "profiled_step_s": _median(profiled),
                "events_per_step": _median(events),
            },
        }

    def shortfall(self) -> str:
        """Why the recording is not complete, naming the rank."""
        if self.error is not None:
            return f"rank {self.rank}: the recording failed: {self.error}"
        if self.manual:
            return (f"rank {self.rank} ran {self.count} steps (.step()); the recording needs "
                    f"{self.plan.describe()}")
        if self.count == 0:
            return f"rank {self.rank} never stepped an optimizer (torch.optim)"
        return (f"rank {self.rank} stepped its optimizer {self.count} times; the recording "
                f"needs {self.plan.describe()}")

    def write_status(self, state: str) -> None:
        """This process's status file (a command's recording only)."""
        if self.status_dir is None or os.getpid() != self.pid:
            return
        self.status_dir.mkdir(parents=True, exist_ok=True)
        _atomic_json(self.status_dir / f"{self.pid}.json", {
            "pid": self.pid, "parent": self.parent, "rank": self.rank, "state": state,
            "steps": self.count, "needed": self.plan.needed, "error": self.error,
        })

    def at_exit(self) -> None:
        """The process ends: report how far it got (a child that never stepped says nothing,
        its parent speaks for it)."""
        if os.getpid() != self.pid:
            return
        release_gil_for_workers()
        if self.done:
            return
        if self._prof is not None:
            self.abort()
        if self.error is not None:
            self.write_status("error")
        elif self.count > 0 or self.parent is None:
            self.write_status("incomplete")


#: how long the exit handler lets other threads run (s); see release_gil_for_workers
EXIT_GRACE_S = 0.05


def release_gil_for_workers() -> None:
    """Let the threads of torch.distributed's process groups take the GIL once more before
    the interpreter finalizes. Every backward pass stashes a Python object (the contextvars
    context, ``torch.autograd.graph._engine_run_backward``) in the thread-local state that the
    gradient all-reduces of DDP capture; a ProcessGroupGloo worker that drops its last
    finished work takes the GIL to release that object, and if it asks after the interpreter
    has started to finalize, Python ends the thread with a forced unwind through a noexcept
    C++ frame: ``terminate called without an active exception``, SIGABRT, a failed job.
    Sleeping in an exit handler (before finalization) hands the GIL to such a thread."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available():
        time.sleep(EXIT_GRACE_S)


def _cuda_in_use() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized())


def _distributed() -> dict[str, Any]:
    """backend and process groups of torch.distributed (None and [] when not initialized)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return {"backend": None, "process_groups": []}
    groups: list[Any] = []
    try:
        from torch.distributed.distributed_c10d import _get_all_pg_configs

        groups = json.loads(json.dumps(_get_all_pg_configs(), default=str))
    except Exception:  # noqa: BLE001 - a private helper; its absence is not an error
        groups = []
    return {"backend": str(dist.get_backend()), "process_groups": groups}


class OptimizerSteps:
    """A global optimizer-step post hook that calls ``on_step`` after every step of the
    first optimizer instance that steps (several optimizers, or a wrapper around an inner
    one, count once per training step)."""

    def __init__(self, on_step: Callable[[Any], None]) -> None:
        self.on_step = on_step
        self._ref: Any = None
        self._handle: Any = None

    def install(self, register: Callable[..., Any] | None = None) -> OptimizerSteps:
        if register is None:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            register = register_optimizer_step_post_hook
        self._handle = register(self)
        return self

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def __call__(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._ref is None or self._ref() is None:
            self._ref = weakref.ref(optimizer)
        elif self._ref() is not optimizer:
            return
        self.on_step(optimizer)


def is_launcher() -> bool:
    """Whether this process is a launcher whose workers are the ranks (torchrun)."""
    argv = list(getattr(sys, "orig_argv", []) or [sys.executable, *sys.argv])
    args = iter(argv[1:])
    for a in args:
        if a == "-m":
            return next(args, "") in LAUNCHER_MODULES
        if a == "-c":
            return False
        if a in ("-W", "-X", "--check-hash-based-pycs"):
            next(args, None)
        elif not a.startswith("-"):
            break
    script = sys.argv[0] if sys.argv else ""
    return os.path.basename(script) in LAUNCHER_SCRIPTS or script.replace(os.sep, "/").endswith(
        tuple(m.replace(".", "/") + ".py" for m in LAUNCHER_MODULES))


def activate(optimizer_module: Any) -> Recorder | None:
    """Start recording this process (called by the injected sitecustomize when
    ``torch.optim.optimizer`` has been imported); None in a launcher."""
    if is_launcher():
        return None
    env = os.environ
    parent = env.get(ENV_PARENT)
    env[ENV_PARENT] = str(os.getpid())
    out = Path(env[ENV_DIR])
    rec = Recorder(out, Plan.from_env(env), status_dir=out / STATUS_DIR, parent=parent)
    hook = OptimizerSteps(lambda opt: None)

    def on_step(opt: Any) -> None:
        if rec.optimizer is None:
            rec.optimizer = type(opt).__name__
        try:
            rec.step()
        except Exception as exc:  # never break the user's job: report it instead
            rec.error = f"{type(exc).__name__}: {exc}"
            rec.abort()
            rec.write_status("error")
        if rec.done or rec.error is not None:
            hook.remove()

    hook.on_step = on_step
    hook.install(optimizer_module.register_optimizer_step_post_hook)
    atexit.register(rec.at_exit)
    return rec
