"""Padding of each expert's tokens for quantized grouped GEMMs (Megatron-Core).

FP8 and FP4 grouped GEMMs need every expert's token count to be a multiple of an alignment
(``get_align_size_for_quantization``, ``megatron/core/transformer/moe/moe_utils.py``): 16 for
FP8 with tensor-wise scaling, 32 for MXFP8 (``fp8_utils.get_fp8_align_size``), 128 for NVFP4
(``fp4_utils.get_fp4_align_size``). Megatron-Core pads in one of two places:

* **at the router** (``--moe-router-padding-for-quantization``; ``--moe-router-padding``
  here): each rank's routing map gets, per expert, as many extra token copies as round its
  count up to the alignment (``pad_routing_map``), so the padding is dispatched, permuted
  and run through the experts like routed tokens. It is a config-level setting: every MoE
  layer pads, BF16 layers of an NVFP4 run included;
* **at the experts** otherwise (``TEGroupedMLP``'s ``Fp8Padding``, or the HybridEP / DeepEP
  dispatchers' own padding): each local expert's received tokens are rounded up; only the
  grouped GEMMs see it. Also config-level (``config.fp8 or config.fp4``, ``experts.py``).

With a random routing (``moe_router_force_load_balancing``, which every published benchmark
recipe sets: random logits, then top-k) the count of one expert among ``n`` routed tokens is
binomial with ``p = top_k / experts``; :func:`padded_mean` gives the expected padded count by
its normal approximation on the integers. The factors multiply the template's routed tokens
(symbols ``moe_pad``: the experts' tokens, ``moe_pad_a2a``: the dispatched ones); they are 1
without quantization and with a capacity factor (a fixed capacity per expert).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

#: Megatron-Core's alignment of an expert's tokens per quantization recipe
ALIGN = {"current": 16, "delayed": 16, "blockwise": 16, "mxfp8": 32, "nvfp4": 128}


def align_size(par: Any) -> int:
    """Megatron-Core's alignment for ``par``'s recipe, 0 where the experts run unquantized."""
    if par.dtype != "fp8" or par.moe_capacity_factor > 0:
        return 0
    return ALIGN.get(par.fp8_recipe or "delayed", 16)


@lru_cache(maxsize=4096)
def padded_mean(n: float, p: float, align: int) -> float:
    """``E[ceil(X / align) * align]`` for ``X ~ Binomial(n, p)`` (normal approximation
    summed over the integers within 8 standard deviations)."""
    mean = n * p
    if align <= 1 or mean <= 0:
        return mean
    sd = math.sqrt(max(mean * (1.0 - p), 1e-12))
    lo, hi = max(0, math.floor(mean - 8 * sd)), math.ceil(mean + 8 * sd)
    total = weight = 0.0
    for x in range(lo, hi + 1):
        w = math.exp(-0.5 * ((x - mean) / sd) ** 2)
        weight += w
        total += w * math.ceil(x / align) * align
    return total / weight


def moe_padding(model: Any, par: Any) -> tuple[float, float]:
    """(factor on the experts' tokens, factor on the dispatched tokens) of one MoE layer
    (module docstring): a rank routes ``b s / cp / tps`` tokens; with router padding each of
    those per-expert counts is padded, else the ``ep`` sources' tokens a local expert
    receives (``ets``: the expert token split, :mod:`tracesim.template.moe_ops`)."""
    align = align_size(par)
    if not align or not model.is_moe:
        return 1.0, 1.0
    p = min(1.0, max(model.top_k, 1) / max(model.experts, 1))
    tps = par.tp if par.sp else 1
    routed = par.micro_batch * par.seq_len / par.cp / tps
    if par.moe_router_padding:
        f = padded_mean(routed, p, align) / (routed * p)
        return f, f
    received = par.ep * routed * tps / par.expert_token_split
    return padded_mean(received, p, align) / (received * p), 1.0
