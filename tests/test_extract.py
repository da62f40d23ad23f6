"""Task-graph invariants on real traces, and dependency kinds on small hand-made traces."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tracesim.engine.replay import replay
from tracesim.graph.io import load_graph, save_graph
from tracesim.trace.extract import extract
from tracesim.trace.kineto import read_kineto

GPU_TRACES = [
    "a100_2rank_nccl.json.gz", "v100_1rank.json.gz", "sampled_128rank_r0.json.gz",
    "a100_alexnet_cuda_sync.json.gz", "a100_event_sync_multi_stream.json.gz",
    "a100_simple_add.trace.json.gz", "mi250_minitoy.json.gz",
]


@pytest.mark.parametrize("fname", GPU_TRACES)
def test_dag_invariants(public_traces, fname, tmp_path):
    ops = read_kineto(public_traces / fname)
    g = extract(ops)
    g.validate()  # ids, lanes, ranks, acyclic
    t = g.tasks
    # every GPU op is a task, on a GPU lane, and every launched one has its launch edge
    n_gpu_ops = ops["cat"].isin(["kernel", "memcpy", "memset"]).sum()
    gpu_tasks = t[t["kind"] == "gpu"]
    assert len(gpu_tasks) == n_gpu_ops
    assert (g.lanes["kind"].to_numpy()[gpu_tasks["lane"]] == "gpu").all()
    launched = set(ops.loc[ops["cat"] == "runtime", "correlation"])
    ev_corr = ops.set_index("event_id")["correlation"]
    has_launcher = ev_corr.reindex(gpu_tasks["src_event"]).isin(launched).to_numpy()
    launch_dst = set(g.edges.loc[g.edges["kind"] == "launch", "dst"])
    assert np.isin(gpu_tasks.index[has_launcher], list(launch_dst)).all()
    # gaps and durations are non-negative, lanes are in time order after replay
    assert (t["dur_ns"] >= 0).all() and (t["gap_ns"] >= 0).all()
    r = replay(g)
    for ln in range(len(g.lanes)):
        idx = np.flatnonzero(t["lane"].to_numpy() == ln)
        assert (r.start_ns[idx][1:] >= r.end_ns[idx][:-1]).all()
    # edges are respected
    s, d = g.edges["src"].to_numpy(), g.edges["dst"].to_numpy()
    assert (r.start_ns[d] >= r.end_ns[s]).all()
    # save / load round trip
    save_graph(g, tmp_path / "w")
    g2 = load_graph(tmp_path / "w")
    assert g2.tasks.shape == g.tasks.shape and g2.edges.shape == g.edges.shape


def _trace(events):
    return {"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, **e} for e in events]}


def _extract(tmp_path, events):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_trace(events)))
    return extract(read_kineto(p))


def test_device_sync_waits_for_gpu(tmp_path):
    ev = [
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 5, "args": {"correlation": 1}},
        {"cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 6, "dur": 1000,
         "args": {"correlation": 1, "stream": 7, "device": 0}},
        {"cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "ts": 10, "dur": 998, "args": {"correlation": 2}},
        {"cat": "cpu_op", "name": "aten::after", "ts": 1010, "dur": 3},
    ]
    g = _extract(tmp_path, ev)
    assert (g.edges["kind"] == "sync").sum() == 1
    r = replay(g)
    t = g.tasks
    after = t.index[t["name"] == "aten::after"][0]
    # the kernel now takes longer: the CPU must wait longer, not replay the recorded wait
    g2 = g.replace(tasks=t.assign(dur_ns=np.where(t["name"] == "k", 5_000_000, t["dur_ns"])))
    r2 = replay(g2)
    assert r2.start_ns[after] - r.start_ns[after] == 5_000_000 - 1_000_000


def test_blocking_copy_is_split(tmp_path):
    ev = [
        {"cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 0, "dur": 500, "args": {"correlation": 3}},
        {"cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 7,
         "ts": 100, "dur": 390, "args": {"correlation": 3, "stream": 7, "device": 0, "bytes": 4096}},
    ]
    g = _extract(tmp_path, ev)
    names = g.tasks["name"].tolist()
    assert "cudaMemcpyAsync (wait)" in names
    assert set(g.edges["kind"]) == {"launch", "sync"}
    r = replay(g)
    assert r.makespan_ns == 500_000


def test_stream_wait_event_from_cuda_sync(public_traces):
    g = extract(read_kineto(public_traces / "a100_event_sync_multi_stream.json.gz"))
    assert (g.edges["kind"] == "event").sum() >= 1


def test_no_steps_is_fine_for_extract(public_traces):
    g = extract(read_kineto(public_traces / "a100_simple_add.trace.json.gz"))
    assert g.n_tasks > 0


def test_cuda_graph_launch(tmp_path):
    """A CUDA graph: one cudaGraphLaunch whose kernels (on two streams) all carry its
    correlation id; they start while the call is still submitting the rest of the graph."""
    def k(name, ts, dur, stream):
        return {"cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                "args": {"correlation": 5, "stream": stream, "device": 0}}

    ev = [
        {"cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 0, "dur": 100, "args": {"correlation": 5}},
        k("g1", 10, 20, 7), k("g2", 31, 20, 7), k("g3", 52, 20, 7), k("h1", 12, 30, 8),
        {"cat": "cpu_op", "name": "aten::after", "ts": 110, "dur": 5},
    ]
    g = _extract(tmp_path, ev)
    t = g.tasks
    names = t["name"].tolist()
    assert "cudaGraphLaunch (submit)" in names
    launch = names.index("cudaGraphLaunch")
    e = g.edges[g.edges["kind"] == "launch"]
    assert (e["src"] == launch).all() and sorted(t["name"][e["dst"]]) == ["g1", "g2", "g3", "h1"]
    r = replay(g)
    start = dict(zip(names, r.start_ns.tolist(), strict=True))
    # the graph's kernels start as recorded, not after the 100 us call
    assert (start["g1"], start["g2"], start["g3"]) == (10_000, 31_000, 52_000)
    assert 10_000 <= start["h1"] <= 12_000
    assert start["aten::after"] == 110_000 and r.fallbacks == {}
    # launching a graph does not wait for it: longer graph kernels do not hold the CPU back
    assert not (g.edges["kind"] == "sync").any()
    slow = g.replace(tasks=t.assign(dur_ns=np.where(t["name"] == "g3", 500_000, t["dur_ns"])))
    assert replay(slow).start_ns[names.index("aten::after")] == 110_000
    # gpu tasks carry their recorded start (the replay's fallback order, matching)
    assert t.loc[t["name"] == "g2", "rec_start"].iat[0] == 31_000


def test_stream_sync_of_unknown_stream_waits_only_for_work_that_ended(tmp_path):
    """Older traces have no cuda_sync records: a cudaStreamSynchronize that returned while
    another stream was still busy did not wait for that stream."""
    ev = [
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 5, "args": {"correlation": 1}},
        {"cat": "kernel", "name": "long", "pid": 0, "tid": 7, "ts": 6, "dur": 1000,
         "args": {"correlation": 1, "stream": 7, "device": 0}},
        {"cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 10, "dur": 5, "args": {"correlation": 2}},
        {"cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 14,
         "ts": 16, "dur": 4, "args": {"correlation": 2, "stream": 14, "device": 0, "bytes": 64}},
        {"cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 16, "dur": 6, "args": {"correlation": 3}},
        {"cat": "cpu_op", "name": "aten::after", "ts": 30, "dur": 3},
    ]
    g = _extract(tmp_path, ev)
    t = g.tasks
    sync = g.edges[g.edges["kind"] == "sync"]
    assert t["name"][sync["src"]].tolist() == ["Memcpy DtoH (Device -> Pageable)"]
    after = t.index[t["name"] == "aten::after"][0]
    base = replay(g).start_ns[after]
    assert base < 40_000
    # the long kernel can grow without holding the CPU back
    slow = g.replace(tasks=t.assign(dur_ns=np.where(t["name"] == "long", 5_000_000, t["dur_ns"])))
    assert replay(slow).start_ns[after] == base


def test_a_blocking_copy_is_not_a_full_launch_queue(tmp_path):
    """A long copy call that returned right after an op on another stream ended was waiting
    for its own copy (which ran before that op ended), not for a launch-queue slot."""
    ev = [
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 5, "args": {"correlation": 1}},
        {"cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 6, "dur": 484,
         "args": {"correlation": 1, "stream": 7, "device": 0}},
        {"cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 10, "dur": 485, "args": {"correlation": 2}},
        {"cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 14,
         "ts": 300, "dur": 10, "args": {"correlation": 2, "stream": 14, "device": 0, "bytes": 64}},
    ]
    g = _extract(tmp_path, ev)
    names = g.tasks["name"].tolist()
    assert "cudaMemcpyAsync (wait)" in names and "cudaMemcpyAsync (queue full)" not in names
    g.validate()


def test_extracted_graphs_fall_back_to_the_recorded_order(tmp_path):
    ev = [{"cat": "cpu_op", "name": "aten::relu", "ts": 0, "dur": 5}]
    assert _extract(tmp_path, ev).meta["on_stall"] == "fallback"


@pytest.mark.parametrize("name", ["hta-v100-2rank-r1-cudagraph/test.json.gz",
                                  "tracelens-mi300x-inference-hipgraph/vllm_prefilldecode_piecewise.graph_execution.json.gz"])
def test_graph_launch_traces_are_dags(name):
    """CUDA / HIP graph traces: every graph kernel has the launch edge of its graph launch,
    and the dependencies form a DAG (one of them deadlocked before)."""
    from pathlib import Path

    ops = read_kineto(Path(__file__).resolve().parent / "data" / "traces" / name)
    g = extract(ops)
    g.validate()
    t = g.tasks
    gl = np.flatnonzero(t["name"].str.endswith("GraphLaunch").to_numpy())
    assert len(gl) > 0
    e = g.edges[(g.edges["kind"] == "launch") & g.edges["src"].isin(gl)]
    assert len(e) >= 5 * len(gl)  # many kernels per launch


def test_an_extracted_workload_predicts_what_its_bundle_predicts(tmp_path):
    """``extract`` takes the profiler's measured cost out as a replay of the bundle does, so
    the workload and its bundle give one prediction (and one reference step)."""
    from pathlib import Path

    from tracesim.api import extract as api_extract
    from tracesim.api import replay as api_replay

    bundle = Path(__file__).resolve().parents[1] / "workloads" / "bundles" / "gpt-tiny"
    out = tmp_path / "w"
    api_extract(bundle, out)
    assert load_graph(out).meta["profiler_overhead_removed_ns"]["per_op"] > 0
    a = api_replay(bundle, device="h100")
    b = api_replay(out, device="h100")
    assert b.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
    assert b.details["recorded"] == a.details["recorded"]
