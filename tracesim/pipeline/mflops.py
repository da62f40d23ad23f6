"""Megatron-LM's model FLOPs per token, the count behind the TFLOP/s that Megatron-Core logs
(``--log-throughput``) and that Megatron-Bridge's performance tables print.

:func:`megatron_flops_per_token` follows ``num_floating_point_operations`` of
``megatron/training/training.py`` at core_v0.15.0 (NVIDIA/Megatron-LM) for a transformer
(a hybrid model: Megatron-Bridge's own count, :func:`hybrid_flops_per_token`): every GEMM
three times (forward, data and weight gradients), a SwiGLU MLP 3/2 of a GELU one (Megatron's ``--swiglu`` only: gpt-oss's clamped GLU,
``glu_clamp``, counts as ungated, as the published TFLOP/s do), dense and MoE layers (``first_k_dense``, ``moe_every``) with
the routed experts' width times ``top_k`` plus the shared experts, grouped-query attention
with half the score matrix (causal), multi-head latent attention by its own terms,
multi-token-prediction modules as one more layer of the last layer's kind plus their norms
and projection, and the output layer once per head. It counts full attention in every layer
(a sliding window is not discounted) and the vocabulary as given (Megatron pads it to a
multiple of 128 x TP: at most 0.1% here). ``tests/test_megatron_flops.py`` checks it
against the published (tokens/s, TFLOP/s) pairs of the Megatron-Bridge tables.
"""

from __future__ import annotations

from tracesim.specs.model import ModelSpec


def megatron_flops_per_token(model: ModelSpec, seq_len: int, mtp_layers: int = 0) -> float:
    """Model FLOPs per token of one training iteration (forward and backward) of ``model`` at
    sequence length ``seq_len`` with ``mtp_layers`` multi-token-prediction modules, as
    Megatron-LM counts them (module docstring)."""
    if model.is_hybrid:
        return hybrid_flops_per_token(model, seq_len, mtp_layers)
    h, s = float(model.hidden), float(seq_len)
    n = model.layers
    moe_pattern = [model.moe_layer(i) for i in range(n)]
    n_moe = sum(moe_pattern)
    n_dense = n - n_moe
    if mtp_layers:
        if moe_pattern[-1]:
            n_moe += mtp_layers
        else:
            n_dense += mtp_layers
    layers = n + mtp_layers
    # Megatron multiplies by 3/2 for ``--swiglu`` only: gpt-oss's clamped GLU (a quick-GELU
    # gate, ``glu_clamp``) is counted as an ungated MLP, as the published TFLOP/s are
    gated = 1.5 if model.activation == "swiglu" and not model.glu_clamp else 1.0
    expansion = 3 * 2 * 2
    mlp = expansion * layers * h * (
        model.ffn_hidden * gated * n_dense / layers
        + model.moe_ffn * (model.top_k if model.is_moe else 0) * gated * n_moe / layers
        + model.shared_ffn * gated * n_moe / layers)
    heads = float(model.heads)
    if model.is_mla:
        qk, rope, v = float(model.qk_nope_head_dim), float(model.qk_rope_head_dim), float(model.v_head_dim)
        q_term = (h * heads * (qk + rope) if not model.q_lora_rank
                  else model.q_lora_rank * (h + heads * (qk + rope) + 1))
        attn = 3 * 2 * layers * (
            q_term
            + model.kv_lora_rank * (h + heads * (qk + v) + 1)
            + h * rope
            + heads * v * h
            + s * heads * (qk + rope) / 2
            + s * heads * v / 2)
    else:
        ratio = model.heads * model.head_dim / h
        attn = expansion * layers * h * h * (
            (1 + model.kv_heads / heads + s / h / 2) * ratio)
    mtp = 3 * 2 * mtp_layers * (3 * h + 2 * h * h)
    logits = 3 * 2 * h * model.vocab * (mtp_layers + 1)
    return mlp + attn + mtp + logits


def hybrid_flops_per_token(model: ModelSpec, seq_len: int, mtp_layers: int = 0) -> float:
    """A hybrid model's FLOPs per token as Megatron-Bridge counts them for its tables
    (``src/megatron/bridge/training/utils/flop_utils.py``, ``hybrid_flops`` at 067f987df0):
    forward x 3; per pattern layer, attention ``4 h p (h + h g / heads) + 2 h p s`` (``p`` the
    query width over ``h``, ``g`` the key/value heads; the full square), a Mamba layer
    ``2 h (2 d + 2 G N + heads) + 7 d N + 2 d h`` with ``d = 2 h`` (Bridge's stand-in for the
    inner width), a dense MLP ``4 ffn h`` (x 3/2 gated), a MoE layer ``4 h_r moe_ffn top_k``
    (``h_r`` the latent width, plus ``4 h moe_latent`` for the two projections) ``+ 4 h
    shared_ffn``; the logits ``2 h V`` once per head; the multi-token-prediction modules as
    one more attention and MoE layer each (Nemotron 3 Super's ``*E``)."""
    h, s = float(model.hidden), float(seq_len)
    counts = {c: model.hybrid_pattern.count(c) for c in "M*-E"}
    counts["*"] += mtp_layers
    counts["E"] += mtp_layers
    gated = 1.5 if model.activation == "swiglu" else 1.0
    p = model.heads * model.head_dim / h
    attn = 4 * h * p * (h + h * model.kv_heads / model.heads) + 2 * h * p * s
    d, groups, state = 2 * h, float(model.mamba_groups), float(model.mamba_state)
    mamba = (2 * h * (2 * d + 2 * groups * state + model.mamba_heads) + 7 * d * state
             + 2 * d * h)
    mlp = 4 * model.ffn_hidden * h * gated
    moe = (4 * model.moe_hidden * model.moe_ffn * model.top_k * gated
           + (4 * h * model.moe_latent if model.moe_latent else 0.0)
           + 4 * h * model.shared_ffn * gated) if model.is_moe else 0.0
    fwd = (counts["*"] * attn + counts["M"] * mamba + counts["-"] * mlp + counts["E"] * moe
           + 2 * h * model.vocab * (1 + mtp_layers))
    return 3 * fwd

