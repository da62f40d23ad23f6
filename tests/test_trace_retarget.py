"""A recorded trace replayed on another device, host and network (tracesim.pipeline.recorded).

Real traces from ../shared/traces (V100 and A100 recordings) are moved onto other device
profiles; the checks are identities (the recorded device gives the self-replay answer),
bounds from the profiles' own numbers (a memory-bound kernel speeds up by at most the
bandwidth ratio) and directions (a slower network slows the step).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import PUBLIC_TRACES
from tracesim.api import replay
from tracesim.errors import InputError
from tracesim.hardware.device import get_device
from tracesim.options import ReplayOptions
from tracesim.pipeline.recorded import load_recorded
from tracesim.transform.comms import grow_groups, network_comms
from tracesim.transform.retime import retime

V100 = PUBLIC_TRACES / "v100_1rank.json.gz"
A100_2R = PUBLIC_TRACES / "a100_2rank_nccl.json.gz"

pytestmark = pytest.mark.skipif(not PUBLIC_TRACES.is_dir(),
                                reason=f"../shared/traces/public not found at {PUBLIC_TRACES}")


def test_the_recorded_device_gives_the_self_replay_answer():
    for src, dev in ((V100, "v100"), (A100_2R, "a100-40gb")):
        self_it = replay(src).iteration_time_s
        same = replay(src, device=dev)
        assert same.mode == "replay-trace"
        assert same.iteration_time_s == pytest.approx(self_it, rel=0.01)
        assert set(same.details["scaling"]["gpu_time_shares"]) <= {"measured", "kept"}
        assert same.details["fallbacks"] == {}  # every dependency resolved


def test_kernel_times_follow_the_device_profiles():
    src, graph, _ = load_recorded(V100)
    v100, h100 = get_device("v100"), get_device("h100")
    rt = retime(graph, v100, h100, op_table=src.op_table)
    t0, t1 = graph.tasks, rt.graph.tasks
    gpu = (t0["kind"] == "gpu").to_numpy() & (t0["op_class"] != "comm").to_numpy()
    ratio = t1["dur_ns"].to_numpy()[gpu] / np.maximum(t0["dur_ns"].to_numpy()[gpu], 1)
    big = t0["dur_ns"].to_numpy()[gpu] > 50_000
    cls = t0["op_class"].to_numpy()[gpu]
    mem = big & np.isin(cls, ("elementwise", "norm", "reduction"))
    assert mem.any()
    # a large memory-bound kernel speeds up by the bandwidth ratio, not more
    bw = v100.hbm_GBps / h100.hbm_GBps
    assert np.all(ratio[mem] >= bw * 0.99) and np.all(ratio[mem] <= 1.0)
    # every GPU kernel got faster on the faster device; host tasks kept their time
    assert np.all(ratio[big] < 1.0)
    cpu = (t0["kind"] == "cpu").to_numpy()
    assert np.array_equal(t0["dur_ns"].to_numpy()[cpu], t1["dur_ns"].to_numpy()[cpu])
    assert sum(rt.shares().values()) == pytest.approx(1.0)
    assert 0 < rt.ratio < 1


def test_host_speed_divides_the_host_time():
    src, graph, _ = load_recorded(V100)
    dev = get_device("v100")
    rt = retime(graph, dev, dev, op_table=src.op_table, host_speed=2.0)
    cpu = (graph.tasks["kind"] == "cpu").to_numpy()
    before = graph.tasks["dur_ns"].to_numpy()[cpu] + graph.tasks["gap_ns"].to_numpy()[cpu]
    after = rt.graph.tasks["dur_ns"].to_numpy()[cpu] + rt.graph.tasks["gap_ns"].to_numpy()[cpu]
    assert after.sum() == pytest.approx(before.sum() / 2, rel=1e-3)
    slow = replay(V100, host_speed=0.5).iteration_time_s
    fast = replay(V100, host_speed=4.0).iteration_time_s
    assert slow > replay(V100).iteration_time_s > fast


def test_collectives_of_an_absent_rank_run_over_their_whole_group():
    src, graph, _ = load_recorded(A100_2R)
    comms = network_comms(graph, op_table=src.op_table)
    # rank 0 of a 2-rank job: its collectives are lone members of the group (0, 1)
    assert comms.groups == ((0, 1),)
    assert comms.counts["lone"] > 0 and comms.counts["kept"] == 0
    t = comms.graph.tasks
    lone = t["match_key"].astype(str).str.startswith("lone#").to_numpy()
    assert np.all(t["kind"].to_numpy()[lone] == "coll")
    assert np.all(t["group"].to_numpy()[lone] == -1)


def test_a_slower_network_slows_the_step(tmp_path):
    fast = replay(A100_2R, cluster="h100x8")
    assert fast.details["communication"]["operations"]["lone"] > 0
    # the same devices, one per node, one 1 Gb/s NIC each: every all-reduce crosses it
    slow_spec = tmp_path / "slow.yaml"
    slow_spec.write_text(
        "name: slow\nnodes: 2\ngpus_per_node: 1\ndevice: h100\n"
        "intra_node: {kind: nvswitch, bandwidth_GBps: 450, latency_us: 0.6}\n"
        "inter_node: {nics_per_node: 1, nic_Gbps: 1, topology: spine_leaf, latency_us: 2.7}\n")
    slow = replay(A100_2R, cluster=str(slow_spec))
    assert slow.iteration_time_s > fast.iteration_time_s * 1.2


def test_a_trace_on_a_cluster_writes_its_link_traffic(tmp_path):
    """The result directory of a trace replayed on a cluster's network has the per-link
    traffic of its re-timed collectives (links.parquet), as a retargeted model's has."""
    import pandas as pd

    from tracesim.api import write_result

    pred = replay(A100_2R, cluster="h100x8", detail=True)
    res = write_result(pred, tmp_path / "out", plots=False)
    links = pd.read_parquet(tmp_path / "out" / "links.parquet")
    assert len(links) and links["bytes"].sum() > 0
    assert links["link"].nunique() >= 2  # both GPUs' NVLink ports
    assert not [w for w in res["warnings"] if "links.parquet" in w]


