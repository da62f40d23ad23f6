#!/usr/bin/env bash
# Set up .venv (reused when present) and run the whole test suite: ruff, then pytest
# (slow end-to-end tests included). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest -n 2 --dist loadfile -q "$@"
