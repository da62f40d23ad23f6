"""Multi-token prediction (MTP) modules, as DeepSeek-V3 trains with them and Megatron-Core
runs them (``--mtp-num-layers``; ``ParallelSpec.mtp_layers``).

MTP module ``k`` predicts the token ``k + 1`` positions ahead (DeepSeek-V3 technical report,
arXiv:2412.19437, section 2.2, equations 21-25): it normalises the previous depth's hidden
states and the embeddings of the inputs shifted by ``k`` (RMSNorm each), concatenates them
and projects ``2 h -> h`` (``M_k``), runs one transformer layer ``TRM_k``, and computes
logits with the *shared* output head and a cross-entropy loss. The embedding and the output
head are the main model's (no parameters of their own); the module owns its two norms, the
projection and the transformer layer.

Megatron-Core places the modules on the last pipeline stage, after the decoder layers
(``MultiTokenPredictionBlock``; Megatron-Bridge's pipeline layout writes them as ``m``):
the builder appends each module to the last model chunk (:mod:`tracesim.build.builder`).
The module's transformer layer has the structure of the model's last layer (a MoE layer
for DeepSeek-V3); :func:`mtp_ops` gives the ops around it, in two pieces:

* ``in``: the embedding lookup of the shifted inputs (the prologue's ``embed.tok`` ops), the
  two norms, the concatenation and the projection ``mtp.eh_proj`` (a column-parallel
  linear; BF16 under the FP8 recipes, whose conversion covers the transformer layers'
  linears only);
* ``out``: the module's final norm, the shared output head and the loss (the epilogue's
  ops, with no parameters of the head's own).

Not modelled: the gradient all-reduce of the word-embedding copy that the last stage holds
for the lookup when pp > 1 (Megatron's embedding group; one collective per iteration).
"""

from __future__ import annotations

from tracesim.specs.model import ModelSpec
from tracesim.template.layer import LayerTemplate, TemplateOp
from tracesim.template.primitives import T, backward_of, norm_op, op

#: what each piece of a module is made of (module docstring)
PIECES = ("in", "out")


def _renamed(o: TemplateOp) -> TemplateOp:
    """An epilogue / prologue op as the module's own: ``mtp.`` name, no parameters (the
    embedding and the head are shared with the main model)."""
    fwd = f"mtp.{o.fwd}" if o.fwd else ""
    return o.replace(name=f"mtp.{o.name}", section="epilogue", params="0", tensors="0", fwd=fwd)


def mtp_ops(template: LayerTemplate, model: ModelSpec
            ) -> dict[str, tuple[list[TemplateOp], list[TemplateOp]]]:
    """(forward ops, backward ops) of the ``in`` and ``out`` pieces of one MTP module for
    ``template`` (module docstring); the backward lists are in backward order."""
    flash = template.meta.get("attention", "flash") != "unfused"
    embed = [_renamed(o) for o in template.select("prologue", "fwd") if o.module == "embed.tok"]
    embed_bwd = [_renamed(o) for o in template.select("prologue", "bwd") if o.module == "embed.tok"]
    own = [
        norm_op("mtp.enorm", "epilogue", model),
        norm_op("mtp.hnorm", "epilogue", model),
        op("mtp.concat", "epilogue", "elementwise", "0", f"4*eb*{T}/tps*h", f"{T}*2*h",
           shard="sequence"),
        op("mtp.eh_proj", "epilogue", "gemm", f"2*{T}*2*h*h/tp",
           f"eb*({T}*2*h + 2*h*h/tp + {T}*h/tp)", f"{T}*h", params="2*h*h/tp",
           shard="feature", tp_style="colwise", shape=f"1, {T}, h/tp, 2*h"),
    ]
    in_fwd = embed + own
    in_bwd = [backward_of(o, flash) for o in reversed(own)] + embed_bwd
    out_fwd = [_renamed(o) for o in template.select("epilogue", "fwd")]
    out_bwd = [_renamed(o) for o in template.select("epilogue", "bwd")]
    return {"in": (in_fwd, in_bwd), "out": (out_fwd, out_bwd)}
