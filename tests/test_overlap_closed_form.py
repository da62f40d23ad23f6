"""The closed forms of Transformer Engine's chunked TP-overlap pipelines
(tracesim.build.overlap ``_ring_in`` / ``_chunks_out``) against the pipelines emitted chunk by
chunk (``overlap.CHUNKED``): the same iteration time to the ns with far fewer tasks, on
userbuffers and on NCCL chunks, BF16 (pipelined reduce-scatter) and FP8 (ring exchange),
with and without SM interference, reduced and full replays."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers import retarget
from tracesim.build import overlap
from tracesim.build.overlap import Overlaps, emit
from tracesim.build.units import Unit
from tracesim.catalog import clusters_dir
from tracesim.graph.chunks import expand_chunks
from tracesim.graph.taskgraph import TaskGraph
from tracesim.options import ReplayOptions
from tracesim.pipeline.build import build
from tracesim.template.resolve import ROp

BASE = {"model": "gpt3-1.7b", "cluster": "h100x8", "micro_batch": 1, "seq_len": 2048,
        "global_batch": 8}


def _both(opts: dict, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, dict]:
    closed = retarget(opts).to_dict()
    monkeypatch.setattr(overlap, "CHUNKED", True)
    chunked = retarget(opts).to_dict()
    monkeypatch.setattr(overlap, "CHUNKED", False)
    return closed, chunked


def _ns(d: dict) -> int:
    return round(d["iteration_time_s"] * 1e9)


#: nothing else on the TP links while a pipeline runs (the gradient reduce and parameter
#: gathers after the backward, not beside it) and no GEMM chunk waiting for the host: then
#: the closed forms are exact (tracesim.build.overlap)
ALONE = {"dp_overlap": False, "overlap_param_gather": False, "host_launch": False}


@pytest.mark.parametrize(("tp", "dtype", "interference", "full"), [
    (2, "bf16", True, False),
    (4, "bf16", False, False),
    (8, "bf16", True, False),
    (2, "fp8", False, False),
    (4, "fp8", True, False),
    (8, "fp8", True, False),
    (4, "bf16", True, True),
    (8, "fp8", False, True),
])
def test_closed_form_replays_like_the_chunks(tp: int, dtype: str, interference: bool, full: bool,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    opts = {**BASE, **ALONE, "tp": tp, "dp": 8 // tp, "dtype": dtype,
            "comm_interference": interference, "full": full}
    closed, chunked = _both(opts, monkeypatch)
    assert _ns(closed) == _ns(chunked)
    assert closed["replay"]["tasks"] < chunked["replay"]["tasks"] or tp == 2


@pytest.mark.parametrize(("tp", "dtype"), [(4, "bf16"), (8, "fp8")])
def test_closed_form_with_every_overlap_on(tp: int, dtype: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    opts = {**BASE, "tp": tp, "dp": 8 // tp, "dtype": dtype, "pp": 1}
    # the uncongested network: exact, gradient reduce beside the backward or not
    closed, chunked = _both({**opts, "host_launch": False, "network": "estimate"}, monkeypatch)
    assert _ns(closed) == _ns(chunked)
    # the flow network with the gradient reduce beside the TP transfers, and the host
    # (this small model's short GEMM chunks wait for it): the transfers meet other flows
    # at other moments, the host's waits fall on other pieces; within 0.1%
    closed, chunked = _both(opts, monkeypatch)
    assert _ns(closed) == pytest.approx(_ns(chunked), rel=1e-3)
    assert closed["replay"]["tasks"] < chunked["replay"]["tasks"]


def test_closed_form_on_the_readme_tour(monkeypatch: pytest.MonkeyPatch) -> None:
    # every default on: flow network, gradient reduce beside the backward, and the host
    # (the GPU waits for it per micro-batch): here still to the ns (83.88 ms, README)
    opts = {**BASE, "tp": 2, "pp": 2, "dp": 2, "seq_len": 2048}
    closed, chunked = _both(opts, monkeypatch)
    assert _ns(closed) == _ns(chunked) == 83_877_425


def test_closed_form_with_recompute_and_pp(monkeypatch: pytest.MonkeyPatch) -> None:
    opts = {**BASE, **ALONE, "tp": 4, "pp": 2, "dp": 1, "seq_len": 512, "recompute": "full"}
    closed, chunked = _both(opts, monkeypatch)
    assert _ns(closed) == _ns(chunked)


def test_closed_form_on_nccl_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # TP 8 over two 4-GPU nodes: userbuffers needs one node, so every chunk is an NCCL
    # collective of its own size (its own algorithm, protocol and base latency)
    spec = yaml.safe_load((clusters_dir() / "h100x8.yaml").read_text())
    spec.update(name="h100-2x4", nodes=2, gpus_per_node=4)
    spec["inter_node"]["nics_per_node"] = 4
    path = tmp_path / "h100-2x4.yaml"
    path.write_text(yaml.safe_dump(spec))
    for dtype in ("bf16", "fp8"):
        opts = {**BASE, **ALONE, "cluster": str(path), "tp": 8, "dp": 1, "dtype": dtype}
        closed, chunked = _both(opts, monkeypatch)
        assert _ns(closed) == _ns(chunked), dtype
        for network in ("estimate",):
            c2, k2 = _both({**opts, "network": network}, monkeypatch)
            assert _ns(c2) == _ns(k2), (dtype, network)


# ------------------------------------------------------------------ one pattern, by hand


def _makespans(u: Unit) -> tuple[int, int]:
    """(end of the last compute task, end of the last comm task): lanes run their tasks
    in order, a task starts when its lane is free and its predecessors are done, a
    collective lasts 1 ns per byte."""
    preds: dict[int, list[int]] = {}
    for a, b in zip(u.src, u.dst, strict=True):
        preds.setdefault(b, []).append(a)
    end: dict[int, int] = {}
    free: dict[str, int] = {}
    c = u.cols
    for i in range(len(u)):
        d = c["dur_ns"][i] if c["kind"][i] == "gpu" else c["msg_bytes"][i]
        s = max([free.get(c["lane"][i], 0)] + [end[p] for p in preds.get(i, [])])
        end[i] = free[c["lane"][i]] = s + d
    gpu = max(e for i, e in end.items() if c["kind"][i] == "gpu")
    comm = max((e for i, e in end.items() if c["kind"][i] != "gpu"), default=0)
    return gpu, comm


def _ops(kind: str, g_ns: int, c_bytes: int) -> list[ROp]:
    gemm = ROp(f"{kind}.gemm", "gpu", "gemm", "fwd", flops=1e9, bytes=1e6, dur_ns=g_ns, ub=kind)
    if kind == "qkv":  # all-gather before
        return [ROp("qkv.ag", "coll", "comm", "fwd", collective="all_gather", gkind="tp",
                    msg_bytes=c_bytes, overlap="ag_next", ub="qkv"), gemm]
    return [gemm, ROp(f"{kind}.rs", "coll", "comm", "fwd", collective="reduce_scatter",
                      gkind="tp", msg_bytes=c_bytes, overlap="rs_prev", ub=kind)]


@pytest.mark.parametrize("tp", [2, 4, 8])
@pytest.mark.parametrize("kind", ["qkv", "proj"])
@pytest.mark.parametrize("config", ["bridge-bf16", "bridge-fp8"])
@pytest.mark.parametrize("c_bytes", [700, 4200, 9100, 30000])
def test_closed_form_by_hand(tp: int, kind: str, config: str, c_bytes: int) -> None:
    out = {}
    for chunked in (False, True):
        u = Unit()
        ov = Overlaps(tp=tp, ub=True, interference=True, sm_count=132, config=config,
                      chunked=chunked)
        emit(u, _ops(kind, 8000, c_bytes), ov, layer=0, phase="fwd")
        out[chunked] = (_makespans(u), len(u),
                        sum(d for d, k in zip(u.cols["dur_ns"], u.cols["kind"], strict=True) if k == "gpu"),
                        sum(m for m, k in zip(u.cols["msg_bytes"], u.cols["kind"], strict=True) if k != "gpu"),
                        sum(u.cols["chunks"]))
    assert out[False][0] == out[True][0]  # GEMM end and last chunk's end
    assert out[False][2:] == out[True][2:]  # compute time, bytes, pieces
    assert out[False][1] <= 5 < out[True][1] or tp == 2


def test_expanded_chunks_are_the_chunked_transfers(monkeypatch: pytest.MonkeyPatch) -> None:
    # Chakra / AICB exports see one operation per chunk again (tracesim.graph.chunks)
    opts = ReplayOptions.from_mapping({**BASE, **ALONE, "tp": 4, "dp": 2, "full": True})
    closed = build(None, opts).graph
    monkeypatch.setattr(overlap, "CHUNKED", True)
    chunked = build(None, opts).graph
    assert int(closed.tasks["chunks"].max()) == 3 and "chunks" not in chunked.tasks
    out = expand_chunks(closed)
    out.validate()

    def comms(g: TaskGraph) -> list[tuple]:
        t = g.tasks[g.tasks["kind"] == "coll"]
        return sorted(zip(t["rank"].tolist(), t["collective"].astype(str).tolist(),
                          t["msg_bytes"].tolist(), t["algorithm"].astype(str).tolist(), strict=True))

    assert comms(out) == comms(chunked) != comms(closed)
    keys = out.tasks.groupby("match_key", observed=True)["rank"].nunique()
    assert set(keys.drop("", errors="ignore").tolist()) <= {2, 4}  # one op per DP / TP group
