"""Chakra ET written rank by rank, and read back as the symmetry-reduced graph.

* ``convert --to chakra`` of a built workload (the builder's ranks instantiated a few at a
  time, each rank's file encoded from its rank program) writes, byte for byte, what the
  exporter of one graph of every rank wrote (``tests/chakra_reference.py``, that exporter
  kept as it was), and so does :func:`export_chakra` of other graphs;
* ``import_chakra(symmetric=True)`` keeps one rank per pipeline stage and replays to the same
  iteration time as the import of every rank; files whose ranks do not prove symmetric (ring
  attention's transfers leave the representatives; one rank's kernel differs) are read with
  every rank.
"""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest

import tracesim.api as api
from tests.chakra_reference import reference_export
from tracesim.graph.chunks import expand_chunks
from tracesim.interop.aicb import read_aicb
from tracesim.interop.aicb_graph import aicb_to_graph
from tracesim.interop.chakra import export_chakra
from tracesim.interop.chakra_import import import_chakra
from tracesim.options import ReplayOptions
from tracesim.pipeline import replay_graph

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(model="gpt3-1.7b", cluster="h100x8", seq_len=512)
LAYOUTS = {
    "tp2-dp4": dict(tp=2, dp=4, global_batch=4),
    "tp2-pp2-dp2": dict(tp=2, pp=2, dp=2, global_batch=8),
    "tp2-cp2-dp2": dict(tp=2, cp=2, dp=2, global_batch=2),
    "moe-tp2-ep2": dict(model="mixtral-8x7b", tp=2, ep=2, dp=4, global_batch=4),
}


def _same_files(a: list[Path], b: list[Path]) -> bool:
    return len(a) == len(b) and all(filecmp.cmp(x, y, shallow=False) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Each layout's ET, written by ``convert`` a few ranks per graph."""
    out = {}
    part_tasks = api.PART_TASKS
    api.PART_TASKS = 3000  # several graphs per layout
    try:
        for name, lay in LAYOUTS.items():
            opts = ReplayOptions(**{**SMALL, **lay})
            prefix = tmp_path_factory.mktemp(name) / "w"
            res = api.convert(None, prefix, "chakra", options=opts)
            out[name] = (opts, prefix, [Path(p) for p in res.written], res)
    finally:
        api.PART_TASKS = part_tasks
    return out


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_streamed_convert_writes_the_bytes_of_the_whole_graph_export(written, name, tmp_path):
    opts, _, files, res = written[name]
    graph = api.build_workload(opts)
    ref = reference_export(graph, tmp_path / "ref")
    assert _same_files(files, [*ref.et_files, ref.comm_group_file])
    assert (res.ranks, res.tasks) == (len(graph.ranks), expand_chunks(graph).n_tasks)


def test_export_of_other_graphs_matches_the_reference(tmp_path):
    graphs = [aicb_to_graph(read_aicb(ROOT / "tests/data/interop/moe_ep2.txt"))]
    api_graph = api.build_workload(ReplayOptions(**{**SMALL, **LAYOUTS["tp2-pp2-dp2"]}))
    t = api_graph.tasks.copy()
    t["gap_ns"] = (t["task_id"] % 3) * 7  # gaps, and a different duration on one rank
    t.loc[t["rank"] == 5, "dur_ns"] += 1
    graphs.append(api_graph.replace(tasks=t))
    for i, g in enumerate(graphs):
        a = export_chakra(g, tmp_path / f"new{i}" / "w")
        b = reference_export(g, tmp_path / f"ref{i}" / "w")
        assert _same_files([*a.et_files, a.comm_group_file], [*b.et_files, b.comm_group_file])


@pytest.mark.parametrize("name", ["tp2-dp4", "tp2-pp2-dp2", "moe-tp2-ep2"])
def test_symmetric_import_replays_as_every_rank(written, name):
    _, prefix, _, _ = written[name]
    full = import_chakra(prefix)
    reduced = import_chakra(prefix, symmetric=True)
    assert reduced.meta["representatives"] and reduced.meta["world"] == len(full.ranks) == 8
    pp = int(full.meta["parallel"]["pp"])
    assert len(reduced.ranks) == pp and reduced.n_tasks * 8 == full.n_tasks * pp
    assert "sym_group" in reduced.tasks and not full.meta.get("representatives")
    a = replay_graph(full, "h100x8")
    b = replay_graph(reduced, "h100x8")
    assert a.makespan_ns == b.makespan_ns
    assert b.gpus == 8
    assert import_chakra(prefix, symmetric=None).n_tasks == full.n_tasks  # 8 < 64 ranks


def test_ring_attention_is_read_with_every_rank(written):
    _, prefix, _, _ = written["tp2-cp2-dp2"]
    g = import_chakra(prefix, symmetric=True)
    assert not g.meta.get("representatives") and len(g.ranks) == 8


def test_a_rank_that_differs_is_read_with_every_rank(written, tmp_path):
    opts = written["tp2-dp4"][0]
    graph = api.build_workload(opts)
    t = graph.tasks.copy()
    row = t.index[(t["rank"] == 5) & (t["kind"] == "gpu")][3]
    t.loc[row, "dur_ns"] += 1000
    export_chakra(graph.replace(tasks=t), tmp_path / "w")
    g = import_chakra(tmp_path / "w", symmetric=True)
    assert not g.meta.get("representatives") and g.n_tasks == expand_chunks(graph).n_tasks
    export_chakra(graph, tmp_path / "ok" / "w")
    assert import_chakra(tmp_path / "ok" / "w", symmetric=True).meta["representatives"]


def test_replay_of_et_files_on_a_cluster(written):
    """``tracesim replay ET --cluster C`` replays the imported files (and names what is
    missing or does not apply)."""
    from tracesim.errors import InputError
    from tracesim.pipeline import predict

    _, prefix, _, _ = written["tp2-pp2-dp2"]
    want = replay_graph(import_chakra(prefix), "h100x8").makespan_ns
    assert predict(prefix.parent, ReplayOptions(cluster="h100x8")).makespan_ns == want
    with pytest.raises(InputError, match="--cluster"):
        predict(prefix.parent, ReplayOptions())
    with pytest.raises(InputError, match="--tp"):
        predict(prefix.parent, ReplayOptions(cluster="h100x8", tp=2))
