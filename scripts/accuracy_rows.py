"""The per-row tables of docs/accuracy.md against a fresh replay of the published rows.

Each table (header ``| row | ... | published | predicted | error | ...``) lists one published
table's rows in the table's order. :func:`compare` matches the doc's rows to replayed ones
(:class:`tracesim.pipeline.published.PublishedRow`) of the CSV whose published values the
doc's table shows, row by row in order, and gives the cells a replay writes: ``predicted``
to four significant digits, ``error`` to 0.1% and, where one of those changed, ``replay wall
s`` from this replay. Tables of CSVs not replayed are left alone; a row the replay could not
run keeps its cells. Used by ``scripts/validation_summary.py`` (``--check``: the page must
show what the model gives; without it the cells are rewritten).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[1] / "docs" / "accuracy.md"


def predicted_cell(value: float) -> str:
    """A predicted value as the page shows it: four significant digits, thousands separated,
    no trailing zeros after the point (``37,040``, ``963.7``, ``886``)."""
    digits = max(0, 3 - math.floor(math.log10(abs(value)))) if value else 0
    text = f"{value:,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def error_cell(rel_error: float) -> str:
    return f"{100 * rel_error:+.1f}%"


def _number(cell: str) -> float | None:
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return None


@dataclass
class Change:
    """A doc row whose replayed cells differ from the page's."""

    line: int  # 1-based line of docs/accuracy.md
    label: str
    old: tuple[str, str]  # (predicted, error) on the page
    new: tuple[str, str]  # (predicted, error) of the replay


def _tables(lines: Sequence[str]) -> list[tuple[list[str], list[int]]]:
    """(header cells, body line indices) of every per-row table."""
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header = [c.strip() for c in line.strip().strip("|").split("|")]
            j = i + 2
            while j < len(lines) and lines[j].startswith("| "):
                j += 1
            if header[0] == "row" and {"published", "predicted", "error"} <= set(header):
                out.append((header, list(range(i + 2, j))))
            i = j
            continue
        i += 1
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _same_published(cell: str, value: float) -> bool:
    """Whether ``cell`` shows ``value`` (rounded to the digits it shows)."""
    shown = _number(cell)
    decimals = len(cell.split(".", 1)[1]) if "." in cell else 0
    return shown is not None and abs(shown - value) <= 0.5 * 10.0 ** -decimals + 1e-9


def compare(rows: Sequence[Any], lines: Sequence[str]) -> tuple[list[str], list[Change]]:
    """The page's lines with every matched row's cells as the replay gives them, and the rows
    that changed. ``rows``: replayed published rows (``table``, ``label``, ``published``,
    ``predicted``, ``rel_error``, ``wall_s``, ``error``) of one or more CSVs, in table order."""
    by_csv: dict[str, list[Any]] = {}
    for r in rows:
        by_csv.setdefault(r.table, []).append(r)
    out = list(lines)
    changes: list[Change] = []
    for header, body in _tables(lines):
        ip, ie, ipub = header.index("predicted"), header.index("error"), header.index("published")
        iw = header.index("replay wall s") if "replay wall s" in header else None
        shown = [_cells(lines[k])[ipub] for k in body]
        csv = next((c for c, rs in by_csv.items() if len(rs) == len(body) and all(
            _same_published(s, r.published) for s, r in zip(shown, rs, strict=True))), None)
        if csv is None:
            continue
        for k, r in zip(body, by_csv[csv], strict=True):
            cells = _cells(lines[k])
            if r.error or not math.isfinite(r.predicted):
                continue
            new = (predicted_cell(r.predicted), error_cell(r.rel_error))
            if (cells[ip], cells[ie]) == new:
                continue
            changes.append(Change(k + 1, cells[0], (cells[ip], cells[ie]), new))
            cells[ip], cells[ie] = new
            if iw is not None:
                cells[iw] = f"{r.wall_s:.1f}"
            out[k] = "| " + " | ".join(cells) + " |"
    return out, changes


def matched_csvs(rows: Sequence[Any], lines: Sequence[str]) -> set[str]:
    """The CSVs of ``rows`` that some table of the page shows (the rest have no table)."""
    by_csv: dict[str, list[Any]] = {}
    for r in rows:
        by_csv.setdefault(r.table, []).append(r)
    found = set()
    for header, body in _tables(lines):
        ipub = header.index("published")
        shown = [_cells(lines[k])[ipub] for k in body]
        for c, rs in by_csv.items():
            if len(rs) == len(body) and all(_same_published(s, r.published)
                                            for s, r in zip(shown, rs, strict=True)):
                found.add(c)
    return found
