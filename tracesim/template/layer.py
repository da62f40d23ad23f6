"""Layer templates: one transformer layer (and its surroundings) as a list of ops whose sizes
are expressions of the model dimensions and the parallel degrees.

A :class:`LayerTemplate` has four sections (DESIGN.md, "Parameterisation"):

* ``prologue``: embeddings (run by the first pipeline stage);
* ``block``: one transformer layer, forward and backward; ops carry a ``part``
  (``attn``, ``mlp`` for a dense MLP, ``moe`` for a mixture-of-experts MLP), so a dense layer
  is ``attn + mlp`` and a MoE layer is ``attn + moe``;
* ``epilogue``: final norm, LM head and loss (run by the last pipeline stage);
* ``optimizer``: the optimizer step over the rank's local parameters.

Each :class:`TemplateOp` has ``flops``, ``bytes``, ``out`` (output elements) and ``params``
(parameters owned by the op) written as arithmetic expressions over the symbols of
:data:`SYMBOLS`, always in *unsharded* form except for the explicit degree symbols: ``tp`` in
an op marked ``shard="feature"`` is the tensor-parallel split of its features (the builder
sets it to 1 where a plan keeps the op replicated), ``tps`` in a ``shard="sequence"`` op is
the sequence-parallel split (``tp`` with ``--sp``, else 1), ``cp`` splits the sequence over
context-parallel ranks and ``ep`` the experts over expert-parallel ranks. Between a MoE
block's dispatch and combine (the routed experts) ``tp`` is the expert TP degree and ``ets``
the split of the routed tokens (:mod:`tracesim.template.resolve`).

``tp_style`` marks linears (``colwise`` / ``rowwise``) or ``vocab`` (a vocab-parallel
embedding, whose output is a partial sum); the builder places the TP communication from
these marks (Megatron's f / g operators). Ops with ``kind="comm"`` are explicit
communication (EP all-to-all, vocab-parallel loss all-reduce).

Trace-derived templates also carry, per op, the duration measured on the source device and
the op's FLOPs / bytes at the recorded dimensions, so the builder can anchor the prediction
on the measurement (:func:`tracesim.hardware.costmodel.scale_duration`).
"""

from __future__ import annotations

import ast
import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.fileio import read_yaml, write_yaml
from tracesim.template.moe_padding import moe_padding

SECTIONS = ("prologue", "block", "epilogue", "optimizer")
PARTS = ("", "attn", "mlp", "moe", "mamba")
SHARDS = ("", "feature", "sequence")
TP_STYLES = ("", "colwise", "rowwise", "vocab")

