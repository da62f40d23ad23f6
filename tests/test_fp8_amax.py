"""Current scaling with sequence parallelism reduces each gathered tensor's amax over the TP
group before its cast (Transformer Engine's ``with_amax_reduction``): a 4-byte all-reduce
before the cast of a column-parallel linear's input (forward) and of a row-parallel one's
output gradient (backward), timed on the compute stream at the collective's uncongested
time (tracesim.template.fp8 ``AMAX_SUFFIX``, tracesim.build.overlap ``_op``)."""

from __future__ import annotations

import numpy as np
import pytest

from tracesim.options import ReplayOptions
from tracesim.pipeline.build import build
from tracesim.template.fp8 import AMAX_SUFFIX

BASE = {"model": "llama3-8b", "cluster": "h100x8", "micro_batch": 1, "seq_len": 4096,
        "dtype": "fp8"}


def _built(**kw):
    tp = kw.get("tp", 1)
    return build(None, ReplayOptions.from_mapping({**BASE, "global_batch": 8 // tp, "dp": 8 // tp,
                                                   **kw}), per_op=True).built


def _amax(ops) -> list[str]:
    return [r.name for r in ops if r.name.endswith(AMAX_SUFFIX)]


def test_the_gathered_tensors_of_current_scaling_reduce_their_amax() -> None:
    sec = _built(tp=4).resolved.dense
    assert _amax(sec.fwd) == ["attn.qkv" + AMAX_SUFFIX, "mlp.fc1" + AMAX_SUFFIX]
    assert _amax(sec.bwd) == ["mlp.fc2" + AMAX_SUFFIX, "attn.proj" + AMAX_SUFFIX]
    # each right before its cast, which comes before the GEMM
    names = [r.name for r in sec.fwd]
    i = names.index("attn.qkv" + AMAX_SUFFIX)
    assert names[i + 1] == "attn.qkv.fp8_cast"


@pytest.mark.parametrize("kw", [{"tp": 1}, {"tp": 4, "fp8_recipe": "delayed"},
                                {"tp": 4, "sp": False, "tp_comm_overlap": False}])
def test_none_without_a_gathered_current_scaled_tensor(kw: dict) -> None:
    sec = _built(**kw).resolved.dense
    assert not _amax(sec.fwd) and not _amax(sec.bwd)


def test_timed_on_the_compute_stream_and_the_overlaps_keep_their_chunks() -> None:
    # one task per op (a merged run of compute tasks holds them in its duration)
    graph = _built(tp=4, host_launch=False).graph
    cur, dly = graph.tasks, _built(tp=4, fp8_recipe="delayed").graph.tasks
    names = np.asarray(cur["name"]).astype(str)
    sel = np.char.endswith(names, AMAX_SUFFIX)
    assert sel.sum() == 4 * 32 * 8  # 4 per layer, 32 layers, 8 ranks
    assert set(np.asarray(cur["op_class"])[sel]) == {"comm"}
    assert set(np.asarray(cur["group_kind"])[sel]) == {"tp"}
    lanes = graph.lanes.set_index("lane")["name"]
    assert set(lanes[np.asarray(cur["lane"])[sel]]) == {"compute"}
    dur = np.asarray(cur["dur_ns"])[sel]
    # NCCL's small all-reduce over 4 NVLink ranks (the network model's estimate: 10.2 us)
    assert (dur > 5_000).all() and (dur < 20_000).all()
    assert (np.asarray(cur["chunks"]) > 1).sum() == (np.asarray(dly["chunks"]) > 1).sum()
