"""Full replays at scale (issue 8): merged compute runs and lean (categorical) task tables
must give the same answers as per-op graphs with plain string columns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.helpers import retarget
from tracesim.build.builder import build_graph
from tracesim.catalog import load_model
from tracesim.engine.replay import replay
from tracesim.graph.taskgraph import TaskGraph, column_codes
from tracesim.options import ReplayOptions
from tracesim.pipeline.build import build
from tracesim.report.breakdown import rank_breakdowns
from tracesim.specs.parallel import ParallelSpec
from tracesim.template.analytic import first_principles_template

LLAMA = load_model("llama3-8b")
STR_COLS = ("kind", "name", "op_class", "step", "phase", "collective", "group_kind", "match_key", "run")


def _op_time(op_class: str, flops: float, nbytes: float, op: object, units: float = 1.0) -> int:
    return int(flops / 1e6) + int(nbytes / 1e3) + 100


def _comm_time(coll: str, kind: str, n: int, nbytes: int) -> int:
    return 1000 + nbytes // 1000


def _as_strings(g: TaskGraph) -> TaskGraph:
    """The same graph with every string column as plain Python strings (object dtype)."""
    t = g.tasks.copy()
    for c in STR_COLS:
        t[c] = pd.Series(t[c].to_numpy().astype(object), dtype=object)
    t["gap_ns"] = np.array(t["gap_ns"].to_numpy())
    e = g.edges.copy()
    e["kind"] = pd.Series(e["kind"].to_numpy().astype(object), dtype=object)
    return g.replace(tasks=t, edges=e)


@pytest.fixture(scope="module")
def cp_graph() -> TaskGraph:
    par = ParallelSpec(tp=2, pp=2, dp=2, cp=2, global_batch=8, seq_len=128, schedule="interleaved",
                       vpp=2, recompute="selective", sp=True)
    return build_graph(LLAMA, par, first_principles_template(LLAMA), _op_time,
                       comm_time=_comm_time, merge_compute=True).graph


def test_builder_graph_is_lean(cp_graph: TaskGraph) -> None:
    t = cp_graph.tasks
    for c in STR_COLS:
        assert isinstance(t[c].dtype, pd.CategoricalDtype), c
        assert t[c].cat.codes.dtype.itemsize <= 2, c  # this graph has < 32k distinct keys
    assert t["gap_ns"].to_numpy().strides == (0,) and not t["gap_ns"].any()
    row = sum(t[c].cat.codes.dtype.itemsize if c in STR_COLS else t[c].to_numpy().strides[0]
              for c in t.columns)
    assert row <= 72, row  # 20 columns: 156 bytes per task with object strings
    assert cp_graph.edges["src"].dtype == np.int32 and cp_graph.edges["dst"].dtype == np.int32
    cp_graph.validate()
    # match keys spell what the builder documents: <gkind><group>|<instance>|<local>[|<cp>]
    codes, names = column_codes(t["match_key"])
    comm = t["kind"].to_numpy() != "gpu"
    assert names[0] == "" and (codes[~comm] == 0).all() and (codes[comm] > 0).all()
    ring = [k for k in names if k.startswith("cp")]
    assert ring and all(k.rsplit("|", 1)[1] in ("0", "1") for k in ring)


def test_categorical_and_string_columns_replay_alike(cp_graph: TaskGraph) -> None:
    plain = _as_strings(cp_graph)
    assert not isinstance(plain.tasks["kind"].dtype, pd.CategoricalDtype)
    a, b = replay(cp_graph), replay(plain)
    assert a.makespan_ns == b.makespan_ns and a.events == b.events
    assert np.array_equal(a.start_ns, b.start_ns) and np.array_equal(a.end_ns, b.end_ns)
    ba = rank_breakdowns(cp_graph, a.start_ns, a.end_ns, a.makespan_ns)
    bb = rank_breakdowns(plain, b.start_ns, b.end_ns, b.makespan_ns)
    assert ba == bb
    assert ba[0]["exposed_comm_s"]["cp"] > 0 and ba[0]["bubble_s"] > 0


def test_breakdown_in_edge_chunks_is_the_same(cp_graph: TaskGraph, monkeypatch) -> None:
    import tracesim.report.breakdown as bd

    r = replay(cp_graph)
    whole = rank_breakdowns(cp_graph, r.start_ns, r.end_ns, r.makespan_ns)
    monkeypatch.setattr(bd, "_EDGE_CHUNK", 997)  # ~30 chunks of task ids
    assert len(cp_graph.edges) > 20 * 997
    assert rank_breakdowns(cp_graph, r.start_ns, r.end_ns, r.makespan_ns) == whole


def test_full_replay_merges_only_without_per_op_output() -> None:
    opts = {"model": "gpt3-1.7b", "cluster": "h100x8", "tp": 2, "pp": 2, "global_batch": 16,
            "seq_len": 1024, "template": "analytic", "full": True}
    merged = retarget({**opts, "per_op": False}, detail=True)
    per_op = retarget({**opts, "per_op": True}, detail=True)
    detail = retarget(opts, detail=True)  # a result directory: per op
    m, p = merged.to_dict(), per_op.to_dict()
    assert m["replay"]["merged_compute"] and not p["replay"]["merged_compute"]
    assert not detail.to_dict()["replay"]["merged_compute"]
    assert detail.graph.n_tasks == per_op.graph.n_tasks
    # merging touches compute runs only: every communication task is kept. With the
    # megatron-core stack (sequence parallelism: four TP collectives per layer forward, GEMMs
    # in chunks that each wait for a chunk of their overlapped collective) the runs between
    # two dependencies are short, so the gain is smaller than on the eager op list below
    mk, pk = merged.graph.tasks["kind"], per_op.graph.tasks["kind"]
    assert int((mk != "gpu").sum()) == int((pk != "gpu").sum())
    assert (mk == "gpu").sum() * 4 < (pk == "gpu").sum() * 3
    eager = {**opts, "stack": "eager"}
    n_merged = build(None, ReplayOptions.from_mapping(eager)).graph.n_tasks
    n_per_op = build(None, ReplayOptions.from_mapping(eager), per_op=True).graph.n_tasks
    assert n_merged * 2 < n_per_op
    # merging changes no simulated time: identical to the nanosecond, same breakdown
    assert merged.makespan_ns == per_op.makespan_ns
    flat = [(k, v) for k, v in m["breakdown"].items() if k != "exposed_comm_s"]
    assert dict(flat) == pytest.approx({k: p["breakdown"][k] for k, _ in flat}, rel=1e-12, abs=1e-15)
    assert m["breakdown"]["exposed_comm_s"] == pytest.approx(p["breakdown"]["exposed_comm_s"],
                                                             rel=1e-12, abs=1e-15)
    assert m["duration_methods"] == p["duration_methods"]
    # a merged task's scaling method is still known (not "model" for want of a name)
    assert set(merged.methods) <= set(per_op.methods) | {"mixed"}


def test_order_check_of_compute_tasks() -> None:
    from tracesim.report.breakdown import _ordered

    rank = np.array([0, 0, 0, 1, 1, 2])
    start = np.array([5, 7, 7, 1, 3, 0])
    idx = np.arange(6)
    assert _ordered(idx, rank, start)
    assert not _ordered(idx, rank, np.array([5, 4, 7, 1, 3, 0]))  # a start goes back
    assert not _ordered(idx, np.array([0, 1, 0, 1, 1, 2]), start)  # a rank goes back
    assert _ordered(idx[[0, 2, 4]], rank, np.array([5, 99, 7, 1, 3, 0]))  # only idx counts
