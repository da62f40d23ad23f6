"""The Blackwell profiles' attention (B200, GB200, GB300, B300): cuDNN's fused attention, the
kernel Transformer Engine runs there, from the fits of :mod:`benchmarks.kernels.kernel_fit`
(``cudnn_gb200``, ``cudnn_gb200_fp8``, ``cudnn_gb300_over_gb200``, and cuDNN 9.10's and
9.13's own ``cudnn910_*``, ``cudnn913_*``); used by :mod:`benchmarks.kernels.datasheet` when
it writes the profiles.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.kernels import kernel_fit as kf
from tracesim.hardware.shapemodel import AttentionShapeModel

#: the cuDNN version of the profiles' main fit (CUDNN-FE-2511's run)
CUDNN = "9.17"


def scaled_plateau(pts: list, factor: float) -> list[list[float]]:
    """A plateau table ``[[head_dim, efficiency], ...]`` times ``factor``, capped at 1."""
    return [[d, round(min(e * factor, 1.0), 4)] for d, e in pts]


def _model(fa3: dict[str, Any], fa3_8: dict[str, Any], cu: dict[str, Any], cu8: dict[str, Any],
           up: dict[str, float]) -> dict[str, Any]:
    """The attention parameters from cuDNN's head-dim-128 fits ``cu`` (BF16) and ``cu8`` (FP8)
    times ``up`` per pass: other head dims with FA3's shape (its FP8 shape for FP8); head dim
    64's backward ratios are head dim 128's times FA3's d64 / d128 ratio (at most 1)."""
    f = cu["plateau_d128"] * up["fwd"] / dict(fa3["plateau"])[128.0]
    # FA3's FP8 plateau at head dim 128, interpolated in log2(head dim) as the model does
    fa3_8_d128 = float(np.interp(7.0, np.log2([p[0] for p in fa3_8["plateau"]]),
                                 [p[1] for p in fa3_8["plateau"]]))
    f8 = cu8["plateau_d128"] * up["fwd"] / fa3_8_d128
    fa3_bwd = AttentionShapeModel({"default": ((128.0, 1.0),)}, {"default": 1.0},
                                  backward=tuple((d, tuple((k, r) for k, r in pts))
                                                 for d, pts in kf.FITTED["attention"]["fa3_bwd_ratio"]))
    b = up["bwd"] / up["fwd"]

    def backward(ratio_d128: list[list[float]]) -> list[list[Any]]:
        d128 = [[kv, round(min(r * b, 1.0), 4)] for kv, r in ratio_d128]
        return [[64.0, [[kv, round(min(r * fa3_bwd.backward_ratio(64.0, kv)
                                        / fa3_bwd.backward_ratio(128.0, kv), 1.0), 4)] for kv, r in d128]],
                [128.0, d128]]
    return {"plateau": {"default": scaled_plateau(fa3["plateau"], f), "fp8": scaled_plateau(fa3_8["plateau"], f8)},
            "kv_half": {"default": cu["kv_half"], "fp8": cu8["kv_half"]},
            "backward": backward(cu["bwd_ratio_d128"]),
            "backward_fp8": backward(cu8["bwd_ratio_d128"])}


def cudnn_blackwell(name: str, fa3: dict[str, Any], fa3_8: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """B200 / GB200 / GB300 attention: cuDNN's fused attention (what Transformer Engine runs on
    Blackwell), fitted on GB200 with cuDNN 9.17 (kernel_fit.cudnn_attention); the other head
    dims keep FA3's shape; B200 takes GB200's fractions of peak (same silicon and kernels);
    GB300 is GB200 times the GB300 / GB200 rate per pass measured with one cuDNN version.
    ``cudnn_versions`` holds older cuDNN releases' own fits (``--cudnn``): 9.10 and 9.13 from
    B200's rows for B200 and GB200, 9.13 from GB300's for GB300 and B300."""
    fit = kf.FITTED["attention"]
    ultra = name in ("gb300", "b300")  # Blackwell Ultra
    up = fit["cudnn_gb300_over_gb200"] if ultra else {"fwd": 1.0, "bwd": 1.0}
    main = _model(fa3, fa3_8, fit["cudnn_gb200"], fit["cudnn_gb200_fp8"], up)
    die = "gb300" if ultra else "b200"
    older = {ver: _model(fa3, fa3_8, fit[f"cudnn{key}_{die}"], fit[f"cudnn{key}_{die}_fp8"],
                         {"fwd": 1.0, "bwd": 1.0})
             for ver, key in (("9.10", "910"), ("9.13", "913")) if f"cudnn{key}_{die}" in fit}
    src = ("cuDNN fused attention (Transformer Engine's backend on Blackwell): kv_half "
           f"{fit['cudnn_gb200']['kv_half']:g} and plateau {fit['cudnn_gb200']['plateau_d128']:g} "
           "at head dim 128 fitted on cuDNN "
           "9.17's GB200 causal forward rows, lengths 512-32k (container nv25.11; data/attention.csv, "
           "source CUDNN-FE-2511; benchmarks/kernels/kernel_fit.py); other head dims: FA3's "
           "head-dim shape on H100 (derived); backward: the "
           "same rows' backward / forward rate per mean key length at head dim 128, head dim 64 "
           "that times FA3's d64 / d128 backward ratio (derived); FP8 (backward_fp8): kv_half "
           f"{fit['cudnn_gb200_fp8']['kv_half']:g} and plateau {fit['cudnn_gb200_fp8']['plateau_d128']:g} "
           "of the FP8 peak at head dim "
           "128 and the backward / forward rates fitted the same way on cuDNN 9.17's GB200 FP8 "
           "causal rows (the frontend's FP8 benchmark, container nv25.11; source "
           "CUDNN-FE-2511-FP8), other head dims with FA3's FP8 shape (derived)")
    if name == "b200":
        src += "; B200: GB200's fractions of peak (same silicon and cuDNN kernels, derived)"
    if ultra:
        src += (f"; GB300: GB200 x {up['fwd']:g} forward and x {up['bwd']:g} backward, the "
                "geometric-mean GB300 / GB200 rates of the two measured the same day with cuDNN "
                "9.22, causal, lengths 2k-32k (source CUDNN-FE-2604)")
    if name == "b300":
        src += "; B300: GB300's (the same Blackwell Ultra die and cuDNN kernels, derived)"
    dev = "GB300" if ultra else "B200"
    src += (f"; cudnn_versions {', '.join(older)}: fitted the same way (lengths 1k-32k) on "
            + ("" if ultra else "cuDNN 9.10.2's (container nv25.06; source CUDNN-FE-2506-FP8) and ")
            + f"cuDNN 9.13.1's (container nv25.09; source CUDNN-FE-2509-FP8) {dev} BF16 and FP8 "
            f"causal rows of the frontend's FP8 benchmark, as fractions of {dev}'s peak"
            + ("" if name == die else f" (derived: the same die as {dev})"))
    return {**main, "cudnn": CUDNN, "cudnn_versions": older}, src
