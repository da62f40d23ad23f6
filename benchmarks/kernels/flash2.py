"""FlashAttention-2's attention parameters for the profiles that have data for it
(``shape_model.attention.flash2``; ``--attention flash2``, docs/devices.md)."""

from __future__ import annotations

import copy
from typing import Any

from benchmarks.kernels import kernel_fit as kf


def flash2_params(name: str, att: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """FlashAttention-2's attention parameters (``--attention flash2``) and their source, where
    there is data: Hopper from FA2's own H100 rows, Ampere the profile's (already FA2's)."""
    fit = kf.FITTED["attention"]
    if name in ("h100", "h200"):
        return ({"plateau": {"default": fit["fa2_bf16"]["plateau"]},
                 "kv_half": {"default": fit["fa2_bf16"]["kv_half"]},
                 "backward": fit["fa2_bwd_ratio"]},
                "FlashAttention-2 on H100 SXM5: plateau per head dim and kv_half fitted on FA2's "
                "forward, non-causal rows of the FlashAttention-3 paper (benchmarks/kernels/"
                "kernel_fit.py, data/attention.csv, source FA3); backward: FA2's backward / "
                "forward rate (sources FA3-BWD and FA3)" + ("; H200: H100's" if name == "h200" else ""))
    if name.startswith("a100"):
        return ({k: copy.deepcopy(att[k]) for k in ("plateau", "kv_half", "backward")},
                "the profile's own attention (FlashAttention-2 is the fused kernel on Ampere)")
    return None, ""
