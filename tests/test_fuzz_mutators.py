"""Mutators shared by the fuzz tests (truncation, byte edits, type confusion), and their checks.

Every fuzz test starts from a real input (a public trace, a shipped YAML spec, an interop
file) and damages it with one of these. Hypothesis draws the edits; with ``derandomize`` the
same cases run on every machine, so a failure in CI reproduces locally.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracesim.errors import InputError, ReplayError


def fuzz_settings(n: int) -> settings:
    """Bounded, repeatable hypothesis settings for ``n`` cases."""
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


#: input class -> outcome ("ok", "InputError", ...) -> cases run (docs/reliability.md)
CASES: dict[str, dict[str, int]] = {}


@pytest.fixture(scope="module", autouse=True)
def fuzz_report():
    """With TRACESIM_FUZZ_REPORT=FILE, add this module's case counts to FILE (JSON)."""
    yield
    out = os.environ.get("TRACESIM_FUZZ_REPORT")
    if out and CASES:
        path = Path(out)
        old = json.loads(path.read_text()) if path.exists() else {}
        for cls, outcomes in CASES.items():
            for k, n in outcomes.items():
                old.setdefault(cls, {})[k] = old.get(cls, {}).get(k, 0) + n
        path.write_text(json.dumps(old, indent=1, sort_keys=True))
        CASES.clear()


# ----------------------------------------------------------------------------- values

_LEAVES = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2**63, -(2**63) - 1, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "0", "-1", "1e999", "nan", "ProfilerStep#1", "nccl:all_reduce",
                     "aten::mm", "[[1, 2], [3]]", "{'rank': 1}", "${x}", "__import__('os')"]),
)
#: any JSON / YAML value, small
JSON_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)

#: tokens that break JSON / YAML structure in interesting ways
_TOKENS = [b'"', b",", b"{", b"}", b"[", b"]", b":", b"-", b"1e999", b"null", b"NaN", b"\\u12",
           b"\\", b"\x00", b"\xff\xfe", b"\n", b"  ", b"- ", b"&a", b"*a", b"!!python/object", b"#",
           b"'", b"|", b"\t", b"%"]
BYTE_EDITS = st.lists(
    st.tuples(st.sampled_from(["replace", "insert", "delete", "dup"]),
              st.integers(min_value=0, max_value=2**31),
              st.one_of(st.sampled_from(_TOKENS), st.binary(min_size=1, max_size=4))),
    min_size=1, max_size=4,
)


def mutate_bytes(data: bytes, edits: list[tuple[str, int, bytes]]) -> bytes:
    """Apply byte-level edits at positions taken modulo the length."""
    out = bytearray(data)
    for kind, pos, chunk in edits:
        p = pos % (len(out) + 1)
        if kind == "replace":
            out[p : p + len(chunk)] = chunk
        elif kind == "insert":
            out[p:p] = chunk
        elif kind == "delete":
            del out[p : p + len(chunk) * 7]
        else:  # duplicate a span
            out[p:p] = out[p : p + 40]
    return bytes(out)


# ----------------------------------------------------------------------------- trees

ACTIONS = ("replace", "delete", "wrap", "stringify", "add_key", "empty", "boundary", "boundary")
#: same-type edge values: what "boundary" puts in place of a number / string / list
BOUNDARY_NUMBERS = (0, -1, 1, 0.5, -0.0, 2**31, 2**63, float("nan"), float("inf"), 1e-300, 7)
BOUNDARY_STRINGS = ("", " ", "x" * 300, "0", "none", "../../etc/passwd", "a/b", "ü")
TREE_EDITS = st.lists(
    st.tuples(st.integers(min_value=0, max_value=2**31), st.sampled_from(ACTIONS), JSON_VALUES,
              st.text(max_size=6)),
    min_size=1, max_size=3,
)


