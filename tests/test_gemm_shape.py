"""Tile / wave quantisation and layout transforms of GEMM kernels (tracesim.hardware.gemm_shape)."""

from __future__ import annotations

import json
import math

import pytest

from tracesim.errors import InputError
from tracesim.hardware.device import get_device
from tracesim.hardware.gemm_shape import (
    cta_fill,
    gemm_passes,
    is_implicit_gemm_conv,
    kernel_alignment,
    kernel_tile,
    layout_transform,
    layout_transform_bytes,
    op_quantization,
    tile_l2_efficiency,
    wave_efficiency,
)

NCHW2NHWC = "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>"
NHWC2NCHW = "void cudnn::ops::nhwcToNchwKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>"
FPROP = ("void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_128x128_32x4_"
         "nhwc_align4>(cutlass_tensorop_s1688fprop_optimized_tf32_128x128_32x4_nhwc_align4::Params)")
GEMM64 = ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>"
          "(cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4::Params)")


@pytest.mark.parametrize("name, tile", [
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(...)", (256, 64)),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_"
     "stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel_cudnn_infer", (128, 128)),
    ("_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock"
     "22ImplicitGemmMultistageINS_4gemm9GemmShapeILi64ELi128ELi32EEE", (64, 128)),
    ("volta_sgemm_32x128_nn", (32, 128)),
    ("cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1", (128, 64)),
    ("ampere_sgemm_32x32_sliced1x4_tn", (32, 32)),
    (NCHW2NHWC, None),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", None),
])
def test_kernel_tile(name: str, tile: tuple[int, int] | None) -> None:
    assert kernel_tile(name) == tile


def test_kernel_alignment_and_layout() -> None:
    assert kernel_alignment(GEMM64) == 4
    assert kernel_alignment("cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align1") == 1
    assert kernel_alignment("volta_sgemm_32x128_nn") is None
    assert (layout_transform(NCHW2NHWC), layout_transform(NHWC2NCHW), layout_transform(FPROP)) == (1, -1, 0)


def test_wave_efficiency() -> None:
    assert wave_efficiency(1, 108 * 128, 128, 512, (128, 128), 108) == pytest.approx(1.0)
    # one tile more than the SMs: two waves, the second almost empty
    assert wave_efficiency(1, 109 * 128, 128, 512, (128, 128), 108) == pytest.approx(109 / 216)
    # m = 196 in a 256-row tile (either orientation of a 256 x 64 tile pads it)
    assert wave_efficiency(108, 196, 256, 64, (256, 256), 108) == pytest.approx(196 / 256)
    # a 64 x 64 output with k = 100352: one tile without split-K, all SMs with it
    assert wave_efficiency(1, 64, 64, 100352, (64, 64), 108) == pytest.approx(1 / 108)
    assert wave_efficiency(1, 64, 64, 100352, (64, 64), 108, split_k=True) == pytest.approx(1.0)
    assert wave_efficiency(1, 64, 64, 100, (64, 64), 108, split_k=True) == pytest.approx(1 / 108)


def test_tile_l2_efficiency() -> None:
    a100 = get_device("a100")
    peak = a100.peak_flops("tf32")
    # 64 x 64 TF32 tile: 2*64*64 / (128 * 4 B) = 16 FLOP/B from 7,219 GB/s of L2 = 115.5 TFLOP/s
    assert tile_l2_efficiency((64, 64), 4, a100.l2_GBps, peak) == pytest.approx(7219e9 * 16 / 156e12)
    assert tile_l2_efficiency((128, 128), 4, a100.l2_GBps, peak) == 1.0
    assert tile_l2_efficiency((64, 64), 4, 0.0, peak) == 1.0  # unknown L2 bandwidth: no cap


def test_gemm_passes_orientation() -> None:
    (p,) = gemm_passes("aten::mm", "[[32,1000],[1000,2048]]", 0.0)
    assert (p.batch, p.m, p.n, p.k) == (1, 2048, 32, 1000)  # cuBLAS: m = N, n = M
    (p,) = gemm_passes("aten::bmm", [[8, 64, 32], [8, 32, 16]], 0.0)
    assert (p.batch, p.m, p.n, p.k) == (8, 16, 64, 32)
    assert gemm_passes("aten::mm", "not json", 0.0) == []
    assert gemm_passes("aten::add", "[[2],[2]]", 0.0) == []


