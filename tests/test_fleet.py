"""The slowest GPU of a job (tracesim.hardware.fleet): calibration, profile keys, the replay."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from tracesim.errors import InputError
from tracesim.hardware.costmodel import op_time_ns
from tracesim.hardware.device import get_device, parse_profile
from tracesim.hardware.fleet import Fleet, expected_max
from tracesim.options import ReplayOptions
from tracesim.pipeline.run import predict


def test_expected_max_of_normal_draws() -> None:
    # closed forms: E[max of 2] = 1 / sqrt(pi), E[max of 3] = 3 / (2 sqrt(pi))
    assert expected_max(1) == 0.0
    assert expected_max(2) == pytest.approx(1.0 / math.sqrt(math.pi), abs=1e-6)
    assert expected_max(3) == pytest.approx(1.5 / math.sqrt(math.pi), abs=1e-6)
    # against a Monte Carlo of 8 and 256 draws
    rng = np.random.default_rng(1)
    for n in (8, 256):
        mc = rng.standard_normal((20_000, n)).max(axis=1).mean()
        assert expected_max(n) == pytest.approx(mc, abs=0.02)
    grows = [expected_max(n) for n in (8, 64, 1024, 16_384)]
    assert grows == sorted(grows)


def test_factor_follows_the_job_size() -> None:
    f = Fleet(concurrent=0.98, chip_sigma=0.03)
    assert f.factor(1) == 1.0  # one GPU alone: the profile's own measurement
    assert f.factor(8) == pytest.approx(0.98 * (1 - 1.4236 * 0.03), rel=1e-4)
    sizes = [f.factor(n) for n in (2, 8, 64, 1024, 8192)]
    assert sizes == sorted(sizes, reverse=True)
    assert Fleet(0.99, 0.0).factor(4096) == 0.99
    # a die's lasting offset and its run-to-run motion add as independent spreads
    both = Fleet(0.98, 0.03, 0.04)
    assert both.sigma == pytest.approx(0.05)
    assert both.factor(64) == pytest.approx(0.98 * (1 - expected_max(64) * 0.05), rel=1e-9)
    assert Fleet(0.99, 0.0, 0.0125).factor(1) == 1.0
    assert Fleet(0.99, 0.0, 0.0125).factor(1024) < Fleet(0.99, 0.0, 0.0125).factor(8) < 0.99


def test_calibration_from_the_node_measurement() -> None:
    """Calibrated on one node's MSMF runs (data/concurrent.csv): B200's 40 runs of 8 GPUs at
    once span 10.4%, far beyond one GPU's run-to-run motion (1.8% over 5 runs): a per-GPU
    spread; H200's 4.5% is what the run motion alone gives 40 runs: no per-GPU spread, the
    shared board's -0.6% and the run motion (2.9% over 5 runs: 0.0125). The shipped profiles
    carry what the calibration gives."""
    from benchmarks.kernels import sustained

    b200, _ = sustained.fleet("b200")
    h200, _ = sustained.fleet("h200")
    assert b200 is not None and h200 is not None
    assert b200["concurrent"] == pytest.approx(1426.4 / 1455.7, abs=1e-4)
    assert 0.02 < b200["chip_sigma"] < 0.04
    assert h200["concurrent"] == pytest.approx(698.6 / 702.9, abs=1e-4) and h200["chip_sigma"] == 0.0
    # run_sigma: one GPU's 5 runs with its siblings busy, range / d2(5)
    assert b200["run_sigma"] == pytest.approx(0.018 / (2 * expected_max(5)), abs=1e-4)
    assert h200["run_sigma"] == pytest.approx(0.029 / (2 * expected_max(5)), abs=1e-4)
    # GB200: the B200 die's spread on another board (its own concurrent and run motion not measured)
    gb200, text = sustained.fleet("gb200")
    assert gb200 == {"concurrent": 1.0, "chip_sigma": b200["chip_sigma"], "run_sigma": 0.0}
    assert "(derived)" in text
    for name, want in (("b200", b200), ("h200", h200), ("h100", h200), ("gb200", gb200)):
        dev = get_device(name)
        assert dev.fleet is not None and dev.fleet.to_dict() == want, name
    for name in ("gb300", "b300", "a100", "mi300x"):
        assert get_device(name).fleet is None and get_device(name).fleet_factor(4096) == 1.0


def test_for_job_slows_compute_not_memory() -> None:
    b200 = get_device("b200")
    job = b200.for_job(256)
    f = b200.fleet_factor(256)
    assert 0.85 < f < 0.95
    assert job.sustained("bf16") == pytest.approx(b200.sustained("bf16") * f)
    assert job.sustained("mxfp8") == pytest.approx(b200.sustained("fp8") * f)
    flops = 2.0 * 8192**3
    t1 = op_time_ns(b200, "gemm", flops, 0.0, "bf16", shape=(1, 8192, 8192, 8192))
    tn = op_time_ns(job, "gemm", flops, 0.0, "bf16", shape=(1, 8192, 8192, 8192))
    assert tn / t1 == pytest.approx(1.0 / f, rel=2e-3)
    assert op_time_ns(job, "elementwise", 0.0, 1e10, "bf16") == op_time_ns(b200, "elementwise", 0.0, 1e10, "bf16")
    assert job.alone() is b200 and job.for_job(256) is job
    with pytest.raises(ValueError):
        job.for_job(8)
    assert job.burst().sustained("bf16") == 1.0 and job.burst().fleet is None
    h100 = get_device("h100")  # FlashAttention-2's rates carry over to the one GPU alone
    fa2 = h100.for_job(64).with_flash2()
    assert fa2 is not None and fa2.alone() == h100.with_flash2()
    a100 = get_device("a100")  # no sustained-load data: nothing to slow
    assert a100.for_job(4096).sustained("bf16") == 1.0


def test_profile_key_is_checked() -> None:
    raw = dict(get_device("b200").raw)
    own = parse_profile({**raw, "sustained_fleet": {"concurrent": 0.95, "chip_sigma": 0.01}})
    assert own.fleet == Fleet(0.95, 0.01)  # run_sigma optional: 0
    moving = parse_profile({**raw, "sustained_fleet": {"concurrent": 0.95, "chip_sigma": 0.01,
                                                       "run_sigma": 0.02}})
    assert moving.fleet == Fleet(0.95, 0.01, 0.02)
    assert parse_profile({**raw, "sustained_fleet": None}).fleet is None
    off = parse_profile({"base": "b200", "name": "b200-binned", "sustained_fleet": None})
    assert off.fleet_factor(1024) == 1.0 and off.sustained("bf16") == get_device("b200").sustained("bf16")
    for bad in ({"concurrent": 1.2, "chip_sigma": 0.01}, {"concurrent": 0.9, "chip_sigma": 0.5},
                {"concurrent": 0.9}, {"concurrent": 0.9, "chip_sigma": -0.1},
                {"concurrent": 0.9, "chip_sigma": 0.01, "skew": 1},
                {"concurrent": 0.9, "chip_sigma": 0.01, "run_sigma": 0.3},
                {"concurrent": 0.9, "chip_sigma": 0.01, "run_sigma": -0.01}, 0.9):
        with pytest.raises(InputError, match="sustained_fleet"):
            parse_profile({**raw, "sustained_fleet": bad}, "dev.yaml")


def _llama(nodes: int, **extra: object) -> ReplayOptions:
    return ReplayOptions.from_mapping({"model": "llama3-8b", "cluster": "dgx-b200", "nodes": nodes,
                                       "tp": 1, "pp": 1, "dp": 8 * nodes, "micro_batch": 1,
                                       "global_batch": 8 * nodes, "seq_len": 4096, **extra})


def test_replay_runs_at_the_slowest_gpu(tmp_path) -> None:
    """The same per-GPU work on 8 and 64 B200s, against a profile without the spread: each
    job's compute is slower by at most its factor (memory-bound kernels do not follow the
    clock), the larger job's by more."""
    prof = tmp_path / "b200-even.yaml"
    prof.write_text("base: b200\nname: b200-even\nsustained_fleet: null\n")
    b200 = get_device("b200")
    slower = []
    for nodes in (1, 8):
        res, even = predict(None, _llama(nodes)), predict(None, _llama(nodes, device=str(prof)))
        f = b200.fleet_factor(8 * nodes)
        assert res.details["slowest_gpu"] == pytest.approx(f) and even.details["slowest_gpu"] == 1.0
        ratio = res.breakdown["compute_s"] / even.breakdown["compute_s"]
        assert 1.0 / f * 0.9 < ratio <= 1.0 / f * 1.001, nodes
        assert res.iteration_time_s > even.iteration_time_s
        slower.append(ratio)
    assert slower[1] > slower[0]


