"""The optimizer step of an analytic template: which optimizer, over which copy of the weights.

``--optimizer`` picks the update rule; the stack says whether the job keeps fp32 master
weights beside the compute-dtype ones (mixed precision as Megatron-Core, Transformer Engine,
DeepSpeed and torchtitan's FSDP2 run it) or trains the parameters in the compute dtype
itself (a model loaded with ``torch_dtype=torch.bfloat16``, as Hugging Face transformers
scripts often do). Per local parameter, with ``eb`` the compute dtype's bytes:

=======================  =====  ==========================================================
optimizer, weights       FLOPs  bytes (reads + writes)
=======================  =====  ==========================================================
adam, master weights     12     ``28 + eb``: read the fp32 gradient, master weight and two
                                moments; write those three back and the compute-dtype copy
adam, compute dtype      12     ``20 eb``: ``torch.optim.AdamW``'s multi-tensor (foreach)
                                path, one pass per foreach op: decay the weight (2), lerp
                                the first moment (3), scale and add the second (2 + 3), its
                                square root, bias correction and epsilon (2 + 2 + 2), the
                                update ``addcdiv`` (4) (torch/optim/adamw.py, torch 2.x)
sgd, master weights     2      ``12 + eb``: read the fp32 gradient and master weight, write
                                the master weight and the compute-dtype copy
sgd, compute dtype      2      ``3 eb``: ``torch._foreach_add_`` (read weight and gradient,
                                write the weight); plain SGD, no momentum
=======================  =====  ==========================================================

Megatron's gradient buffer (:func:`grad_buffer_ops`; the ``megatron-core`` and
``megatron-2021`` stacks): the backward accumulates every gradient into one contiguous buffer
per model chunk (``main_grad``, ``gb`` bytes per element), which the step works on around
the update, per local parameter:

=========================  =====  ==================================================
op                         FLOPs  bytes
=========================  =====  ==================================================
``optimizer.zero_grad``    0      ``gb``: ``zero_grad_buffer`` at the start of each
                                  step, a memset of the rank's whole buffer (not its
                                  ZeRO shard: every replica accumulates all its
                                  gradients; a sharded FSDP buffer, its shard)
``optimizer.grad_prep``    2 / 3  over the optimizer's shard: the fp32 copy of a
                                  BF16 gradient (``.float()``: read 2, write 4; none
                                  for an fp32 buffer), the L2 norm for clipping (read
                                  4), with ``clip_scale`` the clip's scale (read and
                                  write 4)
=========================  =====  ==================================================

Optimizer states per parameter (the memory estimate, :mod:`tracesim.report.memory`): Adam
with master weights 12 bytes (8 in pure fp32, where the weight is its own master), Adam in
the compute dtype two moments of ``eb``; SGD with master weights 4 (0 in fp32), SGD in the
compute dtype none.
"""

from __future__ import annotations

from tracesim.template.layer import TemplateOp

OPTIMIZERS = ("adam", "sgd")

#: (FLOPs, bytes) per local parameter: (optimizer, master weights) -> expressions of ``eb``
_COST = {("adam", True): ("12", "(28+eb)"), ("adam", False): ("12", "20*eb"),
         ("sgd", True): ("2", "(12+eb)"), ("sgd", False): ("2", "3*eb")}

SUMMARY = {("adam", True): "fused Adam over fp32 master weights",
           ("adam", False): "torch.optim.AdamW (foreach) over the compute-dtype weights",
           ("sgd", True): "SGD over fp32 master weights",
           ("sgd", False): "torch.optim.SGD (foreach, no momentum) over the compute-dtype weights"}


def optimizer_op(optimizer: str, master: bool) -> TemplateOp:
    """The ``optimizer.step`` op of ``optimizer`` (``adam`` | ``sgd``) over master weights or
    the compute-dtype weights (module docstring)."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    flops, nbytes = _COST[(optimizer, master)]
    return TemplateOp("optimizer.step", "optimizer", "opt", "optimizer", flops=f"{flops}*params",
                      bytes=f"params*{nbytes}")


#: optimizer ops over the rank's whole local gradient buffer, not the optimizer's shard
WHOLE_BUFFER = ("optimizer.zero_grad",)


def grad_buffer_ops(clip_scale: bool) -> tuple[TemplateOp, TemplateOp]:
    """Megatron's per-step work on its gradient buffer (module docstring): the memset and the
    shard's fp32 copy, norm and (``clip_scale``) clip scale, Megatron-Core's
    ``DistributedDataParallel.zero_grad_buffer``, ``_copy_model_grads_to_main_grads`` and
    ``clip_grad_norm`` (``megatron/core/optimizer/clip_grads.py``)."""
    zero = TemplateOp("optimizer.zero_grad", "optimizer", "opt", "elementwise", flops="0",
                      bytes="gb*params")
    flops, scale = ("3", " + 8") if clip_scale else ("2", "")
    prep = TemplateOp("optimizer.grad_prep", "optimizer", "opt", "optimizer",
                      flops=f"{flops}*params", bytes=f"params*(3*(4 - gb) + 4{scale})")
    return zero, prep


def state_bytes(optimizer: str, master: bool, dtype_bytes: int) -> float:
    """Optimizer states per parameter in bytes (module docstring)."""
    if not master:
        return 2.0 * dtype_bytes if optimizer == "adam" else 0.0
    if optimizer == "adam":
        return 8.0 if dtype_bytes == 4 else 12.0
    return 0.0 if dtype_bytes == 4 else 4.0
