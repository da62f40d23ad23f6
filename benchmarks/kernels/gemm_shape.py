"""GEMM shapes as the GPU kernels run them: tile and wave quantisation, layout transforms.

A GEMM kernel cuts its output (m x n, per batch) into thread-block tiles and runs them in
waves over the streaming multiprocessors (SMs). When the tile count is not a multiple of the
SM count, the last wave leaves SMs idle; when m or n is not a multiple of the tile, the edge
tiles compute padding. Both are physical (CUTLASS / cuBLAS tiling, "wave quantization" in
NVIDIA's GEMM performance guide) and need only the shape, the tile and the SM count.

This module reads what the kernel names of a trace say about the algorithm (never their
durations): the tile (``..._256x64_16x4_...``, ``tilesize128x128x16``, ``GemmShape<128,
128, 32>``, ``sgemm_32x128``), the memory alignment (``align1`` = scalar loads), split-K
(``split_k``, ``splitKreduce``, ``ReduceSplitK``) and cuDNN's NCHW <-> NHWC layout
transforms. :func:`op_quantization` maps an op (aten name, recorded input shapes, FLOPs)
onto the GEMM passes its kernels run and returns the fraction of the issued tile work that
is useful (1.0 when nothing is known); given the kernels' launch grids (thread blocks, as
Kineto records them) the wave fill comes from those, split-K slices included. It also gives
the share of that work run by tensor-core implicit-GEMM convolution kernels
(:func:`is_implicit_gemm_conv`), which :mod:`benchmarks.kernels.conv_tf32` charges on a
plateau of their own. :func:`layout_transform_bytes` gives the bytes the layout-transform
kernels read and write (per kernel: :func:`layout_transform_kernels`).

GEMM orientation follows cuBLAS (column-major): for a row-major ``[M, K] x [K, N]`` torch
matmul the kernel computes ``m = N`` by ``n = M``. Convolutions run as implicit GEMMs
(CUTLASS convention): forward ``m = N*P*Q, n = Cout, k = Cin*R*S``; data gradient
``m = N*H*W, n = Cin, k = Cout*R*S``; weight gradient ``m = Cout, n = Cin*R*S, k = N*P*Q``.
A 1x1 convolution whose kernel is a plain GEMM (no layout transform) runs on NCHW tensors
as one GEMM per image: ``m = H*W, n = Cout (dgrad: Cin), k = Cin (dgrad: Cout)``; its weight
gradient ``m = Cin, n = Cout, k = P*Q`` per image, reduced afterwards.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tracesim.ops.costrules import _prod

_TILE_RES = (
    re.compile(r"tilesize(\d+)x(\d+)x\d+"),                     # sm80_xmma_..._tilesize128x128x16
    re.compile(r"GemmShapeILi(\d+)ELi(\d+)ELi\d+E"),            # mangled cutlass::gemm::GemmShape<M,N,K>
    re.compile(r"GemmShape<(\d+), ?(\d+), ?\d+>"),
    re.compile(r"_(\d+)x(\d+)_\d+x\d+_"),                       # cutlass_80_tensorop_s1688gemm_256x64_16x4_nn
    re.compile(r"(?:gemm|scudnn|hcudnn|cudnn)_(\d+)x(\d+)(?:_|$)"),  # volta_sgemm_32x128_nn
)
_ALIGN_RE = re.compile(r"align(?:c)?(\d+)")
_SPLIT_K_RE = re.compile(r"split_?k", re.IGNORECASE)
_PASS_RE = re.compile(r"(fprop|dgrad|wgrad)", re.IGNORECASE)
_AUX_RE = re.compile(r"reduce|offsets|nchwtonhwc|nhwctonchw|scal_kernel|scalepacked|"
                     r"winograd(?:forward|wgrad)|generatewinograd", re.IGNORECASE)
_PLAIN_GEMM_RE = re.compile(r"(?:\d{4,5}gemm|sgemm|hgemm|dgemm)(?!.*implicit)", re.IGNORECASE)
#: tensor-core implicit-GEMM convolution kernels: cuDNN's xmma (``sm80_xmma_fprop_implicit_gemm``),
#: CUTLASS's (``ImplicitGemmConvolution``, ``cutlass_tensorop_s1688dgrad_optimized_tf32``)
_IMPLICIT_CONV_RE = re.compile(r"implicit_?gemm|tensorop_[a-z]?\d{3,4}(?:fprop|dgrad|wgrad)",
                               re.IGNORECASE)


def kernel_tile(name: str) -> tuple[int, int] | None:
    """(tile_m, tile_n) of a GEMM / implicit-GEMM kernel from its name, or None."""
    for rx in _TILE_RES:
        m = rx.search(name)
        if m:
            tm, tn = int(m.group(1)), int(m.group(2))
            if 8 <= tm <= 512 and 8 <= tn <= 512:
                return tm, tn
    return None


def kernel_alignment(name: str) -> int | None:
    """Elements per global-memory access of a CUTLASS kernel (``align4``), or None."""
    m = _ALIGN_RE.search(name)
    return int(m.group(1)) if m else None


def layout_transform(name: str) -> int:
    """+1 for cuDNN's NCHW -> NHWC transform kernel, -1 for NHWC -> NCHW, 0 otherwise."""
    low = name.lower()
    if "nchwtonhwc" in low:
        return 1
    if "nhwctonchw" in low:
        return -1
    return 0


