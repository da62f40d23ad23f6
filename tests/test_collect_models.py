"""The collector's models, module scopes, event counting and calibration twin (need torch)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from tracesim.collectors.models import build_model  # noqa: E402
from tracesim.collectors.overhead import twin_spec  # noqa: E402
from tracesim.collectors.scopes import MODULE_PREFIX, PHASE_PREFIX  # noqa: E402
from tracesim.collectors.train import count_step_events, make_training  # noqa: E402

from tracesim.catalog import load_model  # noqa: E402


def _n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # shared (tied) tensors counted once


def test_llama_parameter_count_matches_spec():
    spec = load_model("llama-tiny")
    assert _n_params(build_model(spec)) == spec.params()


def test_gpt_parameter_count_matches_spec():
    # ModelSpec.params() counts LayerNorm weights and biases and the learned positions
    spec = load_model("gpt-tiny")
    assert _n_params(build_model(spec)) == spec.params()


def test_moe_parameter_count():
    spec = load_model("moe-tiny")
    h, kv, ef, e = spec.hidden, spec.kv_heads * spec.head_dim, spec.moe_ffn_hidden, spec.experts
    per_layer = 2 * h * h + 2 * h * kv + e * 3 * h * ef + h * e + 2 * h
    expected = spec.layers * per_layer + 2 * spec.vocab * h + h
    assert _n_params(build_model(spec)) == expected == spec.params()


def test_grouped_query_attention_shapes():
    spec = load_model("llama-tiny")
    model = build_model(spec)
    attn = model.blocks[0].attn
    assert spec.kv_heads < spec.heads
    assert attn.k.out_features == spec.kv_heads * spec.head_dim == 120
    assert attn.q.out_features == spec.hidden
    assert model.head.weight is not model.embed.tok.weight
    gpt = build_model(load_model("gpt-tiny"))
    assert gpt.head.weight is gpt.embed.tok.weight
    assert gpt.blocks[0].attn.qkv.out_features == 3 * 160


@pytest.mark.parametrize("name", ["gpt-tiny", "llama-tiny", "moe-tiny"])
def test_initial_loss_is_near_uniform_and_training_lowers_it(name):
    """At init the loss is about ln(vocab); 15 AdamW steps on one batch lower it."""
    torch.set_num_threads(1)
    spec = twin_spec(load_model(name)).replace(vocab=97)
    training = make_training(spec, batch=2, device=torch.device("cpu"))
    first = float(training.step())
    assert abs(first - math.log(spec.vocab)) < 0.3
    for _ in range(15):
        last = float(training.step())
    assert last < first - 0.05


def _annotation_parents(spec_name: str) -> tuple[set[str], dict[str, set[str]]]:
    """Profile one twin step: the annotation names, and for some ops their enclosing scopes."""
    torch.set_num_threads(1)
    spec = twin_spec(load_model(spec_name))
    training = make_training(spec, batch=2, device=torch.device("cpu"))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        training.step()
    events = prof.events()
    names = {e.name for e in events}
    scopes: dict[str, set[str]] = {}
    for e in events:
        if e.name.startswith("aten::"):
            parent, chain = e.cpu_parent, []
            while parent is not None:
                if parent.name.startswith(MODULE_PREFIX):
                    chain.append(parent.name[len(MODULE_PREFIX):])
                parent = parent.cpu_parent
            if chain:
                scopes.setdefault(e.name, set()).add(chain[0])
    return names, scopes


def test_gpt_module_scopes_and_phases():
    names, scopes = _annotation_parents("gpt-tiny")
    for path in ("embed.tok", "embed.pos", "blocks.0.ln1", "blocks.0.attn.qkv",
                 "blocks.0.attn.core", "blocks.1.attn.proj", "blocks.1.mlp.fc1",
                 "blocks.1.mlp.act", "blocks.1.mlp.fc2", "norm_f", "head", "loss"):
        assert MODULE_PREFIX + path in names, path
    for ph in ("forward", "backward", "optimizer"):
        assert PHASE_PREFIX + ph in names
    assert not any(n.startswith(MODULE_PREFIX + "module") for n in names)
    # innermost scope of the forward GEMMs and the attention kernel
    assert "blocks.0.attn.qkv" in scopes["aten::addmm"]
    assert scopes["aten::_scaled_dot_product_flash_attention_for_cpu"] == {
        "blocks.0.attn.core", "blocks.1.attn.core"}


def test_llama_and_moe_module_scopes():
    names, _ = _annotation_parents("llama-tiny")
    for path in ("blocks.0.attn.q", "blocks.0.attn.k", "blocks.0.attn.v", "blocks.0.attn.rope",
                 "blocks.0.mlp.gate", "blocks.0.mlp.up", "blocks.0.mlp.down"):
        assert MODULE_PREFIX + path in names, path
    assert MODULE_PREFIX + "embed.pos" not in names
    names, _ = _annotation_parents("moe-tiny")
    assert MODULE_PREFIX + "blocks.1.mlp.router" in names
    experts = {n for n in names if n.startswith(MODULE_PREFIX + "blocks.0.mlp.experts.")
               and n.endswith(".down")}
    assert 1 <= len(experts) <= 4


def test_twin_keeps_structure_and_shrinks_sizes():
    spec = load_model("moe-tiny")
    twin = twin_spec(spec)
    for key in ("layers", "heads", "kv_heads", "experts", "top_k", "moe_every", "family",
                "norm", "activation", "tied_embeddings"):
        assert getattr(twin, key) == getattr(spec, key), key
    assert twin.hidden < spec.hidden and twin.vocab < spec.vocab and twin.seq_len < spec.seq_len
    assert twin.head_dim % 2 == 0  # rotary needs an even head dim


def test_count_step_events():
    trace = {"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 100, "dur": 50},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 101, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 150, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::late", "ts": 151, "dur": 5},
        {"ph": "X", "cat": "user_annotation", "name": "nn.Module: head", "ts": 110, "dur": 5},
        {"ph": "X", "cat": "user_annotation", "name": "tracesim.phase: forward", "ts": 100,
         "dur": 5},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "x", "ts": 120, "dur": 5},
        {"ph": "i", "cat": "cpu_op", "name": "instant", "ts": 120},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "ts": 10, "dur": 80},
    ]}
    assert count_step_events(trace) == [
        {"step": "ProfilerStep#2", "dur_us": 80.0, "cpu_ops": 0, "module_scopes": 0,
         "annotations": 0, "events": 0},
        {"step": "ProfilerStep#3", "dur_us": 50.0, "cpu_ops": 2, "module_scopes": 1,
         "annotations": 1, "events": 4},
    ]
