"""Reading a git directory of mlcommons/training_results_v* (as `fetch` leaves them, no work
tree) for ``mlperf_training.py``: files at ``HEAD``."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


@functools.cache
def files(repo: Path, folder: str) -> tuple[str, ...]:
    """The files of ``folder`` (each folder listed once: the configs' lookups repeat)."""
    return tuple(git(repo, "ls-tree", "--name-only", "HEAD", folder + "/").split())


@functools.cache
def tree(repo: Path, folder: str) -> tuple[str, ...]:
    """Every file under ``folder`` (the submitters' rows look up the same trees)."""
    return tuple(git(repo, "ls-tree", "-r", "--name-only", "HEAD", folder + "/").split())


def show(repo: Path, path: str) -> str:
    """The text of file ``path``, "" when its folder has no such file."""
    return git(repo, "show", f"HEAD:{path}") if path in files(repo, path.rsplit("/", 1)[0]) else ""
