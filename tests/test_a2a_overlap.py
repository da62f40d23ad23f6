"""The EP all-to-all overlapped with another micro-batch (``--moe-a2a-overlap``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tracesim.build.a2a_overlap import merge, pairs, reorder
from tracesim.build.schedules import Item, interleaved, one_f_one_b
from tracesim.build.units import Unit
from tracesim.options import ReplayOptions
from tracesim.pipeline.run import predict

BASE = {"model": "qwen3-30b-a3b", "cluster": "h100x128", "ep": 16, "dp": 16, "micro_batch": 1,
        "global_batch": 128, "seq_len": 2048}


def _run(tmp_path: Path, **extra):
    opts = ReplayOptions.from_mapping({**BASE, **extra}, tmp_path / "o.yaml", "x")
    return predict(None, opts, breakdown=True)


def test_one_more_warmup_forward() -> None:
    """Megatron-Core schedules one extra warm-up forward with the overlap, so that each
    steady-state pair is a forward and the backward of an earlier micro-batch: with one
    stage F0, F1 B0, F2 B1, ..., B3; interleaved, every stage; each pass exactly once."""
    got, steady = reorder(one_f_one_b(1, 0, 4))
    assert [(it.kind, it.mb) for it in got] == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1),
                                                 ("F", 3), ("B", 2), ("B", 3)]
    assert steady == [1, 3, 5] and pairs(got, steady, {5}) == {1: 2, 3: 4}
    for stage in range(4):
        items = interleaved(4, stage, 8, 2)
        new, steady = reorder(items)
        assert sorted(new) == sorted(items)
        lead = next(i for i, it in enumerate(items) if it.kind == "B")
        assert next(i for i, it in enumerate(new) if it.kind == "B") == lead + 1
        merged = pairs(new, steady, set())
        assert merged and all(new[f].kind == "F" and new[b].kind == "B" and b == f + 1
                              for f, b in merged.items())
        # every micro-batch in the warm-up (as many as stages): nothing to pair, not even the
        # last forward with the first backward (that backward waits on it downstream)
        few, none = reorder(interleaved(4, stage, 4, 2))
        assert none == [] and pairs(few, none, set()) == {}
    assert pairs([Item("F", 0, 1), Item("B", 0, 1)], [0], set()) == {}  # the same pass: alone


def _unit(names: list[str], lanes: list[str], layers: list[int]) -> Unit:
    u = Unit()
    prev = -1
    for name, lane, layer in zip(names, lanes, layers, strict=True):
        kind = "gpu" if lane == "compute" else "coll"
        i = u.add(lane=lane, kind=kind, name=name, layer=layer,
                  collective="all_to_all" if lane == "comm:ep" else "")
        u.edge(prev, i)
        prev = i
    u.entry, u.tail = [0], prev
    return u.freeze()


def test_merge_follows_megatrons_layer_order() -> None:
    """A layer pair runs: backward combine; forward attention; backward experts; forward
    dispatch, backward dispatch; forward experts, combine; backward attention; forward
    residual. Every edge still points forward; the passes' keys stay apart."""
    ep, c = "comm:ep", "compute"
    fu = _unit(["f.attn", "f.dispatch", "f.experts", "f.combine", "f.residual"],
               [c, ep, c, ep, c], [0] * 5)
    bu = _unit(["b.residual", "b.combine", "b.experts", "b.dispatch", "b.attn"],
               [c, ep, c, ep, c], [0] * 5)
    got = merge(fu, bu)
    assert got is not None
    m, fv, bv = got
    assert m.arrays is not None and len(m) == 10
    assert list(m.arrays["name"]) == ["b.residual", "b.combine", "f.attn", "b.experts",
                                      "f.dispatch", "b.dispatch", "f.experts", "f.combine",
                                      "b.attn", "f.residual"]
    assert (m.arrays["src"] < m.arrays["dst"]).all()
    assert m.arrays["name"][fv.tail] == "f.residual" and m.arrays["name"][bv.entry[0]] == "b.residual"
    assert len(set(m.arrays["key"][m.arrays["kind"] != "gpu"].tolist())) == 4


def test_overlap_hides_the_all_to_all(tmp_path: Path) -> None:
    """EP 16 over two nodes: the exposed all-to-all shrinks and the step with it; the
    compute beside an all-to-all runs on the SMs its kernels leave (NCCL's 16 of 132: at most
    16 / 116 longer), none slower without interference; with one stage and interleaved with
    two; the pipeline and data-parallel exchanges still complete (the replay ends)."""
    for extra in ({}, {"pp": 2, "dp": 8, "ep": 8, "vpp": 2, "global_batch": 64}):
        off, on = _run(tmp_path, **extra), _run(tmp_path, **extra, moe_a2a_overlap=True)
        assert on.breakdown["exposed_comm_s"]["ep"] < 0.5 * off.breakdown["exposed_comm_s"]["ep"]
        assert on.iteration_time_s < off.iteration_time_s
        grown = on.breakdown["compute_s"] / off.breakdown["compute_s"] - 1
        assert 0 < grown <= 16 / 116
        plain = _run(tmp_path, **extra, comm_interference=False)
        ideal = _run(tmp_path, **extra, moe_a2a_overlap=True, comm_interference=False)
        assert ideal.breakdown["compute_s"] == pytest.approx(plain.breakdown["compute_s"], rel=1e-6)


def test_deepseek_on_four_stages_does_not_deadlock(tmp_path: Path) -> None:
    """DeepSeek-V3 (dense first layers, MTP) on 4 interleaved stages with HybridEP, with as
    many micro-batches as stages (no steady state) and with twice as many."""
    for gb in (64, 128):
        r = predict(None, ReplayOptions.from_mapping(
            {"model": "deepseek-v3", "cluster": "gb200-nvl72", "pp": 4, "vpp": 2, "ep": 16,
             "dp": 16, "global_batch": gb, "seq_len": 1024, "mtp_layers": 1,
             "stage_layers": [4, 8, 8, 8, 8, 8, 8, 9], "moe_dispatcher": "hybridep",
             "moe_a2a_overlap": True}, tmp_path / "o.yaml", "x"))
        assert np.isfinite(r.iteration_time_s) and r.iteration_time_s > 0


def test_where_megatron_refuses_it_it_is_ignored(tmp_path: Path) -> None:
    """Megatron-Core needs the interleaved schedule when pp > 1 and no full recomputation:
    there the option changes nothing and the replay says why."""
    for extra in ({"pp": 2, "dp": 8, "ep": 8, "global_batch": 64}, {"recompute": "full"}):
        off, on = _run(tmp_path, **extra), _run(tmp_path, **extra, moe_a2a_overlap=True)
        assert on.iteration_time_s == pytest.approx(off.iteration_time_s, rel=1e-9)
        assert any("--moe-a2a-overlap ignored" in w for w in on.warnings)
    dense = predict(None, ReplayOptions.from_mapping(
        {"model": "llama3-8b", "cluster": "h100x8", "dp": 8, "global_batch": 8, "seq_len": 512,
         "moe_a2a_overlap": True}, tmp_path / "o.yaml", "x"))
    assert any("needs MoE layers" in w for w in dense.warnings)
    assert np.isfinite(dense.iteration_time_s)
