"""docs/accuracy.md's per-row tables of the published runs agree with each other and with what
a replay reports: every table's summary line and the Summary table's quotes of it with the
table's own rows, and the rows of the validated tables together and the table of groups with
``tracesim/report/validation.yaml`` (which ``scripts/validation_summary.py`` writes from a
fresh replay). Catches a table, a summary line or the shipped summary left behind when a
change moves predictions. The doc shows each error
to 0.1%, so means are compared to 0.06 points and a count may differ by the rows shown at its
bound (10.0%, 20.0%)."""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "accuracy.md"
SHIPPED = ROOT / "tracesim" / "report" / "validation.yaml"
_ERR = re.compile(r"([-+]?\d+\.\d)%")


def _accuracy_rows() -> ModuleType:
    """scripts/accuracy_rows.py (the same cells scripts/validation_summary.py writes)."""
    spec = importlib.util.spec_from_file_location("accuracy_rows", ROOT / "scripts" / "accuracy_rows.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("accuracy_rows", mod)
    spec.loader.exec_module(mod)
    return mod


#: a table's summary line, read as scripts/validation_summary.py writes it
_SUMMARY = _accuracy_rows().SUMMARY


@dataclass
class Table:
    """One per-row table of docs/accuracy.md: the tables its ``validate published`` command
    names, the line it starts on, the errors it shows (fractions) and the paragraph after it."""

    csvs: tuple[str, ...]
    line: int
    errors: list[float] = field(default_factory=list)
    not_replayed: int = 0
    after: str = ""


@functools.cache
def _lines() -> tuple[str, ...]:
    return tuple(DOC.read_text().splitlines())


@functools.cache
def tables() -> list[Table]:
    """The per-row tables (header ``| row | ... | error | ...``) with the command above them."""
    lines = _lines()
    out: list[Table] = []
    csvs: list[str] = []
    header: list[str] | None = None
    continued = False
    for i, line in enumerate(lines):
        if "tracesim validate published" in line or (continued and ".csv" in line):
            if "tracesim validate published" in line:
                csvs = []
            csvs += re.findall(r"([A-Za-z0-9_]+\.csv)", line)
            continued = line.rstrip().endswith("\\")
            continue
        continued = False
        if line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header = [c.strip() for c in line.strip().strip("|").split("|")]
            if header[0] == "row" and "error" in header:
                out.append(Table(tuple(csvs), i + 1))
            continue
        if line.startswith("|---"):
            continue
        if not line.startswith("| "):
            if header is not None and header[0] == "row" and "error" in header:
                out[-1].after = _paragraph(lines, i)
            header = None
            continue
        if header is not None and header[0] == "row" and "error" in header:
            cell = [c.strip() for c in line.strip().strip("|").split("|")][header.index("error")]
            m = _ERR.fullmatch(cell)
            if m:
                out[-1].errors.append(float(m.group(1)) / 100)
            else:
                out[-1].not_replayed += 1
    return out


def _paragraph(lines: tuple[str, ...], i: int) -> str:
    """The first paragraph from line ``i`` on, joined into one line."""
    while i < len(lines) and not lines[i].strip():
        i += 1
    out = []
    while i < len(lines) and lines[i].strip():
        out.append(lines[i].strip())
        i += 1
    return " ".join(out)


def _within(errors: list[float], bound: float) -> tuple[int, int]:
    """The fewest and most rows within ``bound`` that errors shown to 0.1% can hold."""
    shown = [round(abs(e) * 1000) for e in errors]  # tenths of a percent
    edge = round(bound * 1000)
    return sum(s < edge for s in shown), sum(s <= edge for s in shown)


def _mean_abs(errors: list[float]) -> float:
    return sum(abs(e) for e in errors) / len(errors)


def test_the_doc_has_the_validated_tables() -> None:
    shipped = yaml.safe_load(SHIPPED.read_text())["tables"]
    named = {c for t in tables() for c in t.csvs}
    assert set(shipped) <= named, sorted(set(shipped) - named)


def test_validated_rows_agree_with_the_shipped_summary() -> None:
    """The rows of the tables validation.yaml summarises, as the doc shows them, give its
    count, mean absolute and signed error, largest error and counts within 10% and 20%."""
    shipped = yaml.safe_load(SHIPPED.read_text())
    names = set(shipped["tables"])
    errors = [e for t in tables() if set(t.csvs) & names for e in t.errors]
    summary = shipped["all"]
    assert len(errors) == summary["rows"], "rerun scripts/validation_summary.py or the doc's tables"
    assert abs(_mean_abs(errors) - summary["mean_abs_error"]) <= 6e-4
    assert abs(sum(errors) / len(errors) - summary["mean_error"]) <= 6e-4
    assert abs(max(abs(e) for e in errors) - summary["max_abs_error"]) <= 6e-4
    for bound, key in ((0.1, "within_10pct"), (0.2, "within_20pct")):
        lo, hi = _within(errors, bound)
        assert lo <= summary[key] <= hi, (key, lo, hi, summary[key])


@pytest.mark.parametrize("table", [t for t in tables() if _SUMMARY.match(t.after)],
                         ids=lambda t: f"line{t.line}")
def test_each_summary_line_matches_its_table(table: Table) -> None:
    """"N rows: mean absolute error X%, largest Y%, within 10%: a, within 20%: b" under a
    table is what the table's own rows give."""
    m = _SUMMARY.match(table.after)
    assert m is not None
    n, mae, signed, largest, w10, w20 = m.groups()
    errors = table.errors
    assert int(n) == len(errors), table.after
    assert abs(_mean_abs(errors) * 100 - float(mae)) <= 0.06 + 0.05, table.after
    if signed is not None:
        assert abs(sum(errors) / len(errors) * 100 - float(signed)) <= 0.11, table.after
    assert abs(max(abs(e) for e in errors) * 100 - float(largest)) <= 0.06, table.after
    for count, bound in ((w10, 0.1), (w20, 0.2)):
        if count is not None:
            lo, hi = _within(errors, bound)
            assert lo <= int(count) <= hi, (table.after, bound, lo, hi)


def test_summary_lines_are_found() -> None:
    """The summary-line pattern still reads the doc (the parametrized test above is not empty)."""
    assert sum(bool(_SUMMARY.match(t.after)) for t in tables()) >= 10


def test_the_groups_table_is_the_shipped_summary() -> None:
    """Section "The accuracy a replay reports": its table of groups (stack, kind, GPU) and of
    each stack and kind over its GPUs is validation.yaml's, to the digits shown."""
    rows = _accuracy_rows().group_cells(yaml.safe_load(SHIPPED.read_text()))
    text = "\n".join(_lines()).split("## The accuracy a replay reports", 1)[1].split("\n## ", 1)[0]
    got: dict[tuple[str, str, str], list[str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 9 and cells[0] != "stack":
            got[(cells[0], cells[1], cells[2])] = cells[3:]
    assert list(got) == list(rows), "the groups table lists other groups than validation.yaml"
    for key, cells in got.items():
        assert cells == rows[key], (key, cells, rows[key])


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub writes it."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


_RESULT = re.compile(r"(\d+) rows[^:|]*: MAE (\d+\.\d)%(?:[^|]*?largest ([-+]?\d+(?:\.\d)?)%)?"
                     r"(?:[^|]*?within 10%: (\d+))?(?:[^|]*?within 20%: (\d+))?")


def _summary_claims() -> list[tuple[int, str, tuple[str | None, ...]]]:
    """(line, anchor, result groups) of the page's Summary table rows that quote a per-row table."""
    lines = _lines()
    out = []
    for i, line in enumerate(lines):
        if line.startswith("## Self-replay"):
            break
        m = re.match(r"\| \[[^\]]*\]\(#([^)]+)\)", line)
        r = _RESULT.search(line)
        if m and r:
            out.append((i + 1, m.group(1), r.groups()))
    return out


def _section_lines(anchor: str) -> range:
    lines = _lines()
    for i, line in enumerate(lines):
        h = re.match(r"(#+) (.*)", line)
        if h and _slug(h.group(2)) == anchor:
            level = len(h.group(1))
            end = next((j for j in range(i + 1, len(lines))
                        if re.match(rf"#{{1,{level}}} ", lines[j])), len(lines))
            return range(i + 1, end + 1)
    raise AssertionError(f"no heading with the anchor #{anchor}")


def test_summary_table_quotes_the_tables() -> None:
    """The page's Summary table: each "N rows: MAE X%, largest Y%, within 10%: a, within 20%:
    b" it quotes is what a per-row table of the linked section gives."""
    claims = _summary_claims()
    assert len(claims) >= 10
    per_row = tables()
    for line, anchor, (n, mae, largest, w10, w20) in claims:
        assert n is not None and mae is not None  # the pattern's first two groups always match
        span = _section_lines(anchor)
        ok = []
        for t in per_row:
            if t.line not in span or len(t.errors) != int(n):
                continue
            good = abs(_mean_abs(t.errors) * 100 - float(mae)) <= 0.11
            if largest is not None:
                step = 0.06 if "." in largest else 0.51
                good &= abs(max(abs(e) for e in t.errors) * 100 - abs(float(largest))) <= step
            for count, bound in ((w10, 0.1), (w20, 0.2)):
                if count is not None:
                    lo, hi = _within(t.errors, bound)
                    good &= lo <= int(count) <= hi
            ok.append(good)
        assert any(ok), f"accuracy.md line {line}: no table of #{anchor} gives {n} rows, MAE {mae}%"
