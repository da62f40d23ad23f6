"""The per-op cost rules: GEMMs, convolutions, attention, norms, softmax, embedding,
optimizer, copies and the op-name tables of every class (see tracesim.ops.costrules).

Argument positions follow the aten schemas (``native_functions.yaml``) of PyTorch 2.x.
"""

from __future__ import annotations

from functools import partial

from tracesim.ops.costrules import Args, _prod, classes, rule
from tracesim.ops.dtypes import DTYPE_BYTES, SCALAR_TYPE_CODES

# --------------------------------------------------------------------------- GEMM


def _mm(a: tuple[int, ...] | None, b: tuple[int, ...] | None) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of ``a @ b`` with torch.matmul broadcasting; zeros if unknown."""
    if not a or not b:
        return 0, 0, 0, 0
    if len(a) == 1 and len(b) == 1:
        return 1, 1, 1, a[0]
    if len(b) == 1:  # matrix-vector
        return _prod(a[:-2]) if len(a) > 2 else 1, a[-2], 1, a[-1]
    if len(a) == 1:
        return _prod(b[:-2]) if len(b) > 2 else 1, 1, b[-1], a[0]
    ba, bb = a[:-2], b[:-2]
    n = max(len(ba), len(bb))
    ba = (1,) * (n - len(ba)) + tuple(ba)
    bb = (1,) * (n - len(bb)) + tuple(bb)
    batch = _prod(max(x, y) for x, y in zip(ba, bb, strict=True))
    return batch, a[-2], b[-1], a[-1]


def _gemm(args: Args, ia: int, ib: int, extra: tuple[int, ...] = ()) -> tuple[float, float]:
    batch, m, n, k = _mm(args.shape(ia), args.shape(ib))
    flops = 2.0 * batch * m * n * k
    out = batch * m * n * args.elt(ia)
    nbytes = args.nbytes(ia) + args.nbytes(ib) + out + sum(args.nbytes(i) for i in extra)
    return flops, float(nbytes)


@rule("gemm", "mm", "matmul", "bmm", "dot", "vdot", "mv", "_int_mm", "mkldnn_matmul")
def _r_mm(a: Args) -> tuple[float, float]:
    return _gemm(a, 0, 1)


@rule("gemm", "addmm", "addmm_", "baddbmm", "baddbmm_", "addbmm", "addmv", "_addmm_activation")
def _r_addmm(a: Args) -> tuple[float, float]:
    return _gemm(a, 1, 2, extra=(0,))


@rule("gemm", "linear", "_mkl_linear", "mkldnn_linear")
def _r_linear(a: Args) -> tuple[float, float]:
    x, w = a.shape(0), a.shape(1)
    if not x or not w:
        return 0.0, a.tensor_bytes()
    k = x[-1]
    m = _prod(x[:-1])
    n = w[0] if len(w) == 2 else 1
    out = m * n * a.elt(0)
    return 2.0 * m * n * k, a.tensor_bytes() + out


@rule("gemm", "_scaled_mm")
def _r_scaled_mm(a: Args) -> tuple[float, float]:
    flops, _ = _gemm(a, 0, 1)
    _, m, n, _ = _mm(a.shape(0), a.shape(1))
    return flops, a.tensor_bytes() + m * n * 2.0  # fp8 inputs, bf16 output


@rule("gemm", "_grouped_mm", "_scaled_grouped_mm")
def _r_grouped_mm(a: Args) -> tuple[float, float]:
    x, w = a.shape(0), a.shape(1)
    if not x or not w:
        return 0.0, a.tensor_bytes()
    if len(x) == 2 and len(w) == 3:  # tokens x K times experts x K x N
        flops = 2.0 * x[0] * x[1] * w[2]
        out = x[0] * w[2]
    else:
        batch, m, n, k = _mm(x, w)
        flops, out = 2.0 * batch * m * n * k, batch * m * n
    return flops, a.tensor_bytes() + out * 2.0


@rule("gemm", "einsum")
def _r_einsum(a: Args) -> tuple[float, float]:
    eq = a.value(0)
    shapes = list(a.lists[1] or ()) if len(a.lists) > 1 else []
    if not isinstance(eq, str) or "->" not in eq or len(shapes) != 2:
        return 0.0, a.tensor_bytes()
    lhs, out = eq.replace(" ", "").split("->")
    terms = lhs.split(",")
    sizes: dict[str, int] = {}
    for term, shp in zip(terms, shapes, strict=False):
        if "..." in term or len(term) != len(shp):
            return 0.0, a.tensor_bytes()
        for ch, s in zip(term, shp, strict=True):
            sizes[ch] = max(sizes.get(ch, 1), s)
    flops = 2.0 * _prod(list(sizes.values()))
    out_n = _prod([sizes.get(ch, 1) for ch in out])
    return flops, a.tensor_bytes() + out_n * a.elt()


# --------------------------------------------------------------------------- convolution

# op -> (stride idx, padding idx, dilation idx, transposed idx, groups idx, bias idx)
_CONV_ARGS = {
    "conv1d": (3, 4, 5, None, 6, 2),
    "conv2d": (3, 4, 5, None, 6, 2),
    "conv3d": (3, 4, 5, None, 6, 2),
    "convolution": (3, 4, 5, 6, 8, 2),
    "_convolution": (3, 4, 5, 6, 8, 2),
    "cudnn_convolution": (3, 2, 4, None, 5, None),
    "cudnn_convolution_relu": (3, 4, 5, None, 6, 2),
    "cudnn_convolution_add_relu": (5, 6, 7, None, 8, 4),
    "miopen_convolution": (4, 3, 5, None, 6, 2),
    "mkldnn_convolution": (4, 3, 5, None, 6, 2),
    "_slow_conv2d_forward": (4, 5, None, None, None, 3),
    "thnn_conv2d": (4, 5, None, None, None, 3),
    "slow_conv3d": (4, 5, None, None, None, 3),
    "_conv_depthwise2d": (4, 5, 6, None, None, 3),
    "_nnpack_spatial_convolution": (4, 3, None, None, None, 2),
    "conv_transpose1d": (3, 4, 7, True, 6, 2),
    "conv_transpose2d": (3, 4, 7, True, 6, 2),
    "conv_transpose3d": (3, 4, 7, True, 6, 2),
    "cudnn_convolution_transpose": (4, 2, 5, True, 6, None),
    "miopen_convolution_transpose": (5, 3, 6, True, 7, 2),
}


def _ints(v: object, n: int, default: int) -> list[int]:
    if isinstance(v, int) and not isinstance(v, bool):
        return [v] * n
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) for x in v):
        vals = list(v)
        return (vals * n)[:n] if len(vals) == 1 else (vals + [default] * n)[:n]
    return [default] * n


def _conv_fwd(name: str, a: Args) -> tuple[float, float]:
    x, w = a.shape(0), a.shape(1)
    if not x or not w or len(x) < 3 or len(w) != len(x):
        return 0.0, a.tensor_bytes()
    si, pi, di, ti, gi, _ = _CONV_ARGS[name]
    nsp = len(x) - 2
    ksz = list(w[2:])
    transposed = bool(ti is True or (isinstance(ti, int) and a.value(ti) is True))
    stride = _ints(a.value(si) if si is not None else None, nsp, 1)
    dil = _ints(a.value(di) if di is not None else None, nsp, 1)
    pad_v = a.value(pi) if pi is not None else None
    groups = a.value(gi) if gi is not None else None
    n, cin = x[0], x[1]
    if not isinstance(groups, int) or groups < 1:
        groups = max(cin // w[1], 1) if (w[1] and not transposed and cin % w[1] == 0) else 1
    if transposed:
        cout = w[1] * groups
        pad = _ints(pad_v, nsp, 0)
        if pad_v is None and a.value(si) is None:
            out_sp = list(x[2:])
        else:
            out_sp = [(h - 1) * s - 2 * p + d * (k - 1) + 1
                      for h, s, p, d, k in zip(x[2:], stride, pad, dil, ksz, strict=True)]
        flops = 2.0 * n * _prod(x[2:]) * cin * (cout // groups) * _prod(ksz)
    else:
        cout = w[0]
        if pad_v is None or pad_v == "same":
            out_sp = [-(-h // s) for h, s in zip(x[2:], stride, strict=True)]
        elif pad_v == "valid":
            out_sp = [(h - d * (k - 1) - 1) // s + 1
                      for h, s, d, k in zip(x[2:], stride, dil, ksz, strict=True)]
        else:
            pad = _ints(pad_v, nsp, 0)
            out_sp = [(h + 2 * p - d * (k - 1) - 1) // s + 1
                      for h, s, p, d, k in zip(x[2:], stride, pad, dil, ksz, strict=True)]
        flops = 2.0 * n * cout * _prod(out_sp) * (cin // groups) * _prod(ksz)
    out = n * cout * _prod(max(o, 0) for o in out_sp) * a.elt(0)
    return max(flops, 0.0), a.tensor_bytes() + out


for _name in _CONV_ARGS:
    rule("gemm", _name)(partial(_conv_fwd, _name))


@rule("gemm", "convolution_backward", "cudnn_convolution_backward", "miopen_convolution_backward",
      "mkldnn_convolution_backward", "convolution_backward_overrideable")
def _r_conv_bwd(a: Args) -> tuple[float, float]:
    gout, x, w = a.shape(0), a.shape(1), a.shape(2)
    if not gout or not x or not w or len(w) != len(x):
        return 0.0, a.tensor_bytes()
    transposed = a.value(7) is True
    groups = a.value(9)
    if not isinstance(groups, int) or groups < 1:
        groups = max(x[1] // w[1], 1) if (w[1] and x[1] % w[1] == 0 and not transposed) else 1
    mask = a.value(10)
    if not (isinstance(mask, (list, tuple)) and len(mask) == 3):
        mask = [True, True, True]
    big, small = (x, gout) if transposed else (gout, x)
    cout, cin = big[1], small[1]
    one = 2.0 * big[0] * cout * _prod(big[2:]) * (cin // groups) * _prod(w[2:])
    flops = one * (int(bool(mask[0])) + int(bool(mask[1])))
    e = a.elt(0)
    g_b, x_b, w_b = _prod(gout) * e, _prod(x) * e, _prod(w) * e
    nbytes = (bool(mask[0]) * (g_b + w_b + x_b) + bool(mask[1]) * (g_b + x_b + w_b)
              + bool(mask[2]) * (g_b + gout[1] * e))
    return flops, float(nbytes)


# --------------------------------------------------------------------------- attention

# op -> (query idx, layout "bhle" | "blhe", is_causal idx, causal-mask-type idx, backward)
_ATTN_ARGS = {
    "scaled_dot_product_attention": (0, "bhle", 5, None, False),
    "_scaled_dot_product_attention_math": (0, "bhle", 5, None, False),
    "_scaled_dot_product_flash_attention": (0, "bhle", 4, None, False),
    "_scaled_dot_product_flash_attention_for_cpu": (0, "bhle", 4, None, False),
    "_scaled_dot_product_efficient_attention": (0, "bhle", 6, None, False),
    "_scaled_dot_product_cudnn_attention": (0, "bhle", 6, None, False),
    "_scaled_dot_product_fused_attention_overrideable": (0, "bhle", 5, None, False),
    "_flash_attention_forward": (0, "blhe", 8, None, False),
    "_efficient_attention_forward": (0, "blhe", None, 9, False),
    "_flash_attn_forward": (0, "blhe", 5, None, False),
    "_flash_attn_varlen_forward": (0, "blhe", 9, None, False),
    "_scaled_dot_product_flash_attention_backward": (1, "bhle", 11, None, True),
    "_scaled_dot_product_flash_attention_for_cpu_backward": (1, "bhle", 7, None, True),
    "_scaled_dot_product_efficient_attention_backward": (1, "bhle", 11, None, True),
    "_scaled_dot_product_cudnn_attention_backward": (1, "bhle", 14, None, True),
    "_flash_attention_backward": (1, "blhe", 11, None, True),
    "_efficient_attention_backward": (1, "blhe", None, 14, True),
    "_flash_attn_backward": (1, "blhe", 11, None, True),
    "_flash_attn_varlen_backward": (1, "blhe", 15, None, True),
}


def _attention(name: str, a: Args) -> tuple[float, float]:
    qi, layout, ci, mi, backward = _ATTN_ARGS[name]
    q, k, v = a.shape(qi), a.shape(qi + 1), a.shape(qi + 2)
    if not q or not k or not v or len(q) < 2:
        return 0.0, a.tensor_bytes()
    if layout == "bhle" or len(q) == 3:
        if layout == "blhe" and len(q) == 3:  # varlen: total tokens x heads x dim
            batch, lq, e = q[1], q[0], q[2]
            ls, ev = k[0], v[-1]
        else:
            batch, lq, e = _prod(q[:-2]), q[-2], q[-1]
            ls, ev = k[-2], v[-1]
    else:  # B, L, H, E
        batch, lq, e = q[0] * q[2], q[1], q[3]
        ls, ev = k[1], v[-1]
    flops = 2.0 * batch * lq * ls * (e + ev)
    causal = a.value(ci) is True if ci is not None else (a.value(mi) in (1, 2) if mi is not None else False)
    if causal:
        flops *= 0.5
    elt = a.elt(qi)
    qkv = (_prod(q) + _prod(k) + _prod(v)) * elt
    out = batch * lq * ev * elt
    if backward:  # 5 GEMMs instead of 2 (recomputes QK^T); reads q,k,v,out,dout; writes dq,dk,dv
        return 2.5 * flops, float(2 * qkv + 2 * out)
    return flops, float(qkv + out)


for _name in _ATTN_ARGS:
    rule("attention", _name)(partial(_attention, _name))


def work_units(name: str, a: Args) -> float:
    """Independent work units of an op: batch x heads for the attention ops (each (batch,
    head) pair is one problem of sequence x sequence x head dim), 1 for everything else.
    Device classes with ``compute_size: unit`` read their efficiency at FLOPs per unit."""
    spec = _ATTN_ARGS.get(name.split("::")[-1].strip())
    if spec is None:
        return 1.0
    return _units(spec[1], a.shape(spec[0]))


def work_units_of_dims(name: str, dims: list) -> float:
    """:func:`work_units` from an op's input dims alone (a Kineto ``Input Dims`` list)."""
    if name.split("::")[-1].strip() not in _ATTN_ARGS or not isinstance(dims, list):
        return 1.0
    try:
        types = ["float" if isinstance(d, list) and d else "" for d in dims]
        return work_units(name, Args.build(dims, types, []))
    except Exception:  # noqa: BLE001 - malformed recorded dims: no units
        return 1.0