#: symbols an expression may use, with their meaning
SYMBOLS: dict[str, str] = {
    "b": "micro-batch size (sequences)",
    "s": "sequence length (tokens)",
    "h": "hidden size",
    "heads": "attention heads",
    "kv_heads": "key/value heads",
    "head_dim": "h / heads",
    "kvh": "kv_heads * head_dim (width of the K and V projections)",
    "ffn": "MLP hidden size",
    "vocab": "vocabulary size",
    "experts": "routed experts per MoE layer",
    "top_k": "experts per token",
    "moe_ffn": "expert MLP hidden size",
    "shared_ffn": "shared-expert MLP hidden size (all shared experts; 0: none)",
    "moe_h": "a token's width at the routed experts (latent MoE: moe_latent, else h)",
    "latent": "1 with a latent MoE (projections to and from moe_h), else 0",
    "moe_load": "routed tokens of the busiest expert over the mean (imbalance, capped by capacity)",
    "moe_kept": "share of routed tokens dispatched (1 dropless, capacity factor if below 1)",
    "moe_pad": "an expert's tokens with their quantization padding over the routed ones",
    "moe_pad_a2a": "dispatched tokens with the router's quantization padding over the routed ones",
    "a2a_sorted": "1 where the received tokens arrive by source rank (alltoall dispatcher), else 0",
    "hybridep": "1 with the HybridEP dispatcher (routing metadata gathered every forward), else 0",
    "m_inner": "Mamba-2 mixer inner width (heads x head dim; hybrid models, else 0)",
    "m_heads": "Mamba-2 heads",
    "m_hd": "Mamba-2 head dim (P)",
    "m_state": "Mamba-2 state size (N)",
    "m_groups": "Mamba-2 groups of B and C (G)",
    "m_conv": "Mamba-2 causal convolution width",
    "m_chunk": "Mamba-2 scan chunk length (Q)",
    "qd": "heads * qk_dim (width of the query projection)",
    "qk_dim": "per-head width of queries and keys (MLA: nope + rope part)",
    "v_dim": "per-head width of values",
    "qk_rope": "per-head rotary part of queries and keys (MLA)",
    "q_lora": "MLA query compression rank (0: none)",
    "kv_lora": "MLA key/value compression rank",
    "win": "keys per query of the layer's attention (min(s, sliding window), else s)",
    "gb": "bytes per element of the gradient buffer (4 with fp32 gradient reduction, else eb, "
          "at least 2)",
    "eb": "bytes per element of the activations (the compute dtype; bf16 under FP8, whose "
          "GEMM operands bind it to 1)",
    "tp": "tensor-parallel degree (1 where the op is replicated)",
    "tps": "sequence-parallel split (tp with --sp, else 1)",
    "cp": "context-parallel degree",
    "ep": "expert-parallel degree",
    "ets": "split of a rank's routed tokens at the expert GEMMs: 1 when the experts use the "
           "TP group, else tps / etp (a rank runs its own T / tps routed tokens gathered "
           "over the expert-TP group)",
    "params": "the rank's local parameters (optimizer ops only)",
    "tensors": "the rank's parameter tensors before any pipeline or ZeRO split (optimizer ops only)",
}

_ALLOWED_NODES = (
    ast.Expression,
    ast.BinOp,
    ast.UnaryOp,
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.FloorDiv,
    ast.Pow,
    ast.USub,
    ast.UAdd,
    ast.Call,
)
_FUNCS = {"max": max, "min": min, "ceil": math.ceil}


@lru_cache(maxsize=4096)
def compile_expr(expr: str) -> Any:
    """Compile an arithmetic expression over :data:`SYMBOLS`; ValueError if it is not one."""
    try:
        tree = ast.parse(str(expr), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an expression: {expr!r} ({exc.msg})") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise ValueError(f"{type(node).__name__} not allowed in expression {expr!r}")
        if isinstance(node, ast.Name) and node.id not in SYMBOLS and node.id not in _FUNCS:
            raise ValueError(f"unknown symbol {node.id!r} in expression {expr!r}")
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in _FUNCS
        ):
            raise ValueError(f"only max/min/ceil calls are allowed in {expr!r}")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
            raise ValueError(f"only numbers are allowed in {expr!r}")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and not (
                isinstance(node.right, ast.Constant) and isinstance(node.right.value, (int, float))
                and abs(node.right.value) <= 16
                and not any(isinstance(n, ast.Pow) for n in ast.walk(node.left))):
            raise ValueError(f"only a constant exponent up to 16 on a base without powers is "
                             f"allowed in {expr!r}")  # ((2**64)**64)**64... never finishes
    return compile(tree, "<template expression>", "eval")


def evaluate(expr: str, env: Mapping[str, float]) -> float:
    """Value of ``expr`` with the symbols bound by ``env`` (a float)."""
    if expr in ("", "0"):
        return 0.0
    code = compile_expr(expr)
    scope: dict[str, Any] = dict(_FUNCS)
    scope.update(env)
    try:
        return float(eval(code, {"__builtins__": {}}, scope))  # noqa: S307 - AST checked above
    except (ArithmeticError, TypeError, ValueError) as exc:  # h/0, ceil(a, b), (-h)**0.5
        raise InputError(f"template expression {expr!r} cannot be evaluated ({exc})",
                         "template", "ops") from None


