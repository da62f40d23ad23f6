"""The memory-bound kernel study (benchmarks/kernels/memory_in_steps.py, docs/devices.md): it
finds a step's memory-bound kernels, prices them on the streaming curve the way replay prices
an op, and the per-class factors the GPU profiles read are what it computes."""

from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks.kernels import memory_in_steps as mis
from tracesim.hardware.device import get_device


def test_the_study_reads_the_megatron_steps_memory_bound_kernels() -> None:
    label, path, device = mis.TRACES[0]
    assert "Megatron" in label and device == "a100"
    k = mis.kernels(path, device)
    assert set(k["op_class"]) <= set(mis.CLASSES)
    assert np.isfinite(k["ratio"]).all() and (k["ratio"] > 0).all()
    # the fused masked softmax forward kernels of the step (40 on rank 0)
    soft = k[(k["op_class"] == "softmax") & (k["l2x"] >= 4)]
    assert len(soft) == 40
    # its achieved bandwidth is a real kernel's: below the A100's 2,039 GB/s
    assert (soft["GBps"] < 2039).all()


def test_the_study_prices_on_the_streaming_curve_whatever_the_profile_says() -> None:
    dev = mis.streaming("a100")
    assert dev.class_efficiency("norm") is dev.class_efficiency("default")
    assert get_device("a100").class_efficiency("norm") is not get_device("a100").class_efficiency("default")


def test_the_shipped_factors_are_what_the_study_computes() -> None:
    # data/memory_classes.csv, which benchmarks/kernels/datasheet.py writes into the profiles,
    # comes from the six public traces (python benchmarks/kernels/memory_in_steps.py --write)
    rows = mis.class_factors()
    shipped = pd.read_csv(mis.FACTORS_CSV)
    assert list(shipped["class"]) == [r["class"] for r in rows]
    assert list(shipped["factor"]) == [r["factor"] for r in rows]
    assert list(shipped["calibrated"]) == [r["calibrated"] for r in rows]
    # each calibrated class rests on at least three traces; softmax (two traces, 0.81 and
    # 0.25) stays on the streaming curve
    got = {r["class"]: r for r in rows}
    assert not got["softmax"]["calibrated"] and got["softmax"]["factor"] == 1.0
    assert got["elementwise"]["factor"] == 1.0
    assert all(got[c]["traces"] >= mis.MIN_TRACES and got[c]["factor"] < 1 for c in ("memcpy", "norm", "reduction"))
