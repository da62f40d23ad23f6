"""The per-row tables of docs/accuracy.md against a fresh replay of the published rows.

Each table (header ``| row | ... | published | predicted | error | ...``) lists one published
table's rows in the table's order. :func:`compare` matches the doc's rows to replayed ones
(:class:`tracesim.pipeline.published.PublishedRow`) of the CSV whose published values the
doc's table shows, row by row in order, and gives the cells a replay writes: ``predicted``
to four significant digits, ``error`` to 0.1% and, where one of those changed, ``replay wall
s`` from this replay; and the summary line under the table (``N rows: mean absolute error
X% (signed S%), largest L%, within 10%: a, within 20%: b``, the fields it has) from the
replayed rows' errors. Tables of CSVs not replayed are left alone; a row the replay could
not run keeps its cells. :func:`groups` does the same for the table of groups in section
"The accuracy a replay reports" from the summary ``validation.yaml`` holds. Used by
``scripts/validation_summary.py`` (``--check``: the page must show what the model gives;
without it the cells are rewritten).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[1] / "docs" / "accuracy.md"
#: a table's summary line (tests/test_accuracy_doc.py reads it the same way): rows, mean
#: absolute error, signed error, largest (its sign, where shown, before it), within 10% / 20%
SUMMARY = re.compile(r"^(\d+) rows(?: replayed)?: mean absolute error (\d+\.\d)%(?: \(signed ([-+]?\d+\.\d)%\))?"
                     r"[,;] largest [-+]?(\d+\.\d)%(?: \([^)]*\))?(?:[,;] within 10%: (\d+))?"
                     r"(?:[,;] within 20%: (\d+))?")


def predicted_cell(value: float) -> str:
    """A predicted value as the page shows it: four significant digits, thousands separated,
    no trailing zeros after the point (``37,040``, ``963.7``, ``886``)."""
    digits = max(0, 3 - math.floor(math.log10(abs(value)))) if value else 0
    text = f"{value:,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def error_cell(rel_error: float) -> str:
    return _pct(rel_error, True)


def _number(cell: str) -> float | None:
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return None


@dataclass
class Change:
    """A doc row whose replayed cells differ from the page's."""

    line: int  # 1-based line of docs/accuracy.md
    label: str  # the row's, or "summary line"
    old: tuple[str, ...]  # (predicted, error) on the page, or the summary line's line
    new: tuple[str, ...]  # the same of the replay


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


def compare(rows: Sequence[Any], lines: Sequence[str]) -> tuple[list[str], list[Change], set[str]]:
    """The page's lines with every matched row's cells as the replay gives them, the rows
    that changed, and the CSVs some table of the page shows (the rest have none). ``rows``: replayed published rows (``table``, ``label``, ``published``,
    ``predicted``, ``rel_error``, ``wall_s``, ``error``) of one or more CSVs, in table order."""
    by_csv: dict[str, list[Any]] = {}
    for r in rows:
        by_csv.setdefault(r.table, []).append(r)
    out = list(lines)
    changes: list[Change] = []
    matched: set[str] = set()
    for header, body in _tables(lines):
        ip, ie, ipub = header.index("predicted"), header.index("error"), header.index("published")
        iw = header.index("replay wall s") if "replay wall s" in header else None
        shown = [_cells(lines[k])[ipub] for k in body]
        csv = next((c for c, rs in by_csv.items() if len(rs) == len(body) and all(
            _same_published(s, r.published) for s, r in zip(shown, rs, strict=True))), None)
        if csv is None:
            continue
        matched.add(csv)
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
        errors = [r.rel_error for r in by_csv[csv] if not r.error and math.isfinite(r.rel_error)]
        changes += _summary_line(out, body[-1] + 1, errors)
    return out, changes, matched


