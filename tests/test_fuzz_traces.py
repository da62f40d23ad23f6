"""Fuzzing the trace readers: Kineto (json.load path and streaming path) and execution traces.

Inputs are public traces (../shared/traces/public) truncated, edited byte by byte, with the
gzip stream damaged, or with values of the wrong type put anywhere in the JSON tree. The
invariant: the reader (and the self-replay pipeline after it) succeeds or raises InputError
(ReplayError for a graph that cannot finish) with one line naming the file; never another
exception. The streaming reader must agree with the json.load reader on every case.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from functools import cache
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import PUBLIC_TRACES
from tests.test_fuzz_mutators import (
    BYTE_EDITS,
    TREE_EDITS,
    edit_tree,
    expect_clean,
    fuzz_report,  # noqa: F401  (module fixture: case counts for docs/reliability.md)
    fuzz_settings,
    gz,
    mutate_bytes,
    tree_paths,
)
from tracesim.errors import InputError
from tracesim.trace import kineto
from tracesim.trace.et import data_dependencies, join_rate, read_et
from tracesim.trace.stream import load_trace_streaming

pytestmark = pytest.mark.skipif(not PUBLIC_TRACES.is_dir(),
                                reason=f"../shared/traces/public not found at {PUBLIC_TRACES}")

#: small public traces: one with ProfilerStep annotations (reaches the replay), two without
TRACES = ("mi250_minitoy.json.gz", "a100_simple_add.trace.json.gz",
          "a100_event_sync_multi_stream.json.gz")
ET_FILE = "a100_simple_add.et.json.gz"


@cache
def _text(name: str) -> bytes:
    return gzip.decompress((PUBLIC_TRACES / name).read_bytes())


@cache
def _tree(name: str) -> dict:
    return json.loads(_text(name))


def _read_both(path: Path, chunk: int = 257):
    """Read with the json.load path and the streaming path; outcomes must agree."""
    out = {}

    def plain():
        out["plain"] = kineto.read_kineto(path)

    def streamed():
        data = load_trace_streaming(path, keep=kineto._op_event, chunk_chars=chunk)
        out["stream"] = kineto.op_table_from_events(data, path)

    a = expect_clean("kineto: " + _CLASS, plain)
    b = expect_clean("kineto (streaming): " + _CLASS, streamed)
    assert a == b, f"json.load path: {a}, streaming path: {b}"
    if a == "ok":
        pd.testing.assert_frame_equal(out["plain"], out["stream"])
    return a


_CLASS = ""


def _run(cls: str, name: str, data: bytes, suffix: str = ".json") -> str:
    global _CLASS
    _CLASS = cls
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / ("t" + suffix)
        p.write_bytes(data)
        return _read_both(p)


@fuzz_settings(40)
@given(st.sampled_from(TRACES), st.integers(min_value=0, max_value=2**31), st.booleans())
def test_kineto_truncated(name, at, zipped):
    text = _text(name)
    cut = text[: at % (len(text) + 1)]
    _run("truncated text", name, gz(cut) if zipped else cut, ".json.gz" if zipped else ".json")


@fuzz_settings(25)
@given(st.sampled_from(TRACES), st.integers(min_value=0, max_value=2**31))
def test_kineto_truncated_gzip_stream(name, at):
    data = (PUBLIC_TRACES / name).read_bytes()
    outcome = _run("truncated gzip", name, data[: at % len(data)], ".json.gz")
    assert outcome == "InputError"  # a gzip stream cut short is always an error


@fuzz_settings(60)
@given(st.sampled_from(TRACES), BYTE_EDITS)
def test_kineto_byte_edits(name, edits):
    _run("byte edits (text)", name, mutate_bytes(_text(name), edits))


@fuzz_settings(30)
@given(st.sampled_from(TRACES), BYTE_EDITS)
def test_kineto_gzip_byte_edits(name, edits):
    _run("byte edits (gzip)", name, mutate_bytes((PUBLIC_TRACES / name).read_bytes(), edits),
         ".json.gz")


def _event_paths(tree):
    """Mostly paths inside complete events (what the reader uses), some top-level ones."""
    if not isinstance(tree, dict):
        return tree_paths(tree)
    paths = [(k,) for k in tree]
    ev = tree.get("traceEvents")
    if isinstance(ev, list):
        for i, e in enumerate(ev):
            if isinstance(e, dict) and e.get("ph") == "X":
                paths += [("traceEvents", i) + p for p in tree_paths(e)]
                paths.append(("traceEvents", i))
    return paths or tree_paths(tree)


@fuzz_settings(80)
@given(st.sampled_from(TRACES), TREE_EDITS)
def test_kineto_type_confusion_through_self_replay(name, edits):
    """Wrong types anywhere in events / top-level keys, through read -> extract -> replay."""
    from tracesim.pipeline import self_replay

    tree = edit_tree(_tree(name), edits, pick=_event_paths)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.json"
        p.write_text(json.dumps(tree))
        global _CLASS
        _CLASS = "type confusion"
        if _read_both(p) == "ok":
            expect_clean("self-replay of type-confused trace", lambda: self_replay(p),
                         allow_replay=True)


@fuzz_settings(30)
@given(st.sampled_from(TRACES), st.integers(min_value=1, max_value=5000),
       st.sampled_from([None, 0, 1, 2]))
def test_streaming_equals_json_load(name, chunk, indent):
    """Any chunk size and any layout of the same JSON give the same dict as json.load."""
    tree = _tree(name)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.json"
        p.write_text(json.dumps(tree, indent=indent, separators=None if indent else (",", ":")))
        assert load_trace_streaming(p, chunk_chars=chunk) == tree
        expect_clean("streaming layouts", lambda: None)


def test_streaming_path_is_used_above_the_threshold(monkeypatch):
    """read_kineto switches to the streaming parser by size and gives the same table."""
    calls = []
    real = load_trace_streaming

    def spy(*a, **k):
        calls.append(a[0])
        return real(*a, **k)

    import tracesim.trace.stream as stream_mod

    for name in TRACES:
        before = kineto.read_kineto(PUBLIC_TRACES / name)
        monkeypatch.setattr(kineto, "STREAM_MIN_BYTES", 0)
        monkeypatch.setattr(stream_mod, "load_trace_streaming", spy)
        after = kineto.read_kineto(PUBLIC_TRACES / name)
        monkeypatch.undo()
        pd.testing.assert_frame_equal(before, after)
    assert len(calls) == len(TRACES)


def test_deeply_nested_json_is_an_input_error(tmp_path):
    """json.loads raises RecursionError on deep nesting; both readers turn it into InputError."""
    p = tmp_path / "deep.json"
    p.write_text('{"traceEvents": [' + "[" * 100_000 + "]" * 100_000 + "]}")
    with pytest.raises(InputError, match="nested too deeply"):
        kineto.read_kineto(p)
    with pytest.raises(InputError, match="nested too deeply"):
        load_trace_streaming(p)
    with pytest.raises(InputError, match="nested too deeply"):
        read_et(p)


# ----------------------------------------------------------------------------- execution traces


@cache
def _et_text() -> bytes:
    return gzip.decompress((PUBLIC_TRACES / ET_FILE).read_bytes())


@cache
def _et_ops():
    return kineto.read_kineto(PUBLIC_TRACES / "a100_simple_add.trace.json.gz")


def _et_pipeline(p: Path) -> None:
    from tracesim.trace.extract import extract

    et = read_et(p)
    data_dependencies(et)
    join_rate(et, _et_ops())
    extract(_et_ops(), None, {0: et})


@fuzz_settings(40)
@given(st.one_of(st.tuples(st.just("truncate"), st.integers(min_value=0, max_value=2**31)),
                 st.tuples(st.just("edit"), BYTE_EDITS)), st.booleans())
def test_et_bytes(case, zipped):
    kind, arg = case
    text = _et_text()
    data = text[: arg % (len(text) + 1)] if kind == "truncate" else mutate_bytes(text, arg)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / ("x.et.json.gz" if zipped else "x.et.json")
        p.write_bytes(gz(data) if zipped else data)
        expect_clean(f"execution trace: {'truncated' if kind == 'truncate' else 'byte edits'}",
                     lambda: _et_pipeline(p))


@fuzz_settings(60)
@given(TREE_EDITS)
def test_et_type_confusion(edits):
    tree = edit_tree(json.loads(_et_text()), edits)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.et.json"
        p.write_text(json.dumps(tree))
        expect_clean("execution trace: type confusion", lambda: _et_pipeline(p))
