"""The routed experts' grouped GEMMs priced as Transformer Engine's multi-stream grouped GEMM
runs them: four experts at a time (tracesim/template/grouped_gemm.py, docs/moe.md "Grouped
GEMM kernels")."""

from __future__ import annotations

import pytest

from tracesim.hardware.costmodel import op_time_ns
from tracesim.hardware.device import get_device
from tracesim.template.durations import make_op_time
from tracesim.template.grouped_gemm import GROUPED_GEMM_STREAMS, stream_groups_ns
from tracesim.template.layer import LayerTemplate
from tracesim.template.primitives import op


def _batched(device: str):
    dev = get_device(device)

    def t(flops: float, nbytes: float, shape: tuple[float, ...]) -> int:
        return op_time_ns(dev, "gemm", flops, nbytes, "bf16", shape=shape)
    return t


def _flops(shape: tuple[float, ...]) -> float:
    b, m, n, k = shape
    return 2.0 * b * m * n * k


def test_four_experts_at_a_time() -> None:
    """Experts of a few hundred tokens leave SMs idle in each group of four (H100: 16 experts
    of 512 tokens, 1.41x one batched GEMM); experts of thousands of tokens fill them either
    way (within 0.5%); four experts or fewer are one group, as before."""
    t = _batched("h100")
    assert GROUPED_GEMM_STREAMS == 4
    small = (16.0, 512.0, 1536.0, 2048.0)
    ratio = stream_groups_ns(t, _flops(small), 1e8, small) / t(_flops(small), 1e8, small)
    assert 1.3 < ratio < 1.5
    big = (8.0, 16384.0, 1536.0, 2048.0)
    assert stream_groups_ns(t, _flops(big), 1e9, big) == pytest.approx(t(_flops(big), 1e9, big), rel=0.005)
    four = (4.0, 512.0, 1536.0, 2048.0)
    assert stream_groups_ns(t, _flops(four), 1e8, four) == t(_flops(four), 1e8, four)
    # a remainder group: 6 experts = one group of 4 and one of 2
    six = (6.0, 512.0, 1536.0, 2048.0)
    want = t(_flops(six) * 4 / 6, 1e8 * 4 / 6, (4.0, 512.0, 1536.0, 2048.0)) + t(
        _flops(six) * 2 / 6, 1e8 * 2 / 6, (2.0, 512.0, 1536.0, 2048.0))
    assert stream_groups_ns(t, _flops(six), 1e8, six) == want


def test_template_prices_routed_experts_in_groups_and_nothing_else() -> None:
    """make_op_time applies the groups to the routed experts' GEMMs (part ``moe``, a
    column- or row-parallel linear, not the shared experts) and to no other batched GEMM (a
    trace's ``bmm`` is one kernel)."""
    shape = "16, 512, 1536, 2048"
    flops = _flops((16.0, 512.0, 1536.0, 2048.0))
    expert = op("moe.fc1", "block", "gemm", str(flops), "1e8", "1", part="moe", shard="feature",
                tp_style="colwise", shape=shape)
    shared = op("moe.shared.fc1", "block", "gemm", str(flops), "1e8", "1", part="moe",
                shard="feature", tp_style="colwise", shape=shape)
    bmm = op("attn.scores", "block", "gemm", str(flops), "1e8", "1", shape=shape)
    dev = get_device("h100")
    op_time, _ = make_op_time(LayerTemplate((expert, shared, bmm), {}), dev, "bf16")
    plain = op_time_ns(dev, "gemm", flops, 1e8, "bf16", shape=(16.0, 512.0, 1536.0, 2048.0))
    grouped = stream_groups_ns(_batched("h100"), flops, 1e8, (16.0, 512.0, 1536.0, 2048.0))
    assert op_time("gemm", flops, 1e8, expert) == grouped > plain
    assert op_time("gemm", flops, 1e8, shared) == plain
    assert op_time("gemm", flops, 1e8, bmm) == plain