def _units(layout: str, q: tuple[int, ...] | None) -> float:
    if not q or len(q) < 3:
        return 1.0
    if layout == "bhle":
        return float(max(_prod(q[:-2]), 1))
    if len(q) == 3:  # varlen: total tokens x heads x dim (sequences unknown: heads only)
        return float(max(q[1], 1))
    return float(max(q[0] * q[2], 1))  # B, L, H, E


# --------------------------------------------------------------------------- norm / softmax


@rule("norm", "layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm", "group_norm",
      "native_group_norm", "batch_norm", "native_batch_norm", "_batch_norm_impl_index",
      "cudnn_batch_norm", "miopen_batch_norm", "instance_norm", "_native_batch_norm_legit",
      "_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional",
      "_batch_norm_with_update", "_batch_norm_no_update")
def _r_norm_fwd(a: Args) -> tuple[float, float]:
    n = a.numel(0)
    params = sum(a.nbytes(i) for i in range(1, len(a.shapes)))
    return 8.0 * n, 2.0 * n * a.elt(0) + params


@rule("norm", "rms_norm", "_fused_rms_norm")
def _r_rms_norm(a: Args) -> tuple[float, float]:
    n = a.numel(0)
    params = sum(a.nbytes(i) for i in range(1, len(a.shapes)))
    return 4.0 * n, 2.0 * n * a.elt(0) + params


