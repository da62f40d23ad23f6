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
    ({"shared_expert_intermediate_size": "x", "model_type": "qwen2_moe"},
     "shared_expert_intermediate_size"),
    ({"torch_dtype": {"bf16": True}}, "torch_dtype"),
])
def test_bad_configs_name_the_key(tmp_path: Path, change: dict, key: str) -> None:
    base = json.loads((CONFIGS / "Qwen3-30B-A3B/config.json").read_text())
    d = _write(tmp_path, {**base, **change})
    with pytest.raises(InputError, match=key):
        load_model(d)


@pytest.mark.parametrize("change,key", [
    ({"n_group": "x"}, "n_group"), ({"n_group": [8]}, "n_group"),
    ({"q_lora_rank": "1536"}, "q_lora_rank"), ({"q_lora_rank": -1}, "q_lora_rank"),
    ({"n_group": 8, "topk_group": None}, "topk_group"),
    ({"swiglu_limit": "7"}, "swiglu_limit"), ({"swiglu_limit": -7.0}, "swiglu_limit"),
])
def test_bad_deepseek_and_gpt_oss_configs_name_the_key(tmp_path: Path, change: dict,
                                                       key: str) -> None:
    """Optional keys (absent, null or 0 for none) take nothing but a positive number."""
    folder = "gpt-oss-120b" if "swiglu_limit" in change else "DeepSeek-V3"
    base = json.loads((CONFIGS / folder / "config.json").read_text())
    with pytest.raises(InputError, match=key):
        load_model(_write(tmp_path, {**base, **change}))


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
    ({"layers_block_type": ["mamba", {"type": "moe"}]}, "layers_block_type"),
    ({}, "hybrid_override_pattern"),
    ({"hybrid_override_pattern": "M*E-", "num_hidden_layers": 4}, "n_routed_experts"),
    ({"hybrid_override_pattern": "M*E-", "num_hidden_layers": 4, "n_routed_experts": 8,
      "num_experts_per_tok": 2, "moe_intermediate_size": 1000,
      "moe_shared_expert_intermediate_size": 1500}, "moe_shared_expert_intermediate_size"),
    ({"hybrid_override_pattern": "M*E-", "num_hidden_layers": 4, "n_routed_experts": 8,
      "num_experts_per_tok": 2, "moe_intermediate_size": 1000,
      "moe_shared_expert_intermediate_size": "x"}, "moe_shared_expert_intermediate_size"),
])
def test_bad_nemotron_h_configs_name_the_key(tmp_path: Path, change: dict, key: str) -> None:
    d = _write(tmp_path, {**NEMOTRON_H_56B, **change})
    with pytest.raises(InputError, match=key):
        load_model(d)


def _cfg(tmp_path: Path, name: str, cfg: dict) -> ModelSpec:
    return load_model(_write(tmp_path, {"torch_dtype": "bfloat16", **cfg}, name))


def test_more_dense_and_moe_architectures_match_their_published_sizes(tmp_path: Path) -> None:
    """The config keys of public checkpoints give their published parameter counts: GLM-4.5
    ("355B total, 32B active"; 352.8B without its multi-token-prediction layer) and GLM-4.5-Air
    ("106B, 12B active"), Gemma 2 9B (9.24B), Phi-3-mini (3.8B), OLMo-2 7B (7.3B)."""
    glm = {"model_type": "glm4_moe", "num_hidden_layers": 92, "hidden_size": 5120,
           "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128,
           "intermediate_size": 12288, "moe_intermediate_size": 1536, "n_routed_experts": 160,
           "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
           "n_group": 1, "topk_group": 1, "use_qk_norm": True, "vocab_size": 151552,
           "max_position_embeddings": 131072, "tie_word_embeddings": False,
           "partial_rotary_factor": 0.5}
    m = _cfg(tmp_path, "GLM-4.5", glm)
    assert (m.family, m.first_k_dense, m.shared_experts, m.qk_norm, m.head_dim) == ("moe", 3, 1, True, 128)
    assert m.params() == pytest.approx(355e9, rel=0.01)
    assert m.active_params() - m.vocab * m.hidden == pytest.approx(32e9, rel=0.03)
    air = _cfg(tmp_path, "GLM-4.5-Air", {**glm, "num_hidden_layers": 46, "hidden_size": 4096,
                                         "intermediate_size": 10944, "moe_intermediate_size": 1408,
                                         "n_routed_experts": 128, "first_k_dense_replace": 1,
                                         "use_qk_norm": False})
    assert air.params() == pytest.approx(106e9, rel=0.01) and not air.qk_norm
    assert air.active_params() - air.vocab * air.hidden == pytest.approx(12e9, rel=0.07)
    gemma2 = _cfg(tmp_path, "gemma-2-9b", {
        "model_type": "gemma2", "num_hidden_layers": 42, "hidden_size": 3584,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
        "intermediate_size": 14336, "vocab_size": 256000, "max_position_embeddings": 8192,
        "sliding_window": 4096})
    assert (gemma2.tied_embeddings, gemma2.sliding_window, gemma2.full_attention_every) == (True, 4096, 2)
    assert gemma2.params() == pytest.approx(9.24e9, rel=0.005)
    assert [gemma2.window(i) for i in range(4)] == [4096, 0, 4096, 0]
    gemma3 = _cfg(tmp_path, "gemma-3-1b", {
        "model_type": "gemma3_text", "num_hidden_layers": 26, "hidden_size": 1152,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
        "intermediate_size": 6912, "vocab_size": 262144, "max_position_embeddings": 32768,
        "sliding_window": 512, "sliding_window_pattern": 6})
    assert (gemma3.full_attention_every, gemma3.sliding_window) == (6, 512)
    phi3 = _cfg(tmp_path, "Phi-3-mini-4k-instruct", {
        "model_type": "phi3", "num_hidden_layers": 32, "hidden_size": 3072,
        "num_attention_heads": 32, "intermediate_size": 8192, "vocab_size": 32064,
        "max_position_embeddings": 4096})
    assert phi3.params() == pytest.approx(3.8e9, rel=0.01) and phi3.activation == "swiglu"
    olmo2 = _cfg(tmp_path, "OLMo-2-1124-7B", {
        "model_type": "olmo2", "num_hidden_layers": 32, "hidden_size": 4096,
        "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 100352,
        "max_position_embeddings": 4096})
    assert olmo2.params() == pytest.approx(7.3e9, rel=0.01) and olmo2.qk_norm


