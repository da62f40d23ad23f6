"""A userbuffers overlap runs its GEMM as chunks, each its own cuBLAS call of a fraction of
the tokens (Transformer Engine ``comm_gemm_overlap.cpp``), up to three at once on its
compute streams: each chunk is priced at its own shape by the device's shape model
(tracesim.template.ub_chunks), and the overlap patterns use that price."""

from __future__ import annotations

import pytest

from tracesim.build.overlap import Overlaps, emit
from tracesim.build.units import Unit
from tracesim.hardware.costmodel import op_time_ns
from tracesim.options import ReplayOptions
from tracesim.pipeline.build import build
from tracesim.template.layer import TemplateOp
from tracesim.template.resolve import ROp
from tracesim.template.ub_chunks import chunk_slowdown


def _op_time(op_class: str, flops: float, nbytes: float, op: TemplateOp, units: float = 1.0) -> int:
    shape = tuple(float(x) for x in op.shape.split(","))
    return op_time_ns("h100", op_class, flops, nbytes, "bf16", units, shape=shape)


def _ratio(m: int, n: int, k: int, splits: int) -> float:
    op = TemplateOp(name="g", section="block", phase="fwd", op_class="gemm", flops="0",
                    bytes="0", out="0", shape=f"1,{m},{n},{k}")
    flops, nbytes = 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n)
    return chunk_slowdown(_op_time, op, flops, nbytes, 1.0, _op_time("gemm", flops, nbytes, op),
                          splits)


def test_large_chunks_keep_the_rate_small_ones_lose_it() -> None:
    # Llama 3.1 405B at TP 8: fc1 (4096 tokens x 13312 x 16384) fills the SMs chunk by chunk,
    # qkv (2304 columns) does not: three chunks of 512 tokens are 36 x 3 tiles on 132 SMs
    assert 1.0 <= _ratio(4096, 13312, 16384, 8) < 1.02
    assert _ratio(4096, 2304, 16384, 8) > 1.08
    # smaller chunks cost more
    assert _ratio(2048, 2304, 16384, 8) > _ratio(4096, 2304, 16384, 8)


@pytest.mark.parametrize("splits", [2, 3])
def test_up_to_three_chunks_run_side_by_side(splits: int) -> None:
    # as many streams as chunks: together they are the whole GEMM (launches aside)
    assert _ratio(4096, 2304, 16384, splits) == pytest.approx(1.0, abs=0.02)


@pytest.mark.parametrize("kind", ["qkv", "proj"])
def test_the_patterns_take_the_chunk_price(kind: str) -> None:
    def ops(slow: tuple[tuple[int, float], ...]) -> list[ROp]:
        gemm = ROp(f"{kind}.gemm", "gpu", "gemm", "fwd", flops=1e9, bytes=1e6, dur_ns=8000,
                   ub=kind, chunk_slow=slow)
        comm = ROp(f"{kind}.c", "coll", "comm", "fwd", collective="all_gather" if kind == "qkv"
                   else "reduce_scatter", gkind="tp", msg_bytes=4000,
                   overlap="ag_next" if kind == "qkv" else "rs_prev", ub=kind)
        return [comm, gemm] if kind == "qkv" else [gemm, comm]

    def gemm_ns(slow: tuple[tuple[int, float], ...]) -> int:
        u = Unit()
        emit(u, ops(slow), Overlaps(tp=4, ub=True, config="bridge-fp8"), layer=0, phase="fwd")
        return sum(d for d, k in zip(u.cols["dur_ns"], u.cols["kind"], strict=True) if k == "gpu")

    assert gemm_ns(()) == 8000
    assert gemm_ns(((4, 1.25),)) == 10000
    assert gemm_ns(((8, 2.0),)) == 8000  # another split count: not this pattern's


@pytest.mark.parametrize("ub", [True, False])
def test_a_tp8_layout_prices_its_linears_chunks(ub: bool) -> None:
    opts = ReplayOptions.from_mapping({"model": "gpt3-1.7b", "cluster": "h100x8", "micro_batch": 1,
                                       "seq_len": 2048, "global_batch": 8, "tp": 8,
                                       "stack": "megatron-core", "tp_comm_overlap": ub})
    sec = build(None, opts, ranks=()).built.resolved.dense
    gemms = [r for r in (*sec.fwd, *sec.bwd) if r.op_class == "gemm"]
    priced = {r.ub: dict(r.chunk_slow) for r in gemms if r.chunk_slow}
    if not ub:
        assert not priced
        return
    # every transformer-layer linear, for the ring (8 chunks) and the pipelined split (4)
    assert set(priced) == {"qkv", "proj", "fc1", "fc2"}
    assert all(set(v) == {4, 8} and min(v.values()) > 0.9 for v in priced.values())
    # hidden 2,048: the 256-token chunks of TP 8 lose rate
    assert max(v[8] for v in priced.values()) > 1.05
