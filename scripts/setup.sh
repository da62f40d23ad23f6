#!/usr/bin/env bash
# Create (or reuse) the local virtualenv .venv with tracesim and everything its demo and
# tests need. torch is pinned to 2.13.0: on this platform that installs the CPU build; any
# other torch requirement would make pip fetch a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV=.venv
STAMP=$VENV/.tracesim-setup
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  exit 0
fi
echo "setting up $VENV (first run takes a few minutes) ..." >&2
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >&2
"$VENV/bin/python" -m pip install -q "torch==2.13.0" >&2
"$VENV/bin/python" -m pip install -q -e ".[dev,collect]" >&2
echo "$want" > "$STAMP"
