"""Kernel-level accuracy of the shipped GPU profiles: calibrated-on and tested-on data.

Every row of ``benchmarks/kernels/data`` is timed by the cost model
(:func:`tracesim.hardware.costmodel.op_time_ns`) on its device's shipped profile, with the
op's shape (the shape path) and without it (the size path, what template replays use), and
compared with the measured time (from the published TFLOP/s). ``role`` says whether the rows
calibrated a number of the profile (:mod:`benchmarks.kernels.kernel_fit`) or are held out.

``python -m benchmarks.kernels.kernel_accuracy`` prints the table of docs/devices.md
("Kernel-level accuracy"); ``--rows`` prints every row's predicted / measured time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.kernels import kernel_fit as kf
from tracesim.hardware.costmodel import op_time_ns
from tracesim.hardware.device import DeviceProfile, get_device
from tracesim.template.durations import backward_attention_ns


@dataclass(frozen=True)
class Case:
    """One measured kernel: its profile, class, dtype, FLOPs, bytes, work units, shape."""

    group: str
    role: str
    profile: str
    op_class: str
    dtype: str
    flops: float
    nbytes: float
    units: float
    shape: tuple[float, float, float, float]
    measured_s: float
    label: str
    #: ``fwd``, ``bwd`` (the backward kernel alone), ``fwd_bwd`` (both, in a training step) or
    #: ``sustained`` (a forward kernel timed after a warm-up long enough to hold the power limit)
    kind: str = "fwd"
    #: ``flash``: the profile's fused attention; ``flash2``: its FlashAttention-2 parameters;
    #: ``cudnn 9.13``: its fused attention as that cuDNN version runs it (``--cudnn``)
    attention: str = "flash"

    def device(self) -> DeviceProfile:
        """The profile as the measurement saw the GPU: kernels timed inside a training step
        (``fwd_bwd``) or after a long warm-up (``sustained``) at its sustained clock, short
        kernel benchmarks at the burst rate."""
        dev = get_device(self.profile)
        if self.attention != "flash":
            alt = (dev.with_flash2() if self.attention == "flash2"
                   else dev.with_cudnn(self.attention.split()[1]))
            assert alt is not None, f"{self.profile} has no {self.attention} parameters"
            dev = alt
        return dev if self.kind in ("fwd_bwd", "sustained") else dev.burst()

    def predicted_s(self, shaped: bool = True) -> float:
        return op_time_ns(self.device(), self.op_class, self.flops, self.nbytes, self.dtype,
                          self.units, self.shape if shaped else None) * 1e-9


def _gemm_case(group: str, role: str, r: dict[str, str], profile: str | None = None,
               kind: str = "fwd") -> Case:
    b, m, n, k = (float(r[c]) for c in ("batch", "m", "n", "k"))
    elt = {"fp8": 1.0, "nvfp4": 0.5625}.get(r["dtype"], 2.0)
    return Case(group, role, profile or r["profile"], "gemm", r["dtype"], 2 * b * m * n * k,
                b * (m * k + k * n) * elt + b * m * n * 2.0, 1.0, (b, m, n, k), kf.measured_s(r),
                f"{r['device']} {r['dtype']} {int(b)}x{int(m)}x{int(n)}x{int(k)}", kind)


def gemm_cases() -> list[Case]:
    """Every GEMM row on a shipped profile, grouped and labelled calibrated / tested."""
    cal, held = kf.gemm_split()
    out = [_gemm_case("XLA sm_100 BF16, k in {256, 1024, 4096}", "calibrated (shape parameters)", r)
           for r in cal]
    out += [_gemm_case("XLA sm_100 BF16, k in {512, 2048}", "tested (other k)", r) for r in held]
    out += [_gemm_case("XLA sm_100 FP8", "tested (other dtype)", r)
            for r in kf.gemm_rows(source="XLA100", dtype="fp8")]
    out += [_gemm_case("XLA sm_90 BF16 (H100)", "tested (other device)", r)
            for r in kf.gemm_rows(source="XLA90")]
    out += [_gemm_case("DeepGEMM FP8 block-scaled, H800 (h100 profile)", "tested (other device, library)",
                       r) for r in kf.gemm_rows(source="DEEPGEMM")]
    out += [_gemm_case("TileLang FP16, H800, 8192 x 8192, k 256-16k", "tested (k dependence, other library)",
                       r) for r in kf.gemm_rows(source="TILELANG", dtype="fp16")]
    out += [_gemm_case(f"TileLang FP8, H800, 8192 x 8192, k 256-16k, {run}", "tested (k dependence, FP8)", r)
            for src, run in (("TILELANG", "fork run"), ("TILELANG-UP", "upstream run"))
            for r in kf.gemm_rows(source=src, dtype="fp8")]
    for r in kf.gemm_rows(source="PYPTX"):
        big = min(int(r["m"]), int(r["n"]), int(r["k"])) >= kf.TYPICAL_MIN_DIM
        out.append(_gemm_case("cuBLAS ordinary shapes (pyptx), B200 and H100",
                              "calibrated (typical level q)" if big else "tested (smaller shape)", r))
    # 10,000 warm-up iterations before the timed 1,000: the GPU at its power limit
    out += [_gemm_case(f"Azure cuBLASLt {r['profile']} {r['dtype']}, square and three shapes",
                       "tested (other benchmark; FP8 fast accumulation)"
                       if r["dtype"] == "fp8" and r["profile"] in ("h100", "h200")
                       else "tested (other benchmark)", r, kind="sustained")
            for r in kf.gemm_rows(source="AZ-ABG")]
    out += [_gemm_case("NVFP4 torch._scaled_mm, B200, square 1024-8192 (pytorch/ao #2427)",
                       "calibrated (nvfp4 plateau and level)", r)
            for r in kf.gemm_rows(source="TORCHAO-NVFP4")]
    for r in kf.gemm_rows(source="HIPKITTENS"):
        out.append(_gemm_case(f"HipKittens' baselines, {r['device']} {r['dtype'].upper()}, square 1024-16384",
                              "calibrated (fp8 plateau and level)" if r["dtype"] == "fp8"
                              else "tested (other shapes)", r))
    own = {"A100-SXM", "H100-SXM", "H200-SXM", "B200-SXM", "GB200", "MI300X", "MI325X", "MI355X"}
    for r in kf.gemm_rows(source="MLE-MAMF"):
        if r["profile"] and r["device"] in own:
            out.append(_gemm_case("MAMF best shape", "calibrated (plateau; capped at q of it)", r))
        elif r["profile"]:
            out.append(_gemm_case("MAMF, B300 on b200 and GH200 on h100", "tested (other SKU, shape)", r))
    h200_bf16 = kf.mamf_row("H100-SXM", "bf16")
    out.append(_gemm_case("MAMF best shape", "calibrated (plateau; capped at q of it)", h200_bf16, "h200"))
    return out


def _attn_case(group: str, role: str, r: dict[str, str], causal: bool, profile: str | None = None,
               fwd_bwd: bool = False, bwd: bool = False, attention: str = "flash") -> Case:
    seq, d = float(r["seq_len"]), float(r["head_dim"])
    dv = float(r.get("head_dim_v") or d)
    units = kf.units(r)
    win = float(r.get("window") or 0.0)
    # keys per query summed over the queries: all, half (causal), or a causal window
    keys = seq * win - win * win / 2 if win else seq * seq * (0.5 if causal else 1.0)
    fwd = 2.0 * units * keys * (d + dv)
    shape = (units, seq, keys / seq, d)
    elt = 1.0 if r["dtype"] == "fp8" else 2.0
    nbytes = 4 * units * seq * d * elt
    # in-step rows count 3 x the causal forward FLOPs (fwd + bwd, ml-engineering's convention);
    # backward rows 2.5 x (the sources' convention)
    measured = (3.0 if fwd_bwd else 2.5 if bwd else 1.0) * fwd / (float(r["tflops"]) * 1e12)
    return Case(group, role, profile or r["profile"], "attention", r["dtype"], fwd, nbytes, units,
                shape, measured, f"{r['impl']} {r['dtype']} d{int(d)} L{int(seq)}"
                + (" causal" if causal else "") + (" bwd" if bwd else ""),
                "fwd_bwd" if fwd_bwd else "bwd" if bwd else "fwd", attention)


def _cudnn_role(r: dict[str, str]) -> tuple[str, str]:
    """(group, role) of a cuDNN row (kernel_fit.cudnn_attention and device_ratio)."""
    causal, src, dev = r["causal"] == "true", r["source"], r["device"]
    mask = "causal" if causal else "non-causal"
    if src in ("CUDNN-FE-2511", "CUDNN-FE-2511-FP8") and dev == "GB300":  # the derived GB300
        bench = "FP8 benchmark" if src.endswith("FP8") else "BF16 benchmark"
        return f"cuDNN 9.17 {bench}, GB300, {r['dtype'].upper()}, causal", "tested (GB300 / GB200 ratio)"
    if src == "CUDNN-FE-2511":
        if float(r["seq_len"]) <= kf.CUDNN_MAX_SEQ:
            return f"cuDNN 9.17, GB200, {mask}, 512-32k, {r['pass']}", "calibrated"
        return f"cuDNN 9.17, GB200, {mask}, 64k-128k", "tested (longer)"
    if src in OLDER_FP8_RUNS or src == "CUDNN-FE-2511-FP8":
        ver = OLDER_FP8_RUNS.get(src, "9.17")
        what = f"cuDNN {ver} FP8 benchmark, {dev}, {r['dtype'].upper()}, causal"
        if dev == "GB200" and r["dtype"] == "fp8" and float(r["seq_len"]) <= kf.CUDNN_MAX_SEQ:
            return f"{what}, 512-32k, {r['pass']}", "calibrated (FP8)"
        return what, "tested (FP8 benchmark)"
    if src == "CUDNN-FE-2509":
        return f"cuDNN 9.13 (PyTorch SDPA), {dev}, {mask}", "tested (older cuDNN)"
    if src == "CUDNN-FE-2601":
        return "cuDNN 9.18, GB200, MLA d_qk 192 / d_v 128, causal", "tested (other head dims)"
    if src == "CUDNN-FE-2602":
        return "cuDNN 9.19, GB200, d64, 1k-key window", "tested (head dim 64, window)"
    if dev == "GB300" and causal:
        return "cuDNN 9.22, GB300, causal", "calibrated (GB300 / GB200 ratio)"
    return f"cuDNN 9.22, {dev}, {mask}", "tested (newer cuDNN" + (")" if causal else ", non-causal)")


def attention_cases() -> list[Case]:
    """Attention rows on shipped profiles (forward unless said)."""
    out = []
    for impl, short in (("cuDNN", "cuDNN"), ("FlashAttention-3", "FA3")):
        for r in kf.attention_rows(impl=impl, device="H100-SXM5"):
            if r["pass"] != "fwd" or r["causal"] == "unknown":
                continue
            causal = r["causal"] == "true"
            # cuDNN is what TE runs on Hopper: BF16 fitted on the causal rows (training's) and
            # apart on the non-causal ones (the unmasked curve), FP8 on the non-causal ones (its
            # causal rows cover head dim 64 at 512-1k tokens only)
            if impl != "cuDNN":
                role = "tested (other kernel)"
            elif r["dtype"] == "bf16":
                role = "calibrated" if causal else "calibrated (unmasked)"
            else:
                role = "tested (causal)" if causal else "calibrated"
            out.append(_attn_case(f"FA3 paper, H100, {short}, {r['dtype'].upper()}"
                                  + (", causal" if causal else ""), role, r, causal))
    for r in kf.attention_rows(impl="FlashAttention-2", device="H100-SXM5"):  # --attention flash2
        causal, bwd = r["causal"] == "true", r["pass"] == "bwd"
        out.append(_attn_case("FA3 paper, H100, FlashAttention-2 (flash2)"
                              + (", causal" if causal else "") + (", backward" if bwd else ""),
                              "tested (causal)" if causal else "calibrated", r, causal,
                              profile="h100", bwd=bwd, attention="flash2"))
    for r in kf.attention_rows(source="PYTORCH-BENCH-2391", impl="FlashAttention-3 (flash_v3)"):
        out.append(_attn_case("tritonbench FA3, H100-class (non-causal assumed)", "tested (other bench)",
                              r, False))
    for r in kf.attention_rows(source="MLE-UPG"):
        out.append(_attn_case("FA3 (H200) / FA4 (B200) fwd+bwd in a training step, causal",
                              "tested (backward, other device)", r, True, fwd_bwd=True))
    for r in kf.attention_rows(source="HIPKITTENS"):  # the MI355X profile's derived attention
        causal, bwd = r["causal"] == "true", r["pass"] == "bwd"
        out.append(_attn_case("AITER (HipKittens' baselines), MI355X, BF16, d128"
                              + (", causal" if causal else "") + (", backward" if bwd else ""),
                              "tested (derived profile)", r, causal, bwd=bwd))
    for r in kf.rows("attention"):
        if r["source"].startswith("CUDNN-FE"):
            group, role = _cudnn_role(r)
            out.append(_attn_case(group, role, r, r["causal"] == "true", bwd=r["pass"] == "bwd"))
        ver = {**OLDER_FP8_RUNS, "CUDNN-FE-2509": "9.13"}.get(r["source"])
        if ver:  # at the profile's own fit of that version (--cudnn)
            group, role = _cudnn_version_role(r, ver)
            out.append(_attn_case(group, role, r, r["causal"] == "true", bwd=r["pass"] == "bwd",
                                  attention=f"cudnn {ver}"))
    return out


#: the frontend FP8 benchmark's runs with an older cuDNN than the profiles' 9.17: the version
#: of each (the profiles' ``cudnn_versions`` are fitted on them)
OLDER_FP8_RUNS = {"CUDNN-FE-2509-FP8": "9.13", "CUDNN-FE-2506-FP8": "9.10"}


def _cudnn_version_role(r: dict[str, str], ver: str) -> tuple[str, str]:
    """(group, role) of an older cuDNN's row timed at the profile's fit of that version
    (``--cudnn``; kernel_fit.cudnn_attention on the FP8 benchmark's rows, 1k-32k)."""
    dev, dt, seq = r["device"], r["dtype"].upper(), float(r["seq_len"])
    if r["source"] == "CUDNN-FE-2509":
        return f"cuDNN {ver} through PyTorch SDPA, {dev}, at --cudnn {ver}", "tested (through PyTorch)"
    what = f"cuDNN {ver} FP8 benchmark, {dev}, {dt}, at --cudnn {ver}"
    if kf.CUDNN_913_MIN_SEQ <= seq <= kf.CUDNN_MAX_SEQ:
        return f"{what}, 1k-32k, {r['pass']}", f"calibrated (cudnn_versions {ver})"
    return f"{what}, 512 and 64k-128k", "tested (lengths left out)"


def predict_bwd_s(c: Case, shaped: bool = True) -> float:
    """The backward kernel of an attention case (2.5x the forward FLOPs), at the profile's
    backward / forward rate ratio on the shape path (as
    :func:`tracesim.template.durations.make_op_time` times a backward op)."""
    bwd = Case(**{**c.__dict__, "flops": 2.5 * c.flops, "nbytes": 2 * c.nbytes})
    t_bwd = bwd.predicted_s(shaped)
    if shaped and c.shape is not None:
        t_bwd = backward_attention_ns(c.device(), int(round(t_bwd * 1e9)),
                                       tuple(float(x) for x in c.shape), c.dtype) * 1e-9
    return t_bwd


def predict_fwd_bwd_s(c: Case, shaped: bool = True) -> float:
    """Forward + backward (2.5x the forward FLOPs, tracesim.ops.rules) of an attention case."""
    return c.predicted_s(shaped) + predict_bwd_s(c, shaped)


def memory_cases() -> list[tuple[str, float, float]]:
    """(profile, achieved GB/s of FluidX3D FP32/FP32, the profile's large-copy GB/s)."""
    out = []
    for r in kf.rows("membw"):
        if r["profile"] and r["benchmark"].startswith("FluidX3D LBM FP32/FP32"):
            nbytes = 1e10
            t = op_time_ns(r["profile"], "elementwise", 0.0, nbytes, "fp32") * 1e-9
            out.append((r["profile"], float(r["achieved_GBps"]), nbytes / t / 1e9))
    return out


def ratios(cases: list[Case], shaped: bool = True) -> np.ndarray:
    """Predicted / measured time per case."""
    out = []
    for c in cases:
        t = (predict_fwd_bwd_s(c, shaped) if c.kind == "fwd_bwd" else predict_bwd_s(c, shaped)
             if c.kind == "bwd" else c.predicted_s(shaped))
        out.append(t / c.measured_s)
    return np.array(out)


def summary(r: np.ndarray) -> dict[str, Any]:
    """MAPE, median APE, max APE and median predicted/measured of time ratios ``r``."""
    a = np.abs(r - 1.0)
    return {"n": int(r.size), "mape": float(a.mean()), "median_ape": float(np.median(a)),
            "max_ape": float(a.max()), "median_ratio": float(np.median(r))}


def table(cases: list[Case]) -> list[dict[str, Any]]:
    """Per (group, role, profile): the shape path's and the size path's summaries."""
    keys: dict[tuple[str, str, str], list[Case]] = {}
    for c in cases:
        keys.setdefault((c.group, c.role, c.profile), []).append(c)
    out = []
    for (g, role, prof), cs in keys.items():
        out.append({"group": g, "role": role, "profile": prof, "shape": summary(ratios(cs, True)),
                    "size": summary(ratios(cs, False))})
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| data | role | profile | n | MAPE (shape) | median / max APE (shape) | pred/meas "
             "(shape) | MAPE (size curve) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s, z = r["shape"], r["size"]
        lines.append(f"| {r['group']} | {r['role']} | {r['profile']} | {s['n']} | {s['mape']:.3f} | "
                     f"{s['median_ape']:.3f} / {s['max_ape']:.3f} | {s['median_ratio']:.2f} | "
                     f"{z['mape']:.3f} |")
    return "\n".join(lines)


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", action="store_true", help="print every case")
    args = ap.parse_args()
    g, a = gemm_cases(), attention_cases()
    print("GEMM\n" + markdown(table(g)) + "\n\nAttention\n" + markdown(table(a)))
    print("\nMemory (FluidX3D FP32/FP32 achieved vs the profile's large-copy bandwidth)")
    print("| profile | achieved GB/s | model GB/s |\n|---|---|---|")
    for prof, got, model in memory_cases():
        print(f"| {prof} | {got:g} | {model:.0f} |")
    if args.rows:
        for c, r in zip(g + a, np.concatenate([ratios(g), ratios(a)]), strict=True):
            print(f"{c.role:32s} {c.profile:7s} {c.label:50s} pred/meas {r:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
