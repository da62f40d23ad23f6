"""``collectors.paired_gloo``: the 1-rank and the 2-rank gloo job timed in turn (a real
2-process run), and the paired error of the CPU gloo check."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import yaml


def test_paired_error_moves_the_prediction_by_the_one_rank_drift(tmp_path: Path) -> None:
    from collectors.cpu_accuracy import paired_error

    (tmp_path / "meta.yaml").write_text(yaml.safe_dump({"measured_step_time_s": {"median": 0.060}}))
    # the 1-rank job ran 5% slower in the paired seconds: the prediction moves with it
    err = paired_error(0.070, tmp_path, {"one": 0.063, "two": 0.0735})
    assert err == pytest.approx(0.070 * 1.05 / 0.0735 - 1.0)
    assert paired_error(0.070, tmp_path, {"one": 0.060, "two": 0.070}) == pytest.approx(0.0)


@pytest.mark.slow
def test_paired_run_times_both_jobs_and_the_waiting_rank_is_idle() -> None:
    pytest.importorskip("torch")
    from collectors.paired_gloo import main, measure

    got = measure("gpt-tiny", batch=2, cycles=2, steps=2)
    assert got["one_steps"] == 4 and got["two_steps"] == 4
    assert len(got["one_s"]) == 4 and len(got["two_s"]) == 4
    assert got["one"] == pytest.approx(statistics.median(got["one_s"]), abs=2e-6)
    assert 0 < got["one"] < 5 and 0 < got["two"] < 5
    # rank 1 waits in a barrier while rank 0 runs the 1-rank job: it must not take a core
    assert got["waiting_cpu_s"] < 0.25 * got["one_total_s"]
    assert main(["--cycles", "0"]) == 2
