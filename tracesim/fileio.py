"""Atomic file output and safe YAML input.

Every output file is written to a temporary file in the target directory and renamed
into place, so an interrupted run leaves either the old file or the new one.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import yaml

from tracesim.errors import InputError


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` on success.

    The temporary name is chosen (and remembered for the cleanup) before the file is
    created, so a Ctrl-C / SIGTERM at any moment -- even one whose Python handler runs right
    after the creating system call returns -- leaves no temporary file behind. (Holding the
    signals around ``tempfile.mkstemp`` did not do that: a handler already pending when the
    mask went up still ran inside ``mkstemp`` after it had created its file.)
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file where a directory should be, no permission
        raise InputError(f"cannot create the directory ({exc.strerror or exc})",
                         path.parent) from None
    tmp_path: Path | None = None
    try:
        while True:
            tmp_path = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
            try:
                # 0o666 less the umask: the mode open() would give the final file
                fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:  # another writer's temporary file: not ours to remove
                tmp_path = None
                continue
            break
        os.close(fd)
        yield tmp_path
        os.replace(tmp_path, path)
    except BaseException:
        if tmp_path is not None:
            with contextlib.suppress(FileNotFoundError):
                tmp_path.unlink()
        raise


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` for writing; rename on success."""
    with atomic_path(path) as tmp:
        if str(path).endswith(".gz"):
            with gzip.open(tmp, mode if "b" in mode else mode + "t") as gz:
                yield gz  # type: ignore[misc]
        else:
            with open(tmp, mode) as fh:
                yield fh


def write_json(path: str | Path, obj: Any, indent: int | None = 2) -> None:
    """Write ``obj`` as JSON (gzipped when the name ends in .gz), atomically."""
    with atomic_open(path, "w") as fh:
        json.dump(obj, fh, indent=indent, sort_keys=False)
        fh.write("\n")


def write_yaml(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as YAML, atomically, keeping key order (a string :func:`read_yaml`
    would read as a number, such as ``1e9``, is quoted)."""
    with atomic_open(path, "w") as fh:
        yaml.dump(obj, fh, Dumper=_Dumper, sort_keys=False)


def read_text(path: str | Path, kind: str = "text") -> str:
    """A text file's contents; a missing file, a directory or a binary file is InputError
    (``kind``: what the file should be, for the message)."""
    path = Path(path)
    try:
        return path.read_text()
    except FileNotFoundError:
        raise InputError("file not found", path) from None
    except IsADirectoryError:
        raise InputError(f"is a directory, expected a {kind} file", path) from None
    except UnicodeDecodeError:
        raise InputError("not a text file", path) from None
    except OSError as exc:
        raise InputError(f"not a readable {kind} file ({exc})", path) from None


def read_json(path: str | Path) -> Any:
    """Read a JSON file; missing files and syntax errors are InputError."""
    text = read_text(path, "JSON")
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError("JSON nested too deeply", path) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg}", path, f"line {exc.lineno}") from None


def read_yaml(path: str | Path) -> Any:
    """Read a YAML file with ``safe_load``; missing files, syntax errors and a key given
    twice in one mapping are InputError. A number in exponent form without a sign or a
    point (``1e9``, ``4e2``, ``1.5e9``: strings to YAML 1.1) is a float, as in YAML 1.2."""
    path = Path(path)
    text = read_text(path, "YAML")
    try:
        return _safe_load(text, path)
    except RecursionError:
        raise InputError("YAML nested too deeply", path) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise InputError(f"invalid YAML: {problem}", path, where) from None


#: nodes a YAML document may hold once its aliases are expanded (an "alias bomb" of nine
#: lists of nine aliases expands to 9**9 nodes and hangs anything that walks it)
YAML_MAX_NODES = 1_000_000


#: floats YAML 1.1 leaves as strings (an exponent without a sign, or without a point:
#: ``1e9``, ``4e2``, ``1.5e9``, ``.5e3``), floats in YAML 1.2; YAML 1.1's own float pattern
#: (a point and a signed exponent) still matches first
_FLOAT_12 = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
_FLOAT_TAG = "tag:yaml.org,2002:float"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _SafeLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """``safe_load``'s loader (libyaml's parser when PyYAML was built with it: the same nodes
    and values, several times faster; else the pure-Python one) with :data:`_FLOAT_12` and
    duplicate keys refused."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:  # `<<: *base`: its keys may be overridden
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base class says so
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first on line {first + 1})",
                        key_node.start_mark)
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


class _Dumper(yaml.SafeDumper):
    """``safe_dump``'s dumper, quoting the strings :data:`_FLOAT_12` would read as floats."""


for _cls in (_SafeLoader, _Dumper):
    _cls.add_implicit_resolver(_FLOAT_TAG, _FLOAT_12, list("-+0123456789."))


def _safe_load(text: str, path: Path) -> Any:
    """``yaml.safe_load`` (with :class:`_SafeLoader`), refusing recursive aliases and alias
    expansion past YAML_MAX_NODES."""
    loader = _SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        sizes: dict[int, int] = {}
        active: set[int] = set()
        stack: list[tuple[Any, bool]] = [(node, False)]
        while stack:
            n, done = stack.pop()
            kids = [x for kv in n.value for x in kv] if isinstance(n, yaml.MappingNode) else (
                n.value if isinstance(n, yaml.SequenceNode) else [])
            if done:
                active.discard(id(n))
                sizes[id(n)] = 1 + sum(sizes[id(k)] for k in kids)
                if sizes[id(n)] > YAML_MAX_NODES:
                    raise InputError(f"YAML aliases expand to more than {YAML_MAX_NODES} values",
                                     path)
                continue
            if id(n) in sizes:
                continue
            if id(n) in active:
                raise InputError("recursive YAML alias (a value that contains itself)", path)
            active.add(id(n))
            stack.append((n, True))
            stack.extend((k, False) for k in kids if id(k) not in sizes)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def replace_dir(src: Path, dst: Path) -> None:
    """Move the finished directory ``src`` onto ``dst`` (an old directory there is replaced:
    renamed aside, the new one renamed in, the old one removed)."""
    if dst.exists():
        old = dst.parent / f".{dst.name}.old-{os.getpid()}"
        os.replace(dst, old)
        os.replace(src, dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(src, dst)


def output_dir(path: str | Path, flag: str = "-o", create: bool = True) -> Path:
    """The directory ``path``, created with its parents; an existing file there, or a place
    that cannot hold one (no permission, a read-only or virtual file system), is an
    InputError naming ``flag`` and the path. ``create`` False: only check, before the work
    whose results go there (nothing is created if that work fails)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"{flag}: exists and is not a directory", p)
    if not create:
        up = p
        while not up.exists() and up != up.parent:
            up = up.parent
        if not up.is_dir() or not os.access(up, os.W_OK | os.X_OK):
            raise InputError(f"{flag}: cannot create the directory ({up} is not a writable "
                             "directory)", p)
        return p
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{flag}: cannot create the directory ({exc.strerror or exc})", p) from None
    return p
