"""``tracesim netbench`` (nccl-tests style table / JSON) and the ASTRA-sim network import."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tracesim.catalog import load_cluster
from tracesim.cli import cli
from tracesim.errors import InputError
from tracesim.interop.astrasim_network import cluster_from_astrasim
from tracesim.network.bench import bench_ranks, bus_factor, parse_sizes
from tracesim.network.model import collective_time_ns
from tracesim.network.protocols import BASE_LATENCY_US, HW_LATENCY_US

ASTRA_3D = """\
# 3D topology with 64 NPUs (2 x 8 x 4)
topology: [ Ring, FullyConnected, Switch ]
npus_count: [ 2, 8, 4 ]
bandwidth: [ 200.0, 100.0, 50.0 ]  # GB/s
latency: [ 50.0, 500.0, 2000.0 ]  # ns
"""


def run(*args):
    return CliRunner().invoke(cli, list(args), obj={})


def test_json_shape_and_consistency():
    res = run("netbench", "--cluster", "h100x8", "--collective", "all_reduce", "--ranks", "8",
              "--sizes", "1M,1G", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [r["size_bytes"] for r in out["rows"]] == [1 << 20, 1 << 30]
    for r in out["rows"]:
        assert set(r) >= {"collective", "ranks", "algo", "size_bytes", "time_s", "algbw_GBps",
                          "busbw_GBps"}
        assert r["collective"] == "all_reduce" and r["ranks"] == 8
        assert r["algbw_GBps"] == pytest.approx(r["size_bytes"] / r["time_s"] / 1e9)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * 7 / 8)
    assert out["rows"][1]["algo"] == "nvls"
    assert out["rows"][1]["busbw_GBps"] == pytest.approx(476, rel=0.10)


def test_table_output_and_cross_node_ranks():
    res = run("netbench", "--cluster", "h100x128", "--ranks", "2", "--nodes", "2",
              "--sizes", "8:8G:1024")
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert lines[0].startswith("# tracesim netbench: all_reduce on 2 ranks of h100x128 (2 node(s)")
    assert "busbw(GB/s)" in lines[1]
    rows = [ln.split() for ln in lines[2:]]
    assert [int(r[0]) for r in rows] == [8, 8 << 10, 8 << 20, 8 << 30]
    busbw = [float(r[3]) for r in rows]
    assert busbw == sorted(busbw)
    assert busbw[-1] == pytest.approx(47, rel=0.10)  # one 400 Gb/s NIC


@pytest.mark.parametrize("coll", ["all_gather", "reduce_scatter", "all_to_all", "broadcast",
                                  "reduce", "send_recv"])
def test_other_collectives_run(coll):
    res = run("netbench", "--cluster", "h100x8", "--collective", coll, "--sizes", "1G", "--json")
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.output)["rows"]
    assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * bus_factor(coll, 8))
    assert 100 < row["busbw_GBps"] < 450


@pytest.mark.parametrize("args, needle", [
    (["--cluster", "nosuch"], "unknown cluster"),
    (["--cluster", "h100x8", "--ranks", "9"], "--ranks"),
    (["--cluster", "h100x8", "--sizes", "12Q"], "--sizes"),
    (["--cluster", "h100x8", "--sizes", "8G:1M"], "--sizes"),
    (["--cluster", "h100x8", "--algo", "tree"], "--algo"),
    (["--cluster", "h100x8", "--algo", "warp"], "--algo"),
    (["--cluster", "h100x128", "--ranks", "24", "--nodes", "5"], "--nodes"),
    (["--cluster", "h100x8", "--ranks", "1"], "2 or more ranks"),
    (["--cluster", "host-cpu"], "has one GPU"),
])
def test_bad_input_exits_2_with_one_line(args, needle):
    res = run("netbench", *args)
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracesim: error:") and needle in lines[0]


def test_bad_cluster_file_exits_2(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text(
        "name: bad\nnodes: 1\ngpus_per_node: 8\ndevice: h100\n"
        "intra_node: {kind: nvswitch, bandwidth_GBps: -450, latency_us: 0.6}\n"
    )
    res = run("netbench", "--cluster", str(p))
    assert res.exit_code == 2
    assert f"{p}: intra_node.bandwidth_GBps" in res.output


def test_parse_sizes_and_ranks():
    assert parse_sizes("8,1K,2M,1G") == [8, 1024, 2 << 20, 1 << 30]
    assert parse_sizes("1K:16K") == [1024, 2048, 4096, 8192, 16384]
    assert parse_sizes("8:8G:1024") == [8, 8 << 10, 8 << 20, 8 << 30]
    assert parse_sizes("64KiB,1MB") == [64 << 10, 1 << 20]
    with pytest.raises(InputError):
        parse_sizes("1.5")
    c = load_cluster("h100x128")
    assert bench_ranks(c, 4, 2) == (0, 1, 8, 9)
    assert bench_ranks(c, None, None) == tuple(range(128))


# ------------------------------------------------------------------ ASTRA-sim import


def test_astrasim_network_config_imports(tmp_path):
    p = tmp_path / "network.yml"
    p.write_text(ASTRA_3D)
    c = cluster_from_astrasim(p)
    assert (c.nodes, c.gpus_per_node, c.gpus) == (32, 2, 64)
    assert c.intra_node.kind == "nvlink_ring" and c.intra_node.bandwidth_GBps == 200.0
    assert c.intra_node.latency_us == pytest.approx(0.05)
    inter = c.inter_node
    assert inter.nic_Gbps == 800.0 and inter.nics_per_node == 2
    assert inter.topology == "rail_optimized" and inter.nics_per_leaf == 8 and inter.levels == 2
    assert inter.oversubscription == 2.0 and inter.switch_latency_us == pytest.approx(2.0)
    assert inter.latency_us == pytest.approx(1.0)
    # load_cluster recognises the format
    assert load_cluster(p) == c
    # and netbench runs on it
    res = run("netbench", "--cluster", str(p), "--sizes", "1M", "--json")
    assert res.exit_code == 0, res.output


def test_astrasim_single_switch_dimension_matches_ring_formula(tmp_path):
    p = tmp_path / "switch.yml"
    p.write_text("topology: [Switch]\nnpus_count: [8]\nbandwidth: [50.0]\nlatency: [500.0]\n")
    c = cluster_from_astrasim(p)
    assert c.nodes == 1 and c.intra_node.kind == "nvswitch"
    # ring default calibration: efficiency 0.80; 64 MiB runs NCCL's Simple protocol: its base
    # latency once, and per step the path (2 links x 0.5 us) plus Simple's NVLink latency
    # over LL's (tracesim.network.protocols)
    n, s = 8, 1 << 26
    extra = (HW_LATENCY_US["nvlink"]["ring"][2] - HW_LATENCY_US["nvlink"]["ring"][0]) * 1000.0
    a, b = 1000.0 + extra, 0.8 * 50.0
    base = BASE_LATENCY_US["ring"][2] * 1000.0
    t = collective_time_ns(c, "all_reduce", n, s, "ring")
    assert t == pytest.approx(base + 2 * (n - 1) * (a + s / (n * b)), rel=0.01)


@pytest.mark.parametrize("text, where", [
    ("topology: [Switch, Mesh]\nnpus_count: [8, 2]\nbandwidth: [1, 1]\nlatency: [1, 1]\n", "topology[1]"),
    ("topology: [Switch]\nnpus_count: [8, 2]\nbandwidth: [1]\nlatency: [1]\n", "npus_count"),
    ("topology: [Switch]\nnpus_count: [0]\nbandwidth: [1]\nlatency: [1]\n", "npus_count[0]"),
    ("topology: [Switch]\nnpus_count: [8]\nbandwidth: [-1]\nlatency: [1]\n", "bandwidth[0]"),
    ("topology: [Switch, Switch, Switch, Switch]\nnpus_count: [2, 2, 2, 2]\n"
     "bandwidth: [1, 1, 1, 1]\nlatency: [1, 1, 1, 1]\n", "topology"),
    ("topology: [Switch]\nnpus_count: [8]\nbandwidth: [1]\nlatency: [1]\nfoo: 1\n", "foo"),
])
def test_astrasim_bad_configs(tmp_path, text, where):
    p = tmp_path / "n.yml"
    p.write_text(text)
    with pytest.raises(InputError) as err:
        load_cluster(p)
    assert err.value.where == where and err.value.file == str(p)


def test_nodes_beyond_a_one_node_spec_scale_it():
    """--nodes on a one-node spec with an inter-node fabric scales it, as replay --nodes does;
    a spec without one refuses."""
    from tracesim.api import netbench

    res = netbench("mi300x-platform", "all_reduce", 16, 2, "4G")
    assert res.nodes == 2 and res.rows[0]["busbw_GBps"] == pytest.approx(372.8, abs=0.1)
    with pytest.raises(InputError, match="spread evenly"):
        netbench("h100x8", "all_reduce", 16, 3, "1G")  # scaled to 3 nodes; 16 do not split
    with pytest.raises(InputError, match="host-cpu has 1 GPUs"):
        netbench("host-cpu", "all_reduce", 2, 2, "1M")  # no inter-node fabric: not scaled