def shape_parts(shape: str) -> tuple[str, ...]:
    """The four expressions of a ``shape`` field (none when it is empty); ValueError when it
    does not have four."""
    if not shape:
        return ()
    parts = tuple(p.strip() for p in shape.split(","))
    if len(parts) != 4 or not all(parts):
        raise ValueError(f"shape {shape!r}: expected four comma-separated expressions "
                         "(batch, m, n, k)")
    return parts


@dataclass(frozen=True)
class TemplateOp:
    """One op of a template (see the module docstring for the expression conventions).

    Attributes:
        name: module path inside its section (``attn.qkv``, ``mlp.fc1``, ``head``).
        section: ``prologue`` | ``block`` | ``epilogue`` | ``optimizer``.
        phase: ``fwd`` | ``bwd`` | ``opt``.
        op_class: gemm | attention | elementwise | norm | softmax | ... | comm.
        flops, bytes: expressions (floating-point operations; bytes moved to/from memory).
        out: expression, elements of the op's output (unsharded), used to size TP
            communication at region boundaries.
        params: expression, parameters owned by the op (listed on forward ops only).
        part: ``attn`` | ``mlp`` | ``moe`` for block ops, "" elsewhere.
        shard: ``feature`` (split over TP inside a column-parallel region), ``sequence``
            (split with sequence parallelism) or "".
        tp_style: ``colwise`` | ``rowwise`` | ``vocab`` | "".
        recompute: part of the selective-recompute set (the attention core).
        kind: ``compute`` or ``comm``; comm ops have ``collective``, ``group_kind`` and
            ``msg_bytes`` (an expression).
        measured_ns: median duration measured on the source device (0: none).
        src_flops, src_bytes: the op's FLOPs / bytes at the recorded dimensions.
        src_units: the independent work units of its largest leaf at the recorded dimensions
            (attention: batch x heads, :func:`tracesim.ops.rules.work_units`);
            0 = not recorded (templates written before it existed: units are then ignored).
        count: how many recorded ops were folded into this op.
        leaves: trace-derived ops only: JSON list of ``[op name, input shapes]`` of the
            recorded leaf ops, shapes written with expressions of the *unsharded* model
            dimensions; the builder re-costs them at the target dimensions
            (:func:`tracesim.ops.classify.op_cost`) and then multiplies by the
            ``flops`` / ``bytes`` expressions, which hold the parallel split (``1/(cp*tp)``).
        fwd: for a backward op, the name of the forward op it differentiates ("" = ``name``).
        tensors: expression, parameter tensors owned by the op (forward ops with ``params``).
        dtype: compute dtype of this op when it differs from the layout's activation dtype
            ("" = the layout's): ``fp8`` / ``mxfp8`` marks a GEMM that runs at the device's
            FP8 rate on FP8 operands (:mod:`tracesim.template.fp8`), its ``eb`` 1; ``nvfp4``
            one at the FP4 rate on NVFP4 operands, its ``eb`` 0.5625.
        out_dtype: dtype of ``out`` when it is not the layout's activation dtype ("" = the
            layout's): an FP8 cast's output is ``fp8`` (one byte per element) or ``mxfp8``
            (one byte plus a one-byte scale per 32), an NVFP4 cast's ``nvfp4`` (half a byte
            plus a one-byte scale per 16), the bytes a tensor-parallel all-gather
            of it moves (:data:`tracesim.ops.dtypes.WIRE_BYTES`).
        shape: analytic GEMMs and fused attention: ``batch, m, n, k`` as four comma-separated
            expressions (GEMM ``[m, k] x [k, n]`` per batch; attention ``batch x heads``, query
            length, keys per query, head dim), for the cost model's shape-aware path and for
            sizing the FP8 casts; "" = unknown.
        causal: a fused attention kernel under a causal mask: it runs only the blocks on and
            below the diagonal, half of the ``T x s`` square that ``flops`` counts (model
            FLOPs keep the full square, as Narayanan et al. count them).
        calls: expression, the host calls (dispatches) the op stands for, whose per-call
            time does not grow with the op's size; "0" = none apart. The trace-derived
            optimizer step writes ``<calls per tensor>*tensors``; the resolver turns it into
            calls per local parameter and :func:`tracesim.template.durations.make_op_time`
            scales the per-call part of ``measured_ns`` by ``calls`` over ``count`` and only
            the rest by the cost model's ratio.
        when: expression; a compute op runs only on layouts where it is positive ("" =
            always): the sorting of the dispatched tokens by local expert, ``(experts/ep - 1)*a2a_sorted``.
        quant: a block-scaled quantization kernel's recipe (``mxfp8``, ``nvfp4``; "" = none or
            per-tensor): timed at the device profile's ``quantize`` rate for it.
    """

    name: str
    section: str
    phase: str
    op_class: str
    flops: str = "0"
    bytes: str = "0"
    out: str = "0"
    params: str = "0"
    part: str = ""
    shard: str = ""
    tp_style: str = ""
    recompute: bool = False
    kind: str = "compute"
    collective: str = ""
    group_kind: str = ""
    msg_bytes: str = "0"
    measured_ns: float = 0.0
    src_flops: float = 0.0
    src_bytes: float = 0.0
    src_units: float = 0.0
    count: int = 1
    leaves: str = ""
    fwd: str = ""
    tensors: str = "0"
    calls: str = "0"
    dtype: str = ""
    shape: str = ""
    causal: bool = False
    out_dtype: str = ""
    when: str = ""
    quant: str = ""

    @property
    def module(self) -> str:
        """Module path of the op (the name up to a ``:``)."""
        return self.name.split(":", 1)[0]

    def replace(self, **changes: Any) -> TemplateOp:
        return dataclasses.replace(self, **changes)

    def check(self) -> None:
        """Validate fields and expressions; ValueError names the problem."""
        if self.section not in SECTIONS:
            raise ValueError(f"op {self.name}: section {self.section!r} not in {SECTIONS}")
        if self.phase not in ("fwd", "bwd", "opt"):
            raise ValueError(f"op {self.name}: phase {self.phase!r}")
        if self.part not in PARTS or self.shard not in SHARDS or self.tp_style not in TP_STYLES:
            raise ValueError(f"op {self.name}: bad part/shard/tp_style")
        if self.kind not in ("compute", "comm"):
            raise ValueError(f"op {self.name}: kind {self.kind!r}")
        for expr in (self.flops, self.bytes, self.out, self.params, self.msg_bytes, self.tensors,
                     self.calls, *shape_parts(self.shape), *([self.when] if self.when else [])):
            compile_expr(expr)


