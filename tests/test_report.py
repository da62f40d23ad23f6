"""The result directory, timeline, links, critical path and breakdowns of a replay."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from tests.helpers import retarget
from tracesim.cli import cli
from tracesim.report.critical import critical_path, top_contributors
from tracesim.report.links import _binned
from tracesim.report.result import Prediction
from tracesim.report.resultdir import write_result_dir
from tracesim.report.timeline import chrome_events

SMALL = {"model": "gpt3-1.7b", "cluster": "h100x8", "tp": 2, "pp": 2, "dp": 2,
         "micro_batch": 1, "global_batch": 8}
DESIGN_KEYS = ("iteration_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "gpus", "model",
               "parallel", "cluster", "breakdown", "memory_gib_per_gpu")
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def small_run():
    return retarget(SMALL, detail=True)


@pytest.fixture(scope="module")
def result_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("res") / "run"
    args = ["replay", "--model", "gpt3-1.7b", "--cluster", "h100x8", "--tp", "2", "--pp", "2",
            "--dp", "2", "--micro-batch", "1", "--global-batch", "8", "-o", str(out)]
    r = CliRunner().invoke(cli, args, obj={})
    assert r.exit_code == 0, r.output
    return out, r.output


def test_detail_changes_no_number(small_run):
    plain = retarget(SMALL).to_dict()
    assert plain["iteration_time_s"] == small_run.iteration_time_s
    assert plain["breakdown"] == small_run.breakdown
    assert small_run.makespan_ns == round(plain["iteration_time_s"] * 1e9)
    m = Counter(small_run.methods)
    # gpt-tiny's template was recorded on a CPU: every compute op comes from the cost model
    assert set(m) == {"model", "flow"}
    assert m["flow"] == int(np.isin(small_run.graph.tasks["kind"], ["coll", "send", "recv"]).sum())


def test_critical_path_names_single_ops_with_merged_runs(small_run):
    """Without per-op detail, runs of compute ops are one task each (``a..b``); the critical
    path splits their time over the ops they stand for and reads as the per-op replay's."""
    from tracesim.build.units import run_parts

    plain = retarget(SMALL)
    runs = plain.graph.tasks["run"].astype(str)
    merged = runs[runs != ""]
    assert len(merged) and all(len(run_parts(r)) >= 2 for r in merged.unique())
    assert (small_run.graph.tasks["run"].astype(str) == "").all()  # one task per op
    a = plain.to_dict(critical_path=True)["critical_path"]
    b = small_run.to_dict(critical_path=True)["critical_path"]
    assert not any(".." in r["name"] for r in a)
    assert [(r["name"], r["category"], r["count"]) for r in a] == \
        [(r["name"], r["category"], r["count"]) for r in b]
    for x, y in zip(a, b, strict=True):  # a split share is not rounded to whole ns: 1 ns a piece
        assert abs(x["time_s"] - y["time_s"]) <= x["count"] * 1e-9, (x, y)


def test_result_dir_reports_progress_per_file(small_run, tmp_path):
    from tracesim.report.resultdir import FILES, write_result_dir

    calls: list[tuple[str, int, int]] = []
    write_result_dir(tmp_path / "run", small_run, progress=lambda *a: calls.append(a))
    assert {c[0] for c in calls} == {"write"} and {c[2] for c in calls} == {len(FILES)}
    done = [c[1] for c in calls]
    assert done == sorted(done) and done[0] == 0 and done[-1] == len(FILES)
    written = json.loads((tmp_path / "run" / "result.json").read_text())["files"]
    assert len(written) == len(FILES)  # every file of a flow-level replay, each counted once


def test_result_dir_files(result_dir):
    out, text = result_dir
    for f in ("result.json", "timeline.json.gz", "ops.parquet", "links.parquet",
              "breakdown.png", "gantt.png", "links.png", "kineto/rank0.json.gz"):
        assert (out / f).exists(), f
    for f in ("breakdown.png", "gantt.png", "links.png"):
        assert (out / f).read_bytes()[:8] == PNG
    res = json.loads((out / "result.json").read_text())
    for k in DESIGN_KEYS:
        assert k in res, k
    assert set(res["breakdown"]["exposed_comm_s"]) >= {"tp", "dp", "pp", "cp", "ep"}
    assert res["gpus"] == 8 and len(res["per_rank_breakdown"]) == 8
    assert res["critical_path"] and res["critical_path"][0]["time_s"] > 0
    assert "iteration time" in text and "critical path" in text and str(out) in text


