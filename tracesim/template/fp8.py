"""FP8 and NVFP4 training as Transformer Engine (and torchao's float8) runs it: which ops
are low precision and what the scaling costs.

:func:`fp8_template` turns a template into its FP8 variant for a recipe:

* the linears of the transformer layers (column- and row-parallel GEMMs of attention, MLP,
  shared and routed experts) run at the device's FP8 rate (``dtype`` ``fp8``; ``mxfp8`` for
  the MXFP8 recipe) on one-byte operands, forward and backward, or with the ``nvfp4`` recipe
  at its FP4 rate (``nvfp4``) on half-byte ones; everything else stays BF16:
  attention, norms, softmax, the router, embeddings, the LM head and loss, the optimizer;
* every FP8 GEMM quantizes its input in the forward and its output gradient in the backward,
  memory-bound kernels sized by those tensors (``n`` elements, BF16 in):

  ========== ==================================================== ===========
  recipe     kernels                                               bytes
  ========== ==================================================== ===========
  current    amax pass (read 2n), cast (read 2n, write n),         6 n
             transpose for the other GEMM layout (write n)
  delayed    cast + transpose with the amax taken on the fly       4 n
             (the scale comes from the amax history)
  mxfp8      row- and column-wise 1x32 block quantization          4 n + n/16
             (Blackwell; no global amax)
  nvfp4      amax pass for the per-tensor FP32 scale (read 2n),    5.125 n
             row- and column-wise 1x16 quantization from the
             BF16 tensor (read 2n, write 2 x (n/2 + n/16); the
             random Hadamard transform of the wgrad operand and
             the gradients' stochastic rounding fused in)
  blockwise  row- and column-wise 1x128 block quantization with     4 n + n/16
             FP32 scales, both from the BF16 tensor (no global
             amax)
  ========== ==================================================== ===========

  The transposed copy of the per-tensor recipes (``current``, ``delayed``) is Hopper's:
  its FP8 GEMMs take one operand layout, Blackwell's take either (Transformer Engine
  ``is_non_tn_fp8_gemm_supported``), so on Blackwell their casts write one copy (5 n, 3 n).
  On Hopper a tensor that sequence parallelism gathers (a column-parallel linear's input,
  a row-parallel one's output gradient) is cast on the rank's shard without the transpose
  and transposed after the gather, in the backward before the weight gradient (read and
  write one byte per element of the gathered tensor; :func:`_transposed`).

  ``blockwise`` is Transformer Engine's ``Float8BlockScaling`` (Megatron's ``--fp8-recipe
  blockwise``, Megatron-Bridge's ``fp8_sc``; DeepSeek-V3's scheme): activations and gradients
  in 1x128 blocks, weights in 128x128 blocks, an FP32 scale each; because a block's scale
  runs along one direction, the row- and column-wise copies are both quantized from the
  BF16 tensor on every GPU (``transformer_engine/common/recipe/__init__.py``). Its GEMMs
  (split accumulation always) run at the device's block-scaled FP8 level (``dtype``
  ``mxfp8``: on Hopper cuBLAS's 1x128 / 128x128 block-scaled kernels, docs/devices.md; on
  Blackwell Transformer Engine runs it through the MXFP8 kernels). With sequence parallelism
  the rank's shard is quantized row-wise before the all-gather, and the backward's
  re-gathered column-wise copy is reordered after its gather (``swap_first_dims``: read and
  write one byte an element, :func:`_transposed`), on every GPU.

  (NVFP4: E2M1 values with an E4M3 scale per 16 elements and a per-tensor FP32 scale; both
  layouts are quantized from the high-precision tensor; the wgrad GEMM's operands get a 16 x
  16 random Hadamard transform, gradients stochastic rounding, weights 16 x 16 2D blocks:
  NVIDIA/TransformerEngine ``transformer_engine/common/recipe/__init__.py``
  ``NVFP4BlockScaling``; Megatron-Bridge's ``bf16_with_nvfp4_mixed`` keeps every
  transformer layer in NVFP4 in its performance recipes.)

* the weights are cast once per step (Transformer Engine caches them over the
  micro-batches): read 2, write 1 and its transpose 1 byte per parameter (NVFP4: read 2,
  write 2 x (1/2 + 1/256), 3 bytes; Blackwell without the transpose: 3); with
  ``fp8_param_gather`` the optimizer step writes FP8 parameters itself and only the transpose
  of the gathered weights is left (2 bytes per parameter; Blackwell: nothing), and the
  data-parallel parameter all-gather moves one byte per parameter (the builder; not with
  NVFP4).

* with sequence parallelism, the tensor-parallel all-gathers that feed an FP8 GEMM move the
  quantized tensor, as Transformer Engine runs them (``LayerNormLinear`` / ``Linear``: the
  input is cast on the rank's sequence shard and gathered in FP8, forward and in the
  backward's re-gather; a row-parallel linear's output gradient is cast before its
  all-gather): one byte per element, MXFP8 one plus a scale byte per 32, NVFP4 half a byte
  plus a scale byte per 16 (the cast op's ``out_dtype``); the reduce-scatters carry BF16
  (GEMM outputs and input gradients).

* current scaling (and NVFP4's per-tensor scale) with sequence parallelism reduces the amax
  of each tensor TP gathers over the TP group before its cast, as Transformer Engine's
  ``Linear`` / ``LayerNormLinear``
  quantizers do (``with_amax_reduction``, ``amax_reduction_group = tp_group``: the input of
  a column-parallel linear forward, the output gradient of a row-parallel one backward;
  TE v2.9 ``_customize_quantizers_float8_current_scaling``): one all-reduce of 4 bytes on the
  TP group before the cast (``AMAX_SUFFIX``; resolved only with TP > 1 and sequence
  parallelism), latency-bound, on the compute stream's critical path. The routed experts'
  grouped linears take their TP-local amax.

* with ``attention`` (``--fp8-attention``: Transformer Engine's FP8 dot-product attention,
  Megatron's ``--fp8-dot-product-attention``, ``NVTE_FP8_DPA``) the fused attention core runs
  cuDNN's FP8 kernels forward and backward: at the device's FP8 rate with its FP8 attention
  curve (the profile's ``attention.plateau.fp8``), after casts of its FP8 operands: the
  forward quantizes Q, K and V, the backward the output and its gradient (O and dO; the
  results, O forward and dQ, dK, dV backward, stay BF16, as ``NVTE_DPA_FP8CS_O_in_F16``
  keeps O). The casts cost the bytes per element of the run's recipe above without the
  transpose (every attention quantizer is row-wise only), current scaling's where the
  linears run a block-scaled recipe (MXFP8, NVFP4: Transformer Engine quantizes the
  attention per tensor, ``NVTE_DPA_FP8_RECIPE``).

Delayed scaling's amax reductions, once per model chunk and micro-batch in each pass, are the
builder's (:mod:`tracesim.build.fp8_delayed`). Not modelled: FP8 all-to-all of MoE tokens.
"""

