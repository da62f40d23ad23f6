"""Starting the collector from tracesim (no torch here): check the flags, run the subprocess.

``tracesim collect`` (and :func:`tracesim.api.collect`) validate the workload and layout,
then run ``python -m tracesim.collectors.run`` in the same interpreter as a subprocess, so
the tracesim process never imports torch.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path

from tracesim.catalog import load_model, model_path
from tracesim.errors import InputError
from tracesim.fileio import output_dir
from tracesim.specs.model import ModelSpec
from tracesim.trace.bundle import is_bundle


class CollectorFailed(Exception):
    """The collector subprocess failed (a bug or a crash, not bad input): exit code and the
    last lines it printed."""

    def __init__(self, returncode: int, tail: list[str]):
        self.returncode, self.tail = returncode, tail
        super().__init__(f"the collector failed with exit code {returncode}")


TORCH_MISSING = "torch is not installed: pip install 'tracesim[collect]' (torch==2.13.0)"


def resolve_workload(name_or_path: str) -> tuple[ModelSpec, Path]:
    """The model spec for ``--workload`` (a YAML path or a ``workloads/`` name) and its file."""
    path = model_path(name_or_path, "--workload")
    if not path.is_file():
        raise InputError("model spec not found", path)
    return load_model(path), path


def check_layout(ranks: int | None, tp: int, pp: int, dp: int | None) -> int:
    """Validate the parallel flags; return the number of ranks to run."""
    if tp != 1 or pp != 1:
        flag = "--tp" if tp != 1 else "--pp"
        raise InputError(
            "only data parallelism is collected (tp = pp = 1); record a DP job with "
            "--ranks N and retarget it to TP/PP with `tracesim replay`",
            flag,
        )
    if ranks is None:
        return dp or 1
    if dp is not None and dp != ranks:
        raise InputError(f"must equal --ranks ({ranks}), got {dp}", "--dp")
    return ranks


def check_output(out: Path) -> None:
    """``out`` as the place of a bundle: absent, empty or a bundle, and creatable (its nearest
    existing parent a writable directory); otherwise an InputError naming it."""
    if out.exists() and not is_bundle(out):
        if not out.is_dir() or any(out.iterdir()):
            raise InputError("exists and is not a bundle; refusing to overwrite it", out)
    output_dir(out, "-o", create=False)


def run_collector(argv: list[str], log: Callable[[str], None] | None = None) -> None:
    """Run ``python -m tracesim.collectors.run ARGV``; pass its progress lines to ``log``;
    InputError (exit 2) for what the collector reports as bad input, :class:`CollectorFailed`
    with its last output for anything else."""
    say = log or (lambda _line: None)
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "tracesim.collectors.run", *argv]
    tail: deque[str] = deque(maxlen=25)
    error_line = None
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env=env, text=True, errors="replace",
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            if line.startswith("collect: error: "):
                error_line = line[len("collect: error: "):]
            elif line.startswith("collect: "):
                say(line)
            else:
                tail.append(line)
        rc = proc.wait()
    if rc == 0:
        return
    if rc == 2 and error_line:
        raise InputError(error_line)
    raise CollectorFailed(rc, list(tail))
