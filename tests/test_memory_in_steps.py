"""The memory-bound kernel study (benchmarks/kernels/memory_in_steps.py, docs/devices.md) on
the Megatron-LM trace in tests/data: it finds the step's memory-bound kernels and prices
them the way replay prices an op."""

from __future__ import annotations

import numpy as np

from benchmarks.kernels import memory_in_steps as mis


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
