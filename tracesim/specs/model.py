"""Model specs: what runs (house style rule 1: what / where / how as separate inputs).

A model spec is a YAML mapping (see ``workloads/*.yaml``)::

    name: gpt3-1.7b
    family: gpt            # gpt | llama | moe | hybrid
    layers: 24
    hidden: 2304
    heads: 24
    kv_heads: 24           # optional, default = heads (grouped-query attention if fewer)
    ffn_hidden: 9216       # optional, default 4 * hidden (gelu) or as given
    vocab: 51200
    seq_len: 2048
    activation: gelu       # gelu | swiglu | relu2 (squared ReLU); default swiglu (llama,
                           #   moe), relu2 (hybrid), gelu (gpt)
    norm: layernorm        # layernorm | rmsnorm; default layernorm (gpt), else rmsnorm
    tied_embeddings: true
    dtype: bf16            # fp32 | bf16 | fp16 | fp8
    head_dim: 128          # optional: per-head width when heads x head_dim != hidden (Qwen3, gpt-oss)
    # MoE only: experts, top_k, moe_ffn_hidden, moe_every (a MoE block every k layers),
    #   shared_experts (dense experts every token runs, each moe_ffn_hidden wide),
    #   first_k_dense (the first k layers keep a dense MLP of width ffn_hidden),
    #   moe_latent (latent MoE: the routed experts run on tokens projected to this width,
    #   Megatron's --moe-latent-size, Nemotron 3 Super),
    #   router_groups / router_group_topk (group-limited routing: the experts in that many
    #   equal groups, a token's top_k taken from its best router_group_topk groups; DeepSeek-V3
    #   n_group 8, topk_group 4; Megatron's --moe-router-num-groups / --moe-router-group-topk)
    # multi-head latent attention (DeepSeek-V2/V3): q_lora_rank (0: no query compression),
    #   kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim
    # sliding-window attention: sliding_window (keys per query), full_attention_every
    #   (every n-th layer keeps full attention, 1-based as Megatron's window_attn_skip_freq;
    #   0: every layer is windowed)
    # qk_norm: true (an RMSNorm over each head of the queries and keys, Qwen3)
    # rope_scaling: yarn (YaRN-scaled rotary; default: plain RoPE); glu_clamp: the limit of
    #   a clamped SwiGLU (gpt-oss: 7); expert_bias: the routed experts' projections have
    #   biases (gpt-oss). How stacks run them: docs/moe.md
    # hybrid (family hybrid; Nemotron-H, Nemotron 3): hybrid_pattern, one character per layer
    #   (M Mamba-2, * attention, - MLP, E MoE), and the Mamba-2 mixer's mamba_heads,
    #   mamba_head_dim, mamba_state, mamba_groups, mamba_conv, mamba_chunk
    #   (tracesim.specs.hybrid)

Unknown keys are errors; so are non-positive sizes and heads that do not divide hidden
(unless ``head_dim`` or the MLA head sizes are given). docs/moe.md describes the MoE and
attention variants and how the template models them.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.ops.dtypes import DTYPE_BYTES
from tracesim.specs import hybrid
from tracesim.strict import check_keys, get_number, get_str

FAMILIES = ("gpt", "llama", "moe", "hybrid")
DTYPES = ("fp32", "bf16", "fp16", "fp8")
#: the keys of multi-head latent attention (all given together, ``q_lora_rank`` may be 0)
MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
#: optional integer keys that default to 0 (feature off) and are left out of ``to_dict`` then
_ZERO_KEYS = ("shared_experts", "first_k_dense", *MLA_KEYS, "sliding_window",
              "full_attention_every", "router_groups", "router_group_topk", "moe_latent")

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
    "head_dim",
    "shared_experts",
    "first_k_dense",
    *MLA_KEYS,
    "sliding_window",
    "full_attention_every",
    "rope_scaling",
    "glu_clamp",
    "expert_bias",
    "qk_norm",
    "router_groups",
    "router_group_topk",
    "moe_latent",
    *hybrid.HYBRID_KEYS,
)
#: sizes every spec has and must be positive (checked again when a spec is built in Python)
_POSITIVE = ("layers", "hidden", "heads", "vocab", "seq_len", "kv_heads", "ffn_hidden")
#: MLP activations: GELU, SwiGLU (gated: three weight matrices), squared ReLU (Nemotron-H)
ACTIVATIONS = ("gelu", "swiglu", "relu2")
#: rotary variants a spec may name (``rope_scaling``; "" = plain RoPE)
ROPE_SCALINGS = ("yarn",)


@dataclass(frozen=True)
class ModelSpec:
    """A transformer model's dimensions. Sizes are counts (not bytes).

    ``head_dim_override`` is the YAML key ``head_dim`` (0: ``hidden / heads``); read the
    per-head width from :attr:`head_dim`. The MoE, MLA and sliding-window fields are 0 when
    the model does not use the feature (the module docstring lists them).
    """

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
    head_dim_override: int = 0
    shared_experts: int = 0
    first_k_dense: int = 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int = 0
    full_attention_every: int = 0
    rope_scaling: str = ""
    glu_clamp: float = 0.0
    expert_bias: bool = False
    qk_norm: bool = False
    router_groups: int = 0
    router_group_topk: int = 0
    #: latent MoE (Megatron's moe_latent_size): the routed experts' width of a token (0: hidden)
    moe_latent: int = 0
    #: a hybrid model's layers (:mod:`tracesim.specs.hybrid`; "" for the other families)
    hybrid_pattern: str = ""
    mamba_heads: int = 0
    mamba_head_dim: int = 0
    mamba_state: int = 0
    mamba_groups: int = 0
    mamba_conv: int = 0
    mamba_chunk: int = 0

    def __post_init__(self) -> None:
        # a spec built in Python (not read by model_from_dict) is checked for the sizes the
        # derived widths divide by: InputError naming the field, not a ZeroDivisionError later
        for key in _POSITIVE:
            value = getattr(self, key)
            if not isinstance(value, numbers.Integral) or value < 1:
                raise InputError(f"must be a whole number > 0, got {value!r}",
                                 f"model {self.name}", key)

    @property
    def head_dim(self) -> int:
        """Per-head width of queries, keys and values (standard attention)."""
        return self.head_dim_override or self.hidden // self.heads

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (low-rank key/value, DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    @property
    def qk_head_dim(self) -> int:
        """Per-head width of queries and keys (MLA: the no-position part plus the rotary part)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def v_dim(self) -> int:
        """Per-head width of values (and of the attention output)."""
        return self.v_head_dim if self.is_mla else self.head_dim

    @property
    def q_width(self) -> int:
        """Width of the query projection: ``heads * qk_head_dim``."""
        return self.heads * self.qk_head_dim

    @property
    def attn_width(self) -> int:
        """Width of the attention output (input of the output projection): ``heads * v_dim``."""
        return self.heads * self.v_dim

    @property
    def moe_ffn(self) -> int:
        """Width of one routed expert's MLP."""
        return self.moe_ffn_hidden or self.ffn_hidden

    @property
    def moe_hidden(self) -> int:
        """Width of a token where the routed experts see it: ``moe_latent`` (latent MoE,
        Nemotron 3 Super) or ``hidden``."""
        return self.moe_latent or self.hidden

    @property
    def shared_ffn(self) -> int:
        """Width of the shared-expert MLP (all shared experts side by side; 0: none)."""
        return self.shared_experts * self.moe_ffn if self.is_moe else 0

    @property
    def is_hybrid(self) -> bool:
        """Layers of one kind each in a pattern (Mamba, attention, MLP, MoE; Nemotron-H)."""
        return bool(self.hybrid_pattern)

    def layer_kind(self, layer: int) -> str:
        """A hybrid model's pattern character of layer ``layer`` (``M``, ``*``, ``-``, ``E``);
        "" for the other families (every layer attention + MLP or MoE)."""
        return hybrid.layer_char(self, layer) if self.is_hybrid else ""

    def moe_layer(self, layer: int) -> bool:
        """Whether transformer layer ``layer`` (0-based) has a MoE MLP: not one of the first
        ``first_k_dense`` layers, and the last of each group of ``moe_every`` (a hybrid
        model: an ``E`` layer of its pattern)."""
        if self.is_hybrid:
            return self.layer_kind(layer) == hybrid.MOE
        return (self.is_moe and layer >= self.first_k_dense
                and layer % self.moe_every == self.moe_every - 1)

    def window(self, layer: int) -> int:
        """Keys per query of layer ``layer``'s sliding window (0: full attention). Every
        ``full_attention_every``-th layer (1-based) keeps full attention."""
        f = self.full_attention_every
        if self.sliding_window <= 0 or (f > 0 and layer % f == f - 1):
            return 0
        return self.sliding_window

    def replace(self, **changes: Any) -> ModelSpec:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The spec as a YAML mapping (keys of the file format; features not used left out)."""
        d = dataclasses.asdict(self)
        if not self.is_moe:
            for k in ("experts", "top_k", "moe_ffn_hidden", "moe_every"):
                d.pop(k)
        for k in ("description", "source"):
            if not d[k]:
                d.pop(k)
        head_dim = d.pop("head_dim_override")
        if head_dim:
            d["head_dim"] = head_dim
        for k in (*_ZERO_KEYS, "rope_scaling", "glu_clamp", "expert_bias", "qk_norm",
                  *hybrid.HYBRID_KEYS):
            if not d[k]:
                d.pop(k)
        return d

    def attention_params(self) -> int:
        """Parameters of one layer's attention (projections, MLA latent norms, gpt biases)."""
        h = self.hidden
        if self.is_mla:
            qk, heads = self.qk_head_dim, self.heads
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * qk
            else:
                q = h * heads * qk
            kv = (h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
                  + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_dim))
            return q + kv + self.attn_width * h
        qd, kv = self.q_width, self.kv_heads * self.head_dim
        bias = (qd + 2 * kv + h) if self.family == "gpt" else 0
        qk_norm = 2 * self.head_dim if self.qk_norm else 0
        return h * qd + 2 * h * kv + qd * h + bias + qk_norm  # q, k, v, out

    def mlp_params(self, layer: int, *, active: bool = False) -> int:
        """Parameters of layer ``layer``'s MLP: a dense MLP, or the MoE block (router, routed
        experts, shared experts); ``active``: only the ``top_k`` experts a token runs."""
        h = self.hidden
        per = 3 if self.activation == "swiglu" else 2  # weight matrices per MLP
        if not self.moe_layer(layer):
            bias = (self.ffn_hidden + h) if self.family == "gpt" else 0
            return per * h * self.ffn_hidden + bias
        routed = self.top_k if active else self.experts
        latent = 2 * h * self.moe_latent  # the projections to and from the latent width
        return (routed * per * self.moe_hidden * self.moe_ffn + h * self.experts
                + per * h * self.shared_ffn + latent)

    def params(self) -> int:
        """Total parameter count (weights and biases; embeddings counted once if tied).

        Only the ``gpt`` family has linear-layer biases (GPT-2/3, Megatron); ``llama`` and
        ``moe`` (Mixtral, DeepSeek, Qwen3, gpt-oss) have none (gpt-oss's biases, 0.04 % of
        its parameters, are left out).
        """
        return self._count(active=False)

    def active_params(self) -> int:
        """Parameters one token runs: :meth:`params` with ``top_k`` routed experts per MoE
        layer instead of all of them (embedding and output head included)."""
        return self._count(active=True)

    def _count(self, *, active: bool) -> int:
        h, v = self.hidden, self.vocab
        # LayerNorm has a weight and a bias, RMSNorm only a weight; two norms per layer
        norm_params = 2 * h if self.norm == "layernorm" else h
        attn = self.attention_params()
        total = 0
        for layer in range(self.layers):
            mlp = self.mlp_params(layer, active=active)
            if self.is_hybrid:  # one mixer and one norm a layer
                total += hybrid.layer_params(self, layer, attn, mlp, norm_params)
                continue
            total += attn + mlp + 2 * norm_params
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
           "top_k": 1 << 14, "moe_ffn_hidden": 1 << 22, "moe_every": 1 << 14,
           "head_dim_override": 1 << 16, "shared_experts": 1 << 14, "first_k_dense": 1 << 14,
           "q_lora_rank": 1 << 20, "kv_lora_rank": 1 << 20, "qk_nope_head_dim": 1 << 16,
           "qk_rope_head_dim": 1 << 16, "v_head_dim": 1 << 16, "sliding_window": 1 << 24,
           "full_attention_every": 1 << 14, "router_groups": 1 << 14, "router_group_topk": 1 << 14,
           "moe_latent": 1 << 20}


