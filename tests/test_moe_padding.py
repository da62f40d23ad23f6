"""Quantization padding of the experts' tokens (tracesim.template.moe_padding): the expected
padded count of a binomial expert load, where Megatron-Core pads (router or experts), and
what the template's MoE ops carry."""

from __future__ import annotations

import math

import pytest

from tracesim.catalog import load_model
from tracesim.hardware.device import get_device
from tracesim.specs.parallel import ParallelSpec
from tracesim.template.analytic import first_principles_template
from tracesim.template.durations import make_op_time
from tracesim.template.moe_padding import moe_padding, padded_mean
from tracesim.template.resolve import model_flops_per_iteration, resolve_template


def _exact(n: int, p: float, align: int) -> float:
    """E[ceil(X / align) * align], X ~ Binomial(n, p), summed exactly."""
    log = [math.lgamma(n + 1) - math.lgamma(x + 1) - math.lgamma(n - x + 1) + x * math.log(p)
           + (n - x) * math.log1p(-p) for x in range(n + 1)]
    return sum(math.exp(v) * math.ceil(x / align) * align for x, v in enumerate(log))


@pytest.mark.parametrize(("n", "p", "align"), [(400, 0.25, 16), (2000, 0.05, 32), (600, 0.3, 128),
                                               (300, 0.5, 1)])
def test_padded_mean_is_the_binomial_expectation(n: int, p: float, align: int) -> None:
    assert padded_mean(n, p, align) == pytest.approx(_exact(n, p, align), rel=0.01)


SUPER = "nemotron-3-super"


def _par(**kw: object) -> ParallelSpec:
    base = dict(tp=2, sp=True, dp=32, ep=64, etp=1, micro_batch=1, global_batch=512, seq_len=8192,
                dtype="fp8", fp8_recipe="nvfp4")
    base.update(kw)
    return ParallelSpec(**base)  # type: ignore[arg-type]


def test_factors_where_megatron_pads() -> None:
    m = load_model(SUPER)
    # the router pads each rank's 4,096 tokens x 22 / 512 = 176 per expert (sd 13) to 256
    f, f_a2a = moe_padding(m, _par(moe_router_padding=True))
    assert f == f_a2a == pytest.approx(256 / 176, rel=0.005)
    f8, _ = moe_padding(m, _par(moe_router_padding=True, fp8_recipe="mxfp8"))
    assert f8 == pytest.approx(1 + 15.5 / 176, rel=0.01)  # residues spread over 32
    # the experts pad what they receive from the 64 sources: 11,264 per expert; not dispatched
    g, g_a2a = moe_padding(m, _par())
    assert g_a2a == 1.0 and g == pytest.approx(1 + 63.5 / (64 * 176), rel=0.002)
    # nothing to pad: BF16, or a fixed capacity per expert
    assert moe_padding(m, _par(dtype="bf16", fp8_recipe="", moe_router_padding=True)) == (1.0, 1.0)
    assert moe_padding(m, _par(moe_capacity_factor=1.0, moe_router_padding=True)) == (1.0, 1.0)
    assert moe_padding(load_model("llama3-8b"), _par(ep=1, etp=0)) == (1.0, 1.0)


def test_router_padding_is_dispatched_and_run_but_no_model_flop() -> None:
    m = load_model("qwen3-30b-a3b")
    tpl = first_principles_template(m)
    op_t, _ = make_op_time(tpl, get_device("b200"), "fp8")

    def ops(**kw: object) -> tuple[dict, float]:
        par = ParallelSpec(dp=8, ep=8, micro_batch=1, global_batch=8, seq_len=2048, dtype="fp8",
                           fp8_recipe="mxfp8", **kw)  # type: ignore[arg-type]
        res = resolve_template(tpl, m, par, op_t)
        assert res.moe is not None
        return {(r.name, r.phase): r for r in res.moe.fwd}, model_flops_per_iteration(res, m, par)

    plain, flops0 = ops()
    padded, flops1 = ops(moe_router_padding=True)
    f, _ = moe_padding(m, ParallelSpec(dp=8, ep=8, micro_batch=1, global_batch=8, seq_len=2048,
                                       dtype="fp8", fp8_recipe="mxfp8", moe_router_padding=True))
    g, _ = moe_padding(m, ParallelSpec(dp=8, ep=8, micro_batch=1, global_batch=8, seq_len=2048,
                                       dtype="fp8", fp8_recipe="mxfp8"))
    assert f > g > 1.0
    # 2,048 tokens x 8 / 128 = 128 per expert and rank: a multiple of 32 on average only
    assert padded[("moe.fc1", "fwd")].flops == pytest.approx(plain[("moe.fc1", "fwd")].flops * f / g)
    assert padded[("moe.dispatch", "fwd")].msg_bytes == pytest.approx(
        plain[("moe.dispatch", "fwd")].msg_bytes * f)
    assert flops1 == flops0


def test_the_memory_estimate_holds_the_padded_tokens() -> None:
    """The experts' saved activations grow with their padded tokens."""
    from tracesim.report.memory import layer_activation_bytes

    m = load_model(SUPER)
    moe_layer = next(i for i in range(m.layers) if m.moe_layer(i))
    plain = layer_activation_bytes(m, _par(), moe_layer, flash=True)
    padded = layer_activation_bytes(m, _par(moe_router_padding=True), moe_layer, flash=True)
    assert padded > plain * 1.05


def test_router_padding_without_quantized_experts_is_reported_ignored() -> None:
    from click.testing import CliRunner

    from tracesim.cli import cli

    args = ["replay", "--model", "qwen3-30b-a3b", "--cluster", "h100x8", "--ep", "8", "--dp", "8",
            "--global-batch", "8", "--seq-len", "2048", "--moe-router-padding"]
    bf16 = CliRunner().invoke(cli, args, obj={})
    fp8 = CliRunner().invoke(cli, [*args, "--dtype", "fp8"], obj={})
    assert bf16.exit_code == fp8.exit_code == 0
    assert "--moe-router-padding ignored" in bf16.output
    assert "--moe-router-padding ignored" not in fp8.output
