"""The docs stay true: docs/cli.md matches the code, the runnable shell examples run, and
relative links in the README and the guide resolve."""

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
    text = path.read_text()
    return re.findall(r"<!-- runnable -->\s*\n```bash\n(.*?)```", text, flags=re.S)


def test_cli_reference_is_up_to_date():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_cli_docs.py"), "--check"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr


def test_cli_reference_lists_every_command():
    from tracesim.cli import cli

    text = (ROOT / "docs" / "cli.md").read_text()
    for name in cli.commands:
        assert f"## `tracesim {name}`" in text
    assert "| `--global-batch` | integer >= 1 |" in text


def test_there_are_runnable_examples():
    assert len(runnable_blocks(ROOT / "README.md")) >= 3
    assert runnable_blocks(ROOT / "docs" / "guide.md")


@pytest.mark.slow
@pytest.mark.parametrize("doc", RUNNABLE_DOCS, ids=lambda p: p.name)
def test_runnable_examples_run(doc, tmp_path):
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for block in runnable_blocks(doc):
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{doc.name}: {block}\n{r.stdout}\n{r.stderr}"
        assert "iteration time" in r.stdout
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
