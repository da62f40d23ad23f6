"""Shipped MoE and Llama specs against their published sizes, model FLOPs against the 6N rule
plus attention, and the strict checks of the new spec keys (docs/moe.md)."""

from __future__ import annotations

import pytest

from tracesim.api import list_shipped
from tracesim.catalog import load_model
from tracesim.errors import InputError
from tracesim.specs.model import model_from_dict
from tracesim.specs.parallel import ParallelSpec
from tracesim.template.analytic import first_principles_template
from tracesim.template.resolve import model_flops_per_iteration, resolve_template

NEW = ("deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b", "llama3.1-405b", "kimi-k2")

#: (spec, published total, published activated, whether the activated count includes the input
#: embedding, tolerance); sources in each spec's ``source`` field and docs/moe.md
PUBLISHED = [
    ("deepseek-v3", 671e9, 37e9, True, 0.02),  # tech report: 671B, 37B activated
    ("kimi-k2", 1.04e12, 32e9, False, 0.02),  # arXiv:2507.20534: 1.04T total, 32B activated
    ("qwen3-235b-a22b", 235e9, 22e9, True, 0.02),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, True, 0.02),
    ("gpt-oss-120b", 116.83e9, 5.13e9, False, 0.01),  # model card: unembedding counted, embedding not
    ("gpt-oss-20b", 20.91e9, 3.61e9, False, 0.01),  # the same model card's gpt-oss-20b row
    ("deepseek-moe-16b", 16.4e9, 2.8e9, True, 0.02),
    ("mixtral-8x7b", 46.7e9, 12.9e9, True, 0.01),
    ("llama3.1-405b", 405e9, 405e9, True, 0.01),
    ("llama3-405b", 405e9, 405e9, True, 0.01),
    ("llama3-70b", 70.6e9, 70.6e9, True, 0.01),
    ("llama3-8b", 8.03e9, 8.03e9, True, 0.01),
    ("llama3.1-8b", 8.03e9, 8.03e9, True, 0.01),
    ("llama3.1-70b", 70.6e9, 70.6e9, True, 0.01),
    ("mixtral-8x22b", 141e9, 39e9, True, 0.01),  # Mistral AI: 141B parameters, 39B active
    ("nemotron4-15b", 15.7e9, 15.7e9, True, 0.01),  # arXiv:2402.16819: 3.2B + 12.5B
    ("nemotron4-340b", 341e9, 341e9, True, 0.01),
    ("nemotronh-56b", 56e9, 56e9, True, 0.01),
    ("qwen3-8b", 8.2e9, 8.2e9, True, 0.01),  # Qwen3 model cards: 8.2B, 14.8B, 32.8B
    ("qwen3-14b", 14.8e9, 14.8e9, True, 0.01),
    ("qwen3-32b", 32.8e9, 32.8e9, True, 0.01),
]


def _flat(*_: object) -> int:
    return 1


@pytest.mark.parametrize(("name", "total", "active", "with_embedding", "tol"), PUBLISHED)
def test_parameter_counts_match_the_published_totals(name: str, total: float, active: float,
                                                     with_embedding: bool, tol: float) -> None:
    m = load_model(name)
    assert m.params() == pytest.approx(total, rel=tol)
    got = m.active_params() - (0 if with_embedding else m.vocab * m.hidden)
    assert got == pytest.approx(active, rel=tol)


def test_deepseek_v3_main_model_is_671b_within_a_tenth_of_a_percent() -> None:
    m = load_model("deepseek-v3")
    assert m.params() == pytest.approx(671e9, rel=1e-3)  # README_WEIGHTS: 671B without MTP
    assert [m.moe_layer(i) for i in range(4)] == [False, False, False, True]
    assert m.q_width == 128 * 192 and m.attn_width == 128 * 128


def test_llama_specs_match_their_configs() -> None:
    want = {"llama3-8b": (32, 4096, 32, 8, 14336), "llama3-70b": (80, 8192, 64, 8, 28672),
            "llama3-405b": (126, 16384, 128, 8, 53248), "llama3.1-405b": (126, 16384, 128, 8, 53248),
            "llama3.1-8b": (32, 4096, 32, 8, 14336), "llama3.1-70b": (80, 8192, 64, 8, 28672)}
    for name, dims in want.items():
        m = load_model(name)
        assert (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden) == dims, name
        assert (m.vocab, m.tied_embeddings, m.activation, m.norm) == (128256, False, "swiglu", "rmsnorm")


