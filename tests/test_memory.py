"""Memory estimate against Korthikanti et al. 2022 and the ZeRO paper's model-state sizes."""

from __future__ import annotations

import pytest

from tracesim.report.memory import GiB, estimate_memory, in_flight, layer_activation_bytes
from tracesim.specs.model import ModelSpec
from tracesim.specs.parallel import ParallelSpec

# GPT-3 175B dimensions (Korthikanti et al. use it for their Table 2 examples)
G = ModelSpec(name="g", family="gpt", layers=96, hidden=12288, heads=96, vocab=51200, seq_len=2048,
              kv_heads=96, ffn_hidden=4 * 12288, dtype="bf16")


def sbh(par: ParallelSpec) -> float:
    return par.seq_len * par.micro_batch * G.hidden


@pytest.mark.parametrize(
    ("kw", "coeff"),
    [
        ({"tp": 1}, lambda a, s, h, t: 34 + 5 * a * s / h),
        ({"tp": 8}, lambda a, s, h, t: 10 + 24 / t + 5 * a * s / (h * t)),
        ({"tp": 8, "sp": True}, lambda a, s, h, t: 34 / t + 5 * a * s / (h * t)),
        ({"tp": 8, "sp": True, "recompute": "selective"}, lambda a, s, h, t: 34 / t),
        ({"tp": 8, "recompute": "selective"}, lambda a, s, h, t: 10 + 24 / t),
        ({"tp": 8, "sp": True, "recompute": "full"}, lambda a, s, h, t: 2 / t),
        ({"tp": 8, "recompute": "full"}, lambda a, s, h, t: 2),
    ],
)
def test_activation_bytes_per_layer_match_korthikanti(kw: dict, coeff) -> None:
    par = ParallelSpec(global_batch=1, seq_len=2048, **kw)
    got = layer_activation_bytes(G, par, 0, flash=False)
    want = sbh(par) * coeff(G.heads, par.seq_len, G.hidden, par.tp)
    assert got == pytest.approx(want, rel=1e-9)
    # flash attention stores no score matrix: the 5as/h term goes
    if "recompute" not in kw:
        assert layer_activation_bytes(G, par, 0, flash=True) < got


def test_model_states_sixteen_bytes_per_parameter_and_zero_sharding() -> None:
    p = 1e9
    base = dict(global_batch=8, seq_len=2048, dp=8)
    m0 = estimate_memory(G, ParallelSpec(**base), (p,), (0.0,))
    assert (m0.params_gib + m0.grads_gib + m0.optimizer_gib) * GiB == pytest.approx(16 * p)
    m1 = estimate_memory(G, ParallelSpec(zero=1, **base), (p,), (0.0,))
    assert m1.optimizer_gib * GiB == pytest.approx(12 * p / 8)
    assert m1.grads_gib == m0.grads_gib
    m2 = estimate_memory(G, ParallelSpec(zero=2, **base), (p,), (0.0,))
    assert m2.grads_gib * GiB == pytest.approx(2 * p / 8)
    m3 = estimate_memory(G, ParallelSpec(zero=3, **base), (p,), (0.0,))
    # sharded weights plus two gathered layers in flight
    assert m3.params_gib * GiB == pytest.approx(2 * p / 8 + 2 * (p / 96) * 2)
    assert m3.total_gib < m2.total_gib < m1.total_gib < m0.total_gib


def test_in_flight_micro_batches_follow_the_schedule() -> None:
    par = ParallelSpec(pp=4, global_batch=16, seq_len=2048)
    assert [in_flight(par, s)[0] for s in range(4)] == [4, 3, 2, 1]
    gp = par.replace(schedule="gpipe")
    assert in_flight(gp, 0) == [16]
    il = par.replace(schedule="interleaved", vpp=2)
    assert sum(in_flight(il, 0)) > 4  # interleaving holds more on the first stage


def test_fits_flag_and_worst_stage() -> None:
    par = ParallelSpec(tp=8, pp=8, global_batch=64, seq_len=2048, recompute="full", sp=True)
    mem = estimate_memory(G, par, tuple([175e9 / 64] * 8), tuple([0.0] * 8), capacity_gib=80)
    assert mem.fits and mem.worst_stage == 0
    big = estimate_memory(G, ParallelSpec(global_batch=1, seq_len=2048), (175e9,), (0.0,), capacity_gib=80)
    assert not big.fits and big.total_gib > 16 * 175e9 / GiB


def test_recompute_layers_keep_the_other_layers_activations() -> None:
    """``--recompute full --recompute-layers N`` recomputes the first N layers of each chunk:
    the rest keep their whole activations (Megatron's block method)."""
    p = 1e9
    kw = dict(global_batch=8, seq_len=2048, tp=8, sp=True)
    none = estimate_memory(G, ParallelSpec(**kw), (p,), (0.0,)).activations_gib
    full = estimate_memory(G, ParallelSpec(recompute="full", **kw), (p,), (0.0,)).activations_gib
    part = estimate_memory(G, ParallelSpec(recompute="full", recompute_layers=24, **kw), (p,),
                           (0.0,)).activations_gib
    par = ParallelSpec(**kw)
    per_layer = layer_activation_bytes(G, par, 0, flash=True) / GiB
    kept = layer_activation_bytes(G, par, 0, flash=True, full=True) / GiB
    assert part - full == pytest.approx(72 * (per_layer - kept), rel=1e-9)
    assert full < part < none


def test_selective_modules_drop_their_saved_tensors() -> None:
    """A recomputed module keeps only its input: the dense MLP's fc1 output and fc2 input
    (6 x s b ffn bytes with SwiGLU) and the norms' outputs go; each module a user lists
    lowers the estimate, none of them raises it."""
    llama = ModelSpec(name="l", family="llama", layers=32, hidden=4096, heads=32, kv_heads=8,
                      vocab=128256, seq_len=8192, ffn_hidden=14336, activation="swiglu",
                      norm="rmsnorm", dtype="bf16")
    base = dict(global_batch=8, seq_len=8192, tp=2, sp=True)
    attn = layer_activation_bytes(llama, ParallelSpec(recompute="selective", **base), 0, flash=True)
    mlp = layer_activation_bytes(llama, ParallelSpec(recompute="selective",
                                                     recompute_modules=("core_attn", "mlp"), **base),
                                 0, flash=True)
    assert attn - mlp == pytest.approx(6 * 8192 * 14336 / 2, rel=1e-9)
    ln = layer_activation_bytes(llama, ParallelSpec(recompute="selective",
                                                    recompute_modules=("mlp", "layernorm"), **base),
                                0, flash=True)
    assert mlp - ln == pytest.approx(4 * 8192 * 4096 / 2, rel=1e-9)


def test_moe_modules_drop_the_experts_tensors() -> None:
    from tracesim.catalog import load_model

    qwen = load_model("qwen3-30b-a3b")
    base = dict(global_batch=8, seq_len=4096, ep=8, dp=8, recompute="selective")

    def act(*mods: str) -> float:
        return layer_activation_bytes(qwen, ParallelSpec(recompute_modules=mods, **base), 1,
                                      flash=True)
    assert act("core_attn", "moe") < act("core_attn", "moe_act") < act("core_attn")
