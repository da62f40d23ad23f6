"""Safe arithmetic / comparison expressions for sweep constraints (``tp * pp * dp == gpus``).

An expression is parsed with :mod:`ast` and checked against a whitelist before it is ever
evaluated; evaluation walks the tree itself (never ``eval``). Allowed:

- numbers, strings, ``true``/``false`` (``True``/``False``) and ``None`` literals;
- names (the point's axes and derived quantities, see :mod:`tracesim.sweep.space`);
- ``+ - * / // % **`` (exponents limited to ``|e| <= 64``), unary ``- + not``;
- comparisons ``== != < <= > >=`` (chained), ``in`` / ``not in`` against a literal tuple or
  list, ``and`` / ``or``, ``a if cond else b``;
- the functions ``min``, ``max``, ``abs`` with positional arguments.

Anything else (attributes, subscripts, other calls, lambdas, comprehensions) is an
:class:`~tracesim.errors.InputError` naming the file and the constraint.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracesim.errors import InputError

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMPOPS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_FUNCS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "abs": abs}
_CONSTANT_NAMES = {"true": True, "false": False, "True": True, "False": False, "None": None}
MAX_EXPONENT = 64


@dataclass(frozen=True)
class Expr:
    """A checked expression: its text, parsed tree and the names it reads."""

    text: str
    tree: ast.Expression
    names: frozenset[str]
    file: str | None = None
    where: str | None = None

    def evaluate(self, scope: Mapping[str, Any]) -> Any:
        """The value of the expression with names bound from ``scope``.

        Raises InputError for an unknown name, a division by zero or a type mismatch
        (``'a' * 'b'``), naming the file, the constraint and the offending part.
        """
        missing = sorted(n for n in self.names if n not in scope)
        if missing:
            known = ", ".join(sorted(scope))
            raise InputError(f"unknown name {missing[0]!r} in {self.text!r} (known: {known})",
                             self.file, self.where)
        try:
            return _eval(self.tree.body, scope)
        except InputError:
            raise
        except (ZeroDivisionError, TypeError, ValueError, OverflowError) as exc:
            raise InputError(f"cannot evaluate {self.text!r}: {exc}", self.file, self.where) from None

    def test(self, scope: Mapping[str, Any]) -> bool:
        """Evaluate as a condition: the value must be a boolean (a comparison)."""
        value = self.evaluate(scope)
        if not isinstance(value, bool):
            raise InputError(f"{self.text!r} gives {value!r}, not true/false (use a comparison "
                             "such as `tp * pp * dp == gpus`)", self.file, self.where)
        return value


def parse_expr(text: Any, file: str | Path | None = None, where: str | None = None) -> Expr:
    """Parse and check ``text``; InputError (naming ``file`` / ``where``) when not allowed."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"expected an expression string, got {text!r}", file, where)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise InputError(f"invalid expression {text!r}: {exc.msg}", file, where) from None
    for node in ast.walk(tree):
        _check_node(node, text, file, where)
    funcs = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    names = {n.id for n in ast.walk(tree)
             if isinstance(n, ast.Name) and id(n) not in funcs and n.id not in _CONSTANT_NAMES}
    return Expr(text=text.strip(), tree=tree, names=frozenset(names),
                file=str(file) if file is not None else None, where=where)


_ALLOWED_NODES = (
    ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd,
    ast.BinOp, ast.Compare, ast.Constant, ast.Name, ast.Load, ast.Tuple, ast.List, ast.IfExp,
    ast.Call, *_BINOPS, *_CMPOPS,
)


def _check_node(node: ast.AST, text: str, file: Any, where: str | None) -> None:
    if not isinstance(node, _ALLOWED_NODES):
        raise InputError(f"{type(node).__name__} is not allowed in {text!r} (only arithmetic, "
                         "comparisons, and/or/not, names and min/max/abs)", file, where)
    if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str, bool, type(None))):
        raise InputError(f"literal {node.value!r} is not allowed in {text!r}", file, where)
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS or node.keywords:
            raise InputError(f"only min(), max() and abs() may be called in {text!r}", file, where)
    if isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            if isinstance(elt, ast.Starred):
                raise InputError(f"starred items are not allowed in {text!r}", file, where)


def _eval(node: ast.AST, scope: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in _CONSTANT_NAMES and node.id not in scope:
            return _CONSTANT_NAMES[node.id]
        return scope[node.id]
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, scope), _eval(node.right, scope)
        if isinstance(node.op, ast.Pow) and (not isinstance(right, (int, float)) or abs(right) > MAX_EXPONENT):
            raise ValueError(f"exponent {right!r} outside [-{MAX_EXPONENT}, {MAX_EXPONENT}]")
        if (isinstance(node.op, ast.Pow) and isinstance(left, int) and isinstance(right, int)
                and left.bit_length() * right > 4096):  # ((2**64)**64)**64...: never finishes
            raise ValueError(f"{left!r} ** {right!r} is too large")
        if isinstance(node.op, ast.Mult) and (isinstance(left, (str, tuple)) or isinstance(right, (str, tuple))):
            raise ValueError("only numbers can be multiplied")  # 'x' * 10**12: MemoryError
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, scope)
        if isinstance(node.op, ast.Not):
            return not value
        return -value if isinstance(node.op, ast.USub) else +value
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            result: Any = True
            for v in node.values:
                result = _eval(v, scope)
                if not result:
                    return result
            return result
        result = False
        for v in node.values:
            result = _eval(v, scope)
            if result:
                return result
        return result
    if isinstance(node, ast.Compare):
        left = _eval(node.left, scope)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = _eval(comp, scope)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, scope) if _eval(node.test, scope) else _eval(node.orelse, scope)
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_eval(e, scope) for e in node.elts)
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        return _FUNCS[node.func.id](*(_eval(a, scope) for a in node.args))
    raise ValueError(f"unsupported node {type(node).__name__}")  # unreachable after _check_node