def tree_paths(tree: Any, limit: int = 200_000) -> list[tuple]:
    """Paths (tuples of keys / indices) of every node below the root, depth first."""
    out: list[tuple] = []
    stack: list[tuple[tuple, Any]] = [((), tree)]
    while stack and len(out) < limit:
        path, node = stack.pop()
        if path:
            out.append(path)
        if isinstance(node, dict):
            stack.extend((path + (k,), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((path + (i,), v) for i, v in enumerate(node))
    return out


def edit_tree(tree: Any, edits: list[tuple[int, str, Any, str]],
              pick: Callable[[Any], list[tuple]] = tree_paths) -> Any:
    """A copy of ``tree`` with each edit applied to the node ``pick(tree)[i % n]``."""
    tree = copy.deepcopy(tree)
    for i, action, value, key in edits:
        paths = pick(tree)
        if not paths:
            return value
        path = paths[i % len(paths)]
        parent = tree
        for k in path[:-1]:
            parent = parent[k]
        last = path[-1]
        node = parent[last]
        if action == "replace":
            parent[last] = value
        elif action == "delete":
            del parent[last]
        elif action == "wrap":
            parent[last] = [node]
        elif action == "stringify":
            parent[last] = str(node)
        elif action == "add_key":
            if isinstance(node, dict):
                node[key or "unknown_key"] = value
            elif isinstance(node, list):
                node.append(value)
            else:
                parent[last] = {key: node}
        elif action == "boundary":  # keep the type, take an edge value
            if isinstance(node, bool):
                parent[last] = not node
            elif isinstance(node, (int, float)):
                parent[last] = BOUNDARY_NUMBERS[i % len(BOUNDARY_NUMBERS)]
            elif isinstance(node, str):
                parent[last] = BOUNDARY_STRINGS[i % len(BOUNDARY_STRINGS)]
            elif isinstance(node, list):
                parent[last] = node * 3 if i % 2 else node[:1]
            else:
                parent[last] = value
        else:  # empty
            parent[last] = type(node)() if isinstance(node, (dict, list, str)) else None
    return tree


def truncate_gz(data: bytes, at: int) -> bytes:
    return data[: at % (len(data) + 1)]


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=1, mtime=0)


# ----------------------------------------------------------------------------- invariant


#: seconds one library-level case may take before it counts as a hang
HANG_S = 20.0


class Hang(Exception):
    """A fuzz case that did not finish in HANG_S seconds (a hang or a runaway loop)."""


def expect_clean(cls: str, fn: Callable[[], Any], *, allow_replay: bool = False) -> str:
    """Run ``fn``: success, or InputError (ReplayError if allowed) with a one-line message
    naming a file or place. Any other exception propagates and fails the test. The outcome
    is counted under input class ``cls`` and returned."""
    allowed: tuple[type[BaseException], ...] = (InputError, ReplayError) if allow_replay else (InputError,)
    outcome = "ok"

    def hang(signum: int, frame: Any) -> None:
        raise Hang(f"{cls}: no answer within {HANG_S} s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    try:
        fn()
    except allowed as exc:
        text = str(exc)
        assert text and "\n" not in text, repr(text)
        if isinstance(exc, InputError):
            assert exc.file or exc.where, f"InputError names no file or place: {text}"
        outcome = type(exc).__name__
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    CASES.setdefault(cls, {})
    CASES[cls][outcome] = CASES[cls].get(outcome, 0) + 1
    return outcome


# ----------------------------------------------------------------------------- self-checks


@fuzz_settings(30)
@given(st.binary(max_size=200), BYTE_EDITS)
def test_mutate_bytes_changes_or_keeps_length_sanely(data, edits):
    out = mutate_bytes(data, edits)
    assert isinstance(out, bytes)
    assert len(out) <= len(data) + sum(max(len(c), 40) for _, _, c in edits)


@fuzz_settings(30)
@given(JSON_VALUES, TREE_EDITS)
def test_edit_tree_leaves_the_original_alone(value, edits):
    original = copy.deepcopy(value)
    edit_tree({"root": value}, edits)
    assert _same(value, original)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_expect_clean_lets_bugs_through():
    def boom(exc: Exception) -> None:
        raise exc

    with pytest.raises(KeyError):
        expect_clean("self-check", lambda: boom(KeyError("x")))
    assert expect_clean("self-check", lambda: boom(InputError("bad", "f.yaml", "k"))) == "InputError"
    with pytest.raises(AssertionError):  # an InputError that names nothing is a bug too
        expect_clean("self-check", lambda: boom(InputError("bad")))
    CASES.pop("self-check", None)
