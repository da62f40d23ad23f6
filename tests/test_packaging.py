"""The package installs and runs from anywhere: a built wheel, used from another directory.

The wheel carries the collectors (``tracesim.collectors``), the shipped model specs and
stored template bundles (``tracesim.workloads``), the cluster specs (``tracesim.topologies``)
and the device profiles; names resolve through :mod:`importlib.resources`, not through the
checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_listed() -> None:
    cfg = _config()
    mapped = {v: k for k, v in cfg["package-dir"].items()}
    found = set()
    for init in ROOT.glob("**/__init__.py"):
        rel = init.parent.relative_to(ROOT).as_posix()
        top = rel.split("/")[0]
        if top == "tracesim":
            found.add(rel.replace("/", "."))
        elif top in mapped:
            found.add(mapped[top] + rel[len(top):].replace("/", "."))
    assert sorted(found) == sorted(cfg["packages"])


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of this checkout's files, unpacked into a folder of its own."""
    src = tmp_path_factory.mktemp("src") / "tracesim"
    skip_top = {".git", ".venv", "runs", "build", "dist", ".hypothesis"}

    def ignore(folder: str, names: list[str]) -> set[str]:
        top = Path(folder) == ROOT
        return {n for n in names if (top and n in skip_top) or n == "__pycache__"
                or n.endswith(("_cache", ".egg-info"))}

    shutil.copytree(ROOT, src, ignore=ignore)
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(dist), str(src)], check=True, capture_output=True,
                   timeout=600, cwd=dist)
    (wheel,) = dist.glob("tracesim-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("tracesim/collectors/run.py", "tracesim/workloads/llama3-8b.yaml",
                   "tracesim/workloads/bundles/gpt-tiny/meta.yaml",
                   "tracesim/workloads/bundles/gpt-tiny/rank0/trace.json.gz",
                   "tracesim/topologies/h100x8.yaml", "tracesim/hardware/devices/h100.yaml",
                   "tracesim/report/validation.yaml"):
        assert needed in names, needed
    assert not any(n.startswith(("collectors/", "benchmarks/", "tests/")) for n in names)
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, capture_output=True, timeout=600)
    return target


def _run(target: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(target)}
    return subprocess.run([sys.executable, "-m", "tracesim.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_wheel_runs_from_another_directory(installed: Path, tmp_path: Path) -> None:
    p = _run(installed, tmp_path, "list", "models", "--json")
    assert p.returncode == 0, p.stderr
    assert "llama3-8b" in {m["name"] for m in json.loads(p.stdout)["models"]}
    code = "import tracesim.catalog as c, tracesim.collectors; print(c.__file__, tracesim.collectors.__file__)"
    where = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": str(installed)}, check=True)
    assert all(w.startswith(str(installed)) for w in where.stdout.split()), where.stdout
    # the eager stack replays the family's stored bundle: it must resolve inside the wheel
    # (on a GPU the default stack builds the layer from first principles and reads none)
    p = _run(installed, tmp_path, "replay", "--model", "llama3-8b", "--cluster", "h100x8",
             "--tp", "8", "--seq-len", "2048", "--stack", "eager", "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["iteration_time_s"] > 0
    assert "bundles/llama-tiny" in str(res["template"].get("source", "")), res["template"]
    # the validation summary ships in the wheel: a megatron-core replay finds its group
    p = _run(installed, tmp_path, "replay", "--model", "llama3-8b", "--cluster", "h100x8",
             "--tp", "8", "--seq-len", "2048", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["validation"]["group"]["device"] == "h100"
