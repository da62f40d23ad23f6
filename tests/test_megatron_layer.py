"""The recorded Megatron-LM layer against the replay's ops (benchmarks/kernels/megatron_layer.py,
docs/devices.md "Kernel-level accuracy"): every op of the layer is found in the trace, the
replay times the same ops, and the unfused attention's batched GEMMs go through the GEMM
shape model with their own backward shapes."""

from __future__ import annotations

import pytest

from benchmarks.kernels import megatron_layer as ml
from tracesim.hardware.costmodel import op_time_ns
from tracesim.hardware.device import get_device
from tracesim.template.durations import backward_gemm_ns


def test_every_op_of_the_layer_is_in_the_trace_and_the_replay() -> None:
    rows = ml.table()
    assert [r["op"] for r in rows[:-1]] == [op for op, _, _, _ in ml.OPS]
    for r in rows:
        assert r["trace_us"] > 0 and r["replay_us"] > 0, r
    # the trace's layer: 40 layers of one forward, the GEMMs at most ~85% of A100's FP16 peak
    qkv = next(r for r in rows if r["op"] == "attn.qkv")
    assert 2 * 8192 * 1536 * 4096 / (qkv["trace_us"] * 1e-6) < 0.85 * 312e12


def test_unfused_attention_scores_and_context_are_batched_gemms() -> None:
    tr = ml.trace_us()
    rp = ml.replay_us()
    dev = get_device("a100")
    # scores: 32 (micro-batch 4 x 8 local heads) products of 2048 x 64 by 64 x 2048, as the
    # GEMM shape model prices them (the fused-attention curve would not see the tiny k)
    flops = 2 * 32 * 2048 * 2048 * 64
    gemm = op_time_ns(dev, "gemm", flops, 0.0, "fp16", shape=(32, 2048, 2048, 64)) / 1e3
    assert rp["attn.scores"] >= gemm * 0.99
    assert rp["attn.scores"] == pytest.approx(tr["attn.scores"], rel=0.3)


def test_a_gemm_backward_is_its_data_and_weight_gradients() -> None:
    calls: list[tuple[float, float, tuple[float, ...]]] = []

    def price(f: float, b: float, sh: tuple[float, ...]) -> int:
        calls.append((f, b, sh))
        return 100

    assert backward_gemm_ns(price, 8.0, 4.0, (2.0, 10.0, 20.0, 30.0)) == 200
    # dX = dY W^T: (m, k, n); dW = X^T dY: (k, n, m); half the FLOPs and bytes each
    assert calls == [(4.0, 2.0, (2.0, 10.0, 30.0, 20.0)), (4.0, 2.0, (2.0, 30.0, 20.0, 10.0))]
