"""Checked name lists of the layout options: Megatron-Core's recompute modules and CUDA-graph
scopes (:func:`tracesim.specs.layout_options.parallel_from_options` reads them)."""

from __future__ import annotations

from typing import Any

from tracesim.errors import InputError

#: the --recompute-modules names (Megatron-Core's --recompute-modules); tracesim.build.builder
#: says which template ops each recomputes
RECOMPUTE_MODULES = ("core_attn", "mlp", "moe_act", "moe", "shared_experts", "layernorm",
                     "mla_up_proj")


def _names(value: Any, known: tuple[str, ...], flag: str, what: str,
           none: bool = False) -> tuple[str, ...]:
    """A comma list (or a sequence) of names from ``known``, checked, duplicates dropped;
    with ``none``, ``none`` and an empty list mean no names, else a name is required."""
    items = [x.strip() for x in value.split(",")] if isinstance(value, str) else list(value or ())
    items = [x for x in items if x and not (none and x == "none")]
    bad = [x for x in items if x not in known]
    if bad or not (items or none):
        raise InputError(f"unknown {what} {(bad or [value])[0]!r} (known: {', '.join(known)}"
                         f"{', none' if none else ''})", flag)
    return tuple(dict.fromkeys(items))


def recompute_modules(value: Any) -> tuple[str, ...]:
    """``--recompute-modules`` (a comma list or a sequence) as checked module names."""
    return _names(value, RECOMPUTE_MODULES, "--recompute-modules", "module")


#: the --cuda-graphs scopes (Megatron-Core's cuda_graph_scope / --cuda-graph-modules);
#: tracesim.build.host says which template ops each captures
GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full_iteration")


def graph_scopes(value: Any) -> tuple[str, ...]:
    """``--cuda-graphs`` (a comma list or a sequence) as checked scope names; ``none`` or
    empty: none."""
    return _names(value, GRAPH_SCOPES, "--cuda-graphs", "CUDA-graph scope", none=True)
