"""Model specs from a Hugging Face ``config.json``: ``--model path/to/config.json`` (or the
checkpoint folder that holds it).

A transformers model's ``config.json`` names its architecture (``model_type``) and sizes;
:func:`spec_from_hf_config` turns it into the mapping a model spec YAML would hold, which
:func:`tracesim.specs.model.model_from_dict` then checks like any spec. The architectures
read, by ``model_type``, with the keys each takes (transformers' configuration classes):

* dense, gated MLP, RMSNorm (family ``llama``): ``llama``, ``mistral``, ``qwen2``, ``phi3``,
  ``granite``, ``qwen3`` and ``olmo2`` (RMSNorm over the queries and keys: ``qk_norm``),
  ``gemma``, ``gemma2``, ``gemma3_text`` (the gated GELU timed as SwiGLU: the same three
  GEMMs and an elementwise gate; embeddings tied unless the config says otherwise; Gemma 2
  windows on alternate layers, Gemma 3 ``sliding_window_pattern``, or ``layer_types``):
  ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``,
  ``intermediate_size``, ``vocab_size``, ``tie_word_embeddings``, ``sliding_window`` (Mistral,
  Mixtral and Phi-3 on every layer; Qwen only with ``use_sliding_window``);
* mixture of experts (family ``moe``): ``mixtral`` (``num_local_experts``,
  ``num_experts_per_tok``, every expert ``intermediate_size`` wide), ``qwen2_moe`` /
  ``qwen3_moe`` (``num_experts``, ``moe_intermediate_size``, ``decoder_sparse_step``, the
  shared expert's ``shared_expert_intermediate_size`` as whole experts), ``deepseek_v2`` /
  ``deepseek_v3`` (``n_routed_experts``, ``n_shared_experts``, ``first_k_dense_replace``,
  ``moe_layer_freq``, ``n_group`` / ``topk_group``, multi-head latent attention from
  ``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``,
  ``v_head_dim``), ``glm4_moe`` (GLM-4.5: DeepSeek's expert keys with grouped-query
  attention, ``use_qk_norm``), ``gpt_oss`` (``num_local_experts``, ``experts_per_token``,
  ``sliding_window`` on alternate layers by ``layer_types``, ``swiglu_limit``, expert biases);
* Nemotron-4 and Minitron (``nemotron``; family ``llama`` with the squared-ReLU MLP, not
  gated, and LayerNorm): the dense keys above; rotary on ``partial_rotary_factor`` of each
  head is timed over the whole head;
* hybrid Mamba-2 models (``nemotron_h``: Nemotron-H, Nemotron Nano 2, Nemotron 3; family
  ``hybrid``): the layer pattern from ``hybrid_override_pattern`` (or the per-layer
  ``layers_block_type`` list: ``mamba``, ``attention``, ``mlp``, ``moe``), the mixer's
  ``mamba_num_heads``, ``mamba_head_dim``, ``ssm_state_size``, ``n_groups``, ``conv_kernel``,
  ``chunk_size``; dense MLP layers ``intermediate_size`` wide; MoE layers from
  ``n_routed_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``, the shared
  expert's ``moe_shared_expert_intermediate_size`` (as whole experts) and a latent MoE's
  ``moe_latent_size``;
* GPT-2 (family ``gpt``): ``n_layer``, ``n_embd``, ``n_head``, ``n_inner``, ``n_positions``;
* a vision-language checkpoint whose ``text_config`` is one of these (Gemma 3 4B and up,
  Mistral 3): its language model; the vision encoder is not replayed.

Everywhere: ``torch_dtype`` (or ``dtype``) as the spec's dtype (``float32``, a checkpoint's
storage dtype, as BF16: the mixed precision these models train in), a ``rope_scaling`` of type
``yarn`` as ``rope_scaling: yarn``, and as the default sequence length the
``original_max_position_embeddings`` of the rotary scaling or of the config (Phi-3 128k)
where it has one, else ``max_position_embeddings`` (``--seq-len`` sets the run's). A key a
configuration class defaults and a real config leaves out takes transformers' default
(:data:`HF_DEFAULTS`: Gemma 3). A check the spec then fails names the config's key
(:data:`CONFIG_KEYS`). The spec's name is the checkpoint folder's (the folder of
``config.json``), else ``_name_or_path``'s last part. A ``model_type`` outside these, or a
key these models need that is missing or not a positive integer: exit 2, naming the file
and key. Not read: multi-token prediction layers (``num_nextn_predict_layers``: the replay's
``--mtp-layers``), dense layers inside a MoE stack other than the first ones
(``mlp_only_layers``: refused), attention biases and dropout, Gemma 2 / 3's extra norms
after attention and MLP and their logit soft-capping (memory-bound passes the replay does not
time).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tracesim.errors import InputError

DENSE = ("llama", "mistral", "qwen2", "qwen3", "phi3", "granite", "olmo2", "gemma", "gemma2",
         "gemma3_text")
MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_oss", "glm4_moe")
#: the Gemma generations and the layers their windows leave global (every n-th) where the
#: config has no ``layer_types``: Gemma 2 alternates, Gemma 3 ``sliding_window_pattern`` (6)
GEMMA_WINDOWS = {"gemma2": 2, "gemma3_text": 6}
MODEL_TYPES = (*DENSE, "nemotron", *MOE, "nemotron_h", "gpt2")
#: transformers' configuration-class defaults for the keys real configs leave out, by
#: ``model_type``: the Gemma 3 4B-27B checkpoints' ``text_config`` names no heads, key/value
#: heads, head width, vocabulary or positions (``Gemma3TextConfig.__init__``,
#: huggingface/transformers ``src/transformers/models/gemma3/configuration_gemma3.py``)
HF_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262_208, "num_attention_heads": 8, "num_key_value_heads": 4,
                    "head_dim": 256, "max_position_embeddings": 131_072, "sliding_window": 4096,
                    "sliding_window_pattern": 6},
}
#: ``layers_block_type`` names -> hybrid pattern characters (:mod:`tracesim.specs.hybrid`)
BLOCK_TYPES = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


#: the config key each model-spec key is read from (most architectures'), so that a check
#: the spec fails names the key the user's file has
CONFIG_KEYS = {"layers": "num_hidden_layers", "hidden": "hidden_size",
               "heads": "num_attention_heads", "kv_heads": "num_key_value_heads",
               "ffn_hidden": "intermediate_size", "vocab": "vocab_size",
               "seq_len": "max_position_embeddings", "top_k": "num_experts_per_tok",
               "experts": "num_experts", "moe_ffn_hidden": "moe_intermediate_size",
               "shared_experts": "n_shared_experts", "first_k_dense": "first_k_dense_replace",
               "router_groups": "n_group", "router_group_topk": "topk_group"}


def config_error(exc: InputError, file: Path) -> InputError:
    """``exc``, a check of the spec read from the config ``file``, naming the config's key."""
    key = CONFIG_KEYS.get(exc.where or "")
    if exc.file != str(file) or key is None:
        return exc
    return InputError(exc.message, file, f"{key} (the spec's {exc.where})")


