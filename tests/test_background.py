"""Traffic from outside the job on the same fabric (tracesim/network/background.py, the
``load`` entries of tracesim/network/faults.py): closed forms and replays."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tracesim.api import replay
from tracesim.network.model import collective_time_ns
from tracesim.specs.cluster import ClusterSpec, cluster_from_dict
from tracesim.specs.fabric import parse_background

GIB = 1 << 30


def cluster(nodes: int, gpus_per_node: int, **inter: object) -> ClusterSpec:
    """H100 nodes with one 400 Gb/s NIC each (shared by the node's GPUs)."""
    return cluster_from_dict({
        "name": "shared", "nodes": nodes, "gpus_per_node": gpus_per_node, "device": "h100",
        "intra_node": {"kind": "nvswitch", "bandwidth_GBps": 450, "latency_us": 0.6},
        "inter_node": {"nics_per_node": 1, "nic_Gbps": 400, "latency_us": 2.0,
                       **({"topology": "fat_tree", "levels": 1} | inter)}})


def with_bg(c: ClusterSpec, *specs: str) -> ClusterSpec:
    return c.with_fabric(background=tuple(parse_background(s, c.gpus_per_node, c.gpus) for s in specs))


def bandwidth_ns(c: ClusterSpec, ranks: list[int], nbytes: int = GIB) -> int:
    # one protocol for both sizes (NCCL Simple), so the difference is the bandwidth part
    return (collective_time_ns(c, "all_reduce", ranks, nbytes, "ring", protocol="Simple")
            - collective_time_ns(c, "all_reduce", ranks, 1, "ring", protocol="Simple"))


def test_a_background_all_reduce_on_the_same_nics_halves_the_jobs_share():
    # GPUs 0 and 2 (the job) and 1 and 3 (the other job) share their nodes' one NIC: while
    # both rings run, each of the NIC's directions carries one flow of each, at half speed
    c = cluster(2, 2)
    alone = bandwidth_ns(c, [0, 2])
    busy = with_bg(c, "all_reduce:size=8G:gpus=1+3:every=0s")
    assert bandwidth_ns(busy, [0, 2]) == pytest.approx(2 * alone, rel=1e-3)  # NCCL Simple per-step terms ride along
    # an instance that starts after the job's collective has ended changes nothing
    later = with_bg(c, "all_reduce:size=8G:gpus=1+3:every=10s:start=1s")
    assert bandwidth_ns(later, [0, 2]) == alone


@pytest.mark.parametrize("fraction", [0.25, 0.5])
def test_a_steady_load_leaves_the_rest_of_the_link(fraction):
    c = cluster(2, 1)
    alone = bandwidth_ns(c, [0, 1])
    for on in ("nic", "nic0", "nic0+nic1"):
        loaded = with_bg(c, f"load:fraction={fraction}:on={on}")
        assert bandwidth_ns(loaded, [0, 1]) == pytest.approx(alone / (1 - fraction), rel=1e-3)
    # on a tier the ring does not use: nothing changes
    assert bandwidth_ns(with_bg(c, f"load:fraction={fraction}:on=fabric"), [0, 1]) == alone


# 12 one-GPU nodes, 4 per leaf, one uplink per leaf (oversubscribed 4:1): the job (nodes
# 0-5) spans leaves 0 and 1; a second job on nodes 6-9 spans leaves 1 and 2, so both send up
# leaf 1's uplink; a job on nodes 8-11 stays inside leaf 2
RACKS = dict(topology="spine_leaf", levels=2, nics_per_leaf=4, oversubscription=4)
JOB = dict(model="gpt3-1.7b", tp=1, pp=1, dp=6, micro_batch=1, global_batch=6)


def test_a_second_job_across_a_shared_uplink_slows_the_step_and_is_reported():
    c = cluster(12, 1, **RACKS)
    spec = "all_reduce:size=1G:nodes=6-9:every=0s"
    base = replay(**JOB, cluster=c)
    got = replay(**JOB, cluster=c, background=(spec,))
    pt = got.details["perturbation"]
    assert pt["unperturbed_iteration_time_s"] == pytest.approx(base.iteration_time_s, rel=1e-9)
    assert got.iteration_time_s > base.iteration_time_s and pt["impact"] > 0.01
    bg = pt["background"][0]
    assert bg["spec"] == spec and bg["instances"] >= 1
    assert bg["mean_time_s"] > bg["alone_time_s"] > 0  # it was slowed by the job, too
    assert pt["slowed_operations"][0]["group_kind"] == "dp"


def test_a_second_job_on_links_of_its_own_changes_nothing():
    c = cluster(12, 1, **RACKS)
    base = replay(**JOB, cluster=c)
    got = replay(**JOB, cluster=c, background=("all_reduce:size=1G:nodes=8-11:every=0s",))
    assert got.iteration_time_s == base.iteration_time_s
    assert got.details["perturbation"]["background"][0]["instances"] >= 1


def test_a_cluster_spec_may_carry_background_traffic():
    c = cluster(12, 1, **RACKS)
    d = c.to_dict() | {"background": ["all_reduce:size=1G:nodes=6-9:every=5ms",
                                      "load:fraction=0.2:on=fabric"]}
    spec = cluster_from_dict(d)
    assert spec.background[0].ranks == (6, 7, 8, 9) and spec.background[0].every_ns == 5_000_000
    assert spec.background[1].fraction == 0.2
    assert cluster_from_dict(spec.to_dict()) == spec


def _cli(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracesim.cli", "replay", "--model", "gpt3-1.7b",
                           "--cluster", "h100x128", "--dp", "16", *flags], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("flags, words", [
    (["--background", "all_reduce:size=1G:nodes=2-99:every=1ms"], "outside 0..15"),
    (["--background", "all_reduce:size=1G:every=1ms"], "nodes= or gpus="),
    (["--background", "broadcast:size=1G:nodes=2-3:every=1ms"], "unknown background"),
    (["--background", "all_reduce:size=1X:nodes=2-3:every=1ms"], "bad size"),
    (["--background", "all_reduce:size=1G:nodes=2-3:every=1"], "bad duration"),
    (["--background", "load:fraction=1.5:on=fabric"], "fraction"),
    (["--background", "load:fraction=0.5:on=nic999"], "no link 'nic999'"),
    (["--background", "all_reduce:size=1G:nodes=2-3:every=1ms", "--network", "estimate"],
     "--network flow"),
])
def test_bad_background_options_exit_2_naming_the_option(flags, words):
    r = _cli(*flags)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "--background" in r.stderr and words in r.stderr, r.stderr


def test_background_traffic_stops_when_the_job_ends_or_stalls():
    from tests.helpers import graph
    from tracesim.engine.replay import replay as engine_replay
    from tracesim.errors import ReplayError
    from tracesim.network.model import NetworkModel

    c = with_bg(cluster(2, 2), "all_reduce:size=64M:gpus=1+3:every=1ms")

    def T(rank, dur, kind="cpu", name="op", **kw):
        return {"rank": rank, "lane": rank // 2, "kind": kind, "name": name, "dur_ns": dur, **kw}

    # a job of 5 ms of compute and one all-reduce: the background's 1 ms instances stop
    # after it (the replay returns), about 5 of them
    job = graph([T(0, 5_000_000), T(0, 0, "coll", "ar", collective="all_reduce", match_key="x", group=0, msg_bytes=1 << 20),
                 T(2, 5_000_000), T(2, 0, "coll", "ar", collective="all_reduce", match_key="x", group=0, msg_bytes=1 << 20)],
                groups=[(0, 2)])
    net = NetworkModel(c)
    res = engine_replay(job, net)
    assert res.makespan_ns > 5_000_000
    assert 4 <= net.background.jobs[0].instances <= 7
    # a collective with a missing member: an error, not a hang
    stuck = graph([T(0, 1000), T(0, 0, "coll", "ar", collective="all_reduce", match_key="x", group=0, msg_bytes=8)],
                  groups=[(0, 2)])
    with pytest.raises(ReplayError, match="deadlocked"):
        engine_replay(stuck, NetworkModel(c))
