"""Stragglers and jitter (tracesim/transform/perturb.py, tracesim/pipeline/perturbed.py)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tracesim.api import replay
from tracesim.transform.perturb import Perturbation, rank_factors

BASE = dict(model="gpt3-1.7b", cluster="h100x8", tp=1, pp=1, dp=8, micro_batch=1, global_batch=8)


def test_a_slow_rank_slows_the_data_parallel_step_and_is_named():
    base = replay(**BASE)
    slow = replay(**BASE, straggler=((3, 1.5),))
    pt = slow.details["perturbation"]
    assert pt["unperturbed_iteration_time_s"] == pytest.approx(base.iteration_time_s, rel=1e-9)
    # every all-reduce waits for rank 3: the step grows by about half its compute
    assert 0.2 < pt["impact"] < 0.55
    assert pt["waited_for"][0][0] == 3
    assert pt["slowest_ranks"][0] == [3, 1.5]


def test_a_factor_of_one_changes_nothing():
    base = replay(**BASE)
    same = replay(**BASE, straggler=((3, 1.0),))
    assert same.iteration_time_s == base.iteration_time_s
    assert same.details["perturbation"]["impact"] == 0.0


def test_jitter_is_seeded_and_has_the_asked_spread():
    f1 = rank_factors(range(20000), Perturbation(jitter=0.1, seed=1))
    f2 = rank_factors(range(20000), Perturbation(jitter=0.1, seed=1))
    f3 = rank_factors(range(20000), Perturbation(jitter=0.1, seed=2))
    v = np.array(list(f1.values()))
    assert f1 == f2 and f1 != f3
    assert v.mean() == pytest.approx(1.0, abs=0.005) and v.std() == pytest.approx(0.1, rel=0.05)
    a = replay(**BASE, jitter=0.1, seed=4).iteration_time_s
    assert a == replay(**BASE, jitter=0.1, seed=4).iteration_time_s
    assert a > replay(**BASE).iteration_time_s  # the step waits for the slowest of 8 draws


def test_a_large_layout_with_a_straggler_simulates_every_rank():
    opts = dict(model="gpt3-1.7b", cluster="h100x128", tp=1, pp=1, dp=64, micro_batch=1,
                global_batch=64)
    sym = replay(**opts)
    assert sym.details["replay"]["symmetric"]
    slow = replay(**opts, straggler=((40, 1.3),))
    assert not slow.details["replay"]["symmetric"]
    assert slow.details["perturbation"]["waited_for"][0][0] == 40
    assert slow.iteration_time_s > sym.iteration_time_s


@pytest.mark.parametrize("flag", [["--straggler", "5"], ["--straggler", "x:2"],
                                  ["--straggler", "3:0"], ["--jitter", "0"],
                                  ["--straggler", "99:1.5"]])
def test_bad_straggler_options_exit_2(flag):
    r = subprocess.run([sys.executable, "-m", "tracesim.cli", "replay", "--model", "gpt3-1.7b",
                        "--cluster", "h100x8", *flag], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    if flag[1] == "99:1.5":  # a rank the job does not have: not a silent +0.0%
        assert "rank 99 is not among the replayed ranks (0..7)" in r.stderr
