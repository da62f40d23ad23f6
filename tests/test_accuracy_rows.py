"""scripts/accuracy_rows.py: docs/accuracy.md's per-row tables matched to replayed rows by
their published values, row by row, and their cells rewritten as a replay gives them."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("accuracy_rows", ROOT / "scripts" / "accuracy_rows.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["accuracy_rows"] = mod
    spec.loader.exec_module(mod)
    return mod


@dataclass
class Row:
    table: str
    label: str
    published: float
    predicted: float
    rel_error: float
    wall_s: float = 0.5
    error: str = ""


PAGE = """Some text.

| row | published | predicted | error | replay wall s |
|---|---|---|---|---|
| A 8 GPUs (a note) | 37,556 | 37,040 | -1.4% | 0.0 |
| A 64 GPUs | 999.0 | 963.7 | -3.5% | 0.8 |
| B 128 GPUs | 815.0 | not replayed (no spec) | | |

12 rows: ...

| row | published | predicted | error |
|---|---|---|---|
| C | 10.0 | 11 | +10.0% |
"""


def test_cells_are_the_replays_and_only_moved_rows_change() -> None:
    m = _module()
    assert [m.predicted_cell(v) for v in (37040.2, 963.74, 886.0, 5020.4, 1.23456)] == [
        "37,040", "963.7", "886", "5,020", "1.235"]
    rows = [Row("t.csv", "A 8 GPUs", 37556, 37040.1, 37040.1 / 37556 - 1),
            Row("t.csv", "A 64 GPUs", 999.0, 963.3, 963.3 / 999 - 1, wall_s=0.9),
            Row("t.csv", "B 128 GPUs", 815.0, float("nan"), float("nan"), error="no spec")]
    lines, changes, matched = m.compare(rows, PAGE.splitlines())
    assert [(c.line, c.label, c.old, c.new) for c in changes] == [
        (6, "A 64 GPUs", ("963.7", "-3.5%"), ("963.3", "-3.6%"))]
    assert lines[5] == "| A 64 GPUs | 999.0 | 963.3 | -3.6% | 0.9 |"  # its wall time with it
    assert lines[4] == PAGE.splitlines()[4] and lines[6] == PAGE.splitlines()[6]
    assert lines[10:] == PAGE.splitlines()[10:]  # a table of no replayed CSV is left alone
    assert matched == {"t.csv"}


def test_a_table_showing_other_published_values_is_not_matched() -> None:
    m = _module()
    rows = [Row("t.csv", "A 8 GPUs", 37556, 1.0, 0.0), Row("t.csv", "A 64 GPUs", 998.0, 1.0, 0.0),
            Row("t.csv", "B 128 GPUs", 815.0, 1.0, 0.0)]
    lines, changes, matched = m.compare(rows, PAGE.splitlines())
    assert lines == PAGE.splitlines() and changes == []
    assert matched == set()


def test_the_summary_line_under_a_table_follows_its_rows() -> None:
    """The fields of the line under a table are the replayed rows' (exact errors, not the
    rounded cells), wrapped lines included; the words around them stay."""
    m = _module()
    page = """| row | published | predicted | error |
|---|---|---|---|
| A | 100.0 | 130 | +30.0% |
| B | 100.0 | 95 | -5.0% |

2 rows: mean absolute error 9.9% (signed +1.0%), largest -3.0% (row B); within 10%: 2, within
20%: 0; slowest replay 1.0 s.
"""
    rows = [Row("t.csv", "A", 100.0, 110.04, 0.1004), Row("t.csv", "B", 100.0, 95.0, -0.05)]
    lines, changes, _ = m.compare(rows, page.splitlines())
    assert lines[5:7] == [
        "2 rows: mean absolute error 7.5% (signed +2.5%), largest +10.0% (row B); within 10%: 1, within",
        "20%: 2; slowest replay 1.0 s."]
    assert [c.label for c in changes] == ["A", "summary line", "summary line"]


def test_the_table_of_groups_is_rewritten_from_the_summary() -> None:
    """The page's table of groups is validation.yaml's (tests/test_accuracy_doc.py checks it);
    a stale cell is rewritten, a group missing from the page is left to be written by hand."""
    import yaml

    m = _module()
    shipped = yaml.safe_load((ROOT / "tracesim" / "report" / "validation.yaml").read_text())
    lines = (ROOT / "docs" / "accuracy.md").read_text().splitlines()
    same_lines, changes, same = m.groups(lines, shipped)
    assert same and changes == [] and same_lines == lines
    i = next(k for k, ln in enumerate(lines) if ln.startswith("| megatron-core | dense | h100 |"))
    stale = list(lines)
    stale[i] = stale[i].replace("| 92 |", "| 91 |")
    fixed, changes, same = m.groups(stale, shipped)
    assert same and fixed == lines and [c.line for c in changes] == [i + 1]
    _, _, same = m.groups(lines[:i] + lines[i + 1:], shipped)
    assert not same
