"""Hugging Face transformers' modules in eager PyTorch: their memory passes and launches.

The ``transformers`` stack (:mod:`tracesim.template.stacks`) prices each eager chain of
PyTorch ops as the template's fused op times a number of passes: the chain's time over the
fused kernel's, as the cost model prices the fused op (its bytes, its op class's bandwidth
curve). Where a kernel-level measurement exists the passes are calibrated on it; elsewhere
they are the chain's bytes counted from the source.

**Calibrated** (:data:`HF_PASSES`; ``benchmarks/kernels/eager_chains.py`` on
``benchmarks/kernels/data/eager.csv``, source LIGER-BENCH: Liger-Kernel's benchmark of
``transformers``' ``LlamaRMSNorm``, ``apply_rotary_pos_emb`` and ``torch.nn.CrossEntropyLoss``
on an A100, BF16; the loss on fp32 logits), each at its largest published size:
RMSNorm 7.14 forward, 9.41 backward; rotary 8.82 and 7.04; cross-entropy 1.26 and 1.61 (over
the template's fp32 log-softmax and loss, 12 and 18 bytes per logit).

The bytes the source implies (src/transformers/models/llama/modeling_llama.py; per element of
a BF16 tensor, fp32 intermediates), for comparison: ``LlamaRMSNorm`` forward casts to fp32 (6),
squares (8), takes the mean (4), multiplies by the reciprocal root (8), casts back (6) and
multiplies by the weight (4): 36 against the fused kernel's 4, 9 passes; its autograd
backward 92 against 8, 11.5. ``q * cos + rotate_half(q) * sin``: negation (1),
concatenation (2), two products (2 + 2) and the sum (3), 10 against 2, 5 passes; backward 15
against 3. The measured chains differ from these counts by the efficiency of PyTorch's
elementwise kernels against the op class's curve: the RMSNorm chain's kernels stream faster
than the fused norm class (0.79x and 0.82x of the counted bytes' time), the rotary chain over
the transposed query and key slower (1.76x and 1.41x).

**Counted** (no kernel measurement): SwiGLU ``act_fn(gate) * up`` is SiLU (2 eb) and the
product (3), 5 against the fused 3 (5/3 passes); backward the product's two gradients (3 + 3)
and SiLU's (3), 9 against 4.5 (2 passes).

Kernel launches (:data:`HF_KERNELS`, for the host launch model): RMSNorm forward 8 (the
casts, pow, mean, the epsilon, rsqrt and two products), backward 15 (the products' gradients
and the weight's sum 3 + 3, the casts' 1 + 1, rsqrt's 2, mean's 1, pow's 3, the sum of the
two paths 1); SwiGLU 2 and 3; rotary 10 and 18 (query and key, each forward two products,
negation, concatenation and the sum; backward two products, the negation, two zero-filled
slices of 2 and two sums).
"""

from __future__ import annotations

#: passes over the fused op, by chain: (forward, backward) (module docstring)
HF_PASSES = {"norm": (7.14, 9.41), "act": (5 / 3, 2.0), "rope": (8.82, 7.04)}
#: PyTorch's cross_entropy on fp32 logits over the template's fp32 log-softmax and loss:
#: (forward, backward), calibrated as HF_PASSES
TORCH_CE_PASSES = (1.26, 1.61)
#: kernel launches per chain: (forward, backward)
HF_KERNELS = {"norm": (8, 15), "act": (2, 3), "rope": (10, 18)}
