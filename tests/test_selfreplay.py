"""Self-replay accuracy on the real GPU traces, asserting the bounds of docs/accuracy.md."""

from __future__ import annotations

import pytest

from tracesim.errors import InputError
from tracesim.report.steps import self_replay
from tracesim.trace.sources import load_source

STEP_TRACES = {
    # file: (expected steps, bound on the mean |GPU op start error| in us, None = not asserted)
    "a100_2rank_nccl.json.gz": (3, 20.0),
    "v100_1rank.json.gz": (5, 100.0),
    "sampled_128rank_r0.json.gz": (2, 5000.0),
    "sampled_128rank_r1.json.gz": (2, 5000.0),
    "mi250_minitoy.json.gz": (2, 50.0),
}


@pytest.mark.parametrize("fname", sorted(STEP_TRACES))
def test_every_step_within_5_percent(public_traces, fname):
    n_steps, gpu_bound = STEP_TRACES[fname]
    results = self_replay(load_source(public_traces / fname))
    assert len(results) == n_steps
    for r in results:
        assert r.step.startswith("ProfilerStep#")
        assert abs(r.rel_error) < 0.05, (r.step, r.rel_error)
        if r.gpu_start_mae_us is not None:
            # the GPU timeline follows from launches, stream order and waits, not from
            # recorded start times: check it lines up with the recording
            assert r.gpu_start_mae_us < gpu_bound, (r.step, r.gpu_start_mae_us)


@pytest.mark.parametrize("fname", [
    "a100_alexnet_cuda_sync.json.gz", "a100_event_sync_multi_stream.json.gz",
    "a100_simple_add.trace.json.gz",
])
def test_traces_without_steps_say_why(public_traces, fname):
    with pytest.raises(InputError, match="no ProfilerStep"):
        self_replay(load_source(public_traces / fname))


def test_longer_kernels_slow_a_gpu_bound_step(public_traces):
    """Dependencies carry changes: doubling every kernel slows the GPU-bound V100 steps."""
    import numpy as np

    from tracesim.engine.replay import replay
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