def test_ops_parquet(result_dir, small_run):
    out, _ = result_dir
    ops = pd.read_parquet(out / "ops.parquet")
    assert len(ops) == small_run.graph.n_tasks
    assert (ops["end_ns"] >= ops["start_ns"]).all()
    assert (ops["dur_ns"] == ops["end_ns"] - ops["start_ns"]).all()
    assert ops["end_ns"].max() == small_run.makespan_ns
    assert set(ops["method"]) == {"model", "flow"}
    comm = ops[ops["kind"].isin(["coll", "send", "recv"])]
    assert set(comm["class"]) <= {"tp", "pp", "dp"} and set(comm["class"]) >= {"tp", "pp", "dp"}
    assert set(ops["lane"]) >= {"compute", "comm:tp", "comm:dp"}


def test_links_parquet(result_dir, small_run):
    out, _ = result_dir
    links = pd.read_parquet(out / "links.parquet")
    assert not links.empty
    # every byte the network moved is in the table, once
    carried = small_run.links.link_bytes
    per_link = links.groupby("link")["bytes"].sum()
    np.testing.assert_allclose(per_link.to_numpy(), carried[per_link.index.to_numpy()], rtol=1e-9)
    assert links["utilisation"].max() <= 1.0 + 1e-6
    assert links["utilisation"].max() > 0.5  # gradient all-reduces run at line rate
    assert links.groupby("link")["bin"].count().eq(200).all()
    assert (links["t1_ns"] > links["t0_ns"]).all()


def test_binned_closed_form():
    # flow A: 100 bytes over [0, 10); flow B: 50 bytes over [5, 10); instant C: 7 bytes at 8;
    # D: 30 bytes over [15, 25), half of it past the last edge
    s = np.array([0.0, 5.0, 8.0, 15.0])
    e = np.array([10.0, 10.0, 8.0, 25.0])
    b = np.array([100.0, 50.0, 7.0, 30.0])
    edges = np.array([0.0, 5.0, 7.5, 8.0, 10.0, 20.0])
    row, col, part = _binned(s, e, b, edges)
    got = np.zeros((4, 5))
    np.add.at(got, (row, col), part)
    np.testing.assert_allclose(got, [[50, 25, 5, 20, 0], [0, 25, 5, 20, 0], [0, 0, 0, 7, 0],
                                     [0, 0, 0, 0, 15]])


def test_timeline_structure(result_dir, small_run):
    out, _ = result_dir
    with gzip.open(out / "timeline.json.gz", "rt") as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("name") == "process_name"}
    assert procs == {r: f"rank {r}" for r in range(8)}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
    lanes = small_run.graph.lanes
    assert len(threads) == len(lanes)
    assert sorted(threads.values()) == sorted(lanes["name"].astype(str))
    slices = [e for e in ev if e["ph"] == "X"]
    assert len(slices) == small_run.graph.n_tasks
    for e in slices:  # every slice sits on a named thread of its process
        assert (e["pid"], e["tid"]) in threads and e["dur"] >= 0
    comm = [e for e in slices if e["name"].startswith("ncclDevKernel_")]
    kinds = Counter(e["args"]["group_kind"] for e in comm)
    assert set(kinds) == {"tp", "pp", "dp"}
    ar = next(e for e in comm if e["args"]["Collective name"] == "all_reduce")
    assert ar["args"]["msg_bytes"] > 0 and ar["args"]["Group size"] == 2
    assert ar["args"]["Process Group Ranks"].startswith("[")
    sr = [e for e in comm if e["args"]["Collective name"] in ("send", "recv")]
    assert sr and all(e["args"]["peer"] >= 0 for e in sr)
    starts = [e for e in ev if e["ph"] == "s"]
    ends = [e for e in ev if e["ph"] == "f"]
    assert len(starts) == len(ends) == doc["tracesim"]["flow_arrows"] > 0
    assert all(f["bp"] == "e" for f in ends)
    # slices' extent is the simulated iteration (us)
    assert max(e["ts"] + e["dur"] for e in slices) == pytest.approx(small_run.makespan_ns / 1e3, abs=1e-3)


def test_timeline_is_bounded(small_run):
    g, r = small_run.graph, small_run
    ev, info = chrome_events(g, r.start_ns, r.end_ns, ranks=[0, 5], max_flows=10)
    assert {e["pid"] for e in ev} == {0, 5}
    assert sum(e["ph"] == "s" for e in ev) == 10 == info["flow_arrows"]
    assert info["cross_lane_edges"] > 10
    assert info["tasks_shown"] == int(np.isin(g.tasks["rank"], [0, 5]).sum())


