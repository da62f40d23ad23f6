"""Delayed scaling's amax reductions: the kernels and the blocking all-reduce that
Transformer Engine's ``DelayedScaling`` recipe runs once per model chunk and micro-batch in
each direction.

Every FP8 module of a rank appends its amax tensors once to a global buffer, keyed by
direction, recipe and amax-reduction group only (``FP8GlobalStateManager.
add_fp8_tensors_to_global_buffer``), so one reduction covers every FP8 module of the rank,
whichever chunk it belongs to. ``reduce_and_update_fp8_tensors`` concatenates that buffer
(``torch.cat``: one kernel), all-reduces it with ``MAX`` over the group, blocking
(``reduce_tensor_across_group_op_max``: ``async_op=False``, so the compute stream waits for
it), and updates every amax history and scale in one fused kernel
(``tex.fused_amax_and_scale_update_after_reduction``): in the forward when the outermost
``fp8_autocast`` exits, in the backward when the first FP8 module of the region has run its
backward (``is_first_fp8_module``; TE v2.2 ``transformer_engine/pytorch/fp8.py``,
``module/base.py``, and ``graph.py`` for modules in CUDA graphs). Megatron-Core opens that
region once per model chunk for delayed scaling (``TransformerBlock``, the outer FP8 context)
with the group of every rank of the pipeline stage, TP x DP x CP
(``get_amax_reduction_group(with_context_parallel=True)``), or of its TP x CP ranks only
with ``tp_only_amax_red`` (``--tp-only-amax-red``; tracesim's ``--fp8-amax-tp-only``,
group kind ``tpcp``, reported as ``tp``): each data-parallel replica then scales with its
own amaxes. A recomputed forward appends
nothing (``in_fp8_activation_recompute_phase``), but a layer that full recomputation reruns
is a Transformer Engine checkpoint (Megatron-Core's ``_checkpointed_forward`` calls
``te_checkpoint`` under FP8) whose rerun opens its own ``fp8_autocast`` in the backward,
outermost there, and its exit reduces the whole forward buffer again over the same group
(TE v2.2 ``distributed.py``, ``_CheckpointFunction.backward``): one more forward reduction
per recomputed layer (one checkpoint per layer, Megatron's ``--recompute-num-layers 1``).

The replay adds, after a chunk's last layer forward and after its first layer's backward,
three compute-stream tasks: the concatenation (``8 n`` bytes for ``n`` amax values), the
all-reduce (``4 n`` bytes on the stage's TP x DP x CP ranks, group kind ``stage``, or its
TP x CP ranks, at the
network model's uncongested time: latency-bound, no flows; its ``group_kind`` reported as
``dp``) and the update (each value's amax history read and rolled, ``8 x history``
bytes per value, with NeMo's ``fp8_amax_history_len`` of 1,024,
``nemo/collections/llm/recipes/precision/mixed_precision.py``). ``n`` is three values per FP8
module forward (input, weight, output) and two backward (output gradient, input gradient),
over the stage's FP8 modules (one per FP8 cast of a layer's forward). The host issues each
from Python (three launches, :mod:`tracesim.build.host`).

Not modelled: the reduction of the FP8 weights' amaxes after the optimizer step (once per
step), and the waits a blocking reduction over thousands of GPUs adds where their kernel
times vary (the replay's ranks of a stage run alike).
"""

from __future__ import annotations

from typing import Any

from tracesim.build.units import Unit
from tracesim.specs.placement import STAGE_KIND, TPCP_KIND
from tracesim.template.layer import TemplateOp

#: amax values per FP8 module, by direction (module docstring)
VALUES = {"fwd": 3, "bwd": 2}
#: amax history length of NeMo's FP8 precision recipes (module docstring)
HISTORY = 1024
#: name prefix of the tasks
PREFIX = "fp8_amax"


def applies(par: Any) -> bool:
    """Whether layout ``par`` runs delayed scaling with its amax reductions."""
    return getattr(par, "dtype", "") == "fp8" and getattr(par, "fp8_recipe", "") == "delayed"


def stage_modules(sb: Any) -> int:
    """The FP8 modules of stage builder ``sb``'s rank whose amaxes each reduction covers: one
    per FP8 cast in the forward of each layer of the stage's chunks (0 without delayed
    scaling)."""
    if not applies(sb.par):
        return 0
    cached = getattr(sb, "_fp8_amax_modules", None)  # counted once per stage builder
    if cached is None:
        layers = [i for g in range(sb.stage, sb.n_chunks, sb.par.pp) for i in sb._layers(g)]
        cached = sum(1 for i in layers for r in sb.res.layer(sb.model, i).fwd
                     if r.kind == "gpu" and r.name.endswith(".fp8_cast"))
        sb._fp8_amax_modules = cached
    return int(cached)


def after(u: Unit, sb: Any, g: int, layer: int, phase: str) -> None:
    """Append one reduction (``phase`` fwd or bwd) to unit ``u`` of model chunk ``g`` if
    ``layer`` ends the chunk's FP8 region in that pass: its last layer forward, its first
    layer backward (module docstring); ``sb``: the stage builder."""
    end = int(sb.starts[g + 1]) - 1 if phase == "fwd" else int(sb.starts[g])
    if layer >= 0 and layer == end and end < int(sb.starts[g + 1]):
        _reduce(u, sb, layer, phase, phase)


def recomputed(u: Unit, sb: Any, layer: int) -> None:
    """Append the forward reduction that a fully recomputed layer's checkpoint adds in the
    backward (module docstring) to unit ``u``."""
    _reduce(u, sb, layer, "fwd", "bwd")


def _reduce(u: Unit, sb: Any, layer: int, direction: str, phase: str) -> None:
    """One reduction of the stage's ``direction`` (fwd, bwd) amaxes, its tasks in ``phase``."""
    modules = stage_modules(sb)
    if modules <= 0:
        return
    n = VALUES[direction] * modules

    def kernel(name: str, nbytes: int) -> None:
        op = TemplateOp(name, "block", phase, "elementwise", flops="0", bytes=str(nbytes))
        u.compute_task(name, layer=layer, phase=phase, op_class="elementwise", nbytes=float(nbytes),
                       dur_ns=int(sb.op_time("elementwise", 0.0, float(nbytes), op, 1.0)))

    kernel(f"{PREFIX}.cat", 8 * n)
    group = TPCP_KIND if getattr(sb.par, "fp8_amax_tp_only", False) else STAGE_KIND
    est = sb.ov.est("all_reduce", group, 4 * n)
    if est:  # one rank: no reduction (a group of one)
        u.compute_task(f"{PREFIX}.all_reduce", layer=layer, phase=phase, op_class="comm",
                       dur_ns=int(round(est)), collective="all_reduce", gkind=group, msg_bytes=4 * n)
    kernel(f"{PREFIX}.update", 8 * HISTORY * n)
