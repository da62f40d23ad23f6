"""Module scopes and recorded shapes in the terms of a layer template.

What :mod:`tracesim.template.from_trace` needs to turn a recorded op into a template op: the
section, layer and module an ``nn.Module`` scope names (:func:`classify_scope`), a module's
parallel rules from its name (Megatron's: :data:`COLWISE`, :data:`ROWWISE`, :data:`FEATURE`),
its parameters and parameter tensors, recorded dimensions as expressions of the model
dimensions (:func:`dim_expressions`), and the repeating-sequence fallback for traces without
scopes (:func:`repeating_period`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from tracesim.specs.model import ModelSpec
from tracesim.template.layer import TemplateOp

_EVAL = "autograd::engine::evaluate_function: "
COLWISE = ("qkv", "q", "k", "v", "fc1", "gate", "up", "head", "gate_up")
ROWWISE = ("proj", "fc2", "down")
FEATURE = ("core", "rope", "act", "loss")
_BLOCK_RE = re.compile(r"^blocks\.(\d+)(?:\.(.*))?$")
_EXPERT_RE = re.compile(r"\.experts\.\d+(\.|$)")


def dim_expressions(model: ModelSpec, batch: int, seq_len: int) -> dict[int, str]:
    """Recorded dimension value -> expression of the model dimensions (first match wins)."""
    kvh = model.kv_heads * model.head_dim
    env = {"b": batch, "s": seq_len, "h": model.hidden, "heads": model.heads,
           "kv_heads": model.kv_heads, "head_dim": model.head_dim, "kvh": kvh,
           "ffn": model.ffn_hidden, "vocab": model.vocab, "experts": max(model.experts, 1),
           "top_k": max(model.top_k, 1), "moe_ffn": model.moe_ffn_hidden or model.ffn_hidden}
    cands = ["b*s", "h", "s", "b", "ffn", "vocab", "heads", "head_dim", "kvh", "kv_heads",
             "moe_ffn", "experts", "h+2*kvh", "2*ffn", "2*moe_ffn", "head_dim/2", "b*heads",
             "b*kv_heads", "b*s*top_k", "top_k", "b*s*heads", "b*heads*s", "s*head_dim"]
    out: dict[int, str] = {}
    for expr in cands:
        v = eval(expr, {"__builtins__": {}}, dict(env))  # noqa: S307 - fixed candidate list
        if float(v).is_integer() and int(v) > 1 and int(v) not in out:
            out[int(v)] = expr
    return out


def symbolic(shapes: Any, table: Mapping[int, str], unmapped: list[int], expert: bool) -> Any:
    if isinstance(shapes, list):
        return [symbolic(x, table, unmapped, expert) for x in shapes]
    if isinstance(shapes, bool) or not isinstance(shapes, (int, float)):
        return shapes
    v = int(shapes)
    if v in table:
        return table[v]
    if expert and v > 1:
        return "b*s*top_k/experts"  # tokens routed to one expert (data-dependent when recorded)
    if v > 1:
        unmapped.append(v)
    return v


def repeating_period(names: list[str]) -> int:
    """Shortest period p (> 1 op) with names[i] == names[i + p] over the longest run; 0 if none.

    The fallback layer detector for traces without module scopes: a transformer's forward
    pass repeats the same op sequence once per layer.
    """
    n = len(names)
    best = 0
    for p in range(2, n // 2 + 1):
        eq = np.array([names[i] == names[i + p] for i in range(n - p)])
        run = cur = 0
        for x in eq:
            cur = cur + 1 if x else 0
            run = max(run, cur)
        if run >= p:
            best = p
            break
    return best


def short_name(name: str) -> str:
    name = name.replace(_EVAL, "")
    name = name.split("::")[-1]
    return name


def classify_scope(scope: str) -> tuple[str, int, str, int]:
    """(section, layer, module, expert index) of a module scope."""
    m = _BLOCK_RE.match(scope)
    if m:
        module = m.group(2) or ""
        ex = -1
        e = re.search(r"\.experts\.(\d+)", "." + module)
        if e:
            ex = int(e.group(1))
            module = _EXPERT_RE.sub(r".experts\1", "." + module).lstrip(".")
        return "block", int(m.group(1)), module, ex
    if scope.startswith("embed"):
        return "prologue", -1, scope, -1
    if scope.split(".")[0] in ("norm_f", "head", "loss"):
        return "epilogue", -1, scope, -1
    return "", -1, scope, -1


def parallel_rules(section: str, module: str, model: ModelSpec) -> dict[str, Any]:
    leaf = module.split(".")[-1] if module else ""
    kw: dict[str, Any] = {"shard": "", "tp_style": "", "recompute": False}
    expert = ".experts" in "." + module or module.startswith("experts")
    if module == "embed.tok":
        kw.update(shard="feature", tp_style="vocab")
    elif leaf in COLWISE and (section != "block" or module.startswith(("attn", "mlp"))):
        kw.update(shard="feature", tp_style="colwise")
    elif leaf in ROWWISE:
        kw.update(shard="feature", tp_style="rowwise")
    elif leaf in FEATURE or module in ("attn", "mlp"):  # inside the split region
        kw.update(shard="feature", recompute=leaf == "core")
    else:
        kw.update(shard="sequence")
    split = {"feature": "1/(cp*tp)", "sequence": "1/(cp*tps)", "": "1/cp"}[kw["shard"]]
    if expert:
        split = f"experts*{split}"
    kw["flops"] = kw["bytes"] = split
    return kw


def module_params(module: str, model: ModelSpec) -> str:
    bias = model.norm == "layernorm"
    leaf = module.split(".")[-1] if module else ""
    expert = ".experts" in "." + module
    f = "moe_ffn" if expert else "ffn"
    table = {
        "qkv": f"(h*(h+2*kvh){' + h+2*kvh' if bias else ''})/tp",
        "q": f"(h*h{' + h' if bias else ''})/tp", "k": f"(h*kvh{' + kvh' if bias else ''})/tp",
        "v": f"(h*kvh{' + kvh' if bias else ''})/tp", "proj": f"h*h/tp{' + h' if bias else ''}",
        "fc1": f"(h*{f}{' + ' + f if bias else ''})/tp", "fc2": f"h*{f}/tp{' + h' if bias else ''}",
        "gate": f"h*{f}/tp", "up": f"h*{f}/tp", "down": f"h*{f}/tp", "router": "h*experts",
        "ln1": "2*h" if bias else "h", "ln2": "2*h" if bias else "h", "norm_f": "2*h" if bias else "h",
        "tok": "vocab*h/tp", "pos": "s*h", "head": "0" if model.tied_embeddings else "h*vocab/tp",
    }
    p = table.get(leaf, "0")
    if expert and p != "0":
        p = f"experts/ep*({p})"
    return p


def module_tensors(module: str, model: ModelSpec) -> str:
    """Parameter tensors of ``module`` (the same conventions as :func:`module_params`): a weight,
    plus a bias for linears and norms of LayerNorm models; the embeddings have no bias; a
    tied head owns none; expert modules one set per local expert."""
    bias = model.norm == "layernorm"
    leaf = module.split(".")[-1] if module else ""
    expert = ".experts" in "." + module
    with_bias = ("qkv", "q", "k", "v", "proj", "fc1", "fc2", "ln1", "ln2", "norm_f")
    if leaf in ("tok", "pos", "router", "gate", "up", "down") or (leaf == "head" and not model.tied_embeddings):
        n = "1"
    elif leaf in with_bias:
        n = "2" if bias else "1"
    else:
        return "0"
    return f"experts/ep*{n}" if expert else n


def moe_tensors(op: TemplateOp, model: ModelSpec) -> str:
    """Parameter tensors of an op of the analytic MoE block (:func:`blocks._moe_ops`): the
    router's weight, per local expert the fc1 (gate and up with SwiGLU) and fc2 weights."""
    if op.params == "0":
        return "0"
    gated = 2 if model.activation == "swiglu" else 1
    return {"moe.router": "1", "moe.fc1": f"experts/ep*{gated}",
            "moe.fc2": "experts/ep"}.get(op.module, module_tensors(op.module, model))


def comm_op(name: str, collective: str, group_kind: str, msg: str, phase: str, section: str, part: str) -> TemplateOp:
    return TemplateOp(name, section, phase, "comm", out="b*s/cp*h", part=part, kind="comm",
                      collective=collective, group_kind=group_kind, msg_bytes=msg)
