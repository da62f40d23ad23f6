"""A Hugging Face ``config.json`` as the model spec (tracesim/specs/hf_config.py,
docs/formats.md): the public configs of shipped models give the shipped specs."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tracesim.catalog import load_model
from tracesim.errors import InputError
from tracesim.specs.model import ModelSpec

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "tests/data/hf_configs"
#: checkpoint folder -> the shipped spec its config.json stands for
SHIPPED = {"Llama-3.2-1B": "llama3.2-1b", "Qwen3-30B-A3B": "qwen3-30b-a3b",
           "DeepSeek-V3": "deepseek-v3", "Mixtral-8x7B-v0.1": "mixtral-8x7b",
           "gpt-oss-120b": "gpt-oss-120b"}
#: fields a config.json does not settle the way the shipped spec does: the name and free
#: text, the default sequence length, and DeepSeek-V3's YaRN scaling the shipped spec omits
FREE = ("name", "description", "source", "seq_len", "rope_scaling")


@pytest.mark.parametrize("folder", sorted(SHIPPED))
def test_a_config_gives_the_shipped_spec(folder: str) -> None:
    got = load_model(CONFIGS / folder)
    want = load_model(SHIPPED[folder])
    assert got.name == folder and got.params() == want.params()
    for f in dataclasses.fields(want):
        if f.name not in FREE:
            assert getattr(got, f.name) == getattr(want, f.name), f.name
    assert load_model(CONFIGS / folder / "config.json") == got


def test_defaults_read_from_the_config() -> None:
    llama = load_model(CONFIGS / "Llama-3.2-1B")
    assert (llama.seq_len, llama.tied_embeddings, llama.dtype) == (8192, True, "bf16")
    assert load_model(CONFIGS / "DeepSeek-V3").rope_scaling == "yarn"
    assert load_model(CONFIGS / "Qwen3-30B-A3B").seq_len == 40960


def _write(tmp_path: Path, cfg: dict, name: str = "m") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_gpt2_and_qwen2_moe_shared_experts(tmp_path: Path) -> None:
    gpt2 = load_model(_write(tmp_path, {"model_type": "gpt2", "n_layer": 12, "n_embd": 768,
                                        "n_head": 12, "n_positions": 1024, "vocab_size": 50257,
                                        "n_inner": None}, "gpt2"))
    assert (gpt2.family, gpt2.ffn_hidden, gpt2.norm, gpt2.tied_embeddings) == ("gpt", 3072, "layernorm", True)
    base = json.loads((CONFIGS / "Qwen3-30B-A3B/config.json").read_text())
    moe = load_model(_write(tmp_path, {**base, "model_type": "qwen2_moe", "num_experts": 60,
                                       "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
                                       "shared_expert_intermediate_size": 5632}, "q2"))
    assert (moe.shared_experts, moe.qk_norm) == (4, False)


@pytest.mark.parametrize("change,key", [
    ({"model_type": "bert"}, "model_type"),
    ({"hidden_size": None}, "hidden_size"),
    ({"num_hidden_layers": 0}, "num_hidden_layers"),
    ({"mlp_only_layers": [3]}, "mlp_only_layers"),
    ({"torch_dtype": "int8"}, "torch_dtype"),
    ({"model_type": "gpt_oss", "num_local_experts": 8, "layer_types": "sliding_attention"},
     "layer_types"),
    ({"shared_expert_intermediate_size": 1000, "model_type": "qwen2_moe"},
     "shared_expert_intermediate_size"),
])
def test_bad_configs_name_the_key(tmp_path: Path, change: dict, key: str) -> None:
    base = json.loads((CONFIGS / "Qwen3-30B-A3B/config.json").read_text())
    d = _write(tmp_path, {**base, **change})
    with pytest.raises(InputError, match=key):
        load_model(d)


def test_replay_from_a_config_folder_and_bad_json_exit_2(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "tracesim.cli", "replay", "--cluster", "h200x8", "--dp", "1",
           "--seq-len", "1024", "--stack", "transformers", "--json", "--model"]
    r = subprocess.run([*cmd, str(CONFIGS / "Llama-3.2-1B")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["model"]["name"] == "Llama-3.2-1B"
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama",')
    r = subprocess.run([*cmd, str(bad)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "config.json" in r.stderr
    assert r.stderr.strip().count("\n") == 0


#: Nemotron-H 56B's config.json keys (nvidia/Nemotron-H-56B-Base-8K; transformers'
#: NemotronHConfig names, ``attention_head_dim`` as that checkpoint spells the head width)
NEMOTRON_H_56B = {
    "model_type": "nemotron_h", "num_hidden_layers": 118, "hidden_size": 8192,
    "num_attention_heads": 64, "num_key_value_heads": 8, "attention_head_dim": 128,
    "intermediate_size": 32768, "vocab_size": 131072, "max_position_embeddings": 8192,
    "mamba_num_heads": 256, "mamba_head_dim": 64, "ssm_state_size": 256, "n_groups": 8,
    "conv_kernel": 4, "chunk_size": 128, "mlp_hidden_act": "relu2",
    "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def _same_spec(got: ModelSpec, want: ModelSpec) -> None:
    """Equal specs but for the free fields; a head width given where it is the default
    (hidden / heads) and left out are the same width."""
    assert got.head_dim == want.head_dim
    for f in dataclasses.fields(want):
        if f.name not in (*FREE, "head_dim_override"):
            assert getattr(got, f.name) == getattr(want, f.name), f.name


def test_nemotron_h_and_nemotron4_configs_give_the_shipped_specs(tmp_path: Path) -> None:
    want = load_model("nemotronh-56b")
    got = load_model(_write(tmp_path, {**NEMOTRON_H_56B,
                                       "hybrid_override_pattern": want.hybrid_pattern}, "h56"))
    _same_spec(got, want)
    # the per-layer names instead of the pattern; the layer count from the list
    names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    cfg = {k: v for k, v in NEMOTRON_H_56B.items() if k != "num_hidden_layers"}
    listed = load_model(_write(tmp_path, {**cfg, "layers_block_type":
                                          [names[c] for c in want.hybrid_pattern]}, "h56list"))
    _same_spec(listed, want)
    nano = load_model("nemotron-3-nano")
    moe = load_model(_write(tmp_path, {
        **NEMOTRON_H_56B, "num_hidden_layers": 52, "hidden_size": 2688, "num_attention_heads": 32,
        "num_key_value_heads": 2, "intermediate_size": 1856, "mamba_num_heads": 64,
        "ssm_state_size": 128, "hybrid_override_pattern": nano.hybrid_pattern,
        "n_routed_experts": 128, "num_experts_per_tok": 6, "moe_intermediate_size": 1856,
        "moe_shared_expert_intermediate_size": 3712}, "nano"))
    _same_spec(moe, nano)
    super_ = load_model("nemotron-3-super")
    latent = load_model(_write(tmp_path, {
        **NEMOTRON_H_56B, "num_hidden_layers": 88, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 2, "intermediate_size": 2688, "mamba_num_heads": 128,
        "ssm_state_size": 128, "hybrid_override_pattern": super_.hybrid_pattern,
        "n_routed_experts": 512, "num_experts_per_tok": 22, "moe_intermediate_size": 2688,
        "moe_shared_expert_intermediate_size": 5376, "moe_latent_size": 1024}, "super"))
    _same_spec(latent, super_)
    # Nemotron-4 15B (model_type nemotron: squared ReLU, LayerNorm)
    n4 = load_model(_write(tmp_path, {
        "model_type": "nemotron", "num_hidden_layers": 32, "hidden_size": 6144,
        "num_attention_heads": 48, "num_key_value_heads": 8, "intermediate_size": 24576,
        "vocab_size": 256000, "max_position_embeddings": 4096, "hidden_act": "relu2",
        "partial_rotary_factor": 0.5, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
        "n4"))
    _same_spec(n4, load_model("nemotron4-15b"))


@pytest.mark.parametrize("change,key", [
    ({"hybrid_override_pattern": "M-X*"}, "hybrid_override_pattern"),
    ({"layers_block_type": ["mamba", "ssm"]}, "layers_block_type"),
    ({}, "hybrid_override_pattern"),
    ({"hybrid_override_pattern": "M*E-", "num_hidden_layers": 4}, "n_routed_experts"),
    ({"hybrid_override_pattern": "M*E-", "num_hidden_layers": 4, "n_routed_experts": 8,
      "num_experts_per_tok": 2, "moe_intermediate_size": 1000,
      "moe_shared_expert_intermediate_size": 1500}, "moe_shared_expert_intermediate_size"),
])
def test_bad_nemotron_h_configs_name_the_key(tmp_path: Path, change: dict, key: str) -> None:
    d = _write(tmp_path, {**NEMOTRON_H_56B, **change})
    with pytest.raises(InputError, match=key):
        load_model(d)