def is_hf_config(data: Any) -> bool:
    """Whether a parsed file is a transformers ``config.json`` (it names a ``model_type``)."""
    return isinstance(data, Mapping) and "model_type" in data


def _int(data: Mapping[str, Any], key: str, file: Path, default: int | None = None) -> int:
    value = data.get(key)
    if value is None and default is not None:
        return default
    if value is None:
        raise InputError("missing (a positive integer)", file, key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"expected a positive integer, got {value!r}", file, key)
    return value


def _optional(data: Mapping[str, Any], key: str, file: Path) -> int:
    """A key that may be absent, null or 0 (0 then), else a positive integer."""
    return 0 if data.get(key) in (None, 0) else _int(data, key, file)


def _name(data: Mapping[str, Any], file: Path) -> str:
    if file.name == "config.json" and file.parent.name not in ("", "."):
        return file.parent.name
    path = str(data.get("_name_or_path") or "").rstrip("/")
    return path.rsplit("/", 1)[-1] if path else file.stem


def spec_from_hf_config(data: Mapping[str, Any], file: Path) -> dict[str, Any]:
    """The model-spec mapping of a transformers ``config.json`` (module docstring)."""
    text = data.get("text_config")
    if (isinstance(text, Mapping) and data.get("model_type") not in MODEL_TYPES
            and text.get("model_type") not in MODEL_TYPES):
        raise InputError(f"the language model's model_type {text.get('model_type')!r} is not one "
                         f"tracesim reads (known: {', '.join(MODEL_TYPES)}); write a model spec "
                         "YAML instead", file, "text_config.model_type")
    if isinstance(text, Mapping) and text.get("model_type") in MODEL_TYPES:
        # a vision-language checkpoint: its language model (the vision encoder is not replayed)
        try:
            lm = spec_from_hf_config({"_name_or_path": data.get("_name_or_path"), **text}, file)
        except InputError as exc:  # the key is the text_config's
            where = f"text_config.{exc.where}" if exc.where and exc.file == str(file) else exc.where
            raise InputError(exc.message, exc.file, where) from None
        lm["description"] = (f"{text['model_type']} (the language model of "
                             f"{data.get('model_type')}) from {file.name}")
        return lm
    mtype = data.get("model_type")
    if mtype not in MODEL_TYPES:
        raise InputError(f"model_type {mtype!r} is not one tracesim reads (known: "
                         f"{', '.join(MODEL_TYPES)}); write a model spec YAML instead", file,
                         "model_type")
    if mtype == "gpt2":
        return _gpt2(data, file)
    data = {**HF_DEFAULTS.get(str(mtype), {}), **{k: v for k, v in data.items() if v is not None}}
    pattern = _pattern(data, file) if mtype == "nemotron_h" else ""
    heads = _int(data, "num_attention_heads", file)
    out: dict[str, Any] = {
        "name": _name(data, file), "family": "moe" if mtype in MOE else "llama",
        "description": f"{mtype} from {file.name}", "source": f"Hugging Face config {file}",
        "layers": _int(data, "num_hidden_layers", file, default=len(pattern) or None),
        "hidden": _int(data, "hidden_size", file),
        "heads": heads, "kv_heads": _int(data, "num_key_value_heads", file, default=heads),
        "ffn_hidden": _int(data, "intermediate_size", file), "vocab": _int(data, "vocab_size", file),
        "seq_len": _seq_len(data, file), "activation": "swiglu", "norm": "rmsnorm",
        "tied_embeddings": bool(data.get("tie_word_embeddings", False)),
        "dtype": _dtype(data, file),
    }
    # Nemotron-H's configs spell it attention_head_dim
    hd_key = "head_dim" if data.get("head_dim") is not None else "attention_head_dim"
    if data.get(hd_key) is not None:
        head_dim = _int(data, hd_key, file)
        if head_dim * heads != out["hidden"]:
            out["head_dim"] = head_dim
    scaling = data.get("rope_scaling") or {}
    if isinstance(scaling, Mapping) and (scaling.get("rope_type") or scaling.get("type")) == "yarn":
        out["rope_scaling"] = "yarn"
    if mtype in ("qwen3", "qwen3_moe", "olmo2") or data.get("use_qk_norm"):
        out["qk_norm"] = True
    if mtype.startswith("gemma"):
        out["tied_embeddings"] = bool(data.get("tie_word_embeddings", True))
    window = data.get("sliding_window")
    longest = data.get("max_position_embeddings")
    if isinstance(longest, int) and isinstance(window, int) and window >= longest:
        window = 0  # a window as long as the longest sequence: full attention (Phi-4-mini)
    if window and (mtype in ("mistral", "mixtral", "phi3") or data.get("use_sliding_window")):
        out["sliding_window"] = _int(data, "sliding_window", file)
    if mtype in GEMMA_WINDOWS and data.get("sliding_window"):
        every = GEMMA_WINDOWS[mtype]
        if mtype == "gemma3_text":
            every = _int(data, "sliding_window_pattern", file, default=every)
        _windows(out, data, file, every)
    if mtype in MOE:
        _moe(out, mtype, data, file)
    elif mtype == "nemotron":
        out["activation"], out["norm"] = "relu2", "layernorm"
    elif mtype == "nemotron_h":
        _nemotron_h(out, pattern, data, file)
    return out