def test_conv_passes_nchw_gemm_and_implicit_gemm() -> None:
    # ResNet-50 layer4 1x1 conv, batch 32, 14x14, 1024 -> 256 (forward FLOPs 3.29 G)
    dims = [[32, 1024, 14, 14], [256, 1024, 1, 1]]
    flops = 2.0 * 32 * 256 * 1024 * 196
    (p,) = gemm_passes("aten::cudnn_convolution", json.dumps(dims), flops, [GEMM64])
    assert (p.batch, p.m, p.n, p.k) == (32, 196, 256, 1024)  # one GEMM per image (NCHW)
    (p,) = gemm_passes("aten::cudnn_convolution", json.dumps(dims), flops, [NCHW2NHWC, FPROP])
    assert (p.batch, p.m, p.n, p.k) == (1, 32 * 196, 256, 1024)  # implicit GEMM on NHWC
    # backward of a 3x3 conv: dgrad m = N*H*W, n = Cin, k = Cout*9; wgrad m = Cout, n = Cin*9
    bwd = [[32, 128, 28, 28], [32, 128, 28, 28], [128, 128, 3, 3]]
    dg, wg = gemm_passes("aten::convolution_backward", bwd, 0.0, [FPROP])
    assert (dg.kind, dg.m, dg.n, dg.k) == ("dgrad", 32 * 784, 128, 128 * 9)
    assert (wg.kind, wg.m, wg.n, wg.k) == ("wgrad", 128, 128 * 9, 32 * 784)
    # the first layer (3 input channels) has no data gradient
    stem = [[32, 64, 112, 112], [32, 3, 224, 224], [64, 3, 7, 7]]
    assert [p.kind for p in gemm_passes("aten::convolution_backward", stem, 0.0)] == ["wgrad"]


def test_op_quantization_nchw_1x1() -> None:
    a100 = get_device("a100")
    dims = json.dumps([[32, 1024, 14, 14], [256, 1024, 1, 1]])
    flops = 2.0 * 32 * 256 * 1024 * 196
    q = op_quantization("aten::cudnn_convolution", dims, flops, [GEMM64], a100.sm_count)
    # 32 images x 4 x 4 tiles = 512 tiles: 5 waves of 108 (512/540); 196 of 256 rows used
    assert q.useful == pytest.approx(512 / 540 * 196 / 256)
    assert q.min_alignment == 4
    capped = op_quantization("aten::cudnn_convolution", dims, flops, [GEMM64], a100.sm_count,
                             l2_GBps=a100.l2_GBps, peak_flops=a100.peak_flops("tf32"))
    assert capped.useful == pytest.approx(q.useful * 7219e9 * 16 / 156e12)
    # nothing known: 1.0
    assert op_quantization("aten::mm", "", 1e9, [GEMM64], 108).useful == 1.0
    assert op_quantization("aten::mm", "[[64,64],[64,64]]", 1e9, ["no_tile_kernel"], 108).useful == 1.0


def test_layout_transform_bytes() -> None:
    # forward 3x3, 256 -> 256 channels at 14x14, batch 32: input and weight to NHWC, output back
    x, w, y = 32 * 256 * 196, 256 * 256 * 9, 32 * 256 * 196
    dims = json.dumps([[32, 256, 14, 14], [256, 256, 3, 3]])
    flops = 2.0 * 32 * 256 * 196 * 256 * 9
    kn = [NCHW2NHWC, NCHW2NHWC, FPROP, NHWC2NCHW]
    assert layout_transform_bytes("aten::cudnn_convolution", dims, flops, kn) == (2.0 * 4 * (x + w + y), 3)
    assert layout_transform_bytes("aten::cudnn_convolution", dims, flops, [FPROP]) == (0.0, 0)
    # backward: dgrad converts grad_out and weight, returns grad_in; wgrad converts grad_out
    # and input, returns grad_weight
    g = x
    bwd = json.dumps([[32, 256, 14, 14], [32, 256, 14, 14], [256, 256, 3, 3]])
    dgrad = FPROP.replace("fprop", "dgrad")
    wgrad = FPROP.replace("fprop", "wgrad")
    kn = [NCHW2NHWC, NCHW2NHWC, dgrad, NHWC2NCHW, NCHW2NHWC, NCHW2NHWC, wgrad, NHWC2NCHW]
    total, n = layout_transform_bytes("aten::convolution_backward", bwd, 2 * flops, kn)
    assert n == 6
    assert total == 2.0 * 4 * ((g + w + x) + (g + x + w))


def test_profile_sm_count_and_l2() -> None:
    assert (get_device("a100").sm_count, get_device("v100").sm_count) == (108, 80)
    assert get_device("h100").sm_count == 132 and get_device("h100").l2_GBps == 0.0
    assert get_device("host-cpu").sm_count == 0
    with pytest.raises(InputError, match="sm_count"):
        get_device({"base": "a100", "name": "x", "sm_count": 10.5})


