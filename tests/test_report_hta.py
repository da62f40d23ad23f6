"""The simulated timeline loads in Holistic Trace Analysis and agrees with result.json."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tracesim.cli import cli

hta = pytest.importorskip("hta.trace_analysis", reason="holistictraceanalysis (dev extra) not installed")


@pytest.mark.slow
def test_hta_temporal_breakdown_matches_result(tmp_path, monkeypatch):
    # HTA rounds ns-resolution timestamps inward to whole microseconds unless told not to;
    # the simulated timeline has nanosecond precision (docs/formats.md)
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    out = tmp_path / "run"
    args = ["replay", "--model", "gpt3-1.7b", "--cluster", "h100x8", "--tp", "1", "--pp", "1",
            "--dp", "2", "--micro-batch", "1", "--global-batch", "4", "-o", str(out)]
    r = CliRunner().invoke(cli, args, obj={})
    assert r.exit_code == 0, r.output
    res = json.loads((out / "result.json").read_text())
    ta = hta.TraceAnalysis(trace_dir=str(out / "kineto"))
    df = ta.get_temporal_breakdown(visualize=False).set_index("rank")
    assert sorted(df.index) == [0, 1]
    for rank in (0, 1):
        compute_us = float(df.loc[rank, "compute_time(us)"])
        comm_us = float(df.loc[rank, "non_compute_time(us)"])
        # compute: the iteration's compute time of the rank
        per_rank = res["per_rank_breakdown"][str(rank)]
        assert compute_us == pytest.approx(per_rank["compute_s"] * 1e6, rel=0.01)
        assert compute_us == pytest.approx(res["breakdown"]["compute_s"] * 1e6, rel=0.01)
        # communication: HTA counts the time communication kernels run and no compute does;
        # tracesim's exposed communication is the part of that time compute waited for (a
        # stretch charged to a collective has it running and no compute), so it is no more
        exposed_us = sum(per_rank["exposed_comm_s"].values()) * 1e6
        assert 0 < exposed_us <= comm_us * 1.001
        assert compute_us + comm_us <= res["iteration_time_s"] * 1e6 * 1.001
        # HTA's span is first kernel start to last kernel end: the whole iteration here
        assert float(df.loc[rank, "kernel_time(us)"]) == pytest.approx(res["iteration_time_s"] * 1e6, rel=0.01)
