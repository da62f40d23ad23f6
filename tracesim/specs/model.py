"""Model specs: what runs (house style rule 1: what / where / how as separate inputs).

A model spec is a YAML mapping (see ``workloads/*.yaml``)::

    name: gpt3-1.7b
    family: gpt            # gpt | llama | moe
    layers: 24
    hidden: 2304
    heads: 24
    kv_heads: 24           # optional, default = heads (grouped-query attention if fewer)
    ffn_hidden: 9216       # optional, default 4 * hidden (gelu) or as given
    vocab: 51200
    seq_len: 2048
    activation: gelu       # gelu | swiglu
    norm: layernorm        # layernorm | rmsnorm
    tied_embeddings: true
    dtype: bf16            # fp32 | bf16 | fp16 | fp8
    # MoE only: experts, top_k, moe_ffn_hidden, moe_every (a MoE block every k layers)

Unknown keys are errors; so are non-positive sizes and heads that do not divide hidden.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.ops.dtypes import DTYPE_BYTES
from tracesim.strict import check_keys, get_number, get_str

FAMILIES = ("gpt", "llama", "moe")
DTYPES = ("fp32", "bf16", "fp16", "fp8")

_REQUIRED = ("name", "family", "layers", "hidden", "heads", "vocab", "seq_len")
_OPTIONAL = (
    "kv_heads",
    "ffn_hidden",
    "activation",
    "norm",
    "tied_embeddings",
    "dtype",
    "experts",
    "top_k",
    "moe_ffn_hidden",
    "moe_every",
    "description",
    "source",
)


@dataclass(frozen=True)
class ModelSpec:
    """A transformer model's dimensions. Sizes are counts (not bytes)."""

    name: str
    family: str
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq_len: int
    kv_heads: int
    ffn_hidden: int
    activation: str = "gelu"
    norm: str = "layernorm"
    tied_embeddings: bool = True
    dtype: str = "bf16"
    experts: int = 0
    top_k: int = 0
    moe_ffn_hidden: int = 0
    moe_every: int = 1
    description: str = ""
    source: str = ""

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    def moe_layer(self, layer: int) -> bool:
        """Whether transformer layer ``layer`` (0-based) has a MoE MLP."""
        return self.is_moe and (layer % self.moe_every == self.moe_every - 1)

    def replace(self, **changes: Any) -> ModelSpec:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if not self.is_moe:
            for k in ("experts", "top_k", "moe_ffn_hidden", "moe_every"):
                d.pop(k)
        for k in ("description", "source"):
            if not d[k]:
                d.pop(k)
        return d

    def params(self) -> int:
        """Total parameter count (weights and biases; embeddings counted once if tied).

        Only the ``gpt`` family has linear-layer biases (GPT-2/3, Megatron); ``llama`` and
        ``moe`` (Mixtral, DeepSeek-MoE) have none.
        """
        h, f, v = self.hidden, self.ffn_hidden, self.vocab
        kv = self.kv_heads * self.head_dim
        attn = h * h + 2 * h * kv + h * h  # q, k, v, out
        gated = self.activation == "swiglu"
        mlp_dense = (3 if gated else 2) * h * f
        # LayerNorm has a weight and a bias, RMSNorm only a weight; two norms per layer
        norm_params = 2 * h if self.norm == "layernorm" else h
        norms = 2 * norm_params
        bias = (h + 2 * kv + h + f + h) if self.family == "gpt" else 0
        total = 0
        for layer in range(self.layers):
            if self.moe_layer(layer):
                ef = self.moe_ffn_hidden or f
                mlp = self.experts * (3 if gated else 2) * h * ef + h * self.experts
            else:
                mlp = mlp_dense
            total += attn + mlp + norms + bias
        emb = v * h
        total += emb if self.tied_embeddings else 2 * emb
        if self.family == "gpt":
            total += self.seq_len * h  # learned position embeddings
        total += norm_params  # final norm
        return total


#: upper bounds of the integer fields: far above any model trained, low enough that the
#: sizes derived from them (bytes of a logits tensor, FLOPs of a step) stay finite integers
_LIMITS = {"layers": 1 << 14, "hidden": 1 << 20, "heads": 1 << 14, "kv_heads": 1 << 14,
           "ffn_hidden": 1 << 22, "vocab": 1 << 24, "seq_len": 1 << 24, "experts": 1 << 14,
           "top_k": 1 << 14, "moe_ffn_hidden": 1 << 22, "moe_every": 1 << 14}


def model_from_dict(data: Any, file: str | Path | None = None) -> ModelSpec:
    """Validate a model-spec mapping strictly and return a :class:`ModelSpec`."""
    check_keys(data, _REQUIRED, _OPTIONAL, file=file)
    kw: dict[str, Any] = {"name": get_str(data, "name", file=file)}
    kw["family"] = get_str(data, "family", file=file, choices=FAMILIES)
    for key in ("layers", "hidden", "heads", "vocab", "seq_len"):
        kw[key] = get_number(data, key, file=file, kind=int)
    kw["kv_heads"] = get_number(data, "kv_heads", file=file, kind=int, default=kw["heads"])
    kw["activation"] = get_str(
        data, "activation", file=file, choices=("gelu", "swiglu"),
        default="swiglu" if kw["family"] == "llama" else "gelu",
    )
    kw["norm"] = get_str(
        data, "norm", file=file, choices=("layernorm", "rmsnorm"),
        default="rmsnorm" if kw["family"] == "llama" else "layernorm",
    )
    kw["ffn_hidden"] = get_number(data, "ffn_hidden", file=file, kind=int, default=4 * kw["hidden"])
    tied = data.get("tied_embeddings", kw["family"] == "gpt")
    if not isinstance(tied, bool):
        raise InputError(f"expected true or false, got {tied!r}", file, "tied_embeddings")
    kw["tied_embeddings"] = tied
    kw["dtype"] = get_str(data, "dtype", file=file, choices=DTYPES, default="bf16")
    for key in ("experts", "top_k", "moe_ffn_hidden"):
        kw[key] = get_number(data, key, file=file, kind=int, allow_zero=True, default=0) if key in data else 0
    kw["moe_every"] = get_number(data, "moe_every", file=file, kind=int, default=1)
    for key in ("description", "source"):
        if key in data:
            kw[key] = get_str(data, key, file=file)
    for key, limit in _LIMITS.items():
        if kw.get(key, 0) > limit:
            raise InputError(f"{kw[key]} is more than {limit:,} (the largest value a spec may give)",
                             file, key)
    if kw["hidden"] % kw["heads"]:
        raise InputError(
            f"hidden {kw['hidden']} is not divisible by heads {kw['heads']}", file, "heads"
        )
    if kw["heads"] % kw["kv_heads"]:
        raise InputError(
            f"heads {kw['heads']} is not divisible by kv_heads {kw['kv_heads']}", file, "kv_heads"
        )
    if kw["family"] == "moe" and (kw["experts"] <= 0 or kw["top_k"] <= 0):
        raise InputError("a moe model needs experts > 0 and top_k > 0", file, "experts")
    if kw["experts"] and not 0 < kw["top_k"] <= kw["experts"]:
        raise InputError(
            f"top_k {kw['top_k']} must be in 1..experts ({kw['experts']})", file, "top_k"
        )
    return ModelSpec(**kw)


def model_spec_mapping(spec: ModelSpec | Mapping[str, Any]) -> dict[str, Any]:
    return spec.to_dict() if isinstance(spec, ModelSpec) else dict(spec)