def _summary_line(out: list[str], start: int, errors: list[float]) -> list[Change]:
    """Rewrite in ``out`` the summary line of a table ending before line ``start`` (its
    first paragraph, when it reads as one) from ``errors``; the lines it changed."""
    i = start
    while i < len(out) and not out[i].strip():
        i += 1
    para: list[int] = []
    while i < len(out) and out[i].strip():
        para.append(i)
        i += 1
    joined, offsets, pos = [], [], 0
    for k in para:
        offsets.append(pos)
        joined.append(out[k].strip())
        pos += len(joined[-1]) + 1
    paragraph = " ".join(joined)
    m = SUMMARY.match(paragraph)
    if m is None or not errors:
        return []
    n = len(errors)
    largest = max(errors, key=abs)
    new = [str(n), f"{100 * sum(abs(e) for e in errors) / n:.1f}", f"{100 * sum(errors) / n:+.1f}",
           f"{100 * abs(largest):.1f}", str(sum(abs(e) <= 0.10 for e in errors)),
           str(sum(abs(e) <= 0.20 for e in errors))]
    edits: dict[int, list[tuple[int, int, str]]] = {}
    for g, text in enumerate(new, start=1):
        if m.group(g) is None:
            continue
        a, b = m.span(g)
        if g == 4 and a > 0 and paragraph[a - 1] in "+-":
            a, text = a - 1, ("-" if largest < 0 else "+") + text
        j = max(x for x in range(len(para)) if offsets[x] <= a)
        edits.setdefault(j, []).append((a - offsets[j], b - offsets[j], text))
    changes = []
    for j, spans in edits.items():
        line = out[para[j]]
        indent = len(line) - len(line.lstrip())
        text = line
        for a, b, rep in sorted(spans, reverse=True):
            text = text[:indent + a] + rep + text[indent + b:]
        if text != line:
            changes.append(Change(para[j] + 1, "summary line", (line.strip(),), (text.strip(),)))
            out[para[j]] = text
    return changes


def _pct(x: float, sign: bool) -> str:
    return f"{x * 100:+.1f}%" if sign else f"{x * 100:.1f}%"


def group_cells(shipped: dict[str, Any]) -> dict[tuple[str, str, str], list[str]]:
    """The table of groups as ``shipped`` (``validation.yaml``) gives it: (stack, kind, GPU
    or "every GPU above (n)") -> rows, mean error, mean absolute error, within 10%, within
    20%, largest, as the page shows them."""
    rows: dict[tuple[str, str, str], list[str]] = {}
    for g in shipped["groups"] + [k for k in shipped["kinds"] if len(k["devices"]) > 1]:
        dev = g.get("device") or f"every GPU above ({len(g['devices'])})"
        rows[(g["stack"], g["kind"], dev)] = [
            str(g["rows"]), _pct(g["mean_error"], True), _pct(g["mean_abs_error"], False),
            str(g["within_10pct"]), str(g["within_20pct"]), _pct(g["largest"], True)]
    return rows


def groups(lines: Sequence[str], shipped: dict[str, Any]) -> tuple[list[str], list[Change], bool]:
    """The page's lines with its table of groups (stack, kind, GPU; and each stack and kind
    over its GPUs) as ``shipped`` (``validation.yaml``) gives them (:func:`group_cells`), the
    lines that changed, and whether the table lists the same groups (else nothing is
    rewritten: a group added or gone is a line to write by hand, in its place)."""
    rows = group_cells(shipped)
    out = list(lines)
    start = next((i for i, ln in enumerate(lines) if ln.startswith("## The accuracy a replay reports")), None)
    if start is None:
        return out, [], False
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    found: dict[tuple[str, str, str], int] = {}
    for i in range(start, end):
        cells = _cells(lines[i])
        if lines[i].startswith("| ") and len(cells) == 9 and cells[0] != "stack":
            found[(cells[0], cells[1], cells[2])] = i
    if list(found) != list(rows):
        return out, [], False
    changes = []
    for key, i in found.items():
        cells = _cells(lines[i])
        new = cells[:3] + rows[key]
        if new != cells:
            out[i] = "| " + " | ".join(new) + " |"
            changes.append(Change(i + 1, "groups: " + " ".join(key), tuple(cells[3:]), tuple(new[3:])))
    return out, changes, True

