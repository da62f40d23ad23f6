"""The text forms of the list-valued replay options (:mod:`tracesim.options`): stage layer
counts, stragglers and TP plan overrides, each an InputError naming its flag when malformed."""

from __future__ import annotations

from tracesim.errors import InputError


def parse_ints(text: str) -> list[int]:
    """``7,8x14,7`` -> [7, 8, 8, ..., 7] (``NxK``: N repeated K times)."""
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        n, _, times = part.partition("x")
        if not n.isdigit() or (times and not times.isdigit()):
            raise InputError(f"expected N or NxK items separated by commas, got {text!r}",
                             "--stage-layers")
        out += [int(n)] * (int(times) if times else 1)
    return out


def parse_stragglers(text: str) -> tuple[tuple[int, float], ...]:
    """``'17:1.3,40:2'`` -> ((17, 1.3), (40, 2.0))."""
    pairs = []
    for part in text.replace(" ", "").split(","):
        r, colon, f = part.partition(":")
        try:
            pairs.append((int(r), float(f)))
        except ValueError:
            raise InputError(f"expected RANK:FACTOR items separated by commas, got {text!r}",
                             "--straggler") from None
        if not colon:
            raise InputError(f"expected RANK:FACTOR items separated by commas, got {text!r}",
                             "--straggler")
    return tuple(pairs)


def parse_plan(text: str) -> tuple[tuple[str, str], ...]:
    """``'attn.*=replicate,mlp.fc1=rowwise'`` -> pairs."""
    pairs = []
    for part in text.split(","):
        glob, eq, style = part.strip().partition("=")
        if not eq or not glob:
            raise InputError(f"expected GLOB=STYLE items separated by commas, got {text!r}", "--tp-plan")
        pairs.append((glob.strip(), style.strip()))
    return tuple(pairs)
