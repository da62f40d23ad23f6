"""Shared fixtures (where ../shared lives) and the CI rule that no test skips.

Outside CI a test may skip when something it needs is absent (``../shared`` beside the
checkout, torch); with ``CI`` set in the environment (``.ci/run`` sets it) a skip is a
failure, so a CI run cannot pass with tests that did not run.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
PUBLIC_TRACES = SHARED / "traces" / "public"
REFERENCE = SHARED / "reference"


def in_ci() -> bool:
    """Whether this run is CI's (a skip there is a failure)."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.fixture
def public_traces() -> Path:
    if not PUBLIC_TRACES.is_dir():
        pytest.skip(f"../shared/traces/public not found at {PUBLIC_TRACES}")
    return PUBLIC_TRACES


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and in_ci() and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI (a CI run must run every test): {reason}"


#: test files that take minutes: collected first, so that ``--dist loadfile`` starts them
#: first and the other files fill the other worker meanwhile
LONG_FIRST = ("test_validation_current.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda it: it.path.name not in LONG_FIRST)  # stable: order kept otherwise


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and in_ci():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"module skipped in CI (a CI run must run every test): {reason}"
