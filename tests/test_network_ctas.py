"""NCCL CTA caps per communicator (``collectives.max_ctas``): the spec's Megatron-Core names,
capped transfers and collectives at CTAs x NCCL's per-channel bandwidth, the SMs an
overlapped collective takes, and the MLPerf rows' caps."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import simpy

from tracesim.build.overlap import NCCL_SMS, Overlaps
from tracesim.catalog import load_cluster
from tracesim.errors import InputError
from tracesim.network.ctas import SIMPLE_PER_CHANNEL, bus_factor, channel_busbw
from tracesim.network.model import NetworkModel
from tracesim.options import ReplayOptions
from tracesim.pipeline.published import table_rows
from tracesim.pipeline.run import predict
from tracesim.specs.cluster import cluster_from_dict
from tracesim.specs.collectives import collectives_from_dict

ROOT = Path(__file__).resolve().parents[1]
B200 = load_cluster("dgx-b200")
H100 = load_cluster("h100x8")


def _capped(cluster, **caps):
    return cluster.replace(collectives=dataclasses.replace(
        cluster.collectives, max_ctas=tuple(sorted(caps.items()))))


def _time_ns(cluster, op, *args, kind="") -> int:
    env = simpy.Environment()
    net = NetworkModel(cluster)
    net.attach(env)
    ev = net.p2p(*args, group_kind=kind) if op == "p2p" else net.collective(op, *args, group_kind=kind)
    env.run(until=ev)
    return int(env.now)


def test_megatron_file_blocks_numbers_and_names():
    got = collectives_from_dict({"max_ctas": {
        "dp": {"cga_cluster_size": 4, "min_ctas": 1, "max_ctas": 8}, "dp_cp": {"max_ctas": 4},
        "cp": 1, "pp": {"max_ctas": 2}, "tp": {"cga_cluster_size": 4}, "mp": 2, "embd": 2}}, "f.yaml")
    # dp_cp carries the gradients (dp only where dp_cp is absent); blocks without max_ctas
    # and communicators tracesim runs nothing on are left out
    assert got.max_ctas == (("cp", 1), ("dpcp", 4), ("emb", 2), ("pp", 2))
    assert got.ctas("cp") == 1 and got.ctas("tp") is None
    assert collectives_from_dict({"max_ctas": {"dp": 8}}, "f.yaml").ctas("dpcp") == 8


@pytest.mark.parametrize("caps, where", [
    ({"foo": 1}, "collectives.max_ctas.foo"),
    ({"cp": 0}, "collectives.max_ctas.cp"),
    ({"cp": 1.5}, "collectives.max_ctas.cp"),
    ({"cp": {"max_ctas": True}}, "collectives.max_ctas.cp.max_ctas"),
    ({"cp": {"maxctas": 1}}, "collectives.max_ctas.cp.maxctas"),
    ([1], "collectives.max_ctas"),
])
def test_bad_caps_name_the_field(caps, where):
    with pytest.raises(InputError) as e:
        collectives_from_dict({"max_ctas": caps}, "f.yaml")
    assert where in str(e.value) and "f.yaml" in str(e.value)


def test_caps_survive_the_spec_round_trip():
    spec = _capped(B200, cp=1, dpcp=8, emb=2)
    back = cluster_from_dict(spec.to_dict(), "x.yaml")
    assert back.collectives.max_ctas == spec.collectives.max_ctas
    assert spec.to_dict()["collectives"]["max_ctas"] == {"cp": 1, "dp_cp": 8, "embd": 2}


def test_one_cta_transfer_moves_one_channels_bandwidth():
    n = 700_000_000
    free = _time_ns(B200, "p2p", 0, 1, n, kind="cp")
    one = _time_ns(_capped(B200, cp=1), "p2p", 0, 1, n, kind="cp")
    # NCCL's per-channel Simple ceiling on one Blackwell node: 70 GB/s
    assert channel_busbw("blackwell", 1) == 70.0
    assert one == pytest.approx(n / 70.0, rel=0.01)
    assert one > 5 * free
    # a transfer of another communicator, and one the cap does not bind, are unchanged
    assert _time_ns(_capped(B200, cp=1), "p2p", 0, 1, n, kind="pp") == free
    assert _time_ns(_capped(B200, cp=64), "p2p", 0, 1, n, kind="cp") == free


def test_capped_collective_bus_bandwidth():
    ranks, n = tuple(range(8)), 1 << 30
    free = _time_ns(H100, "all_reduce", ranks, n, kind="dpcp")
    t = _time_ns(_capped(H100, dpcp=2), "all_reduce", ranks, n, kind="dpcp")
    cap = 2 * SIMPLE_PER_CHANNEL["hopper"][0]
    busbw = n * bus_factor("all_reduce", 8) / t
    assert busbw == pytest.approx(cap, rel=0.02)  # latency is a small part at 1 GiB
    assert t > free
    assert bus_factor("all_gather", 4) == 0.75 and bus_factor("send_recv", 2) == 1.0


def test_userbuffers_transfers_are_not_capped():
    ranks, n = (0, 1, 2, 3), 64 << 20
    out = []
    for spec in (H100, _capped(H100, tp=1)):
        env = simpy.Environment()
        net = NetworkModel(spec)
        net.attach(env)
        env.run(until=net.collective("all_gather", ranks, n, "tp", algorithm="userbuffers"))
        out.append(env.now)
    assert out[0] == out[1]
    # the same collective run by NCCL is capped
    assert _time_ns(_capped(H100, tp=1), "all_gather", ranks, n, kind="tp") > _time_ns(
        H100, "all_gather", ranks, n, kind="tp")


def test_overlapped_collective_takes_its_ctas_sms():
    ov = Overlaps(interference=True, sm_count=132, ctas=(("cp", 1), ("dpcp", 8), ("tp", 32)))
    assert ov.nccl_sms("dpcp") == 8 and ov.nccl_sms("cp") == 1
    assert ov.nccl_sms("tp") == NCCL_SMS and ov.nccl_sms("ep") == NCCL_SMS
    assert ov.slowed(1000, ov.nccl_sms("dpcp")) < ov.slowed(1000, NCCL_SMS)


def test_mlperf_rows_carry_their_runs_caps():
    table = ROOT / "benchmarks/published/mlperf_training_llama31_8b.csv"
    rows = list(table_rows([table], lambda lb: "32 GPUs" in lb))
    opts = rows[0][4]
    assert opts["cluster"].collectives.max_ctas == (("cp", 1), ("dpcp", 8), ("emb", 2),
                                                   ("pp", 2), ("tp", 8))
    capped = predict(None, ReplayOptions.from_mapping(opts, table, "row"))
    free = predict(None, ReplayOptions.from_mapping(
        {**opts, "cluster": opts["cluster"].replace(collectives=dataclasses.replace(
            opts["cluster"].collectives, max_ctas=()))}, table, "row"))
    # one CTA for the ring attention's key / value exchange: more of it exposed
    ex_c, ex_f = capped.breakdown["exposed_comm_s"], free.breakdown["exposed_comm_s"]
    assert ex_c.get("cp", 0.0) > 3 * ex_f.get("cp", 0.0) > 0
    assert capped.iteration_time_s > free.iteration_time_s


def test_bad_row_cell_exits_2(tmp_path):
    table = ROOT / "benchmarks/published/mlperf_training_llama31_8b.csv"
    text = table.read_text().splitlines()
    bad = tmp_path / "t.csv"
    bad.write_text("\n".join([text[0], text[1].replace("cp=1", "cp=one")]) + "\n")
    with pytest.raises(InputError) as e:
        list(table_rows([bad], None))
    assert "row 2: max_ctas" in str(e.value)


def test_the_option_takes_pairs_or_megatrons_file(tmp_path):
    cfg = tmp_path / "custom_communicator_cta.yaml"
    cfg.write_text("dp:\n  cga_cluster_size: 4\n  min_ctas: 1\n  max_ctas: 8\ncp:\n  max_ctas: 1\n")
    base = {"model": "llama3-8b", "cluster": "dgx-b200", "nodes": 4, "tp": 1, "cp": 2, "dp": 16,
            "micro_batch": 1, "global_batch": 16, "seq_len": 8192, "dtype": "fp8"}
    runs = [predict(None, ReplayOptions.from_mapping({**base, **extra})) for extra in
            ({}, {"nccl_max_ctas": "dp_cp=8,cp=1"}, {"nccl_max_ctas": str(cfg)})]
    assert runs[1].iteration_time_s == runs[2].iteration_time_s > runs[0].iteration_time_s
    assert runs[1].to_dict()["replay"]["nccl_max_ctas"] == {"cp": 1, "dp_cp": 8}
    for bad, where in (("cp=0", "--nccl-max-ctas: cp"), ("foo=1", "--nccl-max-ctas: foo"),
                       ("cp=x", "--nccl-max-ctas"), (str(tmp_path / "no.yaml"), "no.yaml")):
        with pytest.raises(InputError) as e:
            predict(None, ReplayOptions.from_mapping({**base, "nccl_max_ctas": bad}))
        assert where in str(e.value)


def test_chunked_operations_are_capped_per_chunk():
    ranks, n = tuple(range(8)), 1 << 30
    spec = _capped(H100, tp=2)
    times = []
    for chunks in (1, 4):
        env = simpy.Environment()
        net = NetworkModel(spec)
        net.attach(env)
        env.run(until=net.collective("all_gather", ranks, n, "tp", chunks=chunks))
        times.append(env.now)
    one = _time_ns(spec, "all_gather", ranks, n // 4, kind="tp")
    assert times[1] == pytest.approx(4 * one, rel=1e-6)
    # each chunk at the cap: 4 chunks take about the whole message's time at the cap
    assert times[1] == pytest.approx(times[0], rel=0.05)
