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
