"""Self-replay accuracy on the real GPU traces: every step of every trace with ProfilerStep
markers within 2% (docs/accuracy.md), and the traces without steps replay without error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracesim.engine.replay import replay
from tracesim.errors import InputError
from tracesim.report.steps import self_replay
from tracesim.trace.extract import extract_source
from tracesim.trace.sources import load_source

#: traces copied into the repository (tests/data/traces/<folder>/SOURCE.txt: origin, license)
DATA = Path(__file__).resolve().parent / "data" / "traces"
BOUND = 0.02

PUBLIC_STEP_TRACES = {
    # path under ../shared/traces/public: (expected steps, bound on the mean |GPU op start
    # error| in us, None = not asserted)
    "a100_2rank_nccl.json.gz": (3, 20.0),
    "v100_1rank.json.gz": (5, 100.0),
    "sampled_128rank_r0.json.gz": (2, 5000.0),
    "sampled_128rank_r1.json.gz": (2, 5000.0),
    "mi250_minitoy.json.gz": (2, 50.0),
    # Kineto's first format (Operator / Runtime / Kernel / Memcpy / Memset), pageable copies
    "kineto-tb-resnet50-v100-nw0/worker0.1623143089861.pt.trace.json.gz": (6, 50.0),
    "tracelens-h100-timesformer-infer/facebook_timesformer-base-finetuned-k400__1016002.json.gz":
        (1, None),
    "tracelens-mi300x-resnet-actckpt/resnet_act_checkpoint.json.gz": (3, 100.0),
    "tracelens-mi300x-xdit-flux-hipgraph/profile_trace_rank_0.json.gz": (1, 20.0),
    # one worker of an 8-rank DLRM job alone, then all eight replayed jointly (a folder)
    "param-dlrm-8xv100/worker0_step_12.1694128201545.pt.trace.json.gz": (1, 50.0),
    "param-dlrm-8xv100": (8, 500.0),
}
DATA_STEP_TRACES = {
    # CUDA graphs, all-to-all over SendRecv kernels, 5 streams, old stream syncs
    "hta-a100-16rank-r0-cudagraph-alltoall/rank0.json.gz": (5, 2000.0),
    # rank 3 of a DDP job: 3 streams, stream syncs without cuda_sync records, fbgemm kernels
    "hta-a100-8rank-r3-ddp/control.json.gz": (6, 2000.0),
    # CUDA graphs of 315-429 kernels each, GPU-bound behind a full launch queue
    "hta-v100-2rank-r1-cudagraph/test.json.gz": (6, 2000.0),
    # 2020 small all-reduces overlapping compute
    "hta-v100-2rank-r1-many-allreduce/df_index_resolver.json.gz": (5, 100.0),
}
NO_STEP_TRACES = [
    "tracelens-b200-tp8-r0-eager/eager_trace.json.gz",
    "tracelens-mi300x-inference-hipgraph/sglang_Qwen3-8B_decode.json.gz",
    "tracelens-mi300x-inference-hipgraph/vllm_decode_full.graph_execution.json.gz",
    "tracelens-mi300x-inference-hipgraph/"
    "vllm_decode_full.graph_capture_rank_0.1773709742341309550.pt.trace.json.gz",
    "tracelens-mi300x-inference-hipgraph/vllm_prefilldecode_piecewise.graph_execution.json.gz",
]


def _check_steps(path: Path, n_steps: int, gpu_bound: float | None) -> None:
    results = self_replay(load_source(path))
    assert len(results) == n_steps
    for r in results:
        assert r.step.startswith("ProfilerStep#")
        assert abs(r.rel_error) < BOUND, (r.rank, r.step, r.rel_error)
        if gpu_bound is not None and r.gpu_start_mae_us is not None:
            # the GPU timeline follows from launches, stream order and waits, not from
            # recorded start times: check it lines up with the recording
            assert r.gpu_start_mae_us < gpu_bound, (r.rank, r.step, r.gpu_start_mae_us)


@pytest.mark.parametrize("name", sorted(PUBLIC_STEP_TRACES))
def test_every_step_of_the_public_traces(public_traces, name):
    _check_steps(public_traces / name, *PUBLIC_STEP_TRACES[name])


@pytest.mark.parametrize("name", sorted(DATA_STEP_TRACES))
def test_every_step_of_the_added_traces(name):
    _check_steps(DATA / name, *DATA_STEP_TRACES[name])


@pytest.mark.parametrize("name", NO_STEP_TRACES)
def test_traces_without_steps_replay_their_whole_window(name):
    """Inference traces (CUDA / HIP graphs, vLLM, SGLang) mark no ProfilerStep#N: their whole
    window, first to last host event, is one step (ProfilerStep#0), replayed like any other."""
    src = load_source(DATA / name)
    assert src.meta == {"whole_trace_step": True}
    g = extract_source(src)
    g.validate()
    r = replay(g)
    assert r.makespan_ns > 0 and (r.end_ns >= r.start_ns).all()
    (step,) = self_replay(src)
    assert step.step == "ProfilerStep#0" and abs(step.rel_error) < BOUND
    assert step.whole_trace and step.to_dict()["whole_trace"] is True


@pytest.mark.parametrize("fname", [
    "a100_alexnet_cuda_sync.json.gz", "a100_event_sync_multi_stream.json.gz",
    "a100_simple_add.trace.json.gz",
])
def test_public_traces_without_steps_replay_as_one_step(public_traces, fname, tmp_path):
    """The window is the host's: the step's measured time is its first host event to its
    last; an op table of the same trace (no whole-trace step added) still says why it has
    none, and a trace with steps gets no extra one."""
    src = load_source(public_traces / fname)
    (step,) = self_replay(src)
    host = src.op_table[~src.op_table["cat"].isin(["kernel", "memcpy", "memset", "sync",
                                                   "gpu_annotation"])]
    host = host[host["name"] != "ProfilerStep#0"]
    span = (host["ts_ns"] + host["dur_ns"]).max() - host["ts_ns"].min()
    assert step.measured_s == pytest.approx(span / 1e9)
    assert abs(step.rel_error) < BOUND
    from tracesim.trace.kineto import load_trace_json, op_table_from_events
    from tracesim.trace.schema import write_op_table

    table = op_table_from_events(load_trace_json(public_traces / fname), fname)
    write_op_table(table, tmp_path / "ops.parquet")
    with pytest.raises(InputError, match="no ProfilerStep"):
        self_replay(load_source(tmp_path / "ops.parquet"))
    with_steps = load_source(public_traces / "v100_1rank.json.gz")
    assert with_steps.meta == {} and "ProfilerStep#0" not in set(with_steps.op_table["name"])
    assert all(r.whole_trace is None for r in self_replay(with_steps))


def test_a_whole_window_replay_says_so(public_traces):
    from tracesim.options import ReplayOptions
    from tracesim.pipeline.run import predict

    trace = public_traces / "a100_event_sync_multi_stream.json.gz"
    for res in (predict(trace), predict(trace, ReplayOptions(device="h100"))):
        assert any("no ProfilerStep#N" in w for w in res.warnings)


def test_a_trace_that_deadlocked_replays_without_falling_back():
    """The extractor's dependencies of a real trace are consistent with the recording, so
    nothing falls back to the recorded order (this trace's stream syncs of unknown stream,
    and a blocking copy taken for a full launch queue, once made a cycle)."""
    g = extract_source(load_source(DATA / "hta-v100-2rank-r1-cudagraph/test.json.gz"))
    assert g.meta["on_stall"] == "fallback"
    assert dict(replay(g).fallbacks) == {}
    assert dict(replay(g, on_stall="error").fallbacks) == {}


def test_longer_kernels_slow_a_gpu_bound_step(public_traces):
    """Dependencies carry changes: doubling every kernel slows the GPU-bound V100 steps."""
    import numpy as np

    from tracesim.report.steps import step_times
    from tracesim.trace.extract import extract

    src = load_source(public_traces / "v100_1rank.json.gz")
    g = extract(src.op_table)
    base = {s[1]: s[4] for s in step_times(g, replay(g))}
    t = g.tasks
    slow = g.replace(tasks=t.assign(dur_ns=np.where(t["kind"] == "gpu", 2 * t["dur_ns"], t["dur_ns"])))
    after = {s[1]: s[4] for s in step_times(slow, replay(slow))}
    assert after["ProfilerStep#104"] > 1.3 * base["ProfilerStep#104"]


def test_unprofiled_summary_takes_the_median_of_steady_steps() -> None:
    from tracesim.report.steps import StepResult, unprofiled_summary

    def step(rank: int, name: str, pred: float, steady: bool = True) -> StepResult:
        return StepResult("b", rank, name, 0.05, 0.05, 0.0, steady,
                          measured_unprofiled_s=0.040, predicted_unprofiled_s=pred,
                          rel_error_unprofiled=pred / 0.040 - 1)

    rows = [step(0, "#1", 0.038), step(0, "#2", 0.044), step(0, "#3", 0.041),
            step(0, "#4", 0.090, steady=False), step(1, "#1", 0.036)]
    got = {u.rank: u for u in unprofiled_summary(rows)}
    assert got[0].steps == 3 and got[0].predicted_s == pytest.approx(0.041)
    assert got[0].rel_error == pytest.approx(0.041 / 0.040 - 1)
    assert got[1].steps == 1 and got[1].rel_error == pytest.approx(-0.1)
    # a trace without unprofiled predictions has no summary
    assert unprofiled_summary([StepResult("t", 0, "#1", 0.05, 0.05, 0.0, True)]) == []


def test_the_headline_compares_the_same_steady_steps():
    """An even count of uneven recorded steps (82-166 ms): the reported measured step is the
    median of the steady steps whose predictions make ``iteration_time_s``, not the median
    of every step (which would put the middle pair's mean beside one predicted step)."""
    import numpy as np

    from tracesim import api

    res = api.replay(DATA / "hta-v100-2rank-r1-cudagraph/test.json.gz").to_dict()
    meas = [s["measured_s"] for s in res["steps"]]
    med = float(np.median(meas))
    steady = [s for s in res["steps"] if abs(s["measured_s"] - med) <= 0.2 * med]
    assert len(steady) == 3 < len(meas) == 6
    assert res["measured_step_time_s"] == pytest.approx(np.median([s["measured_s"] for s in steady]))
    assert res["measured_step_time_s"] == res["measured_profiled_step_s"]
    assert res["iteration_time_s"] == pytest.approx(np.median([s["predicted_s"] for s in steady]))
    assert abs(res["iteration_time_s"] / res["measured_step_time_s"] - 1) < BOUND


def test_a_jobs_breakdown_sums_to_its_iteration(public_traces):
    """Eight ranks whose recorded steps differ (12-20 ms): the mean breakdown is each rank's
    share of its own step, in the iteration's time, so its parts sum to the iteration."""
    from tracesim import api

    res = api.replay(public_traces / "param-dlrm-8xv100").to_dict()
    steps = {s["rank"]: s["measured_s"] for s in res["steps"]}
    assert len(steps) == 8 and max(steps.values()) > 1.3 * min(steps.values())
    bd = res["breakdown"]
    parts = (bd["compute_s"] + sum(bd["exposed_comm_s"].values()) + bd["host_s"]
             + bd["bubble_s"] + bd["idle_s"])
    assert parts == pytest.approx(res["iteration_time_s"], rel=1e-9)


def test_mfu_is_against_the_peak_of_the_dtype_the_flops_ran_in(public_traces):
    """A trace without a bundle's model dtype: the FLOPs' own dtype (BF16 here) names the peak,
    the same in a self-replay and in a replay on a cluster of the recorded GPU."""
    from tracesim.options import ReplayOptions
    from tracesim.pipeline.run import predict

    trace = public_traces / "tracelens-mi300x-resnet-actckpt" / "resnet_act_checkpoint.json.gz"
    own = predict(trace)
    on_cluster = predict(trace, ReplayOptions(cluster="mi300x-platform"))
    assert own.details["mfu_dtype"] == "bf16"
    assert own.mfu == pytest.approx(own.tflops_per_gpu / 1307.4)  # MI300X dense BF16
    assert on_cluster.mfu == pytest.approx(on_cluster.tflops_per_gpu / 1307.4)


def test_the_first_kineto_format_links_kernels_to_their_launches(public_traces):
    """PyTorch 1.8-1.9 traces name their launch calls ``Runtime`` and their copies
    ``Memcpy``: read, they link every kernel to its launch, so a device retarget scales the
    kernels instead of keeping their recorded gaps."""
    from tracesim.options import ReplayOptions
    from tracesim.pipeline.run import predict

    path = public_traces / "kineto-tb-resnet50-v100-nw0"
    ops = load_source(path).op_table
    assert {"runtime", "memcpy", "memset", "kernel", "cpu_op"} <= set(ops["cat"])
    res = predict(path, ReplayOptions.from_mapping({"device": "h100"}, "test", "options"))
    shares = res.details["scaling"]["gpu_time_shares"]
    assert shares.get("scaled", 0.0) > 0.8, shares
    assert not [w for w in res.warnings if "does not link" in w]
