"""Strict validation helpers for YAML specs (model, cluster, device, sweep space).

Unknown or missing keys are errors naming the key (house style rule 1): no silent defaults
for misspelt keys.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tracesim.errors import InputError


def check_keys(
    data: Any,
    required: Iterable[str],
    optional: Iterable[str] = (),
    *,
    file: str | Path | None,
    where: str = "",
) -> Mapping[str, Any]:
    """Check that ``data`` is a mapping with all ``required`` keys and no unknown ones."""
    if not isinstance(data, Mapping):
        raise InputError(f"expected a mapping, got {type(data).__name__}", file, where or None)
    required = list(required)
    allowed = set(required) | set(optional)
    for key in data:
        if key not in allowed:
            raise InputError(
                f"unknown key {key!r} (allowed: {', '.join(sorted(allowed))})",
                file,
                _join(where, str(key)),
            )
    for key in required:
        if key not in data:
            raise InputError("missing required key", file, _join(where, key))
    return data


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def get_number(
    data: Mapping[str, Any],
    key: str,
    *,
    file: str | Path | None,
    where: str = "",
    kind: type = float,
    positive: bool = True,
    allow_zero: bool = False,
    default: Any = None,
) -> Any:
    """Read a number from ``data[key]``, checking type and sign; InputError names the key."""
    place = _join(where, key)
    if key not in data:
        if default is not None:
            return default
        raise InputError("missing required key", file, place)
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"expected a number, got {value!r}", file, place)
    if kind is int and (not float(value).is_integer()):
        raise InputError(f"expected an integer, got {value!r}", file, place)
    if value != value or value in (float("inf"), float("-inf")):
        raise InputError(f"expected a finite number, got {value!r}", file, place)
    if positive and (value < 0 or (value == 0 and not allow_zero)):
        raise InputError(f"must be {'>= 0' if allow_zero else '> 0'}, got {value!r}", file, place)
    return kind(value)


def get_str(
    data: Mapping[str, Any],
    key: str,
    *,
    file: str | Path | None,
    where: str = "",
    choices: Iterable[str] | None = None,
    default: str | None = None,
) -> str:
    """Read a string from ``data[key]``, optionally restricted to ``choices``."""
    place = _join(where, key)
    if key not in data:
        if default is not None:
            return default
        raise InputError("missing required key", file, place)
    value = data[key]
    if not isinstance(value, str):
        raise InputError(f"expected a string, got {value!r}", file, place)
    if choices is not None:
        choices = list(choices)
        if value not in choices:
            raise InputError(f"{value!r} is not one of {', '.join(choices)}", file, place)
    return value


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_TIME_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s)\s*$")


def size_bytes(text: str, file: str | Path | None, where: str | None = None) -> int:
    """``"8"``, ``"64K"``, ``"1M"``, ``"8G"`` (binary units, optional B / iB) -> bytes;
    InputError naming ``file`` and ``where`` otherwise."""
    m = _SIZE.match(text)
    if not m:
        raise InputError(f"bad size {text!r} (examples: 8, 64K, 1M, 8G)", file, where)
    value = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if not value.is_integer():
        raise InputError(f"size {text!r} is not a whole number of bytes", file, where)
    return int(value)


def time_ns(text: str, file: str | Path | None, where: str | None = None) -> int:
    """``"250us"``, ``"20ms"``, ``"1.5s"``, ``"0ns"`` -> integer ns (a unit is required)."""
    m = _TIME.match(text)
    if not m:
        raise InputError(f"bad duration {text!r} (a number and ns, us, ms or s: 20ms)", file, where)
    return int(round(float(m.group(1)) * _TIME_NS[m.group(2)]))
