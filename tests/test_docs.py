"""The docs stay true: docs/cli.md and the options table of docs/api.md match the code, the
runnable shell examples run, and relative links in the README and the guide resolve."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNABLE_DOCS = [ROOT / "README.md", ROOT / "docs" / "guide.md"]
LINKED_DOCS = [ROOT / "README.md", ROOT / "docs" / "guide.md", ROOT / "docs" / "index.md"]


def runnable_blocks(path: Path) -> list[str]:
    """Fenced bash blocks that directly follow a ``<!-- runnable -->`` line."""
    return [cmd for cmd, _ in runnable_examples(path)]


def runnable_examples(path: Path) -> list[tuple[str, str | None]]:
    """(command block, the printed output shown right after it in a ``text`` block or None)."""
    text = path.read_text()
    pat = r"<!-- runnable -->\s*\n```bash\n(.*?)```(?:\s*\n```text\n(.*?)```)?"
    return [(cmd, out or None) for cmd, out in re.findall(pat, text, flags=re.S)]


#: a number as the reports print it (1,024 / 91.85 / 2.5e+03 / -0.3)
_NUM = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")


def _numbers(line: str) -> list[float]:
    return [float(x.replace(",", "")) for x in _NUM.findall(line)]


def _shape(line: str) -> str:
    return " ".join(_NUM.sub("#", line).split())


def printed_figures_match(expected: str, got: str, rel: float = 0.01) -> list[str]:
    """The lines of ``expected`` whose wording ``got`` lacks, or whose figures differ from
    ``got``'s by more than ``rel`` (relative); paths of written files are not compared."""
    want = [ln for ln in expected.splitlines() if ln.strip() and not ln.lstrip().startswith("written to")]
    have = [ln for ln in got.splitlines() if ln.strip() and not ln.lstrip().startswith("written to")]
    problems = []
    by_shape: dict[str, list[str]] = {}
    for ln in have:
        by_shape.setdefault(_shape(ln), []).append(ln)
    for ln in want:
        cands = by_shape.get(_shape(ln))
        if not cands:
            problems.append(f"not printed: {ln.strip()}")
            continue
        mine = cands.pop(0)
        for a, b in zip(_numbers(ln), _numbers(mine), strict=True):
            if abs(a - b) > rel * max(abs(a), abs(b)) and not (a == b == 0):
                problems.append(f"README: {ln.strip()}\nprinted: {mine.strip()}")
                break
    return problems


def test_cli_reference_is_up_to_date():
    """docs/cli.md (the click commands) and docs/api.md's options table (the fields of
    ReplayOptions) are what scripts/gen_cli_docs.py generates now."""
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_cli_docs.py"), "--check"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, f"generated docs are stale (docs/cli.md, docs/api.md):\n{r.stderr}"


def test_cli_reference_lists_every_command():
    from tracesim.cli import cli

    text = (ROOT / "docs" / "cli.md").read_text()
    for name in cli.commands:
        assert f"## `tracesim {name}`" in text
    assert "| `--global-batch` | integer >= 1 |" in text


def test_there_are_runnable_examples():
    assert len(runnable_blocks(ROOT / "README.md")) >= 3
    assert runnable_blocks(ROOT / "docs" / "guide.md")
    assert sum(out is not None for _, out in runnable_examples(ROOT / "README.md")) >= 3


def test_printed_figures_are_compared_within_one_percent():
    shown = "  iteration time     91.85 ms\n  tokens/s           178,374\n  written to runs/x/ (a.png)"
    assert printed_figures_match(shown, "  iteration time     91.90 ms\n  tokens/s           178,000\n") == []
    assert printed_figures_match(shown, "  iteration time     93.00 ms\n  tokens/s           178,374\n")
    assert printed_figures_match(shown, "  iteration time     91.85 s\n  tokens/s           178,374\n")


@pytest.mark.slow
@pytest.mark.parametrize("doc", RUNNABLE_DOCS, ids=lambda p: p.name)
def test_runnable_examples_run(doc, tmp_path):
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "120"
    for block, expected in runnable_examples(doc):
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{doc.name}: {block}\n{r.stdout}\n{r.stderr}"
        assert "iteration time" in r.stdout
        if expected is not None:  # the figures the doc shows are what the command prints
            problems = printed_figures_match(expected, r.stdout)
            assert not problems, f"{doc.name}: {block}\n" + "\n".join(problems)
    if doc.name == "README.md":  # what the tour says it wrote
        for f in ("result.json", "breakdown.png", "gantt.png", "links.png", "timeline.json.gz",
                  "ops.parquet", "links.parquet"):
            assert (tmp_path / "runs" / "tour" / f).exists(), f
        assert (tmp_path / "runs" / "tour-compare" / "compare.png").exists()


@pytest.mark.parametrize("doc", LINKED_DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(doc):
    text = doc.read_text()
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"