@rule("norm", "native_layer_norm_backward", "_fused_rms_norm_backward",
      "native_group_norm_backward", "native_batch_norm_backward", "cudnn_batch_norm_backward",
      "miopen_batch_norm_backward", "_batch_norm_impl_index_backward", "batch_norm_backward")
def _r_norm_bwd(a: Args) -> tuple[float, float]:
    n = a.max_numel()
    # reads grad_out and input, writes grad_input; params and saved stats are small
    small = a.tensor_bytes() - 2.0 * n * a.elt()
    return 10.0 * n, 3.0 * n * a.elt() + max(small, 0.0)


@rule("softmax", "softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax",
      "special_softmax")
def _r_softmax(a: Args) -> tuple[float, float]:
    n = a.numel(0)
    return 5.0 * n, 2.0 * n * a.elt(0)


@rule("softmax", "_softmax_backward_data", "_log_softmax_backward_data", "softmax_backward_data")
def _r_softmax_bwd(a: Args) -> tuple[float, float]:
    n = max(a.numel(0), a.numel(1))
    return 4.0 * n, 3.0 * n * a.elt(0)


@rule("softmax", "cross_entropy_loss", "cross_entropy")
def _r_xent(a: Args) -> tuple[float, float]:
    n = a.numel(0)  # log_softmax over the logits, then a gather
    return 6.0 * n, 2.0 * n * a.elt(0) + a.nbytes(1)


