"""Activation offloading to host memory (Transformer Engine's CPU offload,
--cpu-offload-layers): the copies, the GPU's waits for them, the memory they free."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tracesim.build.offload import Offload, backward_waits, forward_waits, windows
from tracesim.engine.replay import replay
from tracesim.errors import InputError
from tracesim.specs.cluster import cluster_from_dict

from .helpers import build, retarget
from .test_builder import LLAMA

REF = Path(__file__).resolve().parents[2] / "shared" / "reference"


def test_windows_follow_transformer_engine() -> None:
    # layer_window_map of AsyncDoubleBufferGroupOffloadHandler (TE 2.9)
    assert windows(80, 40) == list(range(1, 80, 2))
    assert windows(80, 20) == list(range(3, 80, 4))
    assert windows(10, 3) == [3, 6, 9]
    assert windows(7, 3) == [2, 4, 6]
    for n_layers, n in ((80, 79), (61, 7), (5, 1)):
        w = windows(n_layers, n)
        assert w[-1] == n_layers - 1 and all(w[k] >= k + 1 for k in range(n))


def _off(d2h_ns: float, h2d_ns: float) -> Offload:
    # 4 layers, 2 offloaded (windows 1 and 3), 1 GB each: ns = 1e9 / GB/s
    return Offload(2, 4, (1e9, 1e9), 1e9 / d2h_ns, 1e9 / h2d_ns)


def test_forward_waits_at_the_windows() -> None:
    ends = [10.0, 20.0, 30.0, 40.0]
    # copy 0 from 10 to 25: layer 1 ends at 20 and waits 5; copy 1 25..40 is done by 45
    assert forward_waits(_off(15, 15), ends) == pytest.approx({1: 5.0})
    # copy 0 10..50 (layer 1 waits 30), copy 1 50..90, layer 3 ends at 70 and waits 20
    assert forward_waits(_off(40, 40), ends) == pytest.approx({1: 30.0, 3: 20.0})
    assert forward_waits(_off(1, 1), ends) == {}


def test_backward_waits_for_the_reloads() -> None:
    starts = [30.0, 20.0, 10.0, 0.0]  # backward runs layers 3, 2, 1, 0, 10 ns each
    # reload 1 at layer 3 (0..15), reload 0 at layer 1 (20..35): layer 0 waits 5
    assert backward_waits(_off(15, 15), starts) == pytest.approx({0: 5.0})
    # reload 1 0..40: layer 1 waits 20 (until 40); reload 0 40..80: layer 0 (at 50) waits 30
    assert backward_waits(_off(40, 40), starts) == pytest.approx({1: 20.0, 0: 30.0})


def test_slow_copies_lengthen_the_step_by_the_waits() -> None:
    m = LLAMA.replace(layers=6)
    base = build(m, global_batch=2, micro_batch=1)
    t0 = replay(base.graph).end_ns.max()
    fast = Offload(3, 6, (1e6,) * 3, 1e6, 1e6)  # 1 ns per copy: never waited for
    assert replay(build(m, global_batch=2, micro_batch=1, offload=fast).graph).end_ns.max() == t0
    slow = Offload(3, 6, (1e9,) * 3, 1.0, 1.0)  # 1 s per copy
    b = build(m, global_batch=2, micro_batch=1, offload=slow)
    waits = sum(sum(st["offload_wait_ns"].values()) for st in b.info["stages"])
    assert waits > 3e9  # every copy exposed, forward and backward
    assert replay(b.graph).end_ns.max() == pytest.approx(t0 + 2 * waits, rel=1e-6)  # 2 micro-batches


def test_only_one_stage_without_recomputation() -> None:
    off = Offload(1, 4, (1e6,), 1.0, 1.0)
    for kw in ({"pp": 2, "global_batch": 4}, {"recompute": "full", "global_batch": 2}):
        with pytest.raises(InputError) as e:
            build(LLAMA, offload=off, **kw)
        assert "offload" in str(e.value)


def test_host_link_in_the_cluster_spec() -> None:
    spec = {"name": "x", "nodes": 1, "gpus_per_node": 4, "device": "gb200",
            "intra_node": {"kind": "nvswitch", "bandwidth_GBps": 900, "latency_us": 0.6},
            "host_link": {"d2h_GBps": 183, "h2d_GBps": 172}}
    c = cluster_from_dict(spec, "x.yaml")
    assert c.host_link is not None and c.host_link.h2d_GBps == 172
    assert cluster_from_dict(c.to_dict(), "y.yaml") == c
    with pytest.raises(InputError) as e:
        cluster_from_dict({**spec, "host_link": {"d2h_GBps": 183}}, "x.yaml")
    assert "host_link" in str(e.value)


def test_replay_reports_the_offload_and_frees_memory() -> None:
    opts = {"model": "llama3-8b", "cluster": "gb200-nvl72", "dp": 4, "micro_batch": 1,
            "global_batch": 4, "seq_len": 4096, "zero": 1}
    base = retarget(opts)
    off = retarget({**opts, "cpu_offload_layers": 8})
    info = off.to_dict()["stack"]["offload"]
    assert info["layers"] == 8 and info["d2h_GBps"] == 183 and info["gib_per_microbatch"] > 0
    d0, d1 = base.to_dict()["memory_gib_per_gpu"], off.to_dict()["memory_gib_per_gpu"]
    assert d0 - d1 == pytest.approx(info["gib_per_microbatch"] * 7 / 8, rel=1e-3)
    assert off.iteration_time_s >= base.iteration_time_s


def test_a_cluster_without_host_link_is_bad_input() -> None:
    cmd = [sys.executable, "-m", "tracesim.cli", "replay", "--model", "llama3-8b", "--cluster",
           "h100x8", "--dp", "8", "--cpu-offload-layers", "4"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "host_link" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_the_gb_70b_rows_run_their_recipes_offload() -> None:
    from tracesim.pipeline.published import bridge_options, read_table, row_unmodelled

    path = REF / "megatron_bridge_25_11.csv"
    _, rows = read_table(path)
    want = {"DGX-GB200": 40, "DGX-GB300": 20}
    for k, row in enumerate(rows):
        if row["model"] == "llama3-70b" and row["system"] in want:
            assert bridge_options(row, path, k)["cpu_offload_layers"] == want.pop(row["system"])
            assert not any("offload" in u for u in row_unmodelled(row, Path("t.csv"), 0))
    assert not want