@dataclass(frozen=True)
class LayerTemplate:
    """A model family's op template (see the module docstring).

    ``meta`` records where it came from: ``source`` (``first-principles`` or a bundle
    path), ``family``, ``device`` (the recording device, for measured durations), ``dims``
    (the recorded model dimensions) and ``attention`` (``flash`` | ``unfused``).
    """

    ops: tuple[TemplateOp, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)
    #: an FP8 template's unquantized original, for the layers kept in BF16
    #: (:func:`tracesim.template.fp8.fp8_template`, ``ParallelSpec.bf16_layers``)
    plain: LayerTemplate | None = None

    def select(
        self, section: str, phase: str | None = None, parts: Iterable[str] | None = None
    ) -> list[TemplateOp]:
        """The ops of ``section`` (and ``phase``, and block ``parts``) in template order."""
        want = set(parts) if parts is not None else None
        return [
            op
            for op in self.ops
            if op.section == section
            and (phase is None or op.phase == phase)
            and (want is None or op.part in want)
        ]

    def without(self, sections: Iterable[str]) -> LayerTemplate:
        """A copy without the given sections (e.g. uniform pipeline stages for tests)."""
        drop = set(sections)
        return LayerTemplate(tuple(op for op in self.ops if op.section not in drop), self.meta)

    @property
    def measured(self) -> bool:
        return any(op.measured_ns > 0 for op in self.ops)

    def check(self) -> None:
        names = set()
        for op in self.ops:
            op.check()
            names.add((op.section, op.name, op.phase, op.part))
        if not self.select("block", "fwd"):
            raise ValueError("template has no forward block ops")
        block = self.select("block")
        unnamed = [op for op in block if not op.part]
        if unnamed and len(unnamed) < len(block):  # the builder selects block ops by part
            raise ValueError(f"op {unnamed[0].name} ({unnamed[0].phase}) has no part, where other "
                             "block ops name theirs (attn, mlp, moe)")

    def to_dict(self) -> dict[str, Any]:
        defaults = {f.name: f.default for f in dataclasses.fields(TemplateOp)}
        ops = []
        for op in self.ops:
            d = dataclasses.asdict(op)
            ops.append({k: v for k, v in d.items() if k in ("name", "section", "phase", "op_class") or v != defaults[k]})
        return {"format": "tracesim-template", "version": 1, "meta": dict(self.meta), "ops": ops}

    def save(self, path: str | Path) -> None:
        """Write the template as YAML (``template.yaml`` of a workload directory)."""
        write_yaml(path, self.to_dict())


