"""Runs recorded on a CPU (tracesim/trace/cpulanes.py): a compute op's arithmetic is a task
of that op, a gloo collective one task of the collective its call asked for; the critical
path of a recording with gaps between its profiled steps covers the steps only; MFU only
against a peak of the job's dtype.

Real collections: gpt-tiny with two profiled steps and the profiler's calibration cycles
between them (so the steps are not consecutive), a BF16 job, a 2-rank FSDP2 job over gloo."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tracesim.cli import cli
from tracesim.pipeline.run import predict
from tracesim.report.terminal import fit_name, headline, report_text
from tracesim.trace.cpulanes import compute_ops, own_stretches
from tracesim.trace.extract import extract_source
from tracesim.trace.sources import load_source

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
STORED = ROOT / "workloads" / "bundles" / "gpt-tiny"
#: plain training scripts (benchmarks/cpu/byoj_jobs.py runs them all)
JOBS = ROOT / "benchmarks" / "cpu" / "jobs"


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("own") / "tiny"
    args = ["collect", "--workload", "gpt-tiny", "--batch", "2", "--warmup", "1", "--steps", "2",
            "--measure", "2", "--calibration-cycles", "2", "-o", str(out)]
    r = CliRunner().invoke(cli, args, obj={})
    assert r.exit_code == 0, r.output
    return out


def test_gemms_recorded_on_a_cpu_are_tasks_of_their_ops() -> None:
    """``aten::addmm`` / ``aten::mm`` call ``aten::resolve_conj`` (and allocations) inside,
    so they are no leaves: their own time becomes a task of the op, with its FLOPs."""
    src = load_source(STORED)
    g = extract_source(src)
    t = g.tasks
    gemm = t[(t["kind"] == "cpu") & (t["op_class"] == "gemm")]
    assert {"aten::mm", "aten::addmm"} <= set(gemm["name"])
    assert (gemm["flops"] > 0).all()
    ops = src.op_table[src.op_table["rank"] == 0].reset_index(drop=True)
    st = own_stretches(ops)
    comp = compute_ops(ops)
    # every stretch lies inside its op and outside every op recorded inside it
    ts = ops["ts_ns"].to_numpy()
    end = ts + ops["dur_ns"].to_numpy()
    for i, (a, b) in st.items():
        assert ts[i] <= a < b <= end[i]
        kids = np.flatnonzero(ops["parent_id"].to_numpy() == ops["event_id"].iat[i])
        assert ((end[kids] <= a) | (ts[kids] >= b)).all()
        assert ops["event_id"].iat[i] in set(comp["event_id"])
    # the GEMMs' arithmetic is most of their window
    mm = [i for i in st if ops["name"].iat[i] == "aten::mm"]
    own = sum(st[i][1] - st[i][0] for i in mm)
    assert own > 0.8 * sum(end[i] - ts[i] for i in mm)


def test_own_time_tasks_change_no_replayed_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stretch was the next leaf's gap before: the timeline is the same to the ns."""
    with_own = predict(STORED)
    monkeypatch.setattr("tracesim.trace.rankgraph.own_stretches", lambda ops: {})
    without = predict(STORED)
    assert with_own.makespan_ns == without.makespan_ns
    assert [s["predicted_s"] for s in with_own.to_dict()["steps"]] == \
        [s["predicted_s"] for s in without.to_dict()["steps"]]
    # ... and the breakdown counts the GEMMs as compute, not as host time
    assert with_own.breakdown["compute_s"] > 0.8 * with_own.iteration_time_s
    assert without.breakdown["compute_s"] < 0.5 * without.iteration_time_s


def test_critical_path_covers_the_steps_not_the_time_between(two_steps: Path) -> None:
    res = predict(two_steps)
    d = res.to_dict(critical_path=True)
    steps = [s for s in d["steps"] if s["rank"] == 0]
    assert len(steps) == 2
    span = d["critical_path_span_s"]
    assert span == pytest.approx(sum(s["predicted_s"] for s in steps), rel=1e-6)
    # the calibration cycles and timed steps between the two recorded ones are left out (the
    # equality above says what the path is; how much shorter than the whole window it is
    # depends on this machine's load, so only that it is shorter)
    assert span < res.makespan_ns * 1e-9
    assert sum(r["share"] for r in d["critical_path"]) <= 1.0 + 1e-9
    # the GEMMs' own time is on the path under their names (how much of it depends on this
    # machine's noise; the stored bundle's share is checked above)
    assert {"aten::mm", "aten::addmm"} & {r["name"] for r in d["critical_path"]
                                         if r["category"] == "gemm"}, d["critical_path"]
    text = report_text(d)
    assert "critical path over the 2 replayed steps (" in text
    assert "on recorded (1 rank(s), cpu)" in text