def test_data_parallel_groups_grow():
    groups, job = grow_groups([(0, 1), (0,), None], ["world", "pg", "pg"], 2, 8)
    assert job == 8
    assert groups[0] == (0, 1, 2, 3, 4, 5, 6, 7)
    with pytest.raises(InputError, match="multiple"):
        grow_groups([(0, 1)], ["world"], 2, 3)
    # no data-parallel collective: degree 1, so --dp 1 (a sweep's baseline) leaves the job be
    assert grow_groups([(0,), None], ["pg", "pg"], 1, 1) == ([(0,), None], 1)
    with pytest.raises(InputError, match="no data-parallel collective"):
        grow_groups([(0,), None], ["pg", "pg"], 1, 2)
    two = replay(A100_2R, cluster="h100x128")
    many = replay(A100_2R, cluster="h100x128", dp=32)
    assert many.gpus == 32 and many.parallel["dp"] == 32
    assert many.iteration_time_s >= two.iteration_time_s


def test_a_dp_what_if_needs_a_cluster():
    with pytest.raises(InputError, match="--cluster"):
        replay(A100_2R, dp=4)


def test_an_extracted_workload_is_scaled_to_the_cluster_device(tmp_path):
    wk = tmp_path / "wk"
    r = subprocess.run([sys.executable, "-m", "tracesim.cli", "extract", str(V100), "-o", str(wk)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    a = replay(wk, cluster="a100-selene")
    h = replay(wk, cluster="h100x8")
    assert h.iteration_time_s <= a.iteration_time_s < replay(wk).iteration_time_s
    assert a.details["scaling"]["gpu_time_ratio"] < 1


@pytest.mark.parametrize("args,needle", [
    (["--device", "tpu9"], "--device"),
    (["--host-speed", "0"], "--host-speed"),
    (["--retarget", "trace", "--tp", "2"], "--tp"),
    (["--cluster", "h100x8", "--dp", "3"], "--dp"),
])
def test_bad_trace_options_exit_2_with_one_line(args, needle):
    r = subprocess.run([sys.executable, "-m", "tracesim.cli", "replay", str(A100_2R), *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and needle in r.stderr


def test_the_cli_reports_what_was_scaled():
    r = subprocess.run([sys.executable, "-m", "tracesim.cli", "replay", str(V100), "--device", "h100",
                        "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["mode"] == "replay-trace" and res["device"] == "h100"
    assert res["recorded"]["device"] == "v100"
    assert res["iteration_time_s"] < res["recorded"]["measured_step_time_s"]
    assert any("inferred" in w for w in res["warnings"])
    r = subprocess.run([sys.executable, "-m", "tracesim.cli", "replay", str(V100), "--device", "h100"],
                       capture_output=True, text=True, timeout=300)
    assert "kernel times" in r.stdout and "on v100" in r.stdout


def test_options_check_their_values():
    with pytest.raises(InputError):
        ReplayOptions(host_speed=-1.0)
    assert ReplayOptions(host_speed=2).host_speed == 2.0


BUNDLE = Path(__file__).resolve().parents[1] / "workloads" / "bundles" / "gpt-tiny"


def test_a_cpu_recording_moves_onto_a_gpu():
    cpu = replay(BUNDLE)
    gpu = replay(BUNDLE, device="h100", retarget="trace")
    tr = gpu.details["transplant"]
    assert gpu.mode == "replay-trace" and gpu.device == "h100"
    assert tr["kernels"] > 100
    assert tr["host_s_after"] < tr["host_s_before"]
    assert gpu.details["scaling"]["gpu_time_shares"] == {"model": 1.0}
    assert gpu.iteration_time_s < cpu.iteration_time_s
    kinds = gpu.graph.tasks["kind"].to_numpy()
    assert (kinds == "gpu").sum() == tr["kernels"]
    assert set(gpu.methods[kinds == "gpu"]) == {"model"}
    # a slower GPU is slower; the host part does not change with the device
    v100 = replay(BUNDLE, device="v100", retarget="trace")
    assert v100.iteration_time_s > gpu.iteration_time_s
    assert v100.details["transplant"]["host_s_after"] == pytest.approx(tr["host_s_after"])


def test_the_op_that_launches_a_kernel_is_the_innermost_of_its_class():
    from tracesim.trace.cpulanes import compute_ops
    from tracesim.trace.sources import load_source

    ops = load_source(BUNDLE).op_table
    names = set(compute_ops(ops)["name"])
    assert {"aten::mm", "aten::addmm", "aten::copy_"} <= names
    assert not names & {"aten::linear", "aten::matmul", "aten::layer_norm"}


def test_a_grace_hosted_cluster_slows_the_recorded_host_time():
    """The A100 trace is host-bound (its GPU busy about a quarter of the step): on the
    NVL72 rack, whose spec names Grace CPUs (``host_cpu`` speed 0.364), its host time is
    divided by that, said in a warning; ``--host-speed`` overrides it."""
    x86 = replay(A100_2R, cluster="h100x8")
    grace = replay(A100_2R, cluster="gb200-nvl72")
    same_host = replay(A100_2R, cluster="gb200-nvl72", host_speed=1.0)
    assert grace.details["scaling"]["host_speed"] == pytest.approx(0.364)
    assert any("host_cpu" in w and "0.364" in w for w in grace.warnings)
    assert not any("host_cpu" in w for w in same_host.warnings + x86.warnings)
    assert grace.iteration_time_s > 2 * same_host.iteration_time_s
    assert same_host.iteration_time_s == pytest.approx(x86.iteration_time_s, rel=0.05)
