"""Op classification and FLOP/byte features from Kineto shapes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracesim.ops.classify import (
    OP_CLASSES,
    OpCost,
    classify,
    kernel_dtype_hint,
    math_dtype,
    op_cost,
)

F, BF = "float", "c10::BFloat16"


@pytest.mark.parametrize("name, cls", [
    ("aten::mm", "gemm"), ("aten::addmm", "gemm"), ("aten::linear", "gemm"), ("aten::bmm", "gemm"),
    ("aten::baddbmm", "gemm"), ("aten::matmul", "gemm"), ("aten::cudnn_convolution", "gemm"),
    ("aten::convolution_backward", "gemm"), ("aten::_scaled_mm", "gemm"),
    ("aten::scaled_dot_product_attention", "attention"),
    ("aten::_scaled_dot_product_flash_attention", "attention"),
    ("aten::_flash_attention_forward", "attention"), ("aten::_efficient_attention_backward", "attention"),
    ("aten::native_layer_norm", "norm"), ("aten::native_layer_norm_backward", "norm"),
    ("aten::rms_norm", "norm"), ("aten::cudnn_batch_norm", "norm"),
    ("aten::_softmax", "softmax"), ("aten::_log_softmax_backward_data", "softmax"),
    ("aten::gelu", "elementwise"), ("aten::silu_backward", "elementwise"), ("aten::add_", "elementwise"),
    ("aten::sum", "reduction"), ("aten::nll_loss_forward", "reduction"),
    ("aten::embedding", "embedding"), ("aten::embedding_dense_backward", "embedding"),
    ("aten::_foreach_mul_", "optimizer"), ("aten::_fused_adamw_", "optimizer"),
    ("Optimizer.step#AdamW.step", "optimizer"), ("aten::copy_", "memcpy"), ("aten::cat", "memcpy"),
    ("record_param_comms", "comm"), ("nccl:all_reduce", "comm"), ("gloo:broadcast", "comm"),
    ("c10d::allreduce_", "comm"), ("aten::view", "other"), ("ProfilerStep#4", "other"),
    ("nn.Module: model.layers.0.attn", "other"), ("aten::no_such_op", "other"),
    ("AddmmBackward0", "gemm"), ("autograd::engine::evaluate_function: ConvolutionBackward0", "gemm"),
    ("NativeLayerNormBackward0", "norm"), ("ScaledDotProductFlashAttentionBackward0", "attention"),
    ("GeluBackward0", "elementwise"), ("EmbeddingBackward0", "embedding"),
])
def test_classify_ops(name: str, cls: str) -> None:
    assert classify(name) == cls


@pytest.mark.parametrize("name, cls, dtype", [
    ("volta_sgemm_64x64_nt", "gemm", "fp32"),
    ("ampere_sgemm_32x128_tn", "gemm", "fp32"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(Params)", "gemm", "tf32"),
    ("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4", "gemm", "bf16"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw", "gemm", "tf32"),
    ("volta_h884gemm_128x128_ldg8_nn", "gemm", "fp16"),
    # FP16 GEMMs of a Megatron-LM step on A100 (MMA shapes TF32 also uses, the input type spelt)
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn", "gemm", "fp16"),
    ("ampere_fp16_s1688gemm_fp16_256x64_ldg8_f2f_tn", "gemm", "fp16"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_f16_s16816gemm_relu_f16_128x128_32x5_tn_align8>",
     "gemm", "fp16"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn", "gemm", "bf16"),
    ("cutlass_80_tensorop_s16816gemm_64x64_32x6_tn_align8", "gemm", None),  # 16-bit, type unsaid
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT", "gemm", None),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN", "gemm", None),
    ("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4, false, false, cutlass::bfloat16_t>>",
     "attention", "bf16"),
    ("fmha_cutlassF_f16_aligned_64x64_rf_sm80", "attention", "fp16"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "elementwise", None),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "comm", None),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm", None),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>", "norm", None),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>", "norm", None),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true>", "softmax", None),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "reduction", None),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>",
     "optimizer", None),
    ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>", "memcpy", None),
    ("__amd_rocclr_copyBuffer", "memcpy", None),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<>>", "elementwise", None),
    ("some_custom_kernel", "other", None),
])
def test_classify_kernels(name: str, cls: str, dtype: str | None) -> None:
    assert classify(name, "kernel") == cls
    if cls == "gemm" or cls == "attention":
        assert kernel_dtype_hint(name) == dtype


def test_memcpy_categories() -> None:
    assert classify("Memcpy DtoD (Device -> Device)", "gpu_memcpy") == "memcpy"
    assert classify("Memset (Device)", "gpu_memset") == "memcpy"


def test_gemm_costs_closed_form() -> None:
    c = op_cost("aten::mm", [[128, 64], [64, 32]], [F, F])
    assert c == OpCost("gemm", 2 * 128 * 64 * 32, 4 * (128 * 64 + 64 * 32 + 128 * 32), "fp32",
                       shape=(1, 128, 32, 64))
    c = op_cost("aten::addmm", [[256], [2048, 512], [512, 256], [], []], [F, F, F, "Scalar", "Scalar"])
    assert c.flops == 2 * 2048 * 512 * 256
    assert c.bytes == 4 * (256 + 2048 * 512 + 512 * 256 + 2048 * 256)
    c = op_cost("aten::bmm", [[8, 16, 32], [8, 32, 4]], [BF, BF])
    assert (c.flops, c.bytes, c.dtype) == (2 * 8 * 16 * 32 * 4, 2 * (8 * 16 * 32 + 8 * 32 * 4 + 8 * 16 * 4), "bf16")
    c = op_cost("aten::linear", [[4, 128, 160], [480, 160], [480]], [BF] * 3)
    assert c.flops == 2 * 512 * 160 * 480 and c.op_class == "gemm"
    # matmul broadcasting: [2,1,M,K] @ [3,K,N] -> batch 6
    c = op_cost("aten::matmul", [[2, 1, 5, 7], [3, 7, 11]], [F, F])
    assert c.flops == 2 * 6 * 5 * 7 * 11
    assert op_cost("aten::matmul", [[7], [7]], [F, F]).flops == 14


def test_conv_costs() -> None:
    types = [F, F, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]
    dims = [[32, 64, 56, 56], [128, 64, 3, 3], [], [], [], [], [], [], []]
    strided = op_cost("aten::convolution", dims, types,
                      ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"])
    assert strided.flops == 2 * 32 * 128 * 28 * 28 * 64 * 9
    same = op_cost("aten::convolution", dims, types)  # no concrete inputs: stride 1, same padding
    assert same.flops == 4 * strided.flops
    depthwise = op_cost("aten::conv2d", [[2, 32, 8, 8], [32, 1, 3, 3]], [F, F])
    assert depthwise.flops == 2 * 2 * 32 * 64 * 1 * 9
    bwd_dims = [[32, 128, 28, 28], [32, 64, 56, 56], [128, 64, 3, 3]] + [[]] * 8
    full = op_cost("aten::convolution_backward", bwd_dims, [F] * 3 + [""] * 8)
    assert full.flops == 2 * strided.flops
    wonly = op_cost("aten::convolution_backward", bwd_dims, [F] * 3 + [""] * 8,
                    [""] * 10 + ["[False, True, False]"])
    assert wonly.flops == strided.flops and wonly.bytes < full.bytes


def test_attention_costs() -> None:
    q = [2, 8, 1024, 64]
    sdpa = op_cost("aten::scaled_dot_product_attention", [q, q, q, [], [], [], [], []],
                   [BF, BF, BF, "", "Scalar", "Scalar", "", "Scalar"])
    assert sdpa.flops == 4 * 2 * 8 * 1024 * 1024 * 64 and sdpa.op_class == "attention"
    causal = op_cost("aten::scaled_dot_product_attention", [q, q, q, [], [], [], [], []],
                     [BF, BF, BF, "", "Scalar", "Scalar", "", "Scalar"],
                     ["", "", "", "", "0.", "True", "", "False"])
    assert causal.flops == sdpa.flops / 2
    blhe = [2, 1024, 8, 64]  # _flash_attention_forward layout: batch, seq, heads, dim
    fa = op_cost("aten::_flash_attention_forward", [blhe, blhe, blhe] + [[]] * 8, [BF] * 3 + [""] * 8)
    assert fa.flops == sdpa.flops
    bwd = op_cost("aten::_scaled_dot_product_flash_attention_backward",
                  [q, q, q, q, q] + [[]] * 10, [BF] * 5 + [""] * 10)
    assert bwd.flops == 2.5 * sdpa.flops
    gqa = op_cost("aten::scaled_dot_product_attention", [q, [2, 2, 1024, 64], [2, 2, 1024, 64]], [BF] * 3)
    assert gqa.flops == sdpa.flops and gqa.bytes < sdpa.bytes


def test_pointwise_norm_softmax_embedding_optimizer() -> None:
    n = 4 * 128 * 160
    ln = op_cost("aten::native_layer_norm", [[4, 128, 160], [160], [160], [160], []],
                 [F, "ScalarList", F, F, "Scalar"])
    assert ln.op_class == "norm" and ln.bytes == 2 * n * 4 + 2 * 160 * 4 and ln.flops == 8 * n
    sm = op_cost("aten::_softmax", [[64, 1000], [], []], [BF, "Scalar", "Scalar"])
    assert (sm.bytes, sm.dtype) == (2 * 64000 * 2, "bf16")
    add = op_cost("aten::add", [[128, 64], [64], []], [F, F, "Scalar"])  # broadcast
    assert add.bytes == 4 * (128 * 64 + 64 + 128 * 64) and add.flops == 128 * 64
    gelu = op_cost("aten::gelu", [[1000], []], [F, "String"])
    assert gelu.flops > add.flops / (128 * 64) * 1000  # transcendental: more than 1 flop/elem
    emb = op_cost("aten::embedding", [[1000, 160], [4, 128], [], [], []], [F, "long", "", "", ""])
    assert emb.op_class == "embedding" and emb.bytes == 2 * 512 * 160 * 4 + 512 * 8
    adamw = op_cost("aten::_fused_adamw_", [[[10, 10], [10]]] * 4 + [[], [[], []]],
                    ["TensorList"] * 4 + ["GenericList", "TensorList"])
    assert adamw.op_class == "optimizer" and adamw.bytes == (4 + 3) * 110 * 4
    fe = op_cost("aten::_foreach_mul_", [[[10, 10], [10]], []], ["TensorList", "Scalar"])
    assert fe.op_class == "optimizer" and fe.bytes == 2 * 110 * 4
    cp = op_cost("aten::copy_", [[5, 128], [5, 128], []], [BF, F, "Scalar"])
    assert cp.bytes == 640 * (2 + 4)
    to = op_cost("aten::_to_copy", [[5, 128]] + [[]] * 6, [F] + [""] * 6, ["", "15"])  # -> bf16
    assert to.bytes == 640 * (4 + 2)


def test_wrappers_and_views_cost_nothing() -> None:
    for name in ("aten::view", "aten::t", "AddmmBackward0", "Optimizer.step#AdamW.step",
                 "autograd::engine::evaluate_function: MmBackward0", "torch::autograd::AccumulateGrad"):
        c = op_cost(name, [[5, 128]], [F])
        assert (c.flops, c.bytes) == (0.0, 0.0), name


def test_missing_shapes_keep_class() -> None:
    assert op_cost("aten::mm", None, None) == OpCost("gemm", 0.0, 0.0, "fp32")
    assert op_cost("aten::mm", [], []) == OpCost("gemm", 0.0, 0.0, "fp32")


def test_math_dtype() -> None:
    assert math_dtype("aten::cudnn_convolution", "fp32") == "tf32"  # cuDNN default allow_tf32
    assert math_dtype("aten::mm", "fp32") == "fp32"
    assert math_dtype("aten::mm", "fp32", ("ampere_sgemm_32x128_tn",)) == "fp32"
    assert math_dtype("aten::mm", "fp32", ("cutlass_80_tensorop_s1688gemm_64x64",)) == "tf32"
    assert math_dtype("aten::cudnn_convolution", "fp32", ("cudnn_infer_ampere_scudnn_128x64",)) == "fp32"
    assert math_dtype("aten::mm", "bf16", ("void at::native::elementwise_kernel",)) == "bf16"


_dims = st.recursive(st.one_of(st.integers(-5, 10**6), st.text(max_size=3), st.none(), st.floats()),
                     lambda c: st.lists(c, max_size=5), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(["aten::mm", "aten::addmm", "aten::convolution", "aten::convolution_backward",
                             "aten::scaled_dot_product_attention", "aten::_fused_adamw_", "aten::cat",
                             "aten::linear", "aten::einsum", "aten::embedding", "aten::add", "x"]),
       dims=_dims, types=st.lists(st.sampled_from([F, BF, "Scalar", "TensorList", "", "long", 3]), max_size=6),
       conc=st.one_of(st.none(), st.lists(st.sampled_from(["", "[2, 2]", "True", "x[", "1"]), max_size=11)))
def test_op_cost_never_raises(name: str, dims, types, conc) -> None:
    c = op_cost(name, dims, types, conc)
    assert c.op_class in OP_CLASSES
    assert c.flops >= 0 and c.bytes >= 0
