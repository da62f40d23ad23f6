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