def _pattern(data: Mapping[str, Any], file: Path) -> str:
    """A hybrid config's layer pattern: ``hybrid_override_pattern``, or its per-layer
    ``layers_block_type`` names as pattern characters."""
    pattern = data.get("hybrid_override_pattern")
    if pattern is None and isinstance(data.get("layers_block_type"), list):
        types = data["layers_block_type"]
        bad = [t for t in types if not isinstance(t, str) or t not in BLOCK_TYPES]
        if bad:
            raise InputError(f"unknown layer type {bad[0]!r} (known: {', '.join(BLOCK_TYPES)})",
                             file, "layers_block_type")
        pattern = "".join(BLOCK_TYPES[t] for t in types)
    if not isinstance(pattern, str) or not pattern or set(pattern) - set(BLOCK_TYPES.values()):
        raise InputError(f"expected the layer pattern (a string of M, *, - and E), got {pattern!r}",
                         file, "hybrid_override_pattern")
    return pattern


def _nemotron_h(out: dict[str, Any], pattern: str, data: Mapping[str, Any], file: Path) -> None:
    """A hybrid Mamba-2 model (module docstring): its pattern, mixer and experts."""
    out.update(family="hybrid", activation="relu2", hybrid_pattern=pattern)
    # a key the config leaves out takes transformers' NemotronHConfig default (the chunk 128,
    # where a model spec's default is Megatron-Core's 256)
    for key, spec_key, default in (("mamba_num_heads", "mamba_heads", None),
                                   ("mamba_head_dim", "mamba_head_dim", 64),
                                   ("ssm_state_size", "mamba_state", 128),
                                   ("n_groups", "mamba_groups", 8), ("conv_kernel", "mamba_conv", 4),
                                   ("chunk_size", "mamba_chunk", 128)):
        out[spec_key] = _int(data, key, file, default=default)
    if "E" not in pattern:
        return
    out["experts"] = _int(data, "n_routed_experts", file)
    out["top_k"] = _int(data, "num_experts_per_tok", file)
    out["moe_ffn_hidden"] = _int(data, "moe_intermediate_size", file)
    shared = _optional(data, "moe_shared_expert_intermediate_size", file)
    if shared:
        if shared % out["moe_ffn_hidden"]:
            raise InputError(f"{shared} is not a whole number of experts of {out['moe_ffn_hidden']}",
                             file, "moe_shared_expert_intermediate_size")
        out["shared_experts"] = shared // out["moe_ffn_hidden"]
    if data.get("moe_latent_size"):
        out["moe_latent"] = _int(data, "moe_latent_size", file)