def test_every_new_spec_names_its_source_and_is_listed() -> None:
    listed = {e.name: e.summary for e in list_shipped("models")}
    for name in NEW + ("deepseek-moe-16b",):
        m = load_model(name)
        assert len(m.source) > 40 and ("/" in m.source or "arXiv" in m.source), name
        assert name in listed
    assert "MLA" in listed["deepseek-v3"] and "1 shared" in listed["deepseek-v3"]
    assert "window 128" in listed["gpt-oss-120b"]
    kimi = load_model("Kimi_K2")  # as the Megatron-Bridge tables spell it
    assert (kimi.name, kimi.experts, kimi.heads, kimi.first_k_dense) == ("kimi-k2", 384, 64, 1)
    assert [kimi.moe_layer(i) for i in range(2)] == [False, True]


def test_nvidia_and_mistral_specs_match_their_configs() -> None:
    """Nemotron-4 (Megatron-Bridge's Nemotron4ModelProvider15B / 340B), Nemotron-H 56B
    (NemotronHModelProvider56B) and Mixtral 8x22B (NeMo's MixtralConfig8x22B), under the
    spellings NVIDIA's performance tables use."""
    n4 = {"Nemotron4_15B": (32, 6144, 48, 8, 24576), "Nemotron-4 340B": (96, 18432, 96, 8, 73728)}
    for name, dims in n4.items():
        m = load_model(name)
        assert (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden) == dims, name
        assert (m.vocab, m.activation, m.norm, m.tied_embeddings) == (256000, "relu2", "layernorm", False)
    h = load_model("NemotronH_56B")
    assert (h.name, h.layers, len(h.hybrid_pattern)) == ("nemotronh-56b", 118, 118)
    assert [h.hybrid_pattern.count(c) for c in "M-*E"] == [54, 54, 10, 0] and not h.is_moe
    assert (h.mamba_heads, h.mamba_head_dim, h.mamba_state, h.mamba_groups, h.mamba_chunk) == (256, 64, 256, 8, 128)
    assert (h.heads, h.kv_heads, h.head_dim, h.ffn_hidden, h.activation) == (64, 8, 128, 32768, "relu2")
    q32 = load_model("Qwen3_32B")  # the queries 8,192 wide on a 5,120 hidden size
    assert (q32.name, q32.layers, q32.heads, q32.kv_heads, q32.head_dim, q32.qk_norm) == (
        "qwen3-32b", 64, 64, 8, 128, True)
    mx = load_model("Mixtral 8x22B")
    assert (mx.name, mx.layers, mx.hidden, mx.experts, mx.top_k, mx.moe_ffn) == ("mixtral-8x22b", 56, 6144, 8, 2, 16384)
    listed = {e.name for e in list_shipped("models")}
    for name in ("nemotron4-15b", "nemotron4-340b", "nemotronh-56b", "mixtral-8x22b", "llama3.1-8b",
                 "llama3.1-70b", "qwen3-8b", "qwen3-14b", "qwen3-32b"):
        assert name in listed and "/" in load_model(name).source, name


@pytest.mark.parametrize("name", NEW + ("deepseek-moe-16b", "mixtral-8x7b", "mixtral-8x22b"))
def test_model_flops_are_6n_active_plus_attention(name: str) -> None:
    """Forward + backward FLOPs per token = 6 x (activated weights outside the embedding
    lookup) + 3 x the attention scores and context (full ``T x keys`` square, keys bounded by
    a sliding window); norms, activations and softmax add well under half a percent."""
    m = load_model(name)
    par = ParallelSpec(seq_len=m.seq_len, global_batch=1)
    res = resolve_template(first_principles_template(m), m, par, _flat)
    per_token = model_flops_per_iteration(res, m, par) / m.seq_len
    matmul = m.active_params() - m.vocab * m.hidden
    attention = sum(2 * (m.window(i) or m.seq_len) * m.heads * (m.qk_head_dim + m.v_dim)
                    for i in range(m.layers))
    assert per_token == pytest.approx(6 * matmul + 3 * attention, rel=0.005)
    assert per_token > 6 * matmul


