"""Per-op FLOP and byte formulas, registered by decorator (used by tracesim.ops.classify, which loads
:mod:`tracesim.ops.rules`, where the rules are registered).

Each rule is ``fn(args: Args) -> (flops, bytes)`` registered with :func:`rule` for one op
class and a set of operator names (without the ``aten::`` namespace). Ops without a rule
use their class's default (pointwise-style bytes: inputs read plus the largest written).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tracesim.ops.dtypes import (
    DEFAULT_DTYPE,
    DTYPE_BYTES,
    FLOAT_DTYPES,
    dtype_name,
)

Rule = Callable[["Args"], tuple[float, float]]

_RULES: dict[str, tuple[str, Rule | None]] = {}

def rule(op_class: str, *names: str) -> Callable[[Rule], Rule]:
    """Register ``fn`` as the cost rule of ``names`` (operator names without namespace)."""

    def deco(fn: Rule) -> Rule:
        for n in names:
            _RULES[n] = (op_class, fn)
        return fn

    return deco


def classes(op_class: str, *names: str) -> None:
    """Register ``names`` as ops of ``op_class`` that use the class's default rule."""
    for n in names:
        _RULES[n] = (op_class, None)


def op_class_of(base_name: str) -> str | None:
    """The registered class of an operator name (no namespace), or None."""
    hit = _RULES.get(base_name)
    return hit[0] if hit is not None else None


@dataclass(frozen=True)
class Args:
    """An op's inputs: tensor shapes (None for non-tensors), their dtypes, concrete values."""

    shapes: tuple[tuple[int, ...] | None, ...]
    lists: tuple[tuple[tuple[int, ...], ...] | None, ...]
    dtypes: tuple[str | None, ...]
    concrete: tuple[Any, ...]
    dtype: str

    @staticmethod
    def build(dims: list, types: list[str], concrete: list) -> Args:
        shapes: list[tuple[int, ...] | None] = []
        lists: list[tuple[tuple[int, ...], ...] | None] = []
        dts: list[str | None] = []
        for i, d in enumerate(dims):
            t = types[i] if i < len(types) else ""
            dt = dtype_name(t)
            is_list = isinstance(d, list) and bool(d) and all(isinstance(x, list) for x in d)
            if is_list or t in ("TensorList", "GenericList"):
                lists.append(tuple(_shape(x) for x in d if isinstance(x, list)))
                shapes.append(None)
                dts.append(None)
            elif dt is not None and isinstance(d, list):
                shapes.append(_shape(d))
                lists.append(None)
                dts.append(dt)
            else:
                shapes.append(None)
                lists.append(None)
                dts.append(None)
        floats = [d for d in dts if d in FLOAT_DTYPES]
        anyd = [d for d in dts if d is not None]
        dtype = floats[0] if floats else (anyd[0] if anyd else DEFAULT_DTYPE)
        return Args(tuple(shapes), tuple(lists), tuple(dts), tuple(concrete), dtype)

    # ---- accessors (all tolerant of missing arguments)
    def shape(self, i: int) -> tuple[int, ...] | None:
        return self.shapes[i] if 0 <= i < len(self.shapes) else None

    def numel(self, i: int) -> int:
        s = self.shape(i)
        return _prod(s) if s is not None else 0

    def elt(self, i: int | None = None) -> int:
        d = self.dtypes[i] if i is not None and 0 <= i < len(self.dtypes) else None
        return DTYPE_BYTES.get(d or self.dtype, 4)

    def nbytes(self, i: int) -> float:
        if 0 <= i < len(self.lists) and self.lists[i] is not None:
            return float(sum(_prod(s) for s in self.lists[i] or ())) * self.elt()
        return float(self.numel(i) * self.elt(i))

    def tensor_bytes(self) -> float:
        return sum(self.nbytes(i) for i in range(len(self.shapes)))

    def max_numel(self) -> int:
        sizes = [self.numel(i) for i in range(len(self.shapes))]
        for lst in self.lists:
            if lst:
                sizes.append(sum(_prod(s) for s in lst))
        return max(sizes, default=0)

    def list_numel(self, i: int) -> int:
        if 0 <= i < len(self.lists) and self.lists[i]:
            return sum(_prod(s) for s in self.lists[i] or ())
        return 0

    def value(self, i: int, default: Any = None) -> Any:
        if not 0 <= i < len(self.concrete):
            return default
        v = self.concrete[i]
        if isinstance(v, str):
            s = v.strip()
            if s == "":
                return default
            if s in ("True", "False"):
                return s == "True"
            try:
                return ast.literal_eval(s)
            except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
                return s
        return v


