"""The studies under benchmarks/ stay runnable: every module imports, every script has --help.

The package never imports them (tests/test_layout.py); they import the package, so a change
of the package that breaks a study fails here rather than when someone reruns it.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: training scripts that benchmarks run as jobs (they train when imported)
JOBS = ROOT / "benchmarks" / "cpu" / "jobs"
MODULES = sorted(p.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
                 for p in (ROOT / "benchmarks").rglob("*.py")
                 if p.name != "__init__.py" and JOBS not in p.parents)
SCRIPTS = sorted(m for m in MODULES
                 if "__main__" in (ROOT / (m.replace(".", "/") + ".py")).read_text())


@pytest.mark.parametrize("module", MODULES)
def test_benchmark_module_imports(module: str) -> None:
    importlib.import_module(module)


@pytest.mark.slow
def test_benchmark_scripts_have_help() -> None:
    code = ("import runpy, sys\n"
            "for m in sys.argv[1:]:\n"
            "    sys.argv = [m, '--help']\n"
            "    try:\n"
            "        runpy.run_module(m, run_name='__main__')\n"
            "    except SystemExit as e:\n"
            "        assert e.code in (0, None), (m, e.code)\n")
    p = subprocess.run([sys.executable, "-c", code, *SCRIPTS], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