def _moe(out: dict[str, Any], mtype: str, data: Mapping[str, Any], file: Path) -> None:
    if mtype in ("mixtral", "gpt_oss"):
        out["experts"] = _int(data, "num_local_experts", file)
        key = "experts_per_token" if "experts_per_token" in data else "num_experts_per_tok"
        out["top_k"] = _int(data, key, file)
        out["moe_ffn_hidden"] = out["ffn_hidden"]
    elif mtype in ("qwen2_moe", "qwen3_moe"):
        out["experts"] = _int(data, "num_experts", file)
        out["top_k"] = _int(data, "num_experts_per_tok", file)
        out["moe_ffn_hidden"] = _int(data, "moe_intermediate_size", file)
        out["moe_every"] = _int(data, "decoder_sparse_step", file, default=1)
        if data.get("mlp_only_layers"):
            raise InputError("dense layers inside the MoE stack are not modelled (only the first "
                             "k layers can be dense)", file, "mlp_only_layers")
        shared = _optional(data, "shared_expert_intermediate_size", file)
        if shared:
            if shared % out["moe_ffn_hidden"]:
                raise InputError(f"{shared} is not a whole number of experts of "
                                 f"{out['moe_ffn_hidden']}", file, "shared_expert_intermediate_size")
            out["shared_experts"] = shared // out["moe_ffn_hidden"]
    elif mtype == "glm4_moe":  # DeepSeek's expert layout, grouped-query attention
        _routed(out, data, file)
    else:  # deepseek_v2 / deepseek_v3
        _routed(out, data, file)
        out["q_lora_rank"] = _optional(data, "q_lora_rank", file)
        for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            out[key] = _int(data, key, file)
        out.pop("head_dim", None)
        out["kv_heads"] = out["heads"]  # latent attention: every head has its own keys
    if mtype == "gpt_oss":
        _gpt_oss(out, data, file)