@dataclass(frozen=True)
class GemmPass:
    """One GEMM a kernel runs: ``batch`` independent ``m x n x k`` products; ``operands``
    and ``output`` are element counts of the tensors a layout transform would convert,
    ``operand_hw`` and ``output_hw`` their spatial sizes (H*W, or R*S for a filter)."""

    kind: str
    batch: int
    m: int
    n: int
    k: int
    operands: tuple[int, int] = (0, 0)
    output: int = 0
    operand_hw: tuple[int, int] = (0, 0)
    output_hw: int = 0

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k


def wave_efficiency(batch: int, m: int, n: int, k: int, tile: tuple[int, int], sm_count: int,
                    split_k: bool = False, min_k_per_split: int = 128) -> float:
    """Useful fraction of the tile work: (m x n) over the padded tiles, times the fill of the
    last wave (tiles over ``ceil(tiles / SMs) * SMs``). With ``split_k`` the kernel splits k
    into the number of slices (k / slice >= ``min_k_per_split``) that fills the SMs best.
    The tile's orientation against (m, n) is not in every kernel name: the better one is used."""
    best = 0.0
    for tm, tn in {tile, (tile[1], tile[0])}:
        mt, nt = math.ceil(m / tm), math.ceil(n / tn)
        if mt * nt == 0 or sm_count <= 0:
            return 1.0
        pad = (m * n) / (mt * tm * nt * tn)
        tiles = batch * mt * nt
        for s in range(1, 2 * sm_count + 1 if split_k else 2):
            if s > 1 and k / s < min_k_per_split:
                break
            t = tiles * s
            best = max(best, pad * t / (math.ceil(t / sm_count) * sm_count))
    return best


def tile_l2_efficiency(tile: tuple[int, int], elem_bytes: int, l2_GBps: float, peak_flops: float) -> float:
    """Cap on a tile's throughput from the L2 bandwidth that feeds it: per k step a tm x tn
    tile loads (tm + tn) elements for 2 tm tn FLOPs, so at most
    ``l2_bw * 2 tm tn / ((tm + tn) elem_bytes)`` FLOP/s over the whole GPU (1.0 if unknown)."""
    if l2_GBps <= 0 or peak_flops <= 0:
        return 1.0
    tm, tn = tile
    return min(1.0, l2_GBps * 1e9 * 2.0 * tm * tn / ((tm + tn) * elem_bytes) / peak_flops)


def _conv_passes(name: str, dims: list, flops: float, plain: bool) -> list[GemmPass]:
    if name == "aten::convolution_backward":
        g, x, w = dims[0], dims[1], dims[2]
        n, cout, p, q = g[0], g[1], g[2], g[3]
        cin, h, wd = x[1], x[2], x[3]
        r, s = w[2], w[3]
        passes = []
        dg_hw, wg_hw = ((p * q, r * s), h * wd), ((p * q, h * wd), r * s)
        if plain and r * s == 1:
            if cin != 3:
                passes.append(GemmPass("dgrad", n, h * wd, cin, cout, (_prod(g), _prod(w)), _prod(x),
                                       *dg_hw))
            passes.append(GemmPass("wgrad", n, cin, cout, p * q, (_prod(g), _prod(x)), _prod(w), *wg_hw))
            return passes
        if cin != 3:  # the first layer's input needs no gradient (output_mask)
            passes.append(GemmPass("dgrad", 1, n * h * wd, cin, cout * r * s, (_prod(g), _prod(w)),
                                   _prod(x), *dg_hw))
        passes.append(GemmPass("wgrad", 1, cout, cin * r * s, n * p * q, (_prod(g), _prod(x)), _prod(w),
                               *wg_hw))
        return passes
    x, w = dims[0], dims[1]
    n, cin = x[0], x[1]
    cout, cg, r, s = w[0], w[1], w[2], w[3]
    out_sp = round(flops / (2.0 * n * cout * cg * r * s)) if n * cout * cg * r * s else 0
    y = n * cout * out_sp
    hw = ((_prod(x[2:]), r * s), out_sp)
    if plain and r * s == 1:
        return [GemmPass("fprop", n, out_sp, cout, cin, (_prod(x), _prod(w)), y, *hw)]
    return [GemmPass("fprop", 1, n * out_sp, cout, cg * r * s, (_prod(x), _prod(w)), y, *hw)]