# --------------------------------------------------------------------------- reductions


@rule("reduction", "nll_loss", "nll_loss_forward", "nll_loss2d", "nll_loss2d_forward", "nll_loss_nd")
def _r_nll(a: Args) -> tuple[float, float]:
    rows = a.numel(1)
    return 2.0 * rows, a.nbytes(1) + 2.0 * rows * a.elt(0)


@rule("reduction", "nll_loss_backward", "nll_loss2d_backward")
def _r_nll_bwd(a: Args) -> tuple[float, float]:
    return float(a.numel(2)), a.numel(1) * a.elt(1) + a.nbytes(2)  # writes grad_input


classes("reduction", "sum", "mean", "max", "min", "amax", "amin", "argmax", "argmin", "norm",
        "linalg_vector_norm", "var", "std", "var_mean", "std_mean", "prod", "cumsum", "cumprod",
        "logsumexp", "all", "any", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
        "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "count_nonzero",
        "topk", "median", "nanmedian", "mode", "bincount", "histc", "aminmax", "max_values",
        "sum_to_size", "_cdist_forward", "linalg_norm", "frobenius_norm", "nansum", "cummax",
        "cummin", "logcumsumexp", "mse_loss_backward", "sort", "argsort", "unique",
        "_unique2", "nonzero")

