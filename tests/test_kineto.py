"""The Kineto reader on every public trace, plus argument styles and bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tracesim.errors import InputError
from tracesim.trace.kineto import read_kineto
from tracesim.trace.schema import COLUMNS, read_op_table, write_op_table

KINETO_FILES = {
    # file: (min events, steps, has GPU kernels, has comm)
    "a100_2rank_nccl.json.gz": (20000, 3, True, True),
    "v100_1rank.json.gz": (40000, 5, True, True),
    "sampled_128rank_r0.json.gz": (4000, 2, True, True),
    "sampled_128rank_r1.json.gz": (4000, 2, True, True),
    "a100_alexnet_cuda_sync.json.gz": (500, 0, True, False),
    "a100_event_sync_multi_stream.json.gz": (40, 0, True, False),
    "a100_simple_add.trace.json.gz": (40, 0, True, False),
    "mi250_minitoy.json.gz": (100, 2, True, False),
}


@pytest.mark.parametrize("fname", sorted(KINETO_FILES))
def test_reads_every_public_trace(public_traces, fname, tmp_path):
    min_events, n_steps, gpu, comm = KINETO_FILES[fname]
    df = read_kineto(public_traces / fname)
    assert list(df.columns) == list(COLUMNS)
    assert len(df) >= min_events
    steps = {s for s in df["step"].unique() if s}
    assert len(steps) == n_steps
    assert (df["cat"] == "kernel").any() == gpu
    assert (df["op_class"] == "comm").any() == comm
    assert (df["dur_ns"] >= 0).all()
    # every kernel with a correlation id has its launching runtime call
    k = df[(df["cat"] == "kernel") & (df["correlation"] >= 0)]
    rt = set(df.loc[df["cat"] == "runtime", "correlation"])
    assert k["correlation"].isin(rt).mean() > 0.99
    # round trip through Parquet keeps everything, with the schema version
    write_op_table(df, tmp_path / "ops.parquet")
    back = read_op_table(tmp_path / "ops.parquet")
    assert back.shape == df.shape
    assert back["ts_ns"].tolist() == df["ts_ns"].tolist()


def test_hip_runtime_names(public_traces):
    df = read_kineto(public_traces / "mi250_minitoy.json.gz")
    assert df.loc[df["cat"] == "runtime", "name"].str.startswith("hip").all()
    kernels = df[df["cat"] == "kernel"]
    assert (kernels["step"] != "").all()


def test_nccl_sizes_and_phases(public_traces):
    df = read_kineto(public_traces / "a100_2rank_nccl.json.gz")
    nccl_k = df[(df["cat"] == "kernel") & df["name"].str.contains("ncclKernel_AllReduce")]
    assert len(nccl_k) > 0
    assert (nccl_k["collective"] == "all_reduce").all()
    assert (nccl_k["msg_bytes"] > 0).mean() > 0.9
    assert {"fwd", "bwd", "opt"} <= set(df["phase"])


def test_string_style_args(tmp_path):
    """Older traces store Input Dims / Input type as Python-literal strings."""
    trace = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0,
         "dur": 5.0, "args": {"Input Dims": "[[64, 32], [32, 16]]", "Input type": "['float', 'float']"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20.0,
         "dur": 5.0, "args": {"Input Dims": [[64, 32], [32, 16]], "Input type": ["float", "float"]}},
    ]}
    p = tmp_path / "t.json"
    p.write_text(json.dumps(trace))
    df = read_kineto(p)
    assert df["shapes"].iloc[0] == df["shapes"].iloc[1] == "[[64,32],[32,16]]"
    assert df["flops"].iloc[0] == df["flops"].iloc[1] == 2 * 64 * 32 * 16


def test_truncated_gzip(public_traces, tmp_path):
    data = (public_traces / "mi250_minitoy.json.gz").read_bytes()
    p = tmp_path / "cut.json.gz"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="cut.json.gz.*(truncated|corrupt)"):
        read_kineto(p)


def test_not_a_trace(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"hello": 1}')
    with pytest.raises(InputError, match="traceEvents"):
        read_kineto(p)


def test_an_execution_trace_is_named_as_one(tmp_path):
    """A PyTorch execution trace given where a Kineto trace belongs says what it is, on the
    json.load path and the streaming one (large files) alike."""
    from tracesim.trace.stream import load_trace_streaming

    et = Path(__file__).parent / "data/traces/astra-megatron-gpt-tp8-a100/et/megatron_et_0.json.gz"
    with pytest.raises(InputError, match="execution trace.*Kineto") as err:
        read_kineto(et)
    assert "traceEvents" in str(err.value)
    with pytest.raises(InputError, match="execution trace.*Kineto"):
        load_trace_streaming(et)
    p = tmp_path / "x.json"
    p.write_text('{"nodes": "not a list"}')
    with pytest.raises(InputError, match="no 'traceEvents' list"):
        read_kineto(p)


def test_invalid_json_names_line(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"traceEvents": [\n{"ph": "X",\n')
    with pytest.raises(InputError, match="line"):
        read_kineto(p)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="not found"):
        read_kineto(tmp_path / "nope.json")


def test_bad_event_field(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": "x"}]}))
    with pytest.raises(InputError, match=r"traceEvents\[0\]"):
        read_kineto(p)


def test_gzip_plain_equivalent(tmp_path):
    trace = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1,
                              "tid": 1, "ts": 1.5, "dur": 2.25}]}
    a = tmp_path / "a.json"
    a.write_text(json.dumps(trace))
    b = tmp_path / "b.json.gz"
    with gzip.open(b, "wt") as fh:
        json.dump(trace, fh)
    da, db = read_kineto(a), read_kineto(b)
    assert da.equals(db)
    assert da["ts_ns"].iloc[0] == 1500 and da["dur_ns"].iloc[0] == 2250


def test_reads_op_tables_of_schema_1(public_traces, tmp_path):
    """Op tables written before the communication columns were added still load."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    df = read_kineto(public_traces / "mi250_minitoy.json.gz")
    old = df.drop(columns=["pg", "comm_seq", "group_source", "group_kind", "comm_meta"])
    table = pa.Table.from_pandas(old, preserve_index=False)
    table = table.replace_schema_metadata({b"tracesim.schema_version": b"1"})
    pq.write_table(table, tmp_path / "v1.parquet")
    back = read_op_table(tmp_path / "v1.parquet")
    assert set(COLUMNS) <= set(back.columns)
    assert (back["comm_seq"] == -1).all() and (back["comm_meta"] == "").all()
    table = table.replace_schema_metadata({b"tracesim.schema_version": b"99"})
    pq.write_table(table, tmp_path / "v99.parquet")
    with pytest.raises(InputError, match="schema 99"):
        read_op_table(tmp_path / "v99.parquet")


