"""Memory contention of tensor-parallel transfers beside GEMMs (tracesim.build.overlap,
"Memory contention"): the overlapped GEMM loses the memory time of the bytes the transfer
moves through its GPU; checked on pytorch/pytorch #172714's GEMM beside an all-gather on 8
H100 (benchmarks/kernels/overlap_contention.py, data/overlap.csv)."""

from __future__ import annotations

import pytest

from benchmarks.kernels.overlap_contention import measured, modelled
from tracesim.build.overlap import Overlaps
from tracesim.options import ReplayOptions
from tracesim.pipeline.build import build


def test_the_memory_time_of_the_bytes_each_way() -> None:
    ov = Overlaps(tp=8, interference=True, sm_count=132, hbm_Bps=3.35e12)
    one_way = 7 / 8 * 1e9  # (tp - 1) / tp of a 1 GB message, sent and as much received
    assert ov.contention_ns("all_gather", 1e9, 1e9) == pytest.approx(2 * one_way / 3.35e12 * 1e9)
    assert ov.contention_ns("all_reduce", 1e9, 1e9) == pytest.approx(4 * one_way / 3.35e12 * 1e9)
    assert ov.contention_ns("reduce_scatter", 1e9, 1e5) == 1e5  # at most the compute it overlaps
    assert Overlaps(tp=8, interference=False, sm_count=132, hbm_Bps=3.35e12).contention_ns(
        "all_gather", 1e9, 1e9) == 0.0
    assert Overlaps(tp=8, interference=True, sm_count=132).contention_ns("all_gather", 1e9, 1e9) == 0.0


@pytest.mark.parametrize(("mode", "tol"), [("overlap-copy-engine", 0.02), ("overlap-sm", 0.06),
                                           ("sequential", 0.06)])
def test_the_h100_microbenchmark(mode: str, tol: float) -> None:
    """Nothing fitted (the contention factor is 1): the overlapped pair within 2% (copy
    engines) and 6% (NCCL's kernels), where the SMs alone leave it 16-18% short; the parts
    one after the other within 6% (the parts the overlap is built from)."""
    assert modelled(mode) == pytest.approx(measured()[mode], rel=tol)
    if mode != "sequential":
        assert modelled(mode, contention=False) < 0.87 * measured()[mode]


def test_tp_and_dp_replays_pay_it_and_a_single_gpu_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    import tracesim.build.overlap as overlap

    def compute(tp: int, dp: int) -> int:
        opts = {"model": "llama3-8b", "cluster": "h100x8", "micro_batch": 1, "seq_len": 4096,
                "tp": tp, "dp": dp, "global_batch": dp}
        return int(build(None, ReplayOptions.from_mapping(opts)).graph.tasks["dur_ns"].sum())

    layouts = ((1, 1), (4, 2), (1, 8))
    with_it = {lay: compute(*lay) for lay in layouts}
    monkeypatch.setattr(overlap, "CONTENTION", 0.0)
    without = {lay: compute(*lay) for lay in layouts}
    assert with_it[(1, 1)] == without[(1, 1)]  # one GPU: nothing moves beside its compute
    assert with_it[(4, 2)] > without[(4, 2)] * 1.01  # TP transfers beside the GEMMs
    # DP 8 at one micro-batch: the whole gradient reduce-scatter beside the last backward and
    # the parameter all-gather beside the first forward
    assert with_it[(1, 8)] > without[(1, 8)] * 1.01
