"""``collectors.loopback``: the fit and the link it produces reproduce the measured all-reduce
times through tracesim's own network model; a real 2-process gloo run yields a valid link."""

from __future__ import annotations

import pytest

from collectors.cpu_accuracy import CPU_CLUSTER
from collectors.loopback import fit, link_for
from tracesim.network.model import collective_time_ns
from tracesim.specs.cluster import cluster_from_dict


def test_fit_recovers_fixed_time_and_rate() -> None:
    fixed, rate = 400e-6, 1.5e9
    times = {s: fixed + s / rate for s in (1 << 18, 1 << 20, 1 << 22, 1 << 23)}
    got_fixed, got_rate = fit(times)
    assert got_fixed == pytest.approx(fixed, rel=1e-6)
    assert got_rate == pytest.approx(rate, rel=1e-6)


def test_fit_rejects_times_that_do_not_grow() -> None:
    with pytest.raises(RuntimeError, match="does not grow"):
        fit({1 << 20: 2e-3, 1 << 22: 1e-3})


@pytest.mark.parametrize("procs", [2, 4])
def test_link_reproduces_the_fit_in_the_network_model(procs: int) -> None:
    fixed, rate = 600e-6, 1.2e9
    link = link_for(procs, fixed, rate)
    spec = {**CPU_CLUSTER, "gpus_per_node": procs, "intra_node": link}
    cluster = cluster_from_dict(spec)
    for nbytes in (1 << 20, 4 << 20, 16 << 20):
        model_s = collective_time_ns(cluster, "all_reduce", tuple(range(procs)), nbytes) / 1e9
        assert model_s == pytest.approx(fixed + nbytes / rate, rel=0.01)


@pytest.mark.slow
def test_real_two_process_measurement_gives_a_usable_link() -> None:
    pytest.importorskip("torch")
    from collectors.loopback import measure

    res = measure(procs=2, reps=3, gap_ms=1.0, sizes=(1 << 18, 2 << 20, 16 << 20))
    link = res["intra_node"]
    assert link["kind"] == "pcie" and link["bandwidth_GBps"] > 0 and link["latency_us"] >= 0
    assert len(res["detail"]["median_ms"]) == 3
    cluster_from_dict({**CPU_CLUSTER, "intra_node": link})  # a valid spec