def test_hip_devices_are_ordinals(public_traces):
    """On HIP traces a GPU's pid is its HSA agent index (CPU agents first)."""
    df = read_kineto(public_traces / "tracelens-mi300x-resnet-actckpt/resnet_act_checkpoint.json.gz")
    assert set(df.loc[df["cat"] == "kernel", "device"]) == {"0"}


def test_a_step_alone_on_its_thread_marks_the_busiest_thread(tmp_path):
    """``ProfilerStep#1`` recorded on a thread with no other event (HTA's triton example
    has one) marks the work of the busiest host thread instead of nothing."""
    def op(name, tid, ts, dur, cat="cpu_op"):
        return {"ph": "X", "cat": cat, "name": name, "pid": tid, "tid": tid, "ts": ts, "dur": dur,
                "args": {}}
    events = [op("ProfilerStep#1", 9, 100.0, 50.0, "user_annotation"),
              op("aten::add", 5, 110.0, 5.0), op("aten::mul", 5, 120.0, 5.0),
              op("aten::empty", 6, 130.0, 1.0)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    from tracesim.trace.sources import load_source

    df = load_source(p).op_table  # a single trace file, as replay reads it
    step = df[df["name"] == "ProfilerStep#1"]
    assert len(step) == 1 and step["lane"].iat[0] == df.loc[df["name"] == "aten::add", "lane"].iat[0]
    assert "ProfilerStep#0" not in set(df["name"])  # not the whole-window step
    assert set(df.loc[df["name"].str.startswith("aten::add"), "step"]) == {"ProfilerStep#1"}
