"""Shared fixtures: where ../shared lives, and skipping when it is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
PUBLIC_TRACES = SHARED / "traces" / "public"


@pytest.fixture
def public_traces() -> Path:
    if not PUBLIC_TRACES.is_dir():
        pytest.skip(f"../shared/traces/public not found at {PUBLIC_TRACES} (CI provides it)")
    return PUBLIC_TRACES
