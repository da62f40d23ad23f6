"""``tracesim collect -o BUNDLE -- CMD``: record the user's own training job (no torch here).

:func:`run_command` copies ``collectors/inject/sitecustomize.py`` and
``collectors/recorder.py`` (as ``_tracesim_recorder.py``) into a temporary directory, puts it
first on the command's ``PYTHONPATH`` and runs the command (``python train.py ...``,
``torchrun ...``) as a subprocess with stdout inherited and stderr passed on line by line.
Every rank of the job records itself (:mod:`tracesim.collectors.recorder`) into a working
directory beside ``BUNDLE``; when the command has exited, the ranks' files become a version-2
bundle (:mod:`tracesim.collectors.assemble`), renamed onto ``BUNDLE`` at the very end, so a
failed recording leaves nothing there.

Each process that took part writes a status file (``.status/<pid>.json``: its rank, how many
optimizer steps it counted, whether it finished); from them a failed recording is explained
in one line (:class:`~tracesim.errors.InputError`) naming the rank.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import IO, Any

from tracesim.collectors.assemble import bundle_meta, read_rank_infos
from tracesim.collectors.launch import check_output
from tracesim.collectors.recorder import (
    ENV_DIR,
    ENV_MEASURE,
    ENV_PARENT,
    ENV_STEPS,
    ENV_WARMUP,
    STATUS_DIR,
    Plan,
)

from tracesim.errors import InputError
from tracesim.fileio import replace_dir, write_yaml

#: the injected module's name in the job (the copy of collectors/recorder.py)
RECORDER_MODULE = "_tracesim_recorder"


def write_injection(folder: Path) -> None:
    """Put ``sitecustomize.py`` and the recorder module into ``folder``."""
    from tracesim.fileio import atomic_open

    pkg = resources.files("tracesim.collectors")
    for name, text in (("sitecustomize.py", (pkg / "inject" / "sitecustomize.py").read_text()),
                       (f"{RECORDER_MODULE}.py", (pkg / "recorder.py").read_text())):
        with atomic_open(folder / name) as fh:
            fh.write(text)


def injected_env(base: Mapping[str, str], inject: Path, work: Path, plan: Plan) -> dict[str, str]:
    """The command's environment: ``inject`` first on PYTHONPATH, the recording's settings."""
    env = {k: v for k, v in base.items() if k != ENV_PARENT}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(inject), base.get("PYTHONPATH", "")) if p)
    env[ENV_DIR] = str(work)
    env[ENV_STEPS], env[ENV_WARMUP] = str(plan.steps), str(plan.warmup)
    env[ENV_MEASURE] = str(plan.measure)
    env.setdefault("KINETO_LOG_LEVEL", "6")  # quiet the profiler's C++ progress lines
    # torch.compile's C++ kernels on a CPU record themselves (their names, no shapes):
    # without this their time is untraced host time in the recording
    env.setdefault("TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE", "1")
    return env


def run_command(command: list[str], out: Path, *, steps: int, warmup: int, measure: int,
                log: Callable[[str], None] | None) -> Path:
    """Run ``command`` with every rank recorded; write the bundle at ``out``; return it.

    ``warmup`` optimizer steps run untouched, ``measure`` are timed unprofiled, then 1 profiler
    warm-up step and ``steps`` profiled steps (docs/collect.md). ``log`` receives the job's
    stderr lines and tracesim's progress lines (default: the job's lines go to stderr).
    Bad input and a job that fails or does not step enough: InputError, nothing at ``out``.
    """
    where = _short(command)
    if not command:
        raise InputError("no command given after --", "collect")
    for flag, value, low in (("--steps", steps, 1), ("--warmup", warmup, 1),
                             ("--measure", measure, 1)):
        if value < low:
            raise InputError(f"must be >= {low} when recording a command, got {value}", flag)
    if shutil.which(command[0]) is None:
        raise InputError(f"command not found: {command[0]}", where)
    out = Path(out)
    check_output(out)
    plan = Plan(steps=steps, warmup=warmup, measure=measure)
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    work = parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    inject = Path(tempfile.mkdtemp(prefix="tracesim-inject-"))
    say = log or (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        write_injection(inject)
        env = injected_env(os.environ, inject, work, plan)
        rc, last = _run(command, env, say, work / STATUS_DIR)
        statuses = _statuses(work / STATUS_DIR)
        _check(rc, last, statuses, plan, where)
        infos = read_rank_infos(work)
        if not infos:
            raise InputError("no rank wrote anything (is it a PyTorch job that honours "
                             "PYTHONPATH?)", where)
        shutil.rmtree(work / STATUS_DIR, ignore_errors=True)
        meta = bundle_meta(infos, source="collect", command=command)
        if meta["world_size"] > len(infos):
            say(f"collect: note: world size {meta['world_size']}, ranks recorded here: "
                f"{', '.join(str(i['rank']) for i in infos)}")
        write_yaml(work / "meta.yaml", meta)
        replace_dir(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(inject, ignore_errors=True)
    return out


def _short(command: Sequence[str], width: int = 80) -> str:
    text = shlex.join(command)
    return text if len(text) <= width else text[: width - 3] + "..."


def _run(command: list[str], env: dict[str, str], say: Callable[[str], None],
         status_dir: Path) -> tuple[int, str | None]:
    """Run the command to its end; its exit code and last non-empty stderr line. Reports
    each rank once its recording is written."""
    try:
        proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True,
                                errors="replace", bufsize=1)
    except OSError as exc:
        raise InputError(f"the command could not be started: {exc.strerror or exc}",
                         _short(command)) from None
    tail: deque[str] = deque(maxlen=1)
    assert proc.stderr is not None
    reader = threading.Thread(target=_pump, args=(proc.stderr, say, tail), daemon=True)
    reader.start()
    told: set[int] = set()
    try:
        while proc.poll() is None:
            time.sleep(0.2)
            for s in _statuses(status_dir):
                if s.get("state") == "done" and s["rank"] not in told:
                    told.add(s["rank"])
                    say(f"collect: rank {s['rank']} recorded (the job goes on; tracesim waits "
                        "for it to exit)")
    except BaseException:
        _stop(proc)
        raise
    reader.join(timeout=5)  # a grandchild may still hold stderr open
    return proc.returncode, (tail[0] if tail else None)


def _pump(stream: IO[str], say: Callable[[str], None], tail: deque[str]) -> None:
    for line in stream:
        line = line.rstrip("\n")
        say(line)
        if line.strip():
            tail.append(line.strip())


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _statuses(folder: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):  # being replaced right now: read next time
            continue
    return out


def _check(rc: int, last: str | None, statuses: list[dict[str, Any]], plan: Plan,
           where: str) -> None:
    """InputError when the command failed or a rank's recording is not complete."""
    done: dict[int, int] = {}
    for s in statuses:
        if s.get("state") == "done":
            if s["rank"] in done:
                raise InputError(f"two processes recorded rank {s['rank']} (pids {done[s['rank']]} "
                                 f"and {s['pid']})", where)
            done[s["rank"]] = s["pid"]
    parents = {s.get("parent") for s in statuses if s.get("steps", 0) > 0}
    # what is left: processes that did not finish, except where another process finished
    # the same rank (a restarted worker) and launchers whose children stepped
    left = sorted((s for s in statuses if s.get("state") != "done" and s["rank"] not in done
                   and not (s.get("steps", 0) == 0 and str(s["pid"]) in parents)),
                  key=lambda s: (s["rank"], -s.get("steps", 0)))
    failed = [s for s in left if s.get("state") == "error"]
    partial = [s for s in left if s.get("state") != "error" and s.get("steps", 0) > 0]
    never = [s for s in left if s.get("state") != "error" and s.get("steps", 0) == 0]
    if rc != 0:
        what = f"the command exited with code {rc}"
        if rc < 0:
            try:
                what = f"the command was killed by {signal.Signals(-rc).name}"
            except ValueError:
                what = f"the command was killed by signal {-rc}"
        if partial:
            s = partial[0]
            what += (f" (rank {s['rank']} had stepped its optimizer {s['steps']} of "
                     f"{s['needed']} times)")
        raise InputError(what + (f": {last}" if last else ""), where)
    if failed:
        s = failed[0]
        raise InputError(f"rank {s['rank']}: the recording failed: {s.get('error')}", where)
    if partial:
        s = partial[0]
        raise InputError(f"rank {s['rank']} stepped its optimizer {s['steps']} times; the "
                         f"recording needs {plan.describe()}", where)
    if never and not done:
        # (beside recorded ranks, a process that stepped nothing is data preparation or the
        # like, not an error)
        raise InputError(f"rank {never[0]['rank']} never stepped an optimizer (torch.optim)",
                         where)