def _shape(d: Any) -> tuple[int, ...]:
    return tuple(int(x) for x in d if isinstance(x, (int, float)) and not isinstance(x, bool))


def _prod(s: Iterable[int]) -> int:
    p = 1
    for v in s:
        p *= max(int(v), 0)
    return p


# --------------------------------------------------------------------------- dispatch

#: pointwise FLOPs per output element (transcendental ops cost more than one)
_POINTWISE_FLOPS = {
    "gelu": 20, "gelu_": 20, "gelu_backward": 30, "silu": 10, "silu_": 10, "silu_backward": 14,
    "sigmoid": 10, "sigmoid_": 10, "sigmoid_backward": 3, "tanh": 10, "tanh_": 10,
    "tanh_backward": 3, "exp": 8, "exp_": 8, "log": 8, "erf": 15, "softplus": 12, "mish": 20,
    "elu": 8, "pow": 8, "rsqrt": 4, "sqrt": 4, "reciprocal": 2, "div": 2, "div_": 2,
    "native_dropout": 4, "dropout": 4, "bernoulli_": 4, "normal_": 8, "uniform_": 4,
    "lerp_": 3, "addcmul_": 2, "addcdiv_": 3, "nan_to_num": 2,
}

_WRITE_ONLY = {"fill_", "zero_", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like",
               "arange", "randn", "rand", "randint", "normal_", "uniform_", "bernoulli_",
               "random_", "randn_like", "rand_like", "empty", "empty_like", "empty_strided",
               "new_zeros", "new_ones", "new_full", "new_empty", "scalar_tensor", "linspace"}
_NO_TRAFFIC = {"empty", "empty_like", "empty_strided", "new_empty"}


def cost_of(name: str, op_class: str, args: Args) -> tuple[float, float]:
    """(flops, bytes) of an op; uses the registered rule, else the class default."""
    base = name.split("::")[-1].strip()
    hit = _RULES.get(base)
    if hit is not None and hit[1] is not None:
        return hit[1](args)
    if op_class == "other" and base in _VIEW_OPS:
        return 0.0, 0.0
    return _default(base, op_class, args)


def _default(base: str, op_class: str, args: Args) -> tuple[float, float]:
    if base in _NO_TRAFFIC:
        return 0.0, 0.0
    out = float(args.max_numel())
    if base in _WRITE_ONLY:
        if out == 0.0:  # creation op: size given as a ScalarList
            size = args.value(0)
            if isinstance(size, (list, tuple)) and all(isinstance(x, int) for x in size):
                out = float(_prod(size))
        return _POINTWISE_FLOPS.get(base, 0) * out, out * args.elt()
    nbytes = args.tensor_bytes() + out * args.elt()
    if op_class in ("elementwise", "other", "embedding", "memcpy", "comm"):
        per = _POINTWISE_FLOPS.get(base, 1 if op_class == "elementwise" else 0)
        if op_class == "comm":
            return 0.0, args.tensor_bytes()
        return per * out, nbytes
    if op_class == "norm":
        return 8.0 * out, nbytes
    if op_class == "softmax":
        return 5.0 * out, nbytes
    if op_class == "reduction":
        return float(args.tensor_bytes() / max(args.elt(), 1)), args.tensor_bytes()
    if op_class == "optimizer":
        first = args.list_numel(0) or args.numel(0)
        return 2.0 * first, args.tensor_bytes() + first * args.elt()
    # gemm / attention without a specific rule: bytes only
    return 0.0, nbytes


_VIEW_OPS = {
    "view", "reshape", "_reshape_alias", "_unsafe_view", "t", "transpose", "permute", "expand",
    "expand_as", "as_strided", "unsqueeze", "squeeze", "slice", "select", "narrow", "split",
    "split_with_sizes", "chunk", "unbind", "detach", "detach_", "alias", "resize_", "view_as",
    "unflatten", "flatten", "movedim", "diagonal", "lift_fresh", "numpy_T", "mT", "_alias",
    "set_", "result_type", "is_nonzero", "size", "stride", "dim", "item", "_local_scalar_dense",
    "requires_grad_", "record_stream", "is_same_size", "_has_compatible_shallow_copy_type",
    "_to_dense", "conj", "resolve_conj", "resolve_neg", "_fused_sdp_choice", "empty",
    "empty_like", "empty_strided", "new_empty", "new_empty_strided", "contiguous_",
}
classes("other", *_VIEW_OPS)

__all__ = ["Args", "cost_of", "op_class_of", "rule", "classes"]
