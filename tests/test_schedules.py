"""Pipeline schedules: structure, and bubble fractions against Narayanan et al. 2021.

With communication free and uniform stages (no embedding / head / optimizer), bubble time
over ideal compute time must be (p-1)/m for GPipe and 1F1B and (p-1)/(v m) for interleaved
1F1B with v virtual stages, within 1%.
"""

from __future__ import annotations

import numpy as np
import pytest

from tracesim.build.builder import build_graph
from tracesim.build.schedules import SCHEDULES, get_schedule
from tracesim.engine.replay import replay
from tracesim.specs.model import ModelSpec
from tracesim.specs.parallel import ParallelSpec
from tracesim.template.analytic import first_principles_template

from .helpers import op_time

MODEL = ModelSpec(name="t", family="gpt", layers=16, hidden=256, heads=8, vocab=1000, seq_len=128,
                  kv_heads=8, ffn_hidden=1024)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize(("pp", "m", "v"), [(4, 8, 2), (2, 4, 2), (4, 4, 3)])
def test_every_pass_once_backward_after_forward(name: str, pp: int, m: int, v: int) -> None:
    v = v if name == "interleaved" else 1
    for stage in range(pp):
        items = get_schedule(name)(pp, stage, m, v)
        assert sorted(items) == sorted({(k, c, b) for k in "FB" for c in range(v) for b in range(m)})
        pos = {(it.kind, it.chunk, it.mb): i for i, it in enumerate(items)}
        assert all(pos[("F", c, b)] < pos[("B", c, b)] for c in range(v) for b in range(m))


def test_1f1b_keeps_at_most_p_minus_stage_in_flight() -> None:
    for stage in range(4):
        items = get_schedule("1f1b")(4, stage, 8, 1)
        held = peak = 0
        for it in items:
            held += 1 if it.kind == "F" else -1
            peak = max(peak, held)
        assert peak == 4 - stage


@pytest.mark.parametrize(
    ("schedule", "pp", "m", "v"),
    [("gpipe", 4, 8, 1), ("1f1b", 4, 8, 1), ("1f1b", 4, 16, 1), ("1f1b", 2, 6, 1),
     ("interleaved", 4, 8, 2), ("interleaved", 4, 8, 4), ("interleaved", 2, 6, 2),
     ("interleaved", 4, 4, 2)],
)
def test_bubble_fraction_matches_closed_form(schedule: str, pp: int, m: int, v: int) -> None:
    tpl = first_principles_template(MODEL).without(["prologue", "epilogue", "optimizer"])
    par = ParallelSpec(pp=pp, global_batch=m, seq_len=128, schedule=schedule, vpp=v)
    b = build_graph(MODEL, par, tpl, op_time)
    r = replay(b.graph)
    t = b.graph.tasks
    busy = np.bincount(t["rank"], weights=(r.end_ns - r.start_ns) * (t["kind"] == "gpu").to_numpy())
    bubble = (r.makespan_ns - busy) / busy
    expected = (pp - 1) / (v * m)
    assert np.allclose(bubble, expected, rtol=0.01), (bubble, expected)


def test_unknown_schedule_is_input_error() -> None:
    from tracesim.errors import InputError

    with pytest.raises(InputError, match="unknown schedule"):
        get_schedule("zigzag")
