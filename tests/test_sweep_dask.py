"""End to end on a Dask LocalCluster: 12 points, each equal to the point replayed alone,
an impossible point recorded as failed, a rerun that computes nothing, Ctrl-C, and resume
on a running cluster given by its scheduler address."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from tests.helpers import retarget
from tracesim.cli import cli
from tracesim.errors import InputError
from tracesim.sweep import load_space, run_sweep
from tracesim.sweep.task import META_COLUMNS, flatten

pytest.importorskip("dask.distributed")

#: the first-principles template keeps each replay at milliseconds (the default bundle
#: template is re-extracted on every call, ~0.3 s)
TINY = {"model": "gpt-tiny", "cluster": "h100x8", "global_batch": 8, "template": "analytic"}
#: 2 x 3 x 2 = 12 product points, one excluded by a constraint, plus one impossible point
SPACE = {
    "name": "tiny-12",
    "base": TINY,
    "axes": {"pp": [1, 2], "dp": [1, 2, 4], "micro_batch": [1, 2]},
    "points": [{"tp": 2, "pp": 1, "dp": 1}],  # gpt-tiny has 5 heads: tp 2 is impossible
    "constraints": ["tp * pp * dp <= gpus", "not (pp == 2 and dp == 4 and micro_batch == 2)"],
    "prices": {"h100": 2.5},
}
SETTINGS = ("tp", "pp", "dp", "micro_batch")


def _alone(row: pd.Series) -> dict:
    opts = dict(TINY)
    for k in SETTINGS:
        if not pd.isna(row[k]):
            opts[k] = int(row[k])
    return opts


def _same(a, b) -> bool:
    if b is None or (isinstance(b, float) and math.isnan(b)):
        return a is None or pd.isna(a)
    if isinstance(b, float):
        return math.isclose(float(a), b, rel_tol=1e-12, abs_tol=0.0)
    return a == b


@pytest.mark.slow
def test_twelve_points_on_two_local_workers(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    out = tmp_path / "sweep"
    res = CliRunner().invoke(cli, ["sweep", str(space), "-o", str(out), "--workers", "2", "--json",
                                   "--top", "5"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    s = doc["summary"]
    assert (s["points"], s["computed"], s["reused"], s["ok"], s["failed"], s["excluded"]) == (12, 12, 0, 11, 1, 1)
    assert s["workers"] == 2 and s["scheduler"] == "local" and not s["interrupted"]

    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == 12 and table["key"].is_unique
    assert list(table.columns[: len(META_COLUMNS)]) == list(META_COLUMNS)
    ok = table[table["status"] == "ok"]
    assert len(ok) == 11
    for _, row in ok.iterrows():
        alone = flatten(retarget(_alone(row)).to_dict())
        for k, v in alone.items():
            if k.endswith("wall_s"):
                continue  # wall-clock times of the replay itself
            col = "result.cluster" if k == "cluster" else k
            assert _same(row[col], v), (k, row[col], v)
        assert row["tokens_per_s_per_gpu"] == pytest.approx(alone["tokens_per_s"] / alone["gpus"], rel=1e-12)
        assert row["cost_per_hour_usd"] == pytest.approx(2.5 * alone["gpus"], rel=1e-12)
    bad = table[table["status"] == "failed"].iloc[0]
    with pytest.raises(InputError) as e:
        retarget(_alone(bad))
    assert bad["error"] == f"InputError: {e.value}"
    assert "heads 5 are not divisible by tp 2" in bad["error"]
    assert pd.isna(bad["tokens_per_s"])

    # outputs: ranked top 5 by tokens/s, the Pareto front, the PNG
    top = [r["tokens_per_s"] for r in doc["top"]]
    assert top == pytest.approx(sorted(ok["tokens_per_s"], reverse=True)[:5], rel=1e-12)
    ranking = pd.read_csv(out / "ranking.csv")
    assert list(ranking["tokens_per_s"]) == pytest.approx(top, rel=1e-9)
    front = pd.read_csv(out / "pareto.csv")
    assert list(front["cost_per_hour_usd"]) == sorted(front["cost_per_hour_usd"])
    assert front["tokens_per_s"].is_monotonic_increasing
    assert (out / "pareto.png").read_bytes()[:4] == b"\x89PNG"

    # rerun: every key is found, nothing is computed, the table is not rewritten
    before = (out / "results.parquet").stat().st_mtime_ns, (out / "results.parquet").read_bytes()
    res = CliRunner().invoke(cli, ["sweep", str(space), "-o", str(out), "--workers", "2", "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)["summary"]
    assert (s["computed"], s["reused"], s["ok"], s["failed"]) == (0, 12, 11, 1)
    after = (out / "results.parquet").stat().st_mtime_ns, (out / "results.parquet").read_bytes()
    assert after == before


@pytest.mark.slow
def test_interrupt_leaves_a_consistent_table_and_resume_finishes(tmp_path):
    space_file = tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump(SPACE))
    space = load_space(space_file)
    out = tmp_path / "sweep"
    seen = []

    def ctrl_c_after_five(p):
        seen.append(p.done)
        if p.done >= 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(space, out, workers=1, progress=ctrl_c_after_five, batch_size=2)
    partial = pd.read_parquet(out / "results.parquet")
    n = len(partial)
    assert 5 <= n < 12 and partial["key"].is_unique
    assert set(partial["status"]) <= {"ok", "failed"} and partial["tokens_per_s"].notna().sum() >= n - 1
    assert json.loads((out / "summary.json").read_text())["interrupted"] is True
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]

    # resume on a running Dask cluster given by its address (the --scheduler path)
    from dask.distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as dc:
        summary = run_sweep(space, out, scheduler=dc.scheduler_address)
    assert (summary.reused, summary.computed) == (n, 12 - n)
    assert summary.scheduler == dc.scheduler_address and summary.workers is None
    full = pd.read_parquet(out / "results.parquet")
    assert len(full) == 12 and full["key"].is_unique
    kept = full.set_index("key").loc[partial["key"], "iteration_time_s"]
    assert list(kept.fillna(-1)) == list(partial["iteration_time_s"].fillna(-1))  # not recomputed
    assert Path(summary.results) == out / "results.parquet"


def test_a_sweep_of_a_recording_without_tokens_ranks_by_iteration_time(tmp_path, public_traces):
    """A recorded trace says no token count: its points have no tokens/s, so the table ranks
    them by iteration time (fastest first), and there is no throughput Pareto front."""
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({
        "name": "v100-trace", "source": str(public_traces / "v100_1rank.json.gz"),
        "base": {"cluster": "h100x8"}, "axes": {"gpu": ["h100", "b200"], "dp": [1]}}))
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["sweep", str(space), "-o", str(out), "--workers", "1",
                                   "--quiet"])
    assert res.exit_code == 0, res.output
    assert "2 ok, 0 failed" in res.output and "by iteration_time_s" in res.output
    ranking = pd.read_csv(out / "ranking.csv")
    assert sorted(ranking["gpu"]) == ["b200", "h100"]
    assert ranking["iteration_time_s"].is_monotonic_increasing  # the fastest first
    assert ranking["tokens_per_s"].isna().all()
    assert not (out / "pareto.png").exists() and not (out / "pareto.csv").exists()