def _routed(out: dict[str, Any], data: Mapping[str, Any], file: Path) -> None:
    """DeepSeek's expert keys (also GLM-4.5's): routed and shared experts, the first dense
    layers, group-limited routing."""
    out["experts"] = _int(data, "n_routed_experts", file)
    out["top_k"] = _int(data, "num_experts_per_tok", file)
    out["moe_ffn_hidden"] = _int(data, "moe_intermediate_size", file)
    out["moe_every"] = _int(data, "moe_layer_freq", file, default=1)
    for key, spec_key in (("n_shared_experts", "shared_experts"),
                          ("first_k_dense_replace", "first_k_dense")):
        if data.get(key):
            out[spec_key] = _int(data, key, file)
    if _optional(data, "n_group", file) > 1:
        out["router_groups"] = _int(data, "n_group", file)
        out["router_group_topk"] = _int(data, "topk_group", file)


def _windows(out: dict[str, Any], data: Mapping[str, Any], file: Path, every: int = 0) -> None:
    """Windowed attention with full attention on every n-th layer: n from the per-layer
    ``layer_types`` (``full_attention`` / ``sliding_attention``), else ``every`` (0: the
    config has no windows without ``layer_types``)."""
    types = data.get("layer_types") or []
    if not isinstance(types, list):
        raise InputError(f"expected a list of layer types, got {types!r}", file, "layer_types")
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    if full:
        every = full[0] + 1
        if full != list(range(every - 1, len(types), every)):
            raise InputError("full-attention layers must fall every n-th layer", file, "layer_types")
    if data.get("sliding_window") and every:
        out["sliding_window"] = _int(data, "sliding_window", file)
        out["full_attention_every"] = every


def _gpt_oss(out: dict[str, Any], data: Mapping[str, Any], file: Path) -> None:
    """gpt-oss: windowed attention on alternate layers, the clamped SwiGLU, expert biases."""
    _windows(out, data, file)
    limit = data.get("swiglu_limit")
    if limit:
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 < limit < 1e6:
            raise InputError(f"expected a positive number, got {limit!r}", file, "swiglu_limit")
        out["glu_clamp"] = float(limit)
    out["expert_bias"] = True


def _gpt2(data: Mapping[str, Any], file: Path) -> dict[str, Any]:
    hidden = _int(data, "n_embd", file)
    return {
        "name": _name(data, file), "family": "gpt", "description": f"gpt2 from {file.name}",
        "source": f"Hugging Face config {file}", "layers": _int(data, "n_layer", file),
        "hidden": hidden, "heads": _int(data, "n_head", file),
        "ffn_hidden": _int(data, "n_inner", file, default=4 * hidden),
        "vocab": _int(data, "vocab_size", file), "seq_len": _int(data, "n_positions", file),
        "activation": "gelu", "norm": "layernorm",
        "tied_embeddings": bool(data.get("tie_word_embeddings", True)),
        "dtype": _dtype(data, file),
    }


def _seq_len(data: Mapping[str, Any], file: Path) -> int:
    scaling = data.get("rope_scaling")
    if isinstance(scaling, Mapping) and scaling.get("original_max_position_embeddings"):
        return _int(scaling, "original_max_position_embeddings", file)
    if data.get("original_max_position_embeddings"):  # Phi-3 128k, Phi-4-mini: at the top
        return _int(data, "original_max_position_embeddings", file)
    return _int(data, "max_position_embeddings", file)


def _dtype(data: Mapping[str, Any], file: Path) -> str:
    """The training dtype: the checkpoint's ``torch_dtype`` where it is a 16-bit one; a
    checkpoint stored in ``float32`` (Gemma 2, OLMo 2) was trained, as these models are, in
    BF16 mixed precision (``--dtype fp32`` replays pure FP32)."""
    key = "torch_dtype" if data.get("torch_dtype") is not None else "dtype"
    value = data.get(key) or "bfloat16"
    if not isinstance(value, str) or value not in _DTYPES:
        raise InputError(f"expected one of {', '.join(_DTYPES)}, got {value!r}", file, key)
    return "bf16" if value == "float32" else _DTYPES[value]
