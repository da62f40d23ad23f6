"""The reduction kernel that ends a userbuffers ring-exchange reduce-scatter
(tracesim.template.resolve.ub_reduce_ns, tracesim.build.overlap._ring_reduce)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import build, op_time
from tracesim.catalog import load_model


def _reduces(**kw: object) -> tuple[list[str], np.ndarray]:
    res = build(load_model("gpt3-1.7b"), dp=1, sp=True, micro_batch=1, global_batch=1, **kw)
    t = res.graph.tasks
    rank0 = t["rank"].to_numpy() == 0
    names = t["name"].to_numpy()[rank0]
    pick = np.array(["#reduce" in str(n) for n in names], dtype=bool)
    return [str(n) for n in names[pick]], t["dur_ns"].to_numpy()[rank0][pick]


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_fp8_ring_exchange_reduce_scatter_ends_with_its_reduction(tp: int) -> None:
    names, dur = _reduces(tp=tp, tp_comm_overlap=True, dtype="fp8")
    layers = load_model("gpt3-1.7b").layers
    # after the two row-parallel GEMMs of every layer's forward (Megatron-Bridge's FP8
    # configuration: proj and fc2 forward in ring exchange)
    assert sorted(set(names)) == ["attn.proj#reduce", "mlp.fc2#reduce"]
    assert len(names) == 2 * layers
    # the rank's outputs (128 tokens x hidden 2,304 / tp), read from tp BF16 chunks, written
    # once, timed by the op-time function the build was given
    n = 128 * 2304 / tp
    assert set(dur.tolist()) == {op_time("elementwise", n * (tp - 1), n * (tp + 1) * 2.0, None)}


def test_no_reduction_where_the_reduce_scatter_reduces_as_it_goes() -> None:
    # BF16: the pipelined reduce-scatter's userbuffers kernel reduces on its own SMs
    assert _reduces(tp=4, tp_comm_overlap=True, dtype="bf16")[0] == []
    # without the userbuffers overlap: NCCL's reduce-scatter
    assert _reduces(tp=4, tp_comm_overlap=False, dtype="fp8")[0] == []