# --------------------------------------------------------------------------- embedding


@rule("embedding", "embedding", "_embedding_bag", "embedding_bag", "_embedding_bag_forward_only")
def _r_embedding(a: Args) -> tuple[float, float]:
    w, idx = a.shape(0), a.shape(1)
    if not w:
        return 0.0, a.tensor_bytes()
    row = _prod(w[1:]) * a.elt(0)
    if idx is None:
        return 0.0, a.tensor_bytes()
    return 0.0, 2.0 * a.numel(1) * row + a.nbytes(1)


@rule("embedding", "embedding_backward", "embedding_dense_backward", "_embedding_bag_backward",
      "_embedding_bag_dense_backward", "embedding_sparse_backward")
def _r_embedding_bwd(a: Args) -> tuple[float, float]:
    g = a.numel(0)
    num_weights = a.value(2)
    s0 = a.shape(0)
    h = s0[-1] if s0 else 0
    wsize = num_weights * h if isinstance(num_weights, int) else g
    return float(g), (g + wsize) * a.elt(0) + a.nbytes(1)


# --------------------------------------------------------------------------- optimizer


@rule("optimizer", "_fused_adam_", "_fused_adamw_", "_fused_adam", "_fused_adamw")
def _r_fused_adam(a: Args) -> tuple[float, float]:
    p = a.list_numel(0)
    lists = sum(a.nbytes(i) for i in range(4))  # params, grads, exp_avgs, exp_avg_sqs read
    e = a.elt()
    return 16.0 * p, lists + 3.0 * p * e  # params, exp_avgs, exp_avg_sqs written


@rule("optimizer", "_fused_sgd_", "_fused_sgd", "_fused_adagrad_")
def _r_fused_sgd(a: Args) -> tuple[float, float]:
    p = a.list_numel(0)
    has_buf = a.list_numel(2) > 0
    return 4.0 * p, sum(a.nbytes(i) for i in range(3)) + (1 + has_buf) * p * a.elt()


@rule("optimizer", "_foreach_norm")
def _r_foreach_norm(a: Args) -> tuple[float, float]:
    n = a.list_numel(0)
    return 2.0 * n, a.nbytes(0)


classes("optimizer", "_amp_foreach_non_finite_check_and_unscale_", "_amp_update_scale_",
        "_foreach_add_", "_foreach_mul_", "_foreach_div_", "_foreach_sub_", "_foreach_addcmul_",
        "_foreach_addcdiv_", "_foreach_lerp_", "_foreach_sqrt", "_foreach_zero_",
        "_foreach_copy_", "_foreach_add", "_foreach_mul", "_foreach_div", "_foreach_sqrt_",
        "_foreach_neg", "_foreach_maximum_", "_foreach_pow", "_foreach_sign")

# --------------------------------------------------------------------------- memcpy


@rule("memcpy", "copy_", "_copy_from", "_copy_from_and_resize")
def _r_copy(a: Args) -> tuple[float, float]:
    n = max(a.numel(0), a.numel(1))
    return 0.0, float(n * a.elt(0) + n * a.elt(1))


@rule("memcpy", "to", "_to_copy", "type_as", "_to_cpu")
def _r_to(a: Args) -> tuple[float, float]:
    n = a.numel(0)
    code = a.value(1)
    dst = SCALAR_TYPE_CODES.get(code) if isinstance(code, int) else None
    out = DTYPE_BYTES.get(dst, a.elt(0)) if dst else a.elt(0)
    return 0.0, float(n * a.elt(0) + n * out)


