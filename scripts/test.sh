#!/usr/bin/env bash
# Set up .venv (reused when present) and run the whole test suite: ruff, mypy, then pytest
# (slow end-to-end tests included). Tests that compare wall-clock measurements (marked
# `timing`) run afterwards on their own, one at a time, so the other tests' load does not
# disturb what they measure; their printed measurements are shown for passed tests too (-rP).
# Extra arguments go to both pytest runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest -n 2 --dist loadfile -q -m "not timing" "$@"
set +e
.venv/bin/python -m pytest -q -rP -m timing "$@"
rc=$?
set -e
# exit code 5: no timing test selected (e.g. a -k filter), which is fine
if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