def model_from_dict(data: Any, file: str | Path | None = None) -> ModelSpec:
    """Validate a model-spec mapping strictly and return a :class:`ModelSpec`."""
    check_keys(data, _REQUIRED, _OPTIONAL, file=file)
    kw: dict[str, Any] = {"name": get_str(data, "name", file=file)}
    kw["family"] = get_str(data, "family", file=file, choices=FAMILIES)
    for key in ("layers", "hidden", "heads", "vocab", "seq_len"):
        kw[key] = get_number(data, key, file=file, kind=int)
    kw["kv_heads"] = get_number(data, "kv_heads", file=file, kind=int, default=kw["heads"])
    kw["activation"] = get_str(
        data, "activation", file=file, choices=ACTIVATIONS,
        default={"llama": "swiglu", "moe": "swiglu", "hybrid": "relu2"}.get(kw["family"], "gelu"),
    )
    kw["norm"] = get_str(
        data, "norm", file=file, choices=("layernorm", "rmsnorm"),
        default="rmsnorm" if kw["family"] in ("llama", "moe", "hybrid") else "layernorm",
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
    if "head_dim" in data:
        kw["head_dim_override"] = get_number(data, "head_dim", file=file, kind=int)
    for key in _ZERO_KEYS:
        kw[key] = get_number(data, key, file=file, kind=int, allow_zero=True, default=0)
    for key, limit in _LIMITS.items():
        if kw.get(key, 0) > limit:
            name = "head_dim" if key == "head_dim_override" else key
            raise InputError(f"{kw[key]} is more than {limit:,} (the largest value a spec may give)",
                             file, name)
    _check_attention(kw, data, file)
    _variants(kw, data, file)
    hybrid.parse_hybrid(kw, data, file)
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
    for key in ("shared_experts", "first_k_dense", "moe_latent"):
        if kw[key] and not kw["experts"]:
            raise InputError(f"{key} needs a MoE model (experts > 0)", file, key)
    _check_router_groups(kw, file)
    if kw["first_k_dense"] >= kw["layers"]:
        raise InputError(f"first_k_dense {kw['first_k_dense']} leaves no MoE layer of "
                         f"{kw['layers']}", file, "first_k_dense")
    if (kw["family"] == "moe" and not kw.get("hybrid_pattern")
            and not any(i % kw["moe_every"] == kw["moe_every"] - 1
                        for i in range(kw["first_k_dense"], kw["layers"]))):
        raise InputError(f"moe_every {kw['moe_every']} leaves no MoE layer of {kw['layers']}",
                         file, "moe_every")
    if kw["full_attention_every"] and not kw["sliding_window"]:
        raise InputError("full_attention_every needs a sliding_window", file,
                         "full_attention_every")
    return ModelSpec(**kw)


def _check_router_groups(kw: Mapping[str, Any], file: str | Path | None) -> None:
    """Group-limited routing: both keys or neither, groups dividing the experts, the top-k
    inside the chosen groups' experts."""
    g, m = kw["router_groups"], kw["router_group_topk"]
    if not g and not m:
        return
    if not g or not m or not kw["experts"]:
        key = "router_group_topk" if g else "router_groups"
        raise InputError("router_groups and router_group_topk go together, on a MoE model",
                         file, key)
    if kw["experts"] % g:
        raise InputError(f"experts {kw['experts']} are not divisible by router_groups {g}",
                         file, "router_groups")
    if not m <= g or kw["top_k"] > m * kw["experts"] // g:
        raise InputError(f"must be in 1..router_groups ({g}) and its groups hold top_k "
                         f"{kw['top_k']} experts", file, "router_group_topk")


def _variants(kw: dict[str, Any], data: Mapping[str, Any], file: str | Path | None) -> None:
    """The rotary, activation, expert-bias and query/key-norm variants (module docstring)."""
    if "rope_scaling" in data:
        kw["rope_scaling"] = get_str(data, "rope_scaling", file=file, choices=ROPE_SCALINGS)
    if "glu_clamp" in data:
        if kw["activation"] != "swiglu":
            raise InputError("glu_clamp needs activation swiglu", file, "glu_clamp")
        kw["glu_clamp"] = get_number(data, "glu_clamp", file=file)
    for key in ("expert_bias", "qk_norm"):
        flag = data.get(key, False)
        if not isinstance(flag, bool):
            raise InputError(f"expected true or false, got {flag!r}", file, key)
        kw[key] = flag
    if kw["qk_norm"] and kw.get("q_lora_rank", 0) + kw.get("kv_lora_rank", 0):
        raise InputError("qk_norm is for grouped-query attention (MLA has its latent norms)",
                         file, "qk_norm")
    if kw["expert_bias"] and not kw["experts"]:
        raise InputError("expert_bias needs a MoE model (experts > 0)", file, "expert_bias")


def _check_attention(kw: Mapping[str, Any], data: Mapping[str, Any], file: str | Path | None) -> None:
    """Head sizes: ``hidden / heads`` unless ``head_dim`` or the MLA keys give them."""
    mla = [k for k in MLA_KEYS if k in data]
    if mla:
        missing = [k for k in MLA_KEYS if k not in data]
        if missing:
            raise InputError(f"multi-head latent attention needs {', '.join(missing)} too "
                             f"(given: {', '.join(mla)})", file, missing[0])
        for key in ("kv_lora_rank", "v_head_dim"):
            if kw[key] <= 0:
                raise InputError(f"must be > 0, got {kw[key]}", file, key)
        if kw["qk_nope_head_dim"] + kw["qk_rope_head_dim"] <= 0:
            raise InputError("qk_nope_head_dim + qk_rope_head_dim must be > 0", file,
                             "qk_nope_head_dim")
        if "head_dim" in data:
            raise InputError("give head_dim or the MLA head sizes, not both", file, "head_dim")
        if kw["kv_heads"] != kw["heads"]:
            raise InputError(f"MLA has one key/value head per query head: kv_heads "
                             f"{kw['kv_heads']} != heads {kw['heads']}", file, "kv_heads")
    elif "head_dim" not in data and kw["hidden"] % kw["heads"]:
        raise InputError(
            f"hidden {kw['hidden']} is not divisible by heads {kw['heads']}", file, "heads"
        )


def model_spec_mapping(spec: ModelSpec | Mapping[str, Any]) -> dict[str, Any]:
    return spec.to_dict() if isinstance(spec, ModelSpec) else dict(spec)