def template_from_dict(data: Any, file: str | Path | None = None) -> LayerTemplate:
    """Parse a template mapping written by :meth:`LayerTemplate.to_dict`; InputError on bad data."""
    if not isinstance(data, Mapping) or data.get("format") != "tracesim-template":
        raise InputError("not a tracesim layer template (format key missing)", file)
    if data.get("version") != 1:
        raise InputError(f"template version {data.get('version')!r}, expected 1", file, "version")
    fields = {f.name for f in dataclasses.fields(TemplateOp)}
    ops = []
    for i, raw in enumerate(data.get("ops") or []):
        if not isinstance(raw, Mapping):
            raise InputError("expected a mapping", file, f"ops[{i}]")
        unknown = set(raw) - fields
        if unknown:
            raise InputError(f"unknown keys {sorted(unknown)}", file, f"ops[{i}]")
        try:
            op = TemplateOp(**{k: _checked_field(k, raw[k]) for k in raw})
            op.check()
        except (TypeError, ValueError) as exc:
            raise InputError(str(exc), file, f"ops[{i}]") from None
        ops.append(op)
    meta = data.get("meta") or {}
    if not isinstance(meta, Mapping):
        raise InputError(f"expected a mapping, got {type(meta).__name__}", file, "meta")
    tpl = LayerTemplate(tuple(ops), dict(meta))
    try:
        tpl.check()
    except ValueError as exc:
        raise InputError(str(exc), file, "ops") from None
    if not tpl.select("block", "bwd"):  # the builder times gradients from the backward block
        raise InputError("template has no backward block ops", file, "ops")
    return tpl


_EXPR_FIELDS = ("flops", "bytes", "out", "params", "msg_bytes", "tensors", "calls")
_DTYPE_FIELD_VALUES = ("", "fp32", "tf32", "bf16", "fp16", "fp8", "mxfp8", "nvfp4")


