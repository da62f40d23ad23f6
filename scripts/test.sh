#!/usr/bin/env bash
# Set up .venv (reused when present) and run the whole test suite: ruff, mypy, then pytest
# (slow end-to-end tests included). With CI set in the environment (as .ci/run sets it), a
# skipped test fails the run (tests/conftest.py). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest -n 2 --dist loadfile -q "$@"
