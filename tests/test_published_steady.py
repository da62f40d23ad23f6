"""A published row with many micro-batches per pipeline, replayed at a sample and
extrapolated through the schedule's steady period (``tracesim/pipeline/steady.py``): equal
to the full replay, and not used where the schedule runs more than once per iteration."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

BRIDGE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "megatron_bridge_25_11.csv"


@pytest.mark.parametrize("opts", [
    {"model": "gpt3-1.7b", "cluster": "h100x8", "pp": 2, "dp": 4, "micro_batch": 1,
     "global_batch": 64, "seq_len": 2048, "vpp": 2},
    {"model": "qwen3-30b-a3b", "cluster": "dgx-b200", "pp": 2, "ep": 4, "dp": 4, "micro_batch": 1,
     "global_batch": 64, "seq_len": 2048, "dtype": "fp8", "fp8_recipe": "mxfp8"},
])
def test_many_micro_batches_extrapolate_to_the_full_replay(opts: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the schedule's warm-up each micro-batch adds the same period: the extrapolation
    of a row with 16 micro-batches per pipeline from one replay of 6 equals its full replay,
    and the first 4 micro-batches of that replay end as a replay of 4 does."""
    from tracesim.options import ReplayOptions
    from tracesim.pipeline.run import predict
    from tracesim.pipeline.steady import steady_iteration_s, steady_span_s

    res = predict(None, ReplayOptions.from_mapping(opts))
    full = res.iteration_time_s
    got, warns = steady_iteration_s(opts, BRIDGE, "row")
    assert "extrapolated from a replay of 6 of its 16" in warns[-1]
    assert got == pytest.approx(full, rel=1e-9)
    # the period is read off the stages' sends: a replay of 4 ends as much earlier
    per = opts["micro_batch"] * opts["dp"]
    r4, r6 = (predict(None, ReplayOptions.from_mapping({**opts, "global_batch": per * k}),
                      breakdown=False) for k in (4, 6))
    span = steady_span_s(r6, 4, 6)
    assert span is not None
    assert r6.iteration_time_s - r4.iteration_time_s == pytest.approx(span, rel=1e-12)
    # the sample replays skip the per-rank breakdown, which changes no time
    bare = predict(None, ReplayOptions.from_mapping(opts), breakdown=False)
    assert bare.iteration_time_s == full and not bare.per_rank
    assert res.per_rank and bare.breakdown["compute_s"] == 0.0 < res.breakdown["compute_s"]
    # where the stages disagree, a replay of 4 gives the line: the same time
    monkeypatch.setattr("tracesim.pipeline.steady.steady_span_s", lambda *a: None)
    two, warns = steady_iteration_s(opts, BRIDGE, "row")
    assert "extrapolated from 4 and 6 of its 16" in warns[-1]
    assert two == pytest.approx(full, rel=1e-9)


def _sends(ends: dict[int, list[int]]) -> SimpleNamespace:
    """A replay result holding only activation sends: rank -> their end times (ns)."""
    ranks = [r for r, e in ends.items() for _ in e]
    tasks = pd.DataFrame({"rank": ranks, "name": pd.Categorical(["pp.send_act"] * len(ranks))})
    return SimpleNamespace(graph=SimpleNamespace(tasks=tasks),
                           end_ns=np.array([t for e in ends.values() for t in e], dtype=np.int64))


def test_the_steady_period_needs_every_stage_to_agree() -> None:
    """Micro-batches 2 .. 3 of 3 (one send each) took 40 ns on both stages: their span;
    where one stage took longer by more than the tolerance (another still catching up), or a
    stage's sends do not divide into micro-batches, there is none."""
    from tracesim.pipeline.steady import steady_span_s

    assert steady_span_s(_sends({0: [10, 20, 60], 8: [15, 30, 70]}), 2, 3) == pytest.approx(40e-9)
    assert steady_span_s(_sends({0: [10, 20, 60], 8: [15, 30, 75]}), 2, 3) is None
    assert steady_span_s(_sends({0: [10, 20, 60], 8: [15, 30, 75]}), 2, 3, tol=0.2) == pytest.approx(45e-9)
    assert steady_span_s(_sends({0: [10, 20, 60, 70], 8: [15, 30, 70, 80]}), 2, 3) is None
    # two chunks: the sends of micro-batch 1 are the 4th of 6
    assert steady_span_s(_sends({0: [1, 2, 3, 4, 5, 9]}), 2, 3) == pytest.approx(5e-9)


def test_a_schedule_run_several_times_per_iteration_is_replayed_whole() -> None:
    """With ``pp_rounds`` each run has its own warm-up and drain: no steady period spans the
    iteration, so the row is replayed whole, whatever its micro-batches."""
    from tracesim.options import ReplayOptions
    from tracesim.pipeline.run import predict
    from tracesim.pipeline.steady import steady_iteration_s

    opts = {"model": "gpt3-1.7b", "cluster": "h100x8", "pp": 2, "dp": 4, "micro_batch": 1,
            "global_batch": 64, "seq_len": 2048, "pp_rounds": 2}
    got, warns = steady_iteration_s(opts, BRIDGE, "row")
    assert not any("extrapolated" in w for w in warns)
    assert got == predict(None, ReplayOptions.from_mapping(opts)).iteration_time_s