def _checked_field(key: str, value: Any) -> Any:
    """``value`` of TemplateOp field ``key`` if its type is right (numbers are accepted for
    expressions); ValueError says what was expected."""
    default = {f.name: f.default for f in dataclasses.fields(TemplateOp)}[key]
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if key in _EXPR_FIELDS and number:
        return str(value)
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, (int, float)):
        ok = number and value >= 0 and (isinstance(value, int) or not isinstance(default, int))
    else:
        ok = isinstance(value, str)
    allowed = {"dtype": _DTYPE_FIELD_VALUES, "out_dtype": _DTYPE_FIELD_VALUES,
               "quant": ("", "mxfp8", "nvfp4")}.get(key)
    if ok and allowed is not None and value not in allowed:
        raise ValueError(f"{key}: expected one of {', '.join(repr(x) for x in allowed)}, got {value!r}")
    if not ok:
        kind = type(default).__name__ if default is not dataclasses.MISSING else "str"
        raise ValueError(f"{key}: expected {kind}{' >= 0' if kind in ('int', 'float') else ''}, "
                         f"got {value!r}")
    if key == "leaves" and value:
        import json

        try:
            leaves = json.loads(value)
        except ValueError:
            leaves = None
        if not isinstance(leaves, list) or not all(
                isinstance(x, list) and len(x) == 2 and isinstance(x[0], str) for x in leaves):
            raise ValueError(f"leaves: expected a JSON list of [op name, shapes], got {value!r}")
        stack = [x[1] for x in leaves]
        while stack:  # every shape is a number or an expression
            v = stack.pop()
            if isinstance(v, list):
                stack.extend(v)
            elif isinstance(v, str):
                compile_expr(v)
            elif isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"leaves: a shape is {v!r}, expected a number or an expression")
    return value


def load_template(path: str | Path) -> LayerTemplate:
    """Read a template YAML file (``template.yaml``)."""
    return template_from_dict(read_yaml(path), path)


def symbol_env(model: Any, par: Any, *, tp_active: bool = True, sp_active: bool = True) -> dict[str, float]:
    """Bind :data:`SYMBOLS` for ``model`` (a ModelSpec) and ``par`` (a ParallelSpec)."""
    from tracesim.specs.model import DTYPE_BYTES

    tp = float(par.tp)
    pad, pad_a2a = moe_padding(model, par)
    return {
        "b": float(par.micro_batch),
        "s": float(par.seq_len),
        "h": float(model.hidden),
        "heads": float(model.heads),
        "kv_heads": float(model.kv_heads),
        "head_dim": float(model.head_dim),
        "kvh": float(model.kv_heads * model.head_dim),
        "ffn": float(model.ffn_hidden),
        "vocab": float(model.vocab),
        "experts": float(max(model.experts, 1)),
        "top_k": float(max(model.top_k, 1)),
        "moe_ffn": float(model.moe_ffn_hidden or model.ffn_hidden),
        "shared_ffn": float(model.shared_ffn),
        "moe_h": float(getattr(model, "moe_hidden", model.hidden)),
        "latent": float(bool(getattr(model, "moe_latent", 0))),
        "moe_load": float(par.moe_load),
        "moe_kept": float(par.moe_kept),
        "moe_pad": pad,
        "moe_pad_a2a": pad_a2a,
        "a2a_sorted": float(getattr(par, "moe_dispatcher", "alltoall") == "alltoall"),
        "hybridep": float(getattr(par, "moe_dispatcher", "alltoall") == "hybridep"),
        "m_inner": float(getattr(model, "mamba_heads", 0) * getattr(model, "mamba_head_dim", 0)),
        "m_heads": float(getattr(model, "mamba_heads", 0)),
        "m_hd": float(getattr(model, "mamba_head_dim", 0)),
        "m_state": float(getattr(model, "mamba_state", 0)),
        "m_groups": float(getattr(model, "mamba_groups", 0)),
        "m_conv": float(getattr(model, "mamba_conv", 0)),
        "m_chunk": float(getattr(model, "mamba_chunk", 0) or 1),
        "qd": float(model.q_width),
        "qk_dim": float(model.qk_head_dim),
        "v_dim": float(model.v_dim),
        "qk_rope": float(model.qk_rope_head_dim),
        "q_lora": float(model.q_lora_rank),
        "kv_lora": float(model.kv_lora_rank),
        "win": float(par.seq_len),
        "eb": float(DTYPE_BYTES[getattr(par, "act_dtype", par.dtype)]),
        "gb": float(par.grad_bytes),
        "tp": tp if tp_active else 1.0,
        "tps": tp if (par.sp and sp_active) else 1.0,
        "cp": float(par.cp),
        "ep": float(par.ep),
        "ets": float(getattr(par, "expert_token_split", 1.0)),
        "params": 0.0,
        "tensors": 0.0,
    }