def test_sliding_window_bounds_the_attention_flops() -> None:
    m = load_model("gpt-oss-120b")
    assert [m.window(i) for i in range(4)] == [128, 0, 128, 0]  # Megatron window_attn_skip_freq 2
    par = ParallelSpec(seq_len=4096, global_batch=1)
    res = resolve_template(first_principles_template(m), m, par, _flat)
    core = [next(r for r in res.layer(m, i).fwd if r.name == "attn.core") for i in (0, 1)]
    assert core[0].flops == 4 * 4096 * 128 * m.q_width
    assert core[1].flops == 4 * 4096 * 4096 * m.q_width


def test_resolved_parameters_are_the_spec_parameters() -> None:
    """The template's parameter expressions (MLA projections and latent norms, shared experts,
    dense first layers, router) add up to ModelSpec.params on one GPU, and expert weights are
    split over EP while shared experts are not."""
    for name in NEW + ("deepseek-moe-16b",):
        m = load_model(name)
        par = ParallelSpec(seq_len=m.seq_len)
        res = resolve_template(first_principles_template(m), m, par, _flat)
        local = res.prologue.params + res.epilogue.params + sum(
            res.layer(m, i).params for i in range(m.layers))
        assert local == pytest.approx(m.params(), rel=1e-12), name
    m = load_model("deepseek-v3")
    res = resolve_template(first_principles_template(m), m, ParallelSpec(dp=8, ep=8), _flat)
    per_expert = 3 * m.hidden * m.moe_ffn
    assert res.moe is not None and res.moe.expert_params == 256 // 8 * per_expert
    assert res.dense.expert_params == 0


def test_spec_round_trip_and_strict_keys() -> None:
    for name in NEW + ("deepseek-moe-16b",):
        m = load_model(name)
        assert model_from_dict(m.to_dict()) == m
    base = load_model("deepseek-v3").to_dict()
    with pytest.raises(InputError, match="unknown key 'n_shared_experts'"):
        model_from_dict({**base, "n_shared_experts": 1})
    with pytest.raises(InputError, match="needs .*v_head_dim"):
        model_from_dict({k: v for k, v in base.items() if k != "v_head_dim"})
    with pytest.raises(InputError, match="head_dim or the MLA"):
        model_from_dict({**base, "head_dim": 128})
    llama = load_model("llama3-8b").to_dict()
    with pytest.raises(InputError, match="needs a MoE model"):
        model_from_dict({**llama, "shared_experts": 1})
    with pytest.raises(InputError, match="needs a sliding_window"):
        model_from_dict({**llama, "full_attention_every": 2})
    with pytest.raises(InputError, match="not divisible by heads"):
        model_from_dict({**llama, "hidden": 4010})
    assert model_from_dict({**llama, "hidden": 4010, "head_dim": 128}).q_width == 4096


def test_moe_spec_defaults_and_moe_layers_that_cannot_exist() -> None:
    """A MoE spec without activation / norm is the modern MoE block (SwiGLU, RMSNorm); a
    ``moe_every`` that leaves no MoE layer is an error."""
    base = {"name": "m", "family": "moe", "layers": 16, "hidden": 1024, "heads": 8, "vocab": 1000,
            "seq_len": 512, "experts": 8, "top_k": 2, "moe_ffn_hidden": 512}
    m = model_from_dict(base, "m.yaml")
    assert (m.activation, m.norm) == ("swiglu", "rmsnorm")
    gpt = model_from_dict({**base, "family": "gpt", "experts": 0, "top_k": 0,
                           "moe_ffn_hidden": 0}, "g.yaml")
    assert (gpt.activation, gpt.norm) == ("gelu", "layernorm")
    with pytest.raises(InputError, match="moe_every: moe_every 40 leaves no MoE layer"):
        model_from_dict({**base, "moe_every": 40}, "m.yaml")
    # moe_ffn_hidden 0 (what a spec's to_dict writes when it took the default) or absent:
    # experts as wide as ffn_hidden
    assert model_from_dict({**base, "moe_ffn_hidden": 0}, "m.yaml").moe_ffn == 4096
