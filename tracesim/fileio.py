"""Atomic file output and safe YAML input.

Every output file is written to a temporary file in the target directory and renamed
into place, so an interrupted run leaves either the old file or the new one.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import yaml

from tracesim.errors import InputError


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` for writing; rename on success."""
    with atomic_path(path) as tmp:
        if str(path).endswith(".gz"):
            with gzip.open(tmp, mode if "b" in mode else mode + "t") as fh:
                yield fh
        else:
            with open(tmp, mode) as fh:
                yield fh


def write_json(path: str | Path, obj: Any, indent: int | None = 2) -> None:
    """Write ``obj`` as JSON (gzipped when the name ends in .gz), atomically."""
    with atomic_open(path, "w") as fh:
        json.dump(obj, fh, indent=indent, sort_keys=False)
        fh.write("\n")


def write_yaml(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as YAML, atomically, keeping key order."""
    with atomic_open(path, "w") as fh:
        yaml.safe_dump(obj, fh, sort_keys=False)


def read_yaml(path: str | Path) -> Any:
    """Read a YAML file with ``safe_load``; missing files and syntax errors are InputError."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError("file not found", path) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a YAML file", path) from None
    except UnicodeDecodeError:
        raise InputError("not a text file", path) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise InputError(f"invalid YAML: {problem}", path, where) from None
