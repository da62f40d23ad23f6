"""benchmarks/published/residual.py: a published row's step time recovered from a real
`validate published --json` output, the per-step / per-micro-batch split of the residuals,
and bad input."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "published" / "residual.py"
TABLE = ROOT / "benchmarks" / "published" / "mlperf_training_llama31_405b.csv"


def _load():
    import importlib.util

    spec = importlib.util.spec_from_file_location("residual", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_published_step_times_of_a_real_validation_are_the_logged_ones(tmp_path: Path) -> None:
    """The three GB200 NVFP4 405B rows replayed by the CLI: each row's published step time,
    recovered from its replayed iteration and signed error, is the step time the table
    took from the submission's logs; the fit passes through the rows' residuals."""
    out = tmp_path / "rows.json"
    only = "GB200 llama3.1-405b nvfp4"
    run = subprocess.run([sys.executable, "-m", "tracesim.cli", "validate", "published", str(TABLE),
                          "--only", only, "--json"], capture_output=True, text=True, check=False, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    out.write_text(run.stdout)
    logged = [float(r["step_s"]) for r in csv.DictReader(TABLE.open())
              if r["system"] == "DGX-GB200" and r["precision"] == "nvfp4"]
    mod = _load()
    rows = [mod.row_residual(r) for r in json.loads(run.stdout)["rows"]]
    assert len(rows) == 3 == len(logged)
    for r, step in zip(rows, logged, strict=True):
        assert r["published_s"] == pytest.approx(step, rel=1e-4)
    (group, fit), = mod.groups(rows)
    assert fit["m"] == [16.0, 24.0, 144.0]
    for r in group:
        assert fit["a_s"] + fit["b_s"] * r["m"] == pytest.approx(r["residual_s"], abs=0.05)
    shown = subprocess.run([sys.executable, str(SCRIPT), str(out)], capture_output=True, text=True,
                           check=False)
    assert shown.returncode == 0 and "ms per micro-batch" in shown.stdout


def _row(m: int, pred_s: float, pub_s: float, dp: int = 8) -> dict:
    # a tokens/s metric: inversely proportional to the step time
    return {"table": "t.csv", "row": f"m {m}", "iteration_time_s": pred_s, "published": 1.0 / pub_s,
            "predicted": 1.0 / pred_s, "error": None,
            "options": {"model": "x", "dp": dp, "micro_batch": 2, "global_batch": 2 * dp * m}}


def test_the_split_recovers_a_per_step_and_a_per_micro_batch_part() -> None:
    """Rows whose published time is the replayed one plus 0.3 s per step and 5% of a 0.1 s
    micro-batch give a = 0.3 s, b = 5 ms, b_share = 5%; a group of one micro-batch count
    gives its mean residual only."""
    mod = _load()
    rows = [mod.row_residual(_row(m, 0.1 * m, 0.1 * m + 0.3 + 0.005 * m)) for m in (4, 16, 64)]
    (_, fit), = mod.groups(rows)
    assert fit["a_s"] == pytest.approx(0.3) and fit["b_s"] == pytest.approx(0.005)
    assert fit["b_share"] == pytest.approx(0.05) and fit["max_dev_s"] < 1e-9
    one = [mod.row_residual(_row(8, 0.8, 0.9)), mod.row_residual(_row(8, 0.8, 1.0, dp=16))]
    (_, fit1), = mod.groups(one)
    assert "a_s" not in fit1 and fit1["mean_residual_s"] == pytest.approx(0.15)


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"summary": {}}')
    run = subprocess.run([sys.executable, str(SCRIPT), str(bad)], capture_output=True, text=True,
                         check=False)
    assert run.returncode == 2 and str(bad) in run.stderr and len(run.stderr.strip().splitlines()) == 1
