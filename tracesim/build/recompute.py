"""Activation recomputation in the backward pass: which forward ops of a layer run again.

``--recompute selective`` is Megatron-Core's ``--recompute-modules``: the backward pass of
a layer reruns the forward ops of the modules listed in ``ParallelSpec.recompute_modules``
right before the backward of the latest of them
(:meth:`tracesim.build.builder._StageBuilder.backward_unit`). ``core_attn`` is the
template's own selective set (the attention core, marked ``recompute``); the other names
map to template ops by name (:data:`RECOMPUTE_OPS`), as Megatron-Core's modules: ``mlp``
the dense MLP, ``moe_act`` the experts' activation, ``moe`` the whole MoE block (its
dispatch and combine all-to-all included), ``shared_experts``, ``layernorm`` the two norms
of a layer, ``mla_up_proj`` MLA's query and key/value up projections with the rotary
embedding.

``--recompute op`` is torchtitan's op-level selective activation checkpointing
(``activation_checkpoint.mode = "selective"``, ``selective_ac_option = "op"``; pytorch/
torchtitan ``parallelize.py``, ``_save_list`` and ``_custom_policy``): each transformer
block is checkpointed with a policy that saves the outputs of matrix multiplies
(``aten.mm``), of flash / memory-efficient SDPA and of reduce-scatters, and recomputes every
other op; of the matrix multiplies it recomputes every second one of the block, counted in
forward order. A Llama block runs ``wq, wk, wv, wo, w1, w3, w2``, so ``wk``, ``wo`` and
``w3`` are recomputed, with both norms, the rotary embedding, the SwiGLU product and the
residual adds (a GPT MLP ``fc1, fc2``: ``wk``, ``wo``, ``fc2``). PyTorch's non-reentrant
checkpoint reruns the block's forward when the backward first needs a tensor it did not
save, i.e. at the start of the block's backward. The template fuses ``wq, wk, wv`` into
``attn.qkv`` and ``w1, w3`` into ``mlp.fc1``: their recomputed share is priced as that
share of the fused GEMM's time (:func:`op_shares`). An FP8 input cast reruns whole where its
linear reruns at all (the recomputed GEMM needs the cast input). Collectives are not rerun.
Defined for dense blocks: torchtitan's MoE experts run grouped GEMMs, which the policy does
not count, and MLA is a different block.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tracesim.errors import InputError

#: template ops (name prefixes) each --recompute-modules name reruns (module docstring)
RECOMPUTE_OPS: dict[str, tuple[str, ...]] = {
    "mlp": ("mlp.",), "moe_act": ("moe.act",), "moe": ("moe.",),
    "shared_experts": ("moe.shared.",), "layernorm": ("ln1", "ln2"),
    "mla_up_proj": ("attn.q_up", "attn.kv_up", "attn.rope"),
}

#: ops torchtitan's op-level policy saves (the fused SDPA output), by template op name
OP_SAVED = ("attn.core",)
#: name suffix of an FP8 input cast (:mod:`tracesim.template.fp8`)
_CAST = ".fp8_cast"


def recomputed(par: Any, r: Any) -> bool:
    """Whether forward op ``r`` (a resolved op) reruns in the backward with ``--recompute
    selective`` on layout ``par``."""
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


def check_op_recompute(model: Any) -> None:
    """InputError where ``--recompute op`` has no meaning for ``model`` (module docstring)."""
    if model.is_moe or model.is_mla:
        raise InputError(f"--recompute op (torchtitan's op-level selective checkpointing) is "
                         f"modelled for dense attention and MLP blocks; {model.name} has "
                         f"{'MoE layers' if model.is_moe else 'MLA attention'} (use selective "
                         "or full)", "--recompute")


def op_shares(model: Any) -> dict[str, float]:
    """The share of each fused GEMM of the template that ``--recompute op`` reruns: every
    second of the block's unfused matrix multiplies (module docstring); InputError for a
    block it is not defined for."""
    check_op_recompute(model)
    q, kv = float(model.q_width), float(model.kv_heads * model.head_dim)
    qkv = q + 2 * kv
    mms: list[tuple[str, float]] = [("attn.qkv", q / qkv), ("attn.qkv", kv / qkv),
                                    ("attn.qkv", kv / qkv), ("attn.proj", 1.0)]
    if model.activation == "swiglu":
        mms += [("mlp.fc1", 0.5), ("mlp.fc1", 0.5), ("mlp.fc2", 1.0)]
    else:
        mms += [("mlp.fc1", 1.0), ("mlp.fc2", 1.0)]
    out: dict[str, float] = {}
    for k, (name, share) in enumerate(mms, start=1):
        out[name] = out.get(name, 0.0) + (share if k % 2 == 0 else 0.0)
    return out


def _share(r: Any, shares: dict[str, float]) -> float:
    if r.kind != "gpu" or r.name in OP_SAVED:
        return 0.0
    if r.name.endswith(_CAST):
        return 1.0 if shares.get(r.name[: -len(_CAST)], 0.0) > 0 else 0.0
    if r.op_class == "gemm":
        return shares.get(r.name, 0.0)
    return 1.0


def op_recompute(fwd: Any, shares: dict[str, float]) -> list[Any]:
    """The forward ops of a layer (resolved) that ``--recompute op`` reruns, a fused GEMM
    as a copy of its recomputed share (FLOPs, bytes and time scaled)."""
    out = []
    for r in fwd:
        s = _share(r, shares)
        if s >= 1.0:
            out.append(r)
        elif s > 0.0:
            out.append(dataclasses.replace(r, flops=r.flops * s, bytes=r.bytes * s,
                                           dur_ns=int(round(r.dur_ns * s))))
    return out


def rerun(par: Any, fwd: Any, shares: dict[str, float]) -> list[Any]:
    """The forward ops of a layer (resolved) its backward reruns on layout ``par``
    (``shares``: :func:`op_shares` with ``--recompute op``)."""
    if par.recompute == "op":
        return op_recompute(fwd, shares)
    return [x for x in fwd if recomputed(par, x)]
