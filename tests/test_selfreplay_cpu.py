"""Self-replay of CPU bundles collected here (1 rank, and 2 gloo ranks replayed jointly).

These compare wall-clock measurements, so they are `timing` tests: scripts/test.sh runs them
alone after the rest. Measured values are in docs/accuracy.md; the unprofiled comparison is
not asserted (it varies from +4% to +25% between runs here).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tracesim.selfreplay import self_replay
from tracesim.sources import load_source

ROOT = Path(__file__).resolve().parents[1]


def _collect(out: Path, *args: str) -> Path:
    pytest.importorskip("torch")
    cmd = [sys.executable, "-m", "tracesim.cli", "collect", "--workload", "gpt-tiny", "-o", str(out), *args]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600, cwd=ROOT)
    return out


@pytest.mark.slow
@pytest.mark.timing
def test_one_rank_bundle(tmp_path: Path) -> None:
    src = load_source(_collect(tmp_path / "b1"))
    results = self_replay(src)
    assert len(results) == 1
    r = results[0]
    assert abs(r.rel_error) < 0.03, r
    assert r.rel_error_unprofiled is not None
    # the unprofiled comparison is reported, not asserted: it gave +4..+5% in quiet runs but
    # +15% and +25% in fresh-clone runs of this suite (docs/accuracy.md)
    assert r.predicted_unprofiled_s is not None and r.predicted_unprofiled_s < r.predicted_s


@pytest.mark.slow
@pytest.mark.timing
def test_two_rank_bundle_replayed_jointly(tmp_path: Path) -> None:
    results = self_replay(load_source(_collect(tmp_path / "b2", "--ranks", "2")))
    assert sorted(r.rank for r in results) == [0, 1]
    for r in results:
        assert abs(r.rel_error) < 0.05, r  # measured 0.0% and +3.6% (docs/accuracy.md)
