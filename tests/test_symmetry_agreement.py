"""Symmetry reduction vs the full replay (issue 8), at sizes that run in seconds.

The reduced replay simulates one representative rank per pipeline stage; with the flow
network its collectives and transfers run together with their copies on the other ranks of
the class (all of them loading the shared links). The full replay (``full``) simulates every
rank. The benchmark (benchmarks/speed/bench.py) compares the two at the scenarios' full sizes.

Scenarios, scaled down in layers and micro-batches (the layout and the cluster are the real
ones): S1 (Llama 3 8B, FSDP over 128 H100), S2 at 128 GPUs (Llama 3 70B, TP8 PP8 DP2,
interleaved) and S4 (GPT-3 175B, TP8 PP16 DP8 on 1024 A100 of Selene); and layouts that
load the fabric from every replica at once (``STRESS``: DP rings over 1,024 GPUs, DP across
an oversubscribed spine, EP all-to-all and CP rings across nodes), within 1%.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.helpers import retarget
from tracesim.catalog import load_cluster, models_dir
from tracesim.engine.symmetry import SYMMETRY_MIN_PASSES, reduces

TOL = 0.005


def _model(tmp: Path, name: str, layers: int) -> str:
    spec = yaml.safe_load((models_dir() / f"{name}.yaml").read_text())
    spec.update(name=f"{name}-{layers}l", layers=layers)
    path = tmp / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def _pair(opts: dict, network: str | None = "flow") -> tuple[dict, dict]:
    red = retarget({**opts, "network": network} if network else opts).to_dict()
    full = retarget({**opts, "full": True}).to_dict()
    assert red["replay"]["symmetric"] and not full["replay"]["symmetric"]
    assert full["replay"]["network"] == "flow"
    return red, full


def _rel(red: dict, full: dict) -> float:
    return red["iteration_time_s"] / full["iteration_time_s"] - 1


def test_s1_fsdp_reduced_matches_full(tmp_path: Path) -> None:
    opts = {"model": _model(tmp_path, "llama3-8b", 4), "cluster": "h100x128", "dp": 128,
            "fsdp": True, "micro_batch": 2, "global_batch": 256, "seq_len": 8192}
    for network in (None, "estimate"):  # the default (flow) and the estimate
        red, full = _pair(opts, network)
        assert red["replay"]["tasks"] * 100 < full["replay"]["tasks"]
        assert abs(_rel(red, full)) <= TOL, (network, _rel(red, full))


def test_s2_at_128_gpus_reduced_matches_full(tmp_path: Path) -> None:
    opts = {"model": _model(tmp_path, "llama3-70b", 16), "cluster": "h100x128", "tp": 8, "pp": 8,
            "dp": 2, "schedule": "interleaved", "micro_batch": 1, "global_batch": 16, "seq_len": 8192}
    red, full = _pair(opts)
    # both merge compute runs: the full graph is the 16 ranks of each stage's program
    assert red["replay"]["tasks"] * 16 == full["replay"]["tasks"]
    assert abs(_rel(red, full)) <= TOL, _rel(red, full)


@pytest.mark.slow
def test_s4_reduced_is_close_to_full(tmp_path: Path) -> None:
    """Selene's fabric is not symmetric for this layout (scalable units of 20 nodes split
    some 8-node stages). With static ECMP (``routing: ecmp``) a few of the 64 concurrent
    tied-embedding all-reduces collided on spine links and the reduced replay, which waits
    for the slowest copy, was 1.3% slower than the full one; with adaptive routing (the
    default: a leaf's uplinks act as one bundle) the copies see the same fabric and the two
    agree. Without the copies' flows (``estimate``) the reduced replay is further off."""
    opts = {"model": _model(tmp_path, "gpt3-175b", 16), "cluster": "a100-selene", "tp": 8,
            "pp": 16, "dp": 8, "micro_batch": 1, "global_batch": 64}
    red, full = _pair(opts)
    assert red["replay"]["tasks"] * 64 == full["replay"]["tasks"]  # 64 ranks per stage
    assert abs(_rel(red, full)) <= TOL, _rel(red, full)
    est = retarget({**opts, "network": "estimate"}).to_dict()
    assert abs(_rel(red, full)) < abs(_rel(est, full))


def _cluster(tmp: Path, nodes: int, nics_per_leaf: int, oversubscription: float) -> str:
    """h100x1024's fabric (per-rack leaves, adaptive routing) cut to ``nodes`` nodes."""
    d = load_cluster("h100x1024").to_dict()
    d.update(name=f"h100-{nodes}n-l{nics_per_leaf}-o{oversubscription}", nodes=nodes)
    d["inter_node"].update(nics_per_leaf=nics_per_leaf, oversubscription=oversubscription)
    path = tmp / f"{d['name']}.yaml"
    path.write_text(yaml.safe_dump(d))
    return str(path)


#: layouts whose collectives cross the fabric at once from every replica (name, options)
STRESS = [
    ("dp128-rings-1024-gpus", lambda t: {"model": _model(t, "gpt3-1.7b", 2), "cluster": "h100x1024",
                                         "tp": 8, "dp": 128, "micro_batch": 1, "global_batch": 128}),
    ("dp-over-oversubscribed-spine", lambda t: {
        "model": _model(t, "gpt3-1.7b", 2), "cluster": _cluster(t, 16, 8, 4), "tp": 8, "dp": 16,
        "micro_batch": 1, "global_batch": 32}),
    ("ep-all-to-all-across-nodes", lambda t: {
        "model": _model(t, "mixtral-8x7b", 2), "cluster": _cluster(t, 16, 8, 2), "tp": 2,
        "dp": 64, "ep": 8, "micro_batch": 1, "global_batch": 64, "seq_len": 2048}),
    ("cp-across-nodes", lambda t: {
        "model": _model(t, "llama3-8b", 2), "cluster": _cluster(t, 16, 8, 2), "tp": 8, "cp": 4,
        "dp": 4, "micro_batch": 1, "global_batch": 8, "seq_len": 32768}),
]


@pytest.mark.parametrize("name, make", STRESS, ids=[s[0] for s in STRESS])
def test_reduced_flow_matches_full_on_fabric_stressing_layouts(tmp_path: Path, name: str,
                                                                make: Callable[[Path], dict]) -> None:
    """The reduced flow replay (the default) against every rank simulated, within 1%."""
    red, full = _pair(make(tmp_path), None)
    assert red["replay"]["network"] == "flow"
    assert red["replay"]["tasks"] * 8 <= full["replay"]["tasks"]
    assert abs(_rel(red, full)) <= 0.01, (name, _rel(red, full))


#: jobs under SYMMETRY_MIN_GPUS whose micro-batches make the full graph large (name, options)
SMALL_MANY = [
    ("tp8-one-node", {"model": "llama3-70b", "cluster": "h100x8", "tp": 8, "global_batch": 64}),
    ("pp4-interleaved-dp2", {"model": "llama3-8b", "cluster": "h100x8", "pp": 4, "vpp": 2,
                             "dp": 2, "global_batch": 1024}),
    ("ep8-moe", {"model": "qwen3-30b-a3b", "cluster": "h100x8", "ep": 8, "dp": 8,
                 "global_batch": 1024, "seq_len": 2048}),
    ("cp2-fp8-b200", {"model": "llama3-8b", "cluster": "dgx-b200", "cp": 2, "dp": 4,
                      "global_batch": 512, "dtype": "fp8"}),
]


@pytest.mark.parametrize("name, opts", SMALL_MANY, ids=[s[0] for s in SMALL_MANY])
def test_few_gpus_with_many_micro_batches_reduce_to_the_same_time(name: str, opts: dict) -> None:
    """Under 64 GPUs a replay reduces once its layer passes (ranks x micro-batches x layers
    per stage) reach SYMMETRY_MIN_PASSES; the reduced replay keeps the full one's time."""
    red, full = _pair(opts, None)
    assert full["parallel"]["tp"] * full["parallel"]["pp"] * full["parallel"]["dp"] < 64
    assert red["replay"]["tasks"] * 2 <= full["replay"]["tasks"]
    assert abs(_rel(red, full)) <= 1e-9, (name, _rel(red, full))


def test_small_jobs_with_few_micro_batches_keep_every_rank() -> None:
    """The README's first layout (8 GPUs, 4 micro-batches per pipeline) replays every rank:
    its outputs hold each rank's timeline."""
    res = retarget({"model": "gpt3-1.7b", "cluster": "h100x8", "tp": 2, "pp": 2, "dp": 2}).to_dict()
    assert res["replay"]["symmetric"] is False
    assert not reduces(8, 4, 12) and reduces(8, 1024, 80) and reduces(64, 1, 1)
    assert not reduces(1, 10**6, 100)  # one rank: nothing to reduce
    assert reduces(8, SYMMETRY_MIN_PASSES // 8, 1) and not reduces(8, SYMMETRY_MIN_PASSES // 8 - 1, 1)


def test_repeated_schedules_with_deferred_fsdp_sync_reduced_matches_full(tmp_path: Path) -> None:
    """NeMo AutoModel's pattern: the pipeline schedule run twice per iteration, FSDP
    gathering once and reducing once (``pp_rounds``, ``fsdp_keep_gathered``,
    ``fsdp_defer_sync``)."""
    opts = {"model": _model(tmp_path, "llama3-8b", 8), "cluster": "h100x128", "nodes": 8,
            "pp": 4, "dp": 16, "micro_batch": 1, "global_batch": 256, "seq_len": 4096,
            "pp_rounds": 2, "fsdp": True, "stack": "torchtitan", "fsdp_defer_sync": True,
            "fsdp_keep_gathered": True}
    red, full = _pair(opts)
    assert abs(_rel(red, full)) <= 1e-9