def test_launch_grid_gives_the_wave_fill() -> None:
    # a 3x3 weight gradient, m = 64, n = 576, k = 100352 with a 64x64 tile: 9 tiles; the
    # recorded launch grid (9, 1, 11) = 99 thread blocks shows 11 split-K slices
    bwd = json.dumps([[32, 64, 56, 56], [32, 64, 56, 56], [64, 64, 3, 3]])
    wgrad = ("sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc_"
             "tilesize64x64x64_stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel_cudnn_train")
    kn = [FPROP.replace("fprop", "dgrad"), wgrad]
    q = op_quantization("aten::convolution_backward", bwd, 0.0, kn, 108, kernel_ctas=[200, 99])
    dg, wg = gemm_passes("aten::convolution_backward", bwd, 0.0, kn)
    fill_d = 200 / 216 * (dg.m * dg.n) / (math.ceil(dg.m / 128) * 128 * 128)
    fill_w = 99 / 108 * 1.0  # 576 = 9 x 64: no padding
    expect = (dg.flops + wg.flops) / (dg.flops / fill_d + wg.flops / fill_w)
    assert q.useful == pytest.approx(expect)
    # without the grid, the weight gradient is split over k to fill the SMs by rule
    q_rule = op_quantization("aten::convolution_backward", bwd, 0.0, kn, 108)
    assert q_rule.useful != pytest.approx(q.useful)
    assert cta_fill(99, 108) == pytest.approx(99 / 108) and cta_fill(109, 108) == pytest.approx(109 / 216)


IMPLICIT_MANGLED = ("_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock"
                    "22ImplicitGemmMultistageINS_4gemm9GemmShapeILi64ELi128ELi32EEE")


@pytest.mark.parametrize("name, expect", [
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_"
     "stage4_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn_infer", True),
    ("sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x64x64_stage4", True),
    (FPROP, True),
    (FPROP.replace("fprop", "dgrad"), True),
    (IMPLICIT_MANGLED, True),
    (GEMM64, False),                                              # plain GEMM (1x1 conv on NCHW)
    ("cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1", False),  # FP32 SIMT
    ("ampere_gcgemm_64x64_nt", False),                             # FFT convolution's complex GEMM
    (NCHW2NHWC, False),
    ("void cutlass_cudnn_train::Kernel<cutlass_cudnn_train::reduction::kernel::ReduceSplitK<"
     "cutlass_cudnn_train::MatrixShape<4, 64>>>", False),
])
def test_is_implicit_gemm_conv(name: str, expect: bool) -> None:
    assert is_implicit_gemm_conv(name) is expect


def test_conv_fraction_of_a_mixed_op() -> None:
    # backward of a 1x1 conv (Cout 512, Cin 1024, 14x14, batch 32) whose data gradient runs
    # on a plain GEMM kernel and weight gradient on an implicit-GEMM one: equal FLOPs, tiles
    # fit exactly, the grids fill 14 waves (dgrad) and 3/4 of one wave (wgrad)
    bwd = json.dumps([[32, 512, 14, 14], [32, 1024, 14, 14], [512, 1024, 1, 1]])
    kn = [GEMM64, NCHW2NHWC, NCHW2NHWC, IMPLICIT_MANGLED]
    dg, wg = gemm_passes("aten::convolution_backward", bwd, 0.0, kn)
    assert (dg.m, dg.n, wg.m, wg.n) == (6272, 1024, 512, 1024)
    q = op_quantization("aten::convolution_backward", bwd, 0.0, kn, 108, kernel_ctas=[14 * 108, 0, 0, 81])
    assert q.useful == pytest.approx(2 / (1 + 1 / 0.75))
    assert q.conv_fraction == pytest.approx((1 / 0.75) / (1 + 1 / 0.75))
    assert op_quantization("aten::cudnn_convolution", json.dumps([[32, 1024, 14, 14], [256, 1024, 1, 1]]),
                           2.0 * 32 * 256 * 1024 * 196, [GEMM64], 108).conv_fraction == 0.0


@pytest.mark.parametrize("name, shapes", [
    ("aten::mm", "[[0,0],[0,0]]"), ("aten::mm", "[[3],[4]]"), ("aten::bmm", "[[2,3],[3,4]]"),
    ("aten::cudnn_convolution", "[[1,3,8,8],[0,3,3,3]]"), ("aten::convolution_backward", "[[1]]"),
    ("aten::addmm", None), ("aten::mm", "{}"), ("aten::cudnn_convolution", "[[1,3,8,8],[4,3,1,1]]"),
])
def test_malformed_shapes_never_raise(name: str, shapes: object) -> None:
    kn = [NCHW2NHWC, GEMM64, NHWC2NCHW]
    q = op_quantization(name, shapes, float("nan"), kn, 108, kernel_ctas=[1, 2])  # wrong length
    assert 0.0 < q.useful <= 1.0 and 0.0 <= q.conv_fraction <= 1.0
    tb, n = layout_transform_bytes(name, shapes, 1e9, kn)
    assert tb >= 0.0 and n >= 0
