"""Selective recomputation by module (Megatron-Core's ``--recompute-modules``).

With ``--recompute selective`` the backward pass of a layer reruns the forward ops of the
modules listed in ``ParallelSpec.recompute_modules`` right before the backward of the
latest of them (:meth:`tracesim.build.builder._StageBuilder.backward_unit`). ``core_attn``
is the template's own selective set (the attention core, marked ``recompute``); the other
names map to template ops by name (:data:`RECOMPUTE_OPS`), as Megatron-Core's modules:
``mlp`` the dense MLP, ``moe_act`` the experts' activation, ``moe`` the whole MoE block (its
dispatch and combine all-to-all included), ``shared_experts``, ``layernorm`` the two norms
of a layer, ``mla_up_proj`` MLA's query and key/value up projections with the rotary
embedding.
"""

from __future__ import annotations

from typing import Any

#: template ops (name prefixes) each --recompute-modules name reruns (module docstring)
RECOMPUTE_OPS: dict[str, tuple[str, ...]] = {
    "mlp": ("mlp.",), "moe_act": ("moe.act",), "moe": ("moe.",),
    "shared_experts": ("moe.shared.",), "layernorm": ("ln1", "ln2"),
    "mla_up_proj": ("attn.q_up", "attn.kv_up", "attn.rope"),
}


def recomputed(par: Any, r: Any) -> bool:
    """Whether forward op ``r`` (a resolved op) reruns in the backward on layout ``par``."""
    if par.recompute != "selective":
        return False
    comm = r.kind != "gpu"
    for m in par.recompute_modules:
        if m == "core_attn":
            if r.recompute and not comm:
                return True
        elif r.name.startswith(RECOMPUTE_OPS[m]) and (not comm or m == "moe"):
            return True
    return False
