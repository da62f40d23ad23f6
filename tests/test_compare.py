"""tracesim compare: table, winner and ratio per metric, CLI on result dirs and specs."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from tracesim.cli import cli
from tracesim.report.compare import compare_table, default_labels


def _res(it, tok, mfu, mem, tp, cluster="c", tpd=8):
    return {"iteration_time_s": it, "tokens_per_s": tok, "tflops_per_gpu": mfu * 989, "mfu": mfu,
            "memory_gib_per_gpu": mem, "cluster": cluster, "model": {"name": "m"},
            "parallel": {"tp": tpd, "pp": 1, "dp": 1},
            "breakdown": {"compute_s": it - tp, "exposed_comm_s": {"tp": tp, "dp": 0.0},
                          "bubble_s": 0.0, "idle_s": 0.0}}


def test_winner_and_ratio():
    a, b, c = _res(2.0, 100.0, 0.4, 50.0, 0.5), _res(1.6, 125.0, 0.5, 60.0, 0.1), _res(4.0, 50.0, 0.2, 40.0, 0.0)
    df = compare_table([a, b, c], ["a", "b", "c"]).set_index("key")
    assert df.loc["iteration_time_s", "winner"] == "b"
    assert df.loc["iteration_time_s", "ratio"] == pytest.approx(2.0 / 1.6)
    assert df.loc["tokens_per_s", "winner"] == "b"
    assert df.loc["tokens_per_s", "ratio"] == pytest.approx(1.25)
    assert df.loc["memory_gib_per_gpu", "winner"] == "c"
    assert df.loc["memory_gib_per_gpu", "ratio"] == pytest.approx(50.0 / 40.0)
    assert df.loc["exposed_tp_s", "winner"] == "c"
    assert pd.isna(df.loc["exposed_tp_s", "ratio"])  # the winner's 0: no finite ratio
    assert "exposed_dp_s" not in df.index  # zero everywhere: left out
    assert list(df.loc["mfu", ["a", "b", "c"]]) == [0.4, 0.5, 0.2]
    # two runs sharing the best value: no winner, ratio 1
    tie = compare_table([a, dict(a), c], ["a", "a2", "c"]).set_index("key")
    assert pd.isna(tie.loc["iteration_time_s", "winner"])
    assert tie.loc["iteration_time_s", "ratio"] == 1.0
    assert tie.loc["memory_gib_per_gpu", "winner"] == "c"


def test_runs_of_different_work_are_not_ranked_on_time():
    """Half the tokens per iteration: the shorter iteration is no win; throughput ranks."""
    from tracesim.report.compare import work_note

    a, b = _res(2.0, 100.0, 0.5, 50.0, 0.5), _res(1.2, 83.3, 0.42, 40.0, 0.1)  # 200 vs 100 tokens
    df = compare_table([a, b], ["a", "b"])
    rows = df.set_index("key")
    for key in ("iteration_time_s", "compute_s", "exposed_tp_s"):
        assert pd.isna(rows.loc[key, "winner"]) and pd.isna(rows.loc[key, "ratio"]), key
    assert list(df["key"][:3]) == ["iteration_time_s", "tokens_per_iteration", "tokens_per_s"]
    assert rows.loc["tokens_per_iteration", "a"] == pytest.approx(200.0)
    assert rows.loc["tokens_per_s", "winner"] == "a" and rows.loc["memory_gib_per_gpu", "winner"] == "b"
    assert "200 vs 100" in work_note(df, ["a", "b"])
    assert work_note(compare_table([a, dict(a)], ["a", "a2"]), ["a", "a2"]) is None


def test_default_labels_say_what_differs():
    a, b = _res(1, 1, 0.1, 1, 0, cluster="x", tpd=8), _res(1, 1, 0.1, 1, 0, cluster="y", tpd=4)
    assert default_labels([a, b], ["1", "2"]) == ["x tp8", "y tp4"]
    assert default_labels([a, a], ["1", "2"]) == ["1", "2"]
    # the network model: named when it alone differs, left to the cluster's name otherwise
    na = {**a, "replay": {"network": "flow"}}
    assert default_labels([na, {**na, "replay": {"network": "estimate"}}], ["1", "2"]) == [
        "network flow", "network estimate"]
    nb = {**b, "replay": {"network": "recorded"}}
    assert default_labels([na, nb], ["1", "2"]) == ["x tp8", "y tp4"]


@pytest.mark.slow
def test_compare_cli(tmp_path):
    run = CliRunner()
    common = "--model gpt3-1.7b --cluster h100x8 --micro-batch 1 --global-batch 8"
    r = run.invoke(cli, ["replay", *common.split(), "--tp", "2", "--pp", "2", "--dp", "2",
                         "-o", str(tmp_path / "a")], obj={})
    assert r.exit_code == 0, r.output
    r = run.invoke(cli, ["compare", str(tmp_path / "a"), "replay --tp 8 --dp 1", "--common", common,
                         "-o", str(tmp_path / "cmp"), "--json"], obj={})
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    # megatron-core (the default stack on a GPU) runs the distributed optimizer: ZeRO-1 where
    # dp > 1; the labels name every field in which the layouts differ
    assert doc["labels"] == ["tp2 pp2 dp2 zero1", "tp8 pp1 dp1 zero0"]
    it = next(m for m in doc["metrics"] if m["key"] == "iteration_time_s")
    t_a, t_b = doc["results"][0]["iteration_time_s"], doc["results"][1]["iteration_time_s"]
    assert it["winner"] == doc["labels"][0 if t_a < t_b else 1]
    assert it["ratio"] == pytest.approx(max(t_a, t_b) / min(t_a, t_b))
    for f in ("compare.png", "compare.json", "compare.csv"):
        assert (tmp_path / "cmp" / f).exists()
    assert (tmp_path / "cmp" / "compare.png").read_bytes()[:4] == b"\x89PNG"
    r = run.invoke(cli, ["compare", str(tmp_path / "a"), str(tmp_path / "a" / "result.json"),
                         "--labels", "one,two"], obj={})
    assert r.exit_code == 0 and "one" in r.output and "1.000x" in r.output


def test_compare_bad_input(tmp_path):
    run = CliRunner()
    r = run.invoke(cli, ["compare", str(tmp_path / "missing")], obj={})
    assert r.exit_code == 2 and "neither a result directory" in r.output
    r = run.invoke(cli, ["compare", "replay --tp banana"], obj={})
    assert r.exit_code == 2 and "bad replay spec" in r.output
    (tmp_path / "x.json").write_text("{}")
    r = run.invoke(cli, ["compare", str(tmp_path / "x.json")], obj={})
    assert r.exit_code == 2 and "iteration_time_s" in r.output
    r = run.invoke(cli, ["compare", str(tmp_path / "x.json"), "--labels", "a,b"], obj={})
    assert r.exit_code == 2


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.update(tokens_per_s=[1, 2]), "tokens_per_s"),
    (lambda d: d.update(breakdown="x"), "breakdown"),
    (lambda d: d["breakdown"].update(exposed_comm_s=-1), "breakdown.exposed_comm_s"),
    (lambda d: d["breakdown"]["exposed_comm_s"].update(dp={}), "breakdown.exposed_comm_s.dp"),
    (lambda d: d["breakdown"].update(bubble_s=float("nan")), "breakdown.bubble_s"),
])
def test_an_edited_result_names_its_file_and_field(tmp_path, edit, field):
    """A result.json whose metrics are not numbers (edited, or written by something else):
    exit 2 naming the file and the field (an internal TypeError / AttributeError before)."""
    good, bad = _res(1.0, 100.0, 0.4, 30.0, 0.1), _res(1.0, 100.0, 0.4, 30.0, 0.1)
    edit(bad)
    for name, d in (("good", good), ("bad", bad)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(json.dumps(d))
    r = CliRunner().invoke(cli, ["compare", str(tmp_path / "good"), str(tmp_path / "bad")], obj={})
    assert r.exit_code == 2, r.output
    line = r.output.strip().splitlines()[-1]
    assert "bad/result.json" in line and field in line, line


def test_python_compare_of_dicts_checks_them_too():
    from tracesim.api import compare
    from tracesim.errors import InputError

    bad = _res(1.0, 100.0, 0.4, 30.0, 0.1)
    bad["mfu"] = "high"
    with pytest.raises(InputError, match="run 2.*mfu|mfu.*run 2"):
        compare([_res(1.0, 100.0, 0.4, 30.0, 0.1), bad])


def test_a_run_that_does_not_fit_is_never_the_winner():
    """A layout above its GPUs' memory could not run: its values stay, it is not ranked."""
    from tracesim.report.compare import memory_note

    a, b, c = _res(2.0, 100.0, 0.4, 50.0, 0.5), _res(1.6, 125.0, 0.5, 96.0, 0.1), _res(2.5, 80.0, 0.3, 40.0, 0.2)
    b["memory"] = {"total": 96.0, "capacity": 80.0, "fits": False}
    df = compare_table([a, b, c], ["a", "b", "c"]).set_index("key")
    assert df.loc["iteration_time_s", "b"] == 1.6
    assert df.loc["iteration_time_s", "winner"] == "a"  # b is faster but does not fit
    assert df.loc["iteration_time_s", "ratio"] == pytest.approx(2.5 / 2.0)
    assert df.loc["tokens_per_s", "winner"] == "a"
    assert memory_note([a, b, c], ["a", "b", "c"]) == (
        "does not fit in GPU memory, not ranked: b (96.0 GiB per GPU of 80)")
    assert memory_note([a, c], ["a", "c"]) is None
    # only one run left to rank: no winner at all
    two = compare_table([a, b], ["a", "b"]).set_index("key")
    assert pd.isna(two.loc["iteration_time_s", "winner"])


def test_a_spec_keeps_its_own_value_over_common():
    r = CliRunner().invoke(cli, ["compare", "replay --micro-batch 1", "replay --micro-batch 2",
                                 "--common", "--model gpt3-1.7b --cluster h100x8 --dp 8 "
                                 "--micro-batch 4 --global-batch 32", "--json"], obj={})
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [run["parallel"]["micro_batch"] for run in doc["results"]] == [1, 2]
