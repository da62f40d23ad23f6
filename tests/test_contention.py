"""Host contention: the cluster-spec key, its factor, and its use in a retarget replay."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers import retarget
from tracesim.catalog import load_cluster
from tracesim.errors import InputError
from tracesim.hardware.contention import HostContention, contention_from_dict, scaled_op_time
from tracesim.specs.cluster import cluster_from_dict

#: a two-process CPU host (gloo over loopback)
CPU_CLUSTER = {
    "name": "cpu-loopback", "nodes": 1, "gpus_per_node": 2,
    "device": {
        "name": "cpu", "kind": "cpu", "peak_tflops": {"fp32": 0.1}, "hbm_GBps": 20,
        "launch_overhead_us": 5,
        "efficiency": {"default": {"compute": [[1e6, 0.3], [1e9, 0.6]],
                                   "memory": [[1e4, 0.3], [1e8, 0.8]], "spread": 0.3}},
    },
    "intra_node": {"kind": "pcie", "bandwidth_GBps": 2, "latency_us": 50},
}


def test_factor_interpolates_between_measured_counts() -> None:
    hc = HostContention(((2, 1.2), (4, 1.5)))
    assert hc.factor(1) == 1.0
    assert hc.factor(2) == pytest.approx(1.2, abs=1e-12)
    assert hc.factor(3) == pytest.approx(1.35, abs=1e-12)
    assert hc.factor(4) == pytest.approx(1.5, abs=1e-12)
    assert hc.factor(8) == pytest.approx(1.5, abs=1e-12)  # beyond the data: the largest
    assert HostContention().factor(4) == 1.0


@pytest.mark.parametrize(("data", "where", "what"), [
    ({"slowdown": {2: 1.1}, "extra": 1}, "host_contention", "extra"),
    ({}, "host_contention", "slowdown"),
    ({"slowdown": {}}, "host_contention.slowdown", "non-empty"),
    ({"slowdown": {1: 1.1}}, "host_contention.slowdown.1", ">= 2"),
    ({"slowdown": {"two": 1.1}}, "host_contention.slowdown.two", "integer"),
    ({"slowdown": {2: 20}}, "host_contention.slowdown.2", "[0.5, 10]"),
    ({"slowdown": {2: "x"}}, "host_contention.slowdown.2", "[0.5, 10]"),
    ({"slowdown": {2: 1.1}, "method": 3}, "host_contention.method", "text"),
])
def test_bad_contention_names_file_and_key(data: dict, where: str, what: str) -> None:
    with pytest.raises(InputError) as err:
        contention_from_dict(data, "c.yaml")
    assert "c.yaml" in str(err.value) and where in str(err.value) and what in str(err.value)


def test_cluster_spec_keeps_contention(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**CPU_CLUSTER, "host_contention": {
        "slowdown": {2: 1.15}, "method": "measured", "detail": {"per_round": [1.1, 1.2]}}}))
    spec = load_cluster(str(path))
    assert spec.host_contention == HostContention(((2, 1.15),), "measured")
    again = cluster_from_dict(spec.to_dict())
    assert again == spec and again.replace(name="x").host_contention == spec.host_contention
    assert cluster_from_dict(CPU_CLUSTER).host_contention is None
    with pytest.raises(InputError, match="host_contention.slowdown.2"):
        cluster_from_dict({**CPU_CLUSTER, "host_contention": {"slowdown": {2: 0}}}, "c.yaml")


def test_scaled_op_time_multiplies_durations() -> None:
    def base(op_class: str, flops: float, nbytes: float, op: object) -> int:
        return 1000

    assert scaled_op_time(base, 1.0) is base
    assert scaled_op_time(base, 1.25)("gemm", 1.0, 1.0, None) == 1250


def test_retarget_scales_compute_of_colocated_ranks(tmp_path: Path) -> None:
    """DP 2 on one CPU host: with a 1.25 slowdown the compute time grows by 25%, exactly,
    while the all-reduce does not change; DP 1 is not slowed."""
    plain, slowed = tmp_path / "plain.yaml", tmp_path / "slowed.yaml"
    plain.write_text(yaml.safe_dump(CPU_CLUSTER))
    slowed.write_text(yaml.safe_dump({**CPU_CLUSTER, "host_contention": {"slowdown": {2: 1.25}}}))
    opts = {"model": "gpt-tiny", "dp": 2, "global_batch": 16, "micro_batch": 8, "dtype": "fp32"}
    a = retarget({**opts, "cluster": str(plain)}).to_dict()
    b = retarget({**opts, "cluster": str(slowed)}).to_dict()
    assert b["breakdown"]["compute_s"] == pytest.approx(1.25 * a["breakdown"]["compute_s"], rel=1e-3)
    assert b["iteration_time_s"] > 1.15 * a["iteration_time_s"]
    one = {**opts, "dp": 1, "global_batch": 8}
    c = retarget({**one, "cluster": str(plain)}).to_dict()
    d = retarget({**one, "cluster": str(slowed)}).to_dict()
    assert d["iteration_time_s"] == pytest.approx(c["iteration_time_s"], rel=1e-9)