def test_critical_path_adds_up(small_run):
    g, r = small_run.graph, small_run
    pieces = critical_path(g, r.start_ns, r.end_ns)
    assert sum(b - a for _, a, b in pieces) == r.makespan_ns
    # pieces tile [0, makespan) back to front without overlap
    for (_, a, _), (_, _, b2) in zip(pieces, pieces[1:], strict=False):
        assert b2 == a
    top = top_contributors(g, r.start_ns, r.end_ns, top=100)
    assert sum(x["time_s"] for x in top) == pytest.approx(r.makespan_ns * 1e-9, rel=1e-9)
    assert top[0]["share"] >= top[-1]["share"]


def test_critical_path_span_named_when_several_steps_replay(small_run, public_traces):
    """A retarget's critical path is one iteration; a recorded run replays all its profiled
    steps, so its shares are of that span, and the report says so."""
    from tracesim.pipeline.run import predict
    from tracesim.report.terminal import report_text

    one = small_run.to_dict(critical_path=True)
    assert one["critical_path_span_s"] == pytest.approx(small_run.makespan_ns * 1e-9)
    assert "  critical path, top contributors:" in report_text(one)
    rec = predict(public_traces / "v100_1rank.json.gz")
    d = rec.to_dict(critical_path=True)
    assert 3 * d["iteration_time_s"] < d["critical_path_span_s"] <= rec.makespan_ns * 1e-9
    assert "critical path over the 5 replayed steps (" in report_text(d)


LAYOUTS = [
    {"tp": 2, "pp": 2, "dp": 2},
    {"tp": 1, "pp": 4, "dp": 2, "schedule": "gpipe"},
    {"tp": 2, "pp": 2, "dp": 2, "vpp": 2, "schedule": "interleaved", "global_batch": 16},
    {"tp": 8, "pp": 1, "dp": 1},
    {"tp": 1, "pp": 1, "dp": 8, "zero": 3},
]


@pytest.mark.slow
@pytest.mark.parametrize("lay", LAYOUTS, ids=lambda d: "-".join(f"{k}{v}" for k, v in d.items()))
def test_breakdown_adds_up(lay, tmp_path):
    opts = {**SMALL, **lay}
    run = retarget(opts, detail=True)
    it = run.iteration_time_s
    for rank, bd in run.per_rank.items():
        total = bd["compute_s"] + sum(bd["exposed_comm_s"].values()) + bd["bubble_s"] + bd["idle_s"]
        assert total == pytest.approx(it, rel=1e-9, abs=1e-12), rank
        assert min(bd["compute_s"], bd["bubble_s"], bd["idle_s"], *bd["exposed_comm_s"].values()) >= 0
    bd = run.breakdown
    assert bd["host_s"] == 0.0  # a built graph has no host tasks
    assert bd["compute_s"] + sum(bd["exposed_comm_s"].values()) + bd["bubble_s"] + bd["idle_s"] == pytest.approx(it, rel=1e-9)
    if lay["pp"] > 1:
        assert any(b["bubble_s"] > 0 for b in run.per_rank.values())


def _parts(bd: dict) -> dict:
    return {"compute": bd["compute_s"], **{k: v for k, v in bd["exposed_comm_s"].items() if v},
            "host": bd["host_s"], "bubble": bd["bubble_s"], "idle": bd["idle_s"]}