def gemm_passes(name: str, shapes: Any, flops: float, kernel_names: Sequence[str] = ()) -> list[GemmPass]:
    """The GEMM passes of a gemm-class op from its recorded input shapes (JSON or list).

    Returns [] when the op or its shapes are not understood.
    """
    try:
        dims = json.loads(shapes) if isinstance(shapes, str) else shapes
        if not dims:
            return []
        if name in ("aten::mm", "aten::addmm"):
            a, b = (dims[0], dims[1]) if name == "aten::mm" else (dims[1], dims[2])
            return [GemmPass("gemm", 1, int(b[1]), int(a[0]), int(a[1]))]
        if name in ("aten::bmm", "aten::baddbmm"):
            a, b = (dims[0], dims[1]) if name == "aten::bmm" else (dims[1], dims[2])
            return [GemmPass("gemm", int(a[0]), int(b[2]), int(a[1]), int(a[2]))]
        if name in ("aten::cudnn_convolution", "aten::convolution_backward"):
            compute = [k for k in kernel_names if _is_compute(k)]
            plain = bool(compute) and all(_PLAIN_GEMM_RE.search(k) for k in compute) and not any(
                layout_transform(k) for k in kernel_names)
            return _conv_passes(name, dims, flops, plain)
    except (ValueError, TypeError, IndexError, KeyError):
        return []
    return []


def _is_compute(kernel: str) -> bool:
    return kernel_tile(kernel) is not None and not _AUX_RE.search(kernel)


def is_implicit_gemm_conv(kernel: str) -> bool:
    """True for a tensor-core implicit-GEMM convolution compute kernel (cuDNN xmma or CUTLASS
    ``fprop`` / ``dgrad`` / ``wgrad``); False for plain GEMMs, SIMT ``scudnn`` kernels,
    FFT / Winograd convolutions and auxiliary kernels (transforms, reductions, offsets)."""
    return _is_compute(kernel) and bool(_IMPLICIT_CONV_RE.search(kernel))


def _pass_starts(kernel_names: Sequence[str]) -> list[int]:
    """Per kernel, the index of the GEMM pass it belongs to (-1 for non-compute kernels).

    Each compute kernel starts the next pass, except one naming the same pass (``wgrad``) as
    the compute kernel right before it (a split-K companion)."""
    out, i, last = [], -1, None
    for k in kernel_names:
        if not _is_compute(k):
            out.append(-1)
            continue
        m = _PASS_RE.search(k)
        word = m.group(1).lower() if m else None
        if not (word is not None and word == last and i >= 0):
            i += 1
        last = word
        out.append(i)
    return out


def _assign(passes: list[GemmPass], kernel_names: Sequence[str]) -> list[list[str]]:
    """Compute kernels of each pass, in order."""
    out: list[list[str]] = [[] for _ in passes]
    for k, i in zip(kernel_names, _pass_starts(kernel_names), strict=True):
        if 0 <= i < len(out):
            out[i].append(k)
    return out


@dataclass(frozen=True)
class Quantization:
    """Per op: ``useful`` (work-weighted useful fraction of the tile work, 1.0 if unknown),
    ``min_alignment`` (smallest ``alignN`` of its compute kernels, 0 if none named),
    ``conv_fraction`` (share of the issued tile work in passes run by tensor-core
    implicit-GEMM convolution kernels, :func:`is_implicit_gemm_conv`; 0.0 if none)."""

    useful: float
    min_alignment: int
    conv_fraction: float = 0.0


def cta_fill(ctas: int, sm_count: int) -> float:
    """Fill of the SMs by a launch of ``ctas`` thread blocks: ctas / (ceil(ctas / SMs) * SMs)."""
    if ctas <= 0 or sm_count <= 0:
        return 1.0
    return ctas / (math.ceil(ctas / sm_count) * sm_count)


def tile_padding(m: int, n: int, tile: tuple[int, int]) -> float:
    """Useful fraction of the padded tiles covering m x n (the better tile orientation)."""
    best = 0.0
    for tm, tn in {tile, (tile[1], tile[0])}:
        mt, nt = math.ceil(m / tm), math.ceil(n / tn)
        if mt * nt == 0:
            return 1.0
        best = max(best, (m * n) / (mt * tm * nt * tn))
    return best


