"""The text forms of the list-valued replay options (:mod:`tracesim.options`): stage layer
counts, stragglers and TP plan overrides, each an InputError naming its flag when malformed,
and Megatron's pipeline layout strings (:func:`layout_chunks`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tracesim.errors import InputError


def parse_ints(text: str, src: str | Path = "--stage-layers", where: str | None = None) -> list[int]:
    """``7,8x14,7`` -> [7, 8, 8, ..., 7] (``NxK``: N repeated K times); ``src`` and
    ``where`` (the flag, or a file and key) name the value in errors."""
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        n, _, times = part.partition("x")
        if not n.isdigit() or (times and not times.isdigit()):
            raise InputError(f"expected N or NxK items separated by commas, got {text!r}",
                             src, where)
        out += [int(n)] * (int(times) if times else 1)
    return out


def parse_stragglers(text: str, src: str | Path = "--straggler",
                     where: str | None = None) -> tuple[tuple[int, float], ...]:
    """``'17:1.3,40:2'`` -> ((17, 1.3), (40, 2.0)); ``src`` and ``where`` as
    :func:`parse_ints`."""
    pairs = []
    for part in text.replace(" ", "").split(","):
        r, colon, f = part.partition(":")
        try:
            pairs.append((int(r), float(f)))
        except ValueError:
            raise InputError(f"expected RANK:FACTOR items separated by commas, got {text!r}",
                             src, where) from None
        if not colon:
            raise InputError(f"expected RANK:FACTOR items separated by commas, got {text!r}",
                             src, where)
    return tuple(pairs)


def parse_plan(text: str, flag: str | Path = "--tp-plan",
               where: str | None = None) -> tuple[tuple[str, str], ...]:
    """``'attn.*=replicate,mlp.fc1=rowwise'`` -> pairs (``flag``, or a file and ``where``,
    names the option in errors)."""
    pairs = []
    for part in text.split(","):
        glob, eq, style = part.strip().partition("=")
        if not eq or not glob:
            raise InputError(f"expected GLOB=VALUE items separated by commas, got {text!r}", flag,
                             where)
        pairs.append((glob.strip(), style.strip()))
    return tuple(pairs)


def plan_pairs(value: Any, flag: str, allowed: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """A GLOB=VALUE option (``--fp8-plan``) as pairs: text, a mapping, or pairs already;
    every VALUE one of ``allowed``."""
    if not value:
        return ()
    if isinstance(value, str):
        pairs = parse_plan(value, flag)
    else:
        items = value.items() if isinstance(value, Mapping) else value
        pairs = tuple((str(a), str(b)) for a, b in items)
    for glob, v in pairs:
        if v not in allowed:
            raise InputError(f"{glob}={v}: {v!r} is not one of {', '.join(allowed)}", flag)
    return pairs


def first_last(value: Any) -> tuple[int, int]:
    """``--bf16-layers FIRST,LAST`` as two counts (text, or a pair already)."""
    if not value:
        return (0, 0)
    parts = parse_ints(value, "--bf16-layers") if isinstance(value, str) else [int(x) for x in value]
    if len(parts) != 2:
        raise InputError(f"expected FIRST,LAST (two layer counts), got {value!r}", "--bf16-layers")
    return (parts[0], parts[1])


def layout_chunks(layout: str, file: str | Path | None = "pp_layout", where: str | None = None,
                  ) -> tuple[int, ...]:
    """Transformer layers per model chunk of a Megatron ``pipeline_model_parallel_layout``
    string: ``|`` separates chunks, ``t`` is a decoder layer, ``E`` / ``m`` / ``L`` the
    embedding, an MTP layer and the loss, ``X*N`` and ``(...)*N`` repeat.
    ``Et*3|(t*4|)*14ttL`` -> (3, 4 x 14, 2)."""
    text = layout.replace(" ", "").replace(",", "")
    group = re.compile(r"\(([^()]*)\)\*(\d+)")
    while group.search(text):
        text = group.sub(lambda m: m.group(1) * int(m.group(2)), text)
    text = re.sub(r"([A-Za-z])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    if set(text) - set("EtmL|"):
        raise InputError(f"not a pipeline layout: {layout!r}", file, where)
    return tuple(chunk.count("t") for chunk in text.split("|"))
