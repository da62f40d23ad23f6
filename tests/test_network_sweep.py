"""Held-out nccl-tests size sweeps (benchmarks/network/size_sweep.py; docs/network.md,
"Medium messages"): the simulated over the measured time, size band by size band, as the
docs give them. A model change that moves a band updates the docs and this table."""

from __future__ import annotations

import pytest

from benchmarks.network.size_sweep import band_ratios, sweep

H100, H200 = "Azure ND H100 v5 (8 x H100 80GB HBM3)", "Azure ND H200 v5 (8 x H200 141GB)"
GB200 = "Azure ND GB200 v6 (4 x GB200 of one tray)"

#: (system, band) -> (lowest, highest) simulated / measured time, as documented
DOCUMENTED = {
    (H100, "1-64 KiB (latency)"): (0.60, 0.98), (H100, "128 KiB-512 KiB"): (0.60, 0.63),
    (H100, "1-32 MiB"): (0.65, 0.74), (H100, "64-512 MiB"): (0.83, 0.92),
    (H100, "1-8 GiB"): (0.98, 1.00),
    (H200, "1-64 KiB (latency)"): (0.80, 0.84), (H200, "128 KiB-512 KiB"): (0.82, 0.86),
    (H200, "1-32 MiB"): (0.69, 0.83), (H200, "64-512 MiB"): (0.84, 0.93),
    (H200, "1-8 GiB"): (0.98, 1.00),
    (GB200, "1-64 KiB (latency)"): (0.64, 0.69), (GB200, "128 KiB-512 KiB"): (0.66, 0.73),
    (GB200, "1-32 MiB"): (0.75, 0.92), (GB200, "64-512 MiB"): (0.92, 0.97),
    (GB200, "1-8 GiB"): (0.96, 1.00),
}


@pytest.fixture(scope="module")
def points():
    return sweep()


def test_every_measured_size_is_simulated(points) -> None:
    assert len(points) == 72
    assert {p.cluster for p in points} == {"h100x8", "h200x8", "gb200-nvl72"}
    assert all(p.simulated_busbw > 0 and p.measured_busbw > 0 for p in points)


def test_the_bands_are_as_documented(points) -> None:
    got = band_ratios(points)
    assert set(got) == set(DOCUMENTED)
    for key, (lo, hi) in DOCUMENTED.items():
        assert got[key] == pytest.approx((lo, hi), abs=0.006), key


def test_the_large_end_holds(points) -> None:
    # the efficiencies fitted at 8 GiB: NVLS on H100 (nccl_busbw.csv), NVLink 5's ring on
    # this GB200 sweep (docs/network.md, "Calibration")
    for p in points:
        if p.size_bytes >= 1 << 30:
            assert 0.95 < p.time_ratio < 1.03, p