def test_breakdown_of_a_recorded_rank_follows_the_waits() -> None:
    """Two GPU streams, a host thread launching them, a collective: the device's idle
    stretches are charged to what its next kernel waited for (ns)."""
    from tests.helpers import graph
    from tracesim.engine.replay import replay
    from tracesim.report.breakdown import rank_breakdowns

    lanes = [(0, "cpu:1", "cpu"), (0, "stream:7", "gpu"), (0, "stream:13", "gpu")]
    g = graph([
        {"rank": 0, "lane": 0, "kind": "cpu", "name": "launch a", "dur_ns": 100},     # 0
        {"rank": 0, "lane": 0, "kind": "cpu", "name": "launch b", "dur_ns": 300},     # 1
        {"rank": 0, "lane": 1, "kind": "gpu", "name": "gemm a", "dur_ns": 50},        # 2
        {"rank": 0, "lane": 2, "kind": "gpu", "name": "gemm b", "dur_ns": 70},        # 3
        {"rank": 0, "lane": 2, "kind": "gpu", "name": "nccl", "dur_ns": 40,
         "op_class": "comm", "group_kind": "tp"},                                      # 4
        {"rank": 0, "lane": 1, "kind": "gpu", "name": "gemm c", "dur_ns": 10},        # 5
    ], [(0, 2), (1, 3), (3, 4), (4, 5)], lanes)
    r = replay(g)
    # host 0-100, gemm a 100-150; launch b 100-400, gemm b 400-470 (device waited for the
    # host 150-400); nccl 470-510, gemm c 510-520 (waited for the collective)
    assert r.start_ns.tolist() == [0, 100, 100, 400, 470, 510]
    (bd,) = rank_breakdowns(g, r.start_ns, r.end_ns, r.makespan_ns).values()
    assert _parts(bd) == pytest.approx({"compute": 130e-9, "tp": 40e-9, "host": 350e-9,
                                        "bubble": 0.0, "idle": 0.0})
    # a window: only [120, 480)
    (win,) = rank_breakdowns(g, r.start_ns, r.end_ns, r.makespan_ns, {0: (120, 480)}).values()
    assert _parts(win) == pytest.approx({"compute": 100e-9, "host": 250e-9, "bubble": 0.0,
                                         "idle": 0.0, "tp": 10e-9})
    total = sum(_parts(win).values())
    assert total == pytest.approx(360e-9)


def test_a_collective_queued_behind_another_on_its_lane_is_exposed_communication() -> None:
    """Two gradient buckets on one communication lane: the second is ready at 150 ns but its
    lane is busy until 400 ns; the optimizer waits for it. The whole wait (150-500 ns) is
    exposed dp communication, none of it idle."""
    from tests.helpers import graph
    from tracesim.engine.replay import replay
    from tracesim.report.breakdown import rank_breakdowns

    lanes = [(0, "stream:7", "gpu"), (0, "stream:20", "gpu")]
    comm = {"op_class": "comm", "group_kind": "dp"}
    g = graph([
        {"rank": 0, "lane": 0, "kind": "gpu", "name": "gemm a", "dur_ns": 100},             # 0
        {"rank": 0, "lane": 1, "kind": "gpu", "name": "bucket 1", "dur_ns": 300,
         "match_key": "b1", **comm},                                                         # 1
        {"rank": 0, "lane": 0, "kind": "gpu", "name": "gemm b", "dur_ns": 50},              # 2
        {"rank": 0, "lane": 1, "kind": "gpu", "name": "bucket 2", "dur_ns": 100,
         "match_key": "b2", **comm},                                                         # 3
        {"rank": 0, "lane": 0, "kind": "gpu", "name": "optimizer", "dur_ns": 10},           # 4
    ], [(0, 1), (0, 2), (2, 3), (1, 4), (3, 4)], lanes)
    r = replay(g)
    assert r.start_ns.tolist() == [0, 100, 100, 400, 500]
    (bd,) = rank_breakdowns(g, r.start_ns, r.end_ns, r.makespan_ns).values()
    assert _parts(bd) == pytest.approx({"compute": 160e-9, "dp": 350e-9, "host": 0.0,
                                        "bubble": 0.0, "idle": 0.0})


def test_breakdown_of_a_cpu_rank_counts_its_ops_as_compute() -> None:
    from tests.helpers import graph
    from tracesim.engine.replay import replay
    from tracesim.report.breakdown import rank_breakdowns

    g = graph([{"rank": 0, "lane": 0, "kind": "cpu", "name": "aten::mm", "dur_ns": 100},
               {"rank": 0, "lane": 0, "kind": "cpu", "name": "aten::add", "dur_ns": 50, "gap_ns": 30}])
    r = replay(g)
    (bd,) = rank_breakdowns(g, r.start_ns, r.end_ns, r.makespan_ns).values()
    # the 30 ns recorded before the add are untraced CPU work: host, not idle
    assert _parts(bd) == pytest.approx({"compute": 150e-9, "host": 30e-9, "bubble": 0.0,
                                        "idle": 0.0})


def test_result_without_a_graph_writes_result_json(tmp_path):
    # a result without its graph (read back from JSON): only result.json and breakdown.png
    rep = Prediction("replay-workload", 1.0, 2, "h100x8", "h100",
                     {"compute_s": 0.5, "exposed_comm_s": {"dp": 0.5}, "host_s": 0.0,
                      "bubble_s": 0.0, "idle_s": 0.0})
    res = write_result_dir(tmp_path / "w", rep)
    assert set(res["files"]) == {"dir", "breakdown.png"}
    assert json.loads((tmp_path / "w" / "result.json").read_text())["iteration_time_s"] == 1.0