def test_a_vision_language_config_gives_its_language_model(tmp_path: Path) -> None:
    """Gemma 3 27B's checkpoint nests its language model under ``text_config``."""
    text = {"model_type": "gemma3_text", "num_hidden_layers": 62, "hidden_size": 5376,
            "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
            "intermediate_size": 21504, "vocab_size": 262208, "max_position_embeddings": 131072,
            "sliding_window": 1024, "sliding_window_pattern": 6}
    m = _cfg(tmp_path, "gemma-3-27b-pt", {"model_type": "gemma3", "text_config": text,
                                          "vision_config": {"model_type": "siglip_vision_model"}})
    assert (m.name, m.layers, m.hidden, m.full_attention_every) == ("gemma-3-27b-pt", 62, 5376, 6)
    assert m.params() == pytest.approx(27.0e9, rel=0.03)  # 27B with its 0.4B vision encoder
    with pytest.raises(InputError, match="text_config.model_type"):
        _cfg(tmp_path, "vlm", {"model_type": "gemma3", "text_config": {**text, "model_type": "x"}})


def test_nemotron_h_keys_left_out_take_the_transformers_defaults(tmp_path: Path) -> None:
    cfg = {k: v for k, v in NEMOTRON_H_56B.items()
           if k not in ("chunk_size", "conv_kernel", "n_groups", "mamba_head_dim",
                        "num_hidden_layers")}
    m = load_model(_write(tmp_path, {**cfg, "hybrid_override_pattern": "M*M-"}, "h"))
    assert (m.mamba_chunk, m.mamba_conv, m.mamba_groups, m.mamba_head_dim) == (128, 4, 8, 64)
    with pytest.raises(InputError, match="mamba_num_heads"):
        load_model(_write(tmp_path, {**cfg, "hybrid_override_pattern": "M*M-",
                                     "mamba_num_heads": None}, "h2"))


def test_gemma3_checkpoints_leave_sizes_to_transformers_defaults(tmp_path: Path) -> None:
    """The real Gemma 3 4B ``text_config`` names no heads, key/value heads, head width,
    vocabulary or positions (Gemma3TextConfig's defaults fill them): 3.88B parameters in the
    language model (the card's 4.3B holds the 0.42B vision encoder); a key missing where no
    default exists names ``text_config.<key>``."""
    text = {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
            "num_hidden_layers": 34, "sliding_window": 1024, "rope_scaling":
            {"factor": 8.0, "rope_type": "linear"}}
    m = _cfg(tmp_path, "gemma-3-4b-it", {"model_type": "gemma3", "text_config": text})
    assert (m.heads, m.kv_heads, m.head_dim, m.vocab, m.seq_len) == (8, 4, 256, 262208, 131072)
    assert (m.sliding_window, m.full_attention_every) == (1024, 6)
    assert m.params() == pytest.approx(3.88e9, rel=0.005)
    with pytest.raises(InputError, match=r"text_config\.hidden_size: missing"):
        _cfg(tmp_path, "g", {"model_type": "gemma3", "text_config": {
            k: v for k, v in text.items() if k != "hidden_size"}})


def test_float32_checkpoints_train_in_bf16_and_phi3_windows(tmp_path: Path) -> None:
    """A checkpoint stored in float32 (Gemma 2, OLMo 2) replays in BF16 mixed precision;
    Phi-3's window covers every layer, one as long as the sequence is no window, and a
    top-level original_max_position_embeddings (Phi-3 128k) is the default sequence."""
    phi = {"model_type": "phi3", "num_hidden_layers": 32, "hidden_size": 3072,
           "num_attention_heads": 32, "intermediate_size": 8192, "vocab_size": 32064,
           "max_position_embeddings": 4096, "sliding_window": 2047}
    m = load_model(_write(tmp_path, {**phi, "torch_dtype": "float32"}, "phi3"))
    assert m.dtype == "bf16"
    assert (m.sliding_window, m.full_attention_every) == (2047, 0)
    long = load_model(_write(tmp_path, {**phi, "max_position_embeddings": 131072,
                                        "original_max_position_embeddings": 4096,
                                        "sliding_window": 262144}, "phi3-128k"))
    assert (long.seq_len, long.sliding_window) == (4096, 0)


def test_a_check_the_spec_fails_names_the_configs_key(tmp_path: Path) -> None:
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 4096,
           "num_attention_heads": 32, "num_key_value_heads": 7, "intermediate_size": 11008,
           "vocab_size": 32000, "max_position_embeddings": 4096}
    with pytest.raises(InputError, match=r"num_key_value_heads \(the spec's kv_heads\)"):
        load_model(_write(tmp_path, cfg, "kv7"))