from __future__ import annotations

import fnmatch

from tracesim.template.layer import LayerTemplate, TemplateOp, shape_parts
from tracesim.template.moe_ops import is_expert_op

#: name suffix of current scaling's amax all-reduce over the TP group (module docstring)
AMAX_SUFFIX = ".fp8_amax"
#: bytes moved per element of the quantized tensor, by recipe (module docstring)
CAST_BYTES_PER_ELEM = {"current": "6", "delayed": "4", "mxfp8": "4.0625", "nvfp4": "5.125",
                       "blockwise": "4.0625"}
#: the dtype of a recipe's quantized tensors on the wire (:data:`tracesim.ops.dtypes.WIRE_BYTES`)
_WIRE_DTYPE = {"current": "fp8", "delayed": "fp8", "mxfp8": "mxfp8", "nvfp4": "nvfp4",
               "blockwise": "mxfp8"}  # 1 byte + a 4-byte scale per 128: MXFP8's 1 + 1/32
#: the block-scaled recipes, whose casts run at the device's ``quantize`` rate
_BLOCK_SCALED = ("mxfp8", "nvfp4")
#: the recipes with a per-tensor amax of each quantized tensor (reduced over TP with SP)
_TENSOR_AMAX = ("current", "nvfp4")
#: the cost-model dtype of a recipe's GEMMs (``ParallelSpec.gemm_dtype``)
_GEMM_DTYPE = {"current": "fp8", "delayed": "fp8", "mxfp8": "mxfp8", "nvfp4": "nvfp4",
               "blockwise": "mxfp8"}
