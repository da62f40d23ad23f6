"""A real check on this machine: predict a 2-rank gloo data-parallel run of gpt-tiny on the
CPU from a 1-rank trace of the same model (both collected here with ``tracesim collect``).

The 1-rank bundle is recorded with one thread, the per-rank share of the 2 cores in the 2-rank
run; the prediction replays its measured op times (the template's own device) with the DDP
gradient all-reduce over loopback (the cluster spec below: 2 GB/s, 50 us) and is compared
with the 2-rank run's unprofiled median step time. Two processes on one host slow each
other's compute (shared caches, memory bandwidth), which a 1-rank trace cannot show: that
slowdown is measured separately, before the collections, by ``python -m collectors.contention``
(a fixed gemm / row-op / streaming loop, 1 process alone vs 2 at once; not the training job)
and given to the replay as the cluster spec's ``host_contention``. Wall-clock measurements
mean nothing on a machine busy with other work, so the test skips when the load average says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

CPU_CLUSTER = """
name: cpu-loopback
nodes: 1
gpus_per_node: 2
device:
  name: cpu
  kind: cpu
  peak_tflops: {fp32: 0.1}
  hbm_GBps: 20
  launch_overhead_us: 5
  efficiency:
    default: {compute: [[1000000.0, 0.3], [1000000000.0, 0.6]], memory: [[10000.0, 0.3], [100000000.0, 0.8]], spread: 0.3}
intra_node: {kind: pcie, bandwidth_GBps: 2, latency_us: 50}
"""


def _busy() -> bool:
    # scripts/test.sh runs `timing` tests alone after the rest; skip only on a machine that
    # is clearly overloaded by something else (then timings would measure that work)
    cores = os.cpu_count() or 1
    return os.getloadavg()[0] > 2.0 * cores


def _contention(out: Path) -> dict:
    cmd = [sys.executable, "-m", "collectors.contention", "--procs", "2", "--threads", "1",
           "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600, cwd=ROOT)
    return yaml.safe_load(out.read_text())["host_contention"]


def _collect(out: Path, *args: str) -> dict:
    cmd = [sys.executable, "-m", "tracesim.cli", "collect", "--workload", "gpt-tiny", "--batch", "8",
           "-o", str(out), *args]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600, cwd=ROOT)
    return yaml.safe_load((out / "meta.yaml").read_text())


@pytest.mark.slow
@pytest.mark.timing
@pytest.mark.xfail(
    strict=False,
    reason="borderline on this 2-vCPU VM: on a quiet machine predicted 62.9 ms vs measured "
           "71.2 ms (-11.7%; passes 10% in some runs): the two ranks slow each other (shared "
           "caches, memory bandwidth) beyond what a 1-rank trace shows (docs/accuracy.md)",
)
def test_two_rank_gloo_run_predicted_from_one_rank_trace(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    if _busy():
        pytest.skip(f"load average {os.getloadavg()[0]:.1f}: timings would measure other work")
    from tracesim.retarget import run_retarget

    contention = _contention(tmp_path / "contention.yaml")
    one = _collect(tmp_path / "one", "--threads", "1")
    two = _collect(tmp_path / "two", "--ranks", "2")
    if _busy():
        pytest.skip(f"load average {os.getloadavg()[0]:.1f} rose during collection")
    cluster = yaml.safe_load(CPU_CLUSTER)
    (tmp_path / "cpu.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "cpu-contention.yaml").write_text(
        yaml.safe_dump({**cluster, "host_contention": contention}))
    opts = {"dp": 2, "global_batch": 16, "micro_batch": 8, "seq_len": int(one["seq_len"]),
            "dtype": "fp32"}
    plain = run_retarget(str(tmp_path / "one"), {**opts, "cluster": str(tmp_path / "cpu.yaml")})
    res = run_retarget(str(tmp_path / "one"),
                       {**opts, "cluster": str(tmp_path / "cpu-contention.yaml")})
    measured = float(two["measured_step_time_s"]["median"])
    factor = float(contention["slowdown"][2])
    print(f"contention x{factor:.3f}; predicted {res['iteration_time_s'] * 1e3:.1f} ms "
          f"(without contention {plain['iteration_time_s'] * 1e3:.1f} ms), measured "
          f"{measured * 1e3:.1f} ms; load {os.getloadavg()[0]:.2f}")
    assert res["duration_methods"].get("measured", 0) > 0
    assert res["breakdown"]["compute_s"] == pytest.approx(
        factor * plain["breakdown"]["compute_s"], rel=1e-3)
    assert res["iteration_time_s"] == pytest.approx(measured, rel=0.10)