def test_report_names_the_slowest_gpu() -> None:
    out = subprocess.run([sys.executable, "-m", "tracesim.cli", "replay", "--model", "llama3-8b",
                          "--cluster", "dgx-b200", "--nodes", "2", "--tp", "1", "--dp", "16",
                          "--seq-len", "2048"], capture_output=True, text=True, check=True).stdout
    assert "the slowest of 16 GPUs" in out


def test_bad_profile_exits_2(tmp_path) -> None:
    prof = tmp_path / "bad.yaml"
    prof.write_text("base: b200\nname: bad\nsustained_fleet: {concurrent: 0.9, chip_sigma: 3}\n")
    res = subprocess.run([sys.executable, "-m", "tracesim.cli", "replay", "--model", "llama3-8b",
                          "--cluster", "dgx-b200", "--tp", "1", "--dp", "8", "--device", str(prof)],
                         capture_output=True, text=True)
    assert res.returncode == 2
    assert "bad.yaml" in res.stderr and "sustained_fleet.chip_sigma" in res.stderr
    assert "Traceback" not in res.stderr


def test_device_listing_names_the_slowest_gpu() -> None:
    from tracesim.catalog import shipped

    text = {e.name: e.summary for e in shipped("devices")}
    assert "the slowest of 8 / 1,024 GPUs 0.937 / 0.882" in text["b200"]
    assert "the slowest of 8 / 1,024 GPUs 0.976 / 0.954" in text["h100"]
    assert "slowest" not in text["gb300"] and "slowest" not in text["a100"]
    assert "slowest" in text["gb200"]