def op_quantization(name: str, shapes: Any, flops: float, kernel_names: Sequence[str],
                    sm_count: int, *, l2_GBps: float = 0.0, peak_flops: float = 0.0,
                    elem_bytes: int = 4, kernel_ctas: Sequence[int] | None = None) -> Quantization:
    """Tile / wave quantisation of one op on a GPU with ``sm_count`` SMs (see module doc),
    times the tile's L2-bandwidth cap (:func:`tile_l2_efficiency`) when ``l2_GBps`` is given.

    With ``kernel_ctas`` (thread blocks each kernel launched, from the trace's launch grids,
    same order as ``kernel_names``) the wave fill of a pass is that of its first compute
    kernel's launch (split-K slices included) times the tile padding; otherwise it is
    derived from the shape and tile, weight-gradient passes (k = N*P*Q, the largest
    dimension) and passes of split-K kernels being split over k."""
    passes = gemm_passes(name, shapes, flops, kernel_names)
    aligns = [a for k in kernel_names if _is_compute(k)
              for a in [kernel_alignment(k)] if a is not None]
    min_align = min(aligns) if aligns else 0
    if not passes or sm_count <= 0:
        return Quantization(1.0, min_align)
    split = any(_SPLIT_K_RE.search(k) for k in kernel_names)
    work, issued, conv_issued = 0.0, 0.0, 0.0
    ctas: dict[str, int] = {}
    if kernel_ctas is None or len(kernel_ctas) != len(kernel_names):
        kernel_ctas = [0] * len(kernel_names)
    for kname, c in zip(kernel_names, kernel_ctas, strict=True):
        if c > 0:
            ctas.setdefault(kname, int(c))  # the first launch of a name
    for p, ks in zip(passes, _assign(passes, kernel_names), strict=True):
        tile = kernel_tile(ks[0]) if ks else None
        if tile is None:
            eff = 1.0
        elif ks[0] in ctas:
            eff = cta_fill(ctas[ks[0]], sm_count) * tile_padding(p.m, p.n, tile)
        else:
            eff = wave_efficiency(p.batch, p.m, p.n, p.k, tile, sm_count,
                                  split_k=p.kind == "wgrad" or (split and p.kind == "gemm"))
        eff *= 1.0 if tile is None else tile_l2_efficiency(tile, elem_bytes, l2_GBps, peak_flops)
        work += p.flops
        issued += p.flops / max(eff, 1e-3)
        if ks and is_implicit_gemm_conv(ks[0]):
            conv_issued += p.flops / max(eff, 1e-3)
    if issued <= 0:
        return Quantization(1.0, min_align)
    return Quantization(work / issued, min_align, conv_issued / issued)


def layout_transform_bytes(name: str, shapes: Any, flops: float, kernel_names: Sequence[str],
                           elem_bytes: int = 4) -> tuple[float, int]:
    """(bytes, count) of the op's NCHW <-> NHWC transform kernels: each NCHW -> NHWC before a
    pass converts that pass's next operand, each NHWC -> NCHW after it converts its output;
    every conversion reads and writes its tensor once (:func:`layout_transform_kernels`)."""
    parts = layout_transform_kernels(name, shapes, flops, kernel_names, elem_bytes)
    return float(sum(b for _, b, _ in parts)), len(parts)


def layout_transform_kernels(name: str, shapes: Any, flops: float, kernel_names: Sequence[str],
                             elem_bytes: int = 4) -> list[tuple[int, float, int]]:
    """Per layout-transform kernel of the op: (its index in ``kernel_names``, bytes it reads
    and writes, spatial size H*W (R*S for a filter) of the tensor it converts)."""
    if not any(layout_transform(k) for k in kernel_names):
        return []
    passes = gemm_passes(name, shapes, flops, kernel_names)
    if not passes:
        return []
    out: list[tuple[int, float, int]] = []
    started, pending = 0, 0
    for j, (k, i) in enumerate(zip(kernel_names, _pass_starts(kernel_names), strict=True)):
        t = layout_transform(k)
        if t > 0 and started < len(passes):
            p = passes[started]
            out.append((j, 2.0 * p.operands[min(pending, 1)] * elem_bytes, p.operand_hw[min(pending, 1)]))
            pending += 1
        elif t < 0:
            p = passes[min(max(started - 1, 0), len(passes) - 1)]
            out.append((j, 2.0 * p.output * elem_bytes, p.output_hw))
        elif i >= 0:
            started, pending = i + 1, 0
    return out