@rule("memcpy", "clone", "contiguous", "repeat", "roll", "flip", "constant_pad_nd", "pad",
      "narrow_copy", "expand_copy", "permute_copy", "transpose_copy", "_unsafe_index",
      "repeat_interleave", "tile", "reflection_pad2d", "replication_pad2d", "view_copy")
def _r_clone(a: Args) -> tuple[float, float]:
    return 0.0, 2.0 * a.max_numel() * a.elt(0)


@rule("memcpy", "cat", "_cat", "stack", "hstack", "vstack", "concat", "concatenate")
def _r_cat(a: Args) -> tuple[float, float]:
    return 0.0, 2.0 * a.tensor_bytes()


@rule("memcpy", "index_select", "gather", "take", "take_along_dim", "masked_select")
def _r_gather(a: Args) -> tuple[float, float]:
    src, idx = a.shape(0), None
    for i in range(1, len(a.shapes)):
        if a.shape(i):
            idx = i
            break
    if not src or idx is None:
        return 0.0, a.tensor_bytes()
    n = a.numel(idx)
    row = _prod(src[1:]) if a.value(1) == 0 and len(src) > 1 and len(a.shape(idx) or ()) == 1 else 1
    return 0.0, 2.0 * n * row * a.elt(0) + a.nbytes(idx)


classes("memcpy", "index", "index_put_", "_index_put_impl_", "index_put", "scatter", "scatter_",
        "scatter_add", "scatter_add_", "index_add_", "index_add", "index_copy_", "index_fill_",
        "masked_scatter_", "split_with_sizes_copy", "unbind_copy", "_pin_memory", "pin_memory")

# --------------------------------------------------------------------------- elementwise

classes("elementwise", "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "neg", "neg_",
        "abs", "exp", "exp_", "log", "log_", "sqrt", "sqrt_", "rsqrt", "rsqrt_", "pow", "pow_",
        "reciprocal", "sigmoid", "sigmoid_", "tanh", "tanh_", "relu", "relu_", "gelu", "gelu_",
        "gelu_backward", "silu", "silu_", "silu_backward", "threshold", "threshold_",
        "threshold_backward", "clamp", "clamp_", "clamp_min", "clamp_min_", "clamp_max",
        "clamp_max_", "hardtanh", "hardtanh_", "hardtanh_backward", "leaky_relu", "elu", "softplus",
        "mish", "dropout", "native_dropout", "native_dropout_backward", "_fused_dropout",
        "_masked_scale", "feature_dropout", "where", "masked_fill", "masked_fill_", "fill_",
        "zero_", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "lerp", "lerp_",
        "addcmul", "addcmul_", "addcdiv", "addcdiv_", "sign", "eq", "ne", "lt", "gt", "le", "ge",
        "logical_and", "logical_or", "logical_not", "logical_and_", "bitwise_and", "bitwise_or",
        "bitwise_not", "maximum", "minimum", "floor", "ceil", "round", "trunc", "remainder",
        "fmod", "erf", "erfinv", "sin", "cos", "tril", "triu", "tril_", "triu_", "rsub", "square",
        "exp2", "log1p", "expm1", "hardswish", "hardsigmoid", "sigmoid_backward", "tanh_backward",
        "arange", "randn", "rand", "randint", "normal_", "uniform_", "bernoulli_", "random_",
        "nan_to_num", "nan_to_num_", "isnan", "isinf", "isfinite", "max_pool2d",
        "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d",
        "avg_pool2d_backward", "adaptive_avg_pool2d", "_adaptive_avg_pool2d",
        "_adaptive_avg_pool2d_backward", "adaptive_max_pool2d", "upsample_nearest2d",
        "upsample_bilinear2d", "rand_like", "randn_like", "new_zeros", "new_ones", "new_full",
        "scalar_tensor", "linspace", "mul_out", "_log_softmax_out", "masked_fill_backward",
        "elu_backward", "leaky_relu_backward", "softplus_backward", "mish_backward", "xlogy",
        "logit", "hypot", "atan2", "copysign", "heaviside", "polar", "sgn", "frac", "relu6",
        "glu", "glu_backward", "prelu", "selu", "celu", "_prelu_kernel", "lt_", "gt_", "eq_",
        "ne_", "ge_", "le_", "div_out", "where_", "bitwise_xor", "logical_xor")
