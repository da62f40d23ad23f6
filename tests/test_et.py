"""Execution-trace reading, the join to Kineto ops, and data dependencies."""

from __future__ import annotations

import json

import pytest

from tracesim.errors import InputError
from tracesim.trace.et import data_dependencies, join_rate, read_et
from tracesim.trace.extract import extract
from tracesim.trace.kineto import read_kineto
from tracesim.trace.sources import load_source


def test_public_et_joins_its_kineto_trace(public_traces):
    et = read_et(public_traces / "a100_simple_add.et.json.gz")
    ops = read_kineto(public_traces / "a100_simple_add.trace.json.gz")
    assert len(et) == 38
    assert join_rate(et, ops) == 1.0
    deps = data_dependencies(et)
    # e.g. aten::add reads the tensors aten::uniform_ wrote
    names = dict(zip(et["rf_id"], et["name"], strict=True))
    assert any(names[c] == "aten::add" and names[p] in ("aten::uniform_", "aten::copy_") for p, c in deps)


def test_trace_with_sibling_et_is_loaded(public_traces):
    src = load_source(public_traces / "a100_simple_add.trace.json.gz")
    assert 0 in src.et_tables
    g = extract(src.op_table, et_tables=src.et_tables)
    g.validate()


def test_data_edge_across_threads(tmp_path):
    """A tensor written on one thread and read on another gives a data edge."""
    tensor = [5, 6, 0, 16, 4, "cpu"]
    et = {"schema": "1.0.1", "nodes": [
        {"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "rf_id": 0, "parent": 1, "tid": 0},
        {"id": 2, "name": "aten::mul", "rf_id": 10, "parent": 1, "tid": 1, "inputs": [], "outputs": [tensor]},
        {"id": 3, "name": "aten::add", "rf_id": 11, "parent": 1, "tid": 2, "inputs": [tensor], "outputs": []},
    ]}
    trace = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
         "args": {"Record function id": 10}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 2, "ts": 500, "dur": 10,
         "args": {"Record function id": 11}},
    ]}
    (tmp_path / "x.et.json").write_text(json.dumps(et))
    (tmp_path / "x.trace.json").write_text(json.dumps(trace))
    src = load_source(tmp_path / "x.trace.json")
    g = extract(src.op_table, et_tables=src.et_tables)
    assert (g.edges["kind"] == "data").sum() == 1


def test_not_an_et(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{}")
    with pytest.raises(InputError, match="nodes"):
        read_et(p)