#: bytes per parameter of the once-per-step weight cast (module docstring)
_WEIGHT_CAST_BYTES = {"nvfp4": "3"}
#: the per-tensor scaling recipes: one FP8 copy of a tensor, plus its transpose where the
#: device's FP8 GEMMs need it (module docstring)
_PER_TENSOR = ("current", "delayed")
#: the recipes whose gathered tensors are quantized row-wise on the shard and whose column-wise
#: copy is reordered after the backward's gather on every GPU (module docstring)
_REORDERED = ("blockwise",)


def _transposed(o: TemplateOp) -> list[TemplateOp]:
    """The FP8 transpose of what sequence parallelism gathered for the backward GEMM ``o``
    (Hopper, per-tensor recipes; the blockwise recipe's reorder of its gathered column-wise
    copy on every GPU, the same bytes): the re-gathered input of a column-parallel linear, the
    gathered output gradient of a row-parallel one, each quantized rowwise on its shard and
    transposed after the gather for the weight gradient (Transformer Engine
    ``update_usage(columnwise_usage=True)`` on the gathered ``Float8Tensor``: read and write
    one byte an element); only where sequence parallelism splits the tensor (``tps`` > 1)."""
    if is_expert_op(o) or o.tp_style not in ("colwise", "rowwise"):
        return []
    n = _elems(o, "a" if o.tp_style == "colwise" else "c")
    if not n:
        return []
    return [TemplateOp(
        name=f"{o.module}.fp8_transpose", section=o.section, phase="bwd", op_class="elementwise",
        bytes=f"2*{n}", part=o.part, shard=o.shard, fwd=o.fwd or o.name, out="0",
        when="tps-1")]


def is_fp8_gemm(op: TemplateOp) -> bool:
    """A linear of a transformer layer (the GEMMs Transformer Engine runs in FP8)."""
    return (op.op_class == "gemm" and op.section == "block"
            and (op.tp_style in ("colwise", "rowwise") or is_expert_op(op)))


def _elems(op: TemplateOp, operand: str) -> str:
    """Elements of a GEMM's input (``operand`` ``a``: batch x m x k) or output gradient
    (``c``: batch x m x n), from its shape; "" without a shape."""
    parts = shape_parts(op.shape)
    if not parts:
        return ""
    b, m, n, k = (f"({p})" for p in parts)
    return f"{b}*{m}*{k}" if operand == "a" else f"{b}*{m}*{n}"


def is_fused_attention(op: TemplateOp) -> bool:
    """The fused attention core of a transformer layer (what FP8 attention quantizes)."""
    return op.op_class == "attention" and op.section == "block" and bool(op.shape)


def _fp8_attention(o: TemplateOp, fwd_op: TemplateOp, recipe: str) -> list[TemplateOp]:
    """The fused attention ``o`` in FP8 after the casts of its FP8 operands (module
    docstring); ``fwd_op``: its forward op, whose bytes (Q, K, V and O per rank) size them."""
    # one row-wise copy, no transpose on any GPU: Transformer Engine sets every attention
    # quantizer to row-wise usage (dot_product_attention/utils.py, ``set_usage(rowwise=True,
    # columnwise=False)``)
    per_elem = f"{float(CAST_BYTES_PER_ELEM[recipe if recipe in _PER_TENSOR else 'current']) - 1:g}"
    q = f"({fwd_op.out})/tp"  # Q and O per rank; the op's bytes hold Q, O and every key and
    # value the kernel reads (all cp ranks' over the ring): the rank casts its own shard
    n = f"({q} + (({fwd_op.bytes})/eb - 2*{q})/cp)" if o.phase == "fwd" else f"2*{q}"
    # part of the core as recomputation and ring attention see it (one run of ops)
    cast = TemplateOp(
        name=f"{o.module}.fp8_cast", section=o.section, phase=o.phase, op_class="elementwise",
        flops=f"2*{n}", bytes=f"{per_elem}*{n}", part=o.part, shard=o.shard, out="0",
        recompute=o.recompute, fwd=(o.fwd or o.name) if o.phase == "bwd" else "")
    return [cast, o.replace(dtype="fp8")]


