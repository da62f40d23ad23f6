"""An option's kind and the values it accepts (:class:`Option`), and the check that turns a
given value into the option's normalised one (:func:`checked`); :mod:`tracesim.options`
attaches an :class:`Option` to every field of its ``ReplayOptions``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.specs.cluster import ClusterSpec
from tracesim.specs.fabric import parse_background, parse_link_faults
from tracesim.specs.model import ModelSpec
from tracesim.specs.parallel import TP_STYLES
from tracesim.specs.textopts import parse_ints, parse_plan, parse_stragglers


@dataclass(frozen=True)
class Option:
    """What one option is: help text, kind and the values it accepts.

    ``kind``: ``str``, ``spec`` (a name, a path or, from Python, a spec object), ``int``
    (``minimum`` / ``maximum``), ``float`` (a number > 0, at most ``maximum`` and, where
    given, at least ``minimum``), ``stragglers`` (RANK:FACTOR pairs),
    ``links`` / ``background`` (repeatable link-fault / background specs,
    :mod:`tracesim.specs.fabric`), ``bool`` (``--x/--no-x``), ``flag`` (``--x`` alone),
    ``choice`` (``choices``), ``ints`` (integers, ``7,8x14,7`` on the command line), ``plan``
    (module glob -> style), ``version`` (a dotted version, ``9.13.1``). ``group`` orders help
    and docs: what, where, layout, stack, template, replay.
    """

    help: str
    kind: str = "str"
    group: str = "layout"
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    metavar: str | None = None


def checked(opt: Option, value: Any, src: str | Path, where: str | None) -> Any:
    """``value`` checked against ``opt`` and normalised (tuples for lists); InputError naming
    ``src`` and ``where`` otherwise. ``None`` (not given) passes."""
    if value is None:
        return None
    if opt.kind in ("bool", "flag"):
        if not isinstance(value, bool):
            raise InputError(f"expected true or false, got {value!r}", src, where)
        return value
    if opt.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"expected an integer, got {value!r}", src, where)
        if opt.minimum is not None and value < opt.minimum:
            raise InputError(f"must be >= {opt.minimum}, got {value}", src, where)
        if opt.maximum is not None and value > opt.maximum:
            raise InputError(f"must be <= {opt.maximum}, got {value}", src, where)
        return value
    if opt.kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                or value == float("inf"):
            raise InputError(f"expected a number > 0, got {value!r}", src, where)
        if opt.minimum is not None and value < opt.minimum:
            raise InputError(f"must be >= {opt.minimum:g}, got {value!r}", src, where)
        if opt.maximum is not None and value > opt.maximum:
            raise InputError(f"must be <= {opt.maximum:g}, got {value!r}", src, where)
        return float(value)
    if opt.kind == "stragglers":
        pairs = parse_stragglers(value, src, where) if isinstance(value, str) else value
        if (not isinstance(pairs, (list, tuple)) or not pairs or not all(
                isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], int)
                and not isinstance(p[0], bool) and p[0] >= 0 and isinstance(p[1], (int, float))
                and not isinstance(p[1], bool) and 0 < p[1] < float("inf") for p in pairs)):
            raise InputError(f"expected RANK:FACTOR pairs (rank >= 0, factor > 0), got {value!r}",
                             src, where)
        return tuple((int(r), float(f)) for r, f in pairs)
    if opt.kind in ("links", "background"):
        items = (value,) if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not items or not all(isinstance(x, str) for x in items):
            raise InputError(f"expected a string or a list of strings, got {value!r}", src,
                             where)
        if opt.kind == "links":
            return tuple(f.text() for x in items for f in parse_link_faults(x, src, where))
        for x in items:  # the form; node and GPU ranges are checked against the cluster
            parse_background(x, 1, 1 << 40, src, where)
        return tuple(x.strip() for x in items)
    if opt.kind == "version":
        if not isinstance(value, str) or not re.fullmatch(r"\d+(\.\d+)*", value.strip()):
            raise InputError(f"expected a version like 9.13 (in YAML a quoted string), got {value!r}",
                             src, where)
        return value.strip()
    if opt.kind == "choice":
        if value not in opt.choices:
            raise InputError(f"{value!r} is not one of {', '.join(opt.choices)}", src,
                             where)
        return value
    if opt.kind == "ints":
        items = parse_ints(value, src, where) if isinstance(value, str) else value
        if (not isinstance(items, (list, tuple)) or not items
                or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in items)):
            raise InputError(f"expected a list of integers >= 0, got {value!r}", src,
                             where)
        return tuple(items)
    if opt.kind == "plan":
        pairs = parse_plan(value, src, where) if isinstance(value, str) else (
            tuple(value.items()) if isinstance(value, Mapping) else value)
        if not isinstance(pairs, (list, tuple)) or not all(
                isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], str)
                and p[1] in TP_STYLES for p in pairs):
            raise InputError(f"expected module-glob = {' | '.join(TP_STYLES)} pairs, got {value!r}",
                             src, where)
        return tuple((str(a), str(b)) for a, b in pairs)
    if opt.kind == "spec" and isinstance(value, (ModelSpec, ClusterSpec)):
        return value
    if not isinstance(value, (str, Path)):
        raise InputError(f"expected a string, got {value!r}", src, where)
    return str(value)
