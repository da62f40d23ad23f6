"""Hybrid models: Mamba-2 mixers between attention, MLP and MoE layers (Nemotron-H, Nemotron 3).

Megatron-Core's hybrid model (``megatron/core/models/mamba``) stacks single-purpose layers,
each a pre-norm, one mixer and a residual add, in the order of a pattern string
(``hybrid_override_pattern``), one character per layer:

====  ==========================================================================
``M``  a Mamba-2 mixer (``MambaMixer``: in-projection, causal depthwise convolution, the
       chunked state-space scan, gated RMSNorm, out-projection)
``*``  self-attention (the model's grouped-query attention)
``-``  a dense MLP (``ffn_hidden`` wide)
``E``  a MoE block (the model's routed and shared experts)
====  ==========================================================================

A model spec names the pattern and the mixer's sizes::

    family: hybrid
    hybrid_pattern: "MEMEM*EMEMEM*E..."   # its length is ``layers``
    mamba_heads: 64          # nheads; d_inner = mamba_heads x mamba_head_dim
    mamba_head_dim: 64       # P
    mamba_state: 128         # d_state (N)
    mamba_groups: 8          # n_groups of B and C
    mamba_conv: 4            # causal convolution width (default 4)
    mamba_chunk: 256         # the scan's chunk length (default 256, Megatron's chunk_size)

The parameters of one mixer (``MambaMixer.__init__``): ``in_proj`` ``h x (2 d_inner + 2
groups state + heads)`` (z, x, B, C, dt), the convolution's ``conv_dim x (conv + 1)`` weights
and biases (``conv_dim = d_inner + 2 groups state``), ``dt_bias``, ``A_log`` and ``D`` (one
per head), the gated norm's ``d_inner`` weights and ``out_proj`` ``d_inner x h``; docs/moe.md
("Hybrid models") gives the ops and their costs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.strict import get_number, get_str

#: pattern characters: Mamba-2 mixer, attention, dense MLP, MoE (Megatron's Symbols)
MAMBA, ATTENTION, MLP, MOE = "M", "*", "-", "E"
PATTERN_CHARS = (MAMBA, ATTENTION, MLP, MOE)
#: each kind's template part (:mod:`tracesim.template.resolve`) and its name in messages
PARTS = {MAMBA: "mamba", ATTENTION: "attn", MLP: "mlp", MOE: "moe"}
KIND_NAMES = {MAMBA: "Mamba-2 mixer", ATTENTION: "attention", MLP: "MLP", MOE: "MoE"}
#: the mixer's integer keys and their defaults (0: required)
MAMBA_KEYS = {"mamba_heads": 0, "mamba_head_dim": 64, "mamba_state": 128, "mamba_groups": 8,
              "mamba_conv": 4, "mamba_chunk": 256}
HYBRID_KEYS = ("hybrid_pattern", *MAMBA_KEYS)
_LIMIT = 1 << 16


def parse_hybrid(kw: dict[str, Any], data: Mapping[str, Any], file: str | Path | None) -> None:
    """Read and check the hybrid keys into ``kw`` (module docstring): the pattern's length is
    the layer count, its characters are known, a Mamba layer needs the mixer's sizes, an
    ``E`` layer experts, and heads divide into the groups."""
    if "hybrid_pattern" not in data:
        extra = [k for k in MAMBA_KEYS if k in data]
        if kw["family"] == "hybrid" or extra:
            raise InputError("a hybrid model needs hybrid_pattern (one character per layer: "
                             "M mamba, * attention, - mlp, E moe)", file, "hybrid_pattern")
        return
    if kw["family"] != "hybrid":
        raise InputError("hybrid_pattern needs family: hybrid", file, "hybrid_pattern")
    pattern = get_str(data, "hybrid_pattern", file=file).strip()
    bad = sorted({c for c in pattern if c not in PATTERN_CHARS})
    if bad:
        raise InputError(f"unknown layer characters {''.join(bad)!r} (M mamba, * attention, "
                         "- mlp, E moe)", file, "hybrid_pattern")
    if len(pattern) != kw["layers"]:
        raise InputError(f"{len(pattern)} characters for {kw['layers']} layers", file,
                         "hybrid_pattern")
    kw["hybrid_pattern"] = pattern
    for key, default in MAMBA_KEYS.items():
        if key not in data:
            if default or MAMBA not in pattern:  # a default, or no Mamba layer to need it
                kw[key] = default
                continue
        kw[key] = get_number(data, key, file=file, kind=int)  # required: names the key if missing
        if kw[key] > _LIMIT:
            raise InputError(f"{kw[key]} is more than {_LIMIT:,}", file, key)
    if MAMBA in pattern and kw["mamba_heads"] % kw["mamba_groups"]:
        raise InputError(f"mamba_heads {kw['mamba_heads']} is not divisible by mamba_groups "
                         f"{kw['mamba_groups']}", file, "mamba_heads")
    if MOE in pattern and not kw.get("experts"):
        raise InputError("an E (MoE) layer needs experts > 0", file, "experts")
    if kw.get("experts") and MOE not in pattern:
        raise InputError("experts given but hybrid_pattern has no E (MoE) layer", file, "experts")
    for key, default in (("first_k_dense", 0), ("moe_every", 1)):
        if kw.get(key, default) != default:
            raise InputError(f"{key} does not apply to a hybrid model (its pattern places "
                             "every layer)", file, key)


def layer_char(model: Any, layer: int) -> str:
    """The pattern character of layer ``layer`` (0-based; past the end: the last layer's)."""
    pattern = model.hybrid_pattern
    return pattern[min(layer, len(pattern) - 1)]


def d_inner(model: Any) -> int:
    """The mixer's inner width: ``mamba_heads x mamba_head_dim``."""
    return int(model.mamba_heads * model.mamba_head_dim)


def in_width(model: Any) -> int:
    """Width of the in-projection's output: z, x (``d_inner`` each), B, C (``groups x
    state`` each) and dt (one per head)."""
    return 2 * d_inner(model) + 2 * int(model.mamba_groups * model.mamba_state) + model.mamba_heads


def conv_dim(model: Any) -> int:
    """Channels of the causal convolution: x, B and C (``d_inner + 2 groups state``)."""
    return d_inner(model) + 2 * int(model.mamba_groups * model.mamba_state)


def mamba_params(model: Any) -> int:
    """Parameters of one Mamba-2 mixer (module docstring), without its pre-norm."""
    h, di, cd = model.hidden, d_inner(model), conv_dim(model)
    conv = cd * model.mamba_conv + cd
    return h * in_width(model) + conv + 3 * model.mamba_heads + di + di * h


def layer_params(model: Any, layer: int, attention: int, mlp: int, norm: int) -> int:
    """Parameters of hybrid layer ``layer``: its mixer (``attention``, ``mlp`` are the
    model's per-layer counts of that kind) and one pre-norm."""
    c = layer_char(model, layer)
    mixer = {MAMBA: mamba_params(model), ATTENTION: attention}.get(c, mlp)
    return mixer + norm


def check_mamba_cp(heads: int, groups: int, tp: int, cp: int) -> None:
    """Megatron-Core's Mamba context parallelism (``MambaContextParallel``): every CP rank
    takes whole heads of its TP rank's share, and whole groups of B and C or a whole number
    of CP ranks per group (the group's state then repeated on each); InputError naming
    ``cp`` otherwise."""
    if (heads // tp) % cp:
        raise InputError(f"cp {cp} must divide the Mamba heads per TP rank ({heads} / tp {tp} = "
                         f"{heads // tp}): each CP rank scans whole heads", "layout", "cp")
    g = groups // tp
    if g % cp and cp % g:
        raise InputError(f"cp {cp} and the Mamba groups per TP rank ({groups} / tp {tp} = {g}) "
                         "must divide one another", "layout", "cp")
