"""The shipped accuracy summary is what the model gives now: every published row of
docs/accuracy.md's tables replayed afresh (``scripts/validation_summary.py --check``, one
process, about four minutes on one core) gives ``tracesim/report/validation.yaml`` byte for
byte, and each of the page's rows of those tables its predicted value and error as shown
(``scripts/accuracy_rows.py``). A change that moves predictions without rerunning the script
fails here, and ``tests/test_accuracy_doc.py`` then holds the page's summary lines to the
rerun rows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "reference"


def test_validation_yaml_is_current() -> None:
    if not REFERENCE.is_dir():
        pytest.skip(f"../shared/reference not found at {REFERENCE}")
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "validation_summary.py"), "--check",
                        "--jobs", "1"], capture_output=True, text=True, cwd=ROOT, timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    assert "current (" in r.stdout, r.stdout