def fp8_template(template: LayerTemplate, recipe: str, param_gather: bool,
                 gemm_dtype: str = "fp8", plan: tuple[tuple[str, str], ...] = (),
                 attention: bool = False, transposes: bool = True) -> LayerTemplate:
    """``template`` with its transformer-layer GEMMs in FP8 (``gemm_dtype``) and the
    quantization kernels of ``recipe`` (module docstring); ``plan``: (module glob, recipe)
    pairs, the first a linear's module matches giving its own recipe (``bf16``: left as it
    is); ``attention``: the fused attention core in FP8 too; ``transposes``: the device's
    per-tensor FP8 GEMMs take one operand layout only (Hopper), so the recipes ``current``
    and ``delayed`` write transposed copies (:func:`_transposed`). The result keeps
    ``template`` as its ``plain`` (the layers kept in BF16)."""
    ops: list[TemplateOp] = []
    fwd_attn = {o.module: o for o in template.ops if o.phase == "fwd" and is_fused_attention(o)}
    for o in template.ops:
        if attention and is_fused_attention(o) and o.kind == "compute" and o.module in fwd_attn:
            ops += _fp8_attention(o, fwd_attn[o.module], recipe)
            continue
        rec = next((r for g, r in plan if fnmatch.fnmatchcase(o.module, g)), recipe)
        if not is_fp8_gemm(o) or o.kind != "compute" or rec == "bf16":
            ops.append(o)
            continue
        per_elem = CAST_BYTES_PER_ELEM[rec]
        n = _elems(o, "a" if o.phase == "fwd" else "c")
        # the tensor sequence parallelism gathers over TP: a column-parallel linear's input,
        # a row-parallel one's output gradient
        gathered = not is_expert_op(o) and o.tp_style == ("colwise" if o.phase == "fwd" else "rowwise")
        if n and rec in _TENSOR_AMAX and gathered:  # its scale needs the TP group's amax
            ops.append(TemplateOp(
                name=f"{o.module}{AMAX_SUFFIX}", section=o.section, phase=o.phase,
                op_class="comm", kind="comm", collective="all_reduce", group_kind="tp",
                msg_bytes="4", out="0", part=o.part,
                fwd=(o.fwd or o.name) if o.phase == "bwd" else ""))
        if n:
            # a gathered tensor is quantized on the rank's sequence shard, before the (FP8)
            # all-gather
            local = f"{n}/tps" if gathered else n
            bytes_ = f"{per_elem}*{local}"
            if rec in _PER_TENSOR or rec in _REORDERED:
                if rec in _PER_TENSOR and not transposes:
                    bytes_ = f"{float(per_elem) - 1:g}*{local}"
                elif gathered:  # transposed (reordered) after the gather where SP gathers it
                    bytes_ = f"({per_elem}-min(tps-1,1))*{local}"
            fwd = o.phase == "fwd"  # its output, the GEMM's whole input, is what TP gathers
            ops.append(TemplateOp(
                name=f"{o.module}.fp8_cast", section=o.section, phase=o.phase,
                op_class="elementwise", flops=f"2*{local}", bytes=bytes_,
                part=o.part, shard="sequence" if gathered else o.shard,
                fwd=(o.fwd or o.name) if o.phase == "bwd" else "", out=n if fwd else "0",
                out_dtype=_WIRE_DTYPE[rec] if fwd else "", quant=rec if rec in _BLOCK_SCALED else ""))
        if o.phase == "bwd" and (transposes and rec in _PER_TENSOR or rec in _REORDERED):
            ops += _transposed(o)
        ops.append(o.replace(dtype=gemm_dtype if rec == recipe else _GEMM_DTYPE[rec]))
    per_param = _WEIGHT_CAST_BYTES.get(recipe) or (
        ("2" if param_gather else "4") if transposes or recipe not in _PER_TENSOR
        else ("0" if param_gather else "3"))
    if per_param != "0":  # Blackwell with FP8 parameters: the optimizer wrote them, no transpose
        ops.append(TemplateOp("fp8.weight_cast", "optimizer", "opt", "elementwise",
                              flops="params", bytes=f"{per_param}*params"))
    meta = {**dict(template.meta), "fp8_recipe": recipe, "fp8_param_gather": param_gather,
            "fp8_attention": attention}
    tpl = LayerTemplate(tuple(ops), meta, plain=template)
    tpl.check()
    return tpl