def test_long_op_names_keep_both_ends() -> None:
    fwd = "aten::_scaled_dot_product_flash_attention_for_cpu"
    bwd = fwd + "_backward"
    assert fit_name(fwd) != fit_name(bwd)
    assert len(fit_name(bwd)) == 44 and fit_name(bwd).endswith("_backward")
    assert fit_name("aten::mm") == "aten::mm"
    assert "(8 GPU(s), h100)" in headline({"cluster": "h100x8", "gpus": 8, "device": "h100"})




def test_a_bf16_job_on_a_cpu_has_no_mfu_against_the_fp32_peak(tmp_path: Path) -> None:
    """A CPU profile's peak is its fp32 GEMM rate; BF16 GEMMs on a CPU with BF16 units run
    faster than that, so the self-replay gives TFLOP/s and no MFU, and says why."""
    job = JOBS / "bf16_llm.py"
    out = tmp_path / "bf16"
    r = CliRunner().invoke(cli, ["collect", "--steps", "2", "--warmup", "1", "--measure", "3",
                                 "-o", str(out), "--", sys.executable, str(job)], obj={})
    assert r.exit_code == 0, r.output
    own = predict(out).to_dict()
    r2 = CliRunner().invoke(cli, ["replay", str(out), "--host-speed", "2", "--json"], obj={})
    assert r2.exit_code == 0, r2.output
    for d in (own, json.loads(r2.stdout)):
        assert d["tflops_per_gpu"] > 0 and d["mfu"] is None
        assert any("no bf16 peak" in w for w in d["warnings"]), d["warnings"]
    # an fp32 job keeps its MFU against the fp32 peak
    assert predict(STORED).mfu is not None




def test_whole_comm_leaves_folds_what_runs_inside_a_collective() -> None:
    from tracesim.trace.cpulanes import whole_comm_leaves

    # c10d op [0, 100) with two children, a sibling [100, 120), gloo op [130, 200) with one
    ts = np.array([0, 10, 50, 100, 130, 140])
    end = np.array([100, 20, 60, 120, 200, 150])
    comm = np.array([True, False, False, False, True, False])
    leaf = np.array([False, True, True, True, False, True])
    out, inside = whole_comm_leaves(ts, end, comm, leaf, 0)
    assert out.tolist() == [True, False, False, True, True, False]
    assert inside.tolist() == [False, True, True, False, False, True]


def test_fsdp2_collectives_on_gloo_are_replayed_on_a_cluster(tmp_path: Path) -> None:
    """Gloo runs FSDP2's all-gather and reduce-scatter as ops with aten ops inside (views,
    copies, a division): each is one communication task, so a cluster replay times them and
    --dp grows them; the reduce-scatter, which gloo runs as an all-reduce, is replayed as the
    reduce-scatter the program asked for."""
    import shutil

    job = JOBS / "fsdp2.py"
    out = tmp_path / "fsdp2"
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    launcher = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    r = CliRunner().invoke(cli, ["collect", "--steps", "2", "--warmup", "1", "--measure", "2",
                                 "-o", str(out), "--", *launcher, "--standalone",
                                 "--nproc-per-node", "2", str(job)], obj={})
    assert r.exit_code == 0, r.output
    g = extract_source(load_source(out))
    t = g.tasks
    colls = set(t.loc[t["kind"] == "coll", "collective"].astype(str))
    assert colls == {"all_gather", "reduce_scatter"}, colls
    names = set(t.loc[(t["kind"] == "coll") & (t["collective"] == "reduce_scatter"), "name"])
    assert names == {"gloo:all_reduce"}, names
    for extra in ([], ["--dp", "8"]):
        r2 = CliRunner().invoke(cli, ["replay", str(out), "--cluster", "h100x128", *extra,
                                      "--json"], obj={})
        assert r2.exit_code == 0, r2.output
        d = json.loads(r2.stdout)
        assert d["communication"]["operations"]["matched"] >= 8, d["communication"]
        assert d["gpus"] == (8 if extra else 2)


def test_gloo_ops_take_their_calls_collective_only_where_they_pair_up() -> None:
    import pandas as pd

    from tracesim.trace.cpulanes import gloo_collectives

    ops = pd.DataFrame({
        "name": ["c10d::_reduce_scatter_base_", "gloo:all_reduce", "c10d::allreduce_",
                 "gloo:all_reduce", "aten::div_"],
        "cat": ["comm", "comm", "comm", "comm", "cpu_op"],
        "pg": ["0"] * 5, "ts_ns": [0, 10, 20, 30, 35],
        "collective": ["reduce_scatter", "all_reduce", "all_reduce", "all_reduce", ""]})
    assert gloo_collectives(ops) == {1: "reduce_scatter"}
    # one call without its gloo op: the group is left as recorded
    assert gloo_collectives(ops.drop(index=3)) == {}
    # a gloo op that starts before the call it would pair with: left as recorded
    assert gloo_collectives(ops.assign(ts_ns=[12, 10, 20, 30, 35])) == {}
