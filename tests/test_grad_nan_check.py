"""Megatron-Core's NaN check of each gradient bucket (``check_for_nan_in_grad``): the bucket's
norm on the compute stream and two host syncs before its reduction (tracesim.build.dpsync)."""

from __future__ import annotations

import numpy as np
import pytest

from tracesim.build.dpsync import NAN_CHECK
from tracesim.build.host import LAUNCH_US_BWD, SYNC_US
from tracesim.options import ReplayOptions
from tracesim.pipeline.build import build
from tracesim.pipeline.run import predict

BASE = {"model": "llama3-8b", "cluster": "h100x128", "micro_batch": 1, "seq_len": 2048,
        "tp": 4, "pp": 1, "dp": 4, "global_batch": 8, "host_launch": True,
        "grad_reduce_fp32": True}
H100_HBM = 3350e9  # bytes/s, the datasheet's peak


def _opts(**kw):
    return ReplayOptions.from_mapping({k: v for k, v in {**BASE, **kw}.items() if v is not None})


def _graph(**kw):
    return build(None, _opts(**kw), per_op=True).built.graph


def _rank0(graph, lane: str = "compute"):
    t = graph.tasks
    lanes = graph.lanes.set_index("lane")["name"]
    sel = (np.asarray(t["rank"]) == 0) & (lanes[np.asarray(t["lane"])].to_numpy().astype(str) == lane)
    return t[sel]


def test_each_bucket_costs_its_norm_and_two_host_syncs() -> None:
    off, on = _graph(), _graph(grad_nan_check=True)
    added_s = (_rank0(on)["dur_ns"].sum() - _rank0(off)["dur_ns"].sum()) / 1e9
    rs = _rank0(off, "comm:dp")
    buckets = int((rs["name"] == "dp.reduce_scatter").sum())
    grad_bytes = float(rs["msg_bytes"].sum())  # fp32 gradients, each bucket read once by its norm
    assert buckets >= 10
    # per bucket at least: two syncs and the three launches the GPU waits for after them
    # (the second test, the reduction, the next backward kernel); the norm at most the
    # datasheet's HBM rate, and at least a quarter of it
    host = buckets * (2 * SYNC_US + 3 * LAUNCH_US_BWD) * 1e-6
    assert host + grad_bytes / H100_HBM < added_s < host + 4 * grad_bytes / H100_HBM + buckets * 20e-6


def test_each_sync_costs_the_gpu_a_sync_and_a_launch() -> None:
    base = _rank0(_graph())["dur_ns"].sum()
    added = [_rank0(_graph(grad_nan_check=True, grad_nan_syncs=n))["dur_ns"].sum() - base
             for n in (0, 1, 2)]
    buckets = int((_rank0(_graph(), "comm:dp")["name"] == "dp.reduce_scatter").sum())
    # Megatron-Core 0.10 / 0.11 with the rerun state machine disabled: the norm alone, no
    # idle; each sync more: the sync, the launch after it, and a one-element test kernel
    norm = added[0]
    assert 0 < norm
    first = (added[1] - norm) / buckets / 1e3  # us per bucket
    assert SYNC_US + 2 * LAUNCH_US_BWD <= first < SYNC_US + 2 * LAUNCH_US_BWD + 10
    second = (added[2] - added[1]) / buckets / 1e3
    assert SYNC_US + LAUNCH_US_BWD <= second < SYNC_US + LAUNCH_US_BWD + 10


def test_syncs_outside_megatron_cores_range_or_without_the_check_exit_2() -> None:
    from tracesim.errors import InputError
    with pytest.raises(InputError, match="grad.nan.syncs"):
        _graph(grad_nan_check=True, grad_nan_syncs=3)
    with pytest.raises(InputError, match="grad_nan_syncs needs grad_nan_check"):
        _graph(grad_nan_syncs=1)


def test_with_one_stage_the_step_grows_by_the_checks() -> None:
    # one node: the reductions (NVLink) finish within the backward, whose compute the
    # checks lengthen on the critical path (over two nodes they would hide in the
    # reductions' tail)
    node = {"cluster": "h100x8", "dp": 2, "global_batch": 4, "seq_len": 8192}
    opts_on, opts_off = _opts(grad_nan_check=True, **node), _opts(**node)
    on, off = _rank0(_graph(grad_nan_check=True, **node)), _rank0(_graph(**node))
    added = (on["dur_ns"].sum() - off["dur_ns"].sum()) / 1e9
    grown = predict(None, opts_on).iteration_time_s - predict(None, opts_off).iteration_time_s
    assert added > 0
    assert grown == pytest.approx(added, rel=0.1)


def test_after_the_backward_without_overlapped_reduction() -> None:
    g = _graph(grad_nan_check=True, dp_overlap=False)
    t = g.tasks
    check = t[(t["name"] == NAN_CHECK)]
    assert len(check) == 4 * 4  # one task a rank, every rank
    ids = set(check["task_id"].tolist())
    names = dict(zip(t["task_id"].tolist(), t["name"].astype(str).tolist(), strict=True))
    waits = {names[int(d)] for s, d in zip(g.edges["src"], g.edges["dst"], strict=True) if int(s) in ids}
    assert waits == {"dp.reduce_scatter"}
    assert not (_graph(dp_overlap=False).tasks["name"] == NAN_CHECK).any()


def test_nothing_without_data_parallelism() -> None:
    one = {"dp": 1, "global_batch": 2}
    a, b = _rank0(_graph(**one)), _rank0(_graph(grad_nan_check=True, **one))
    assert a["dur_ns"].sum() == b["dur_ns"].sum()


def test_the_report_names_the_check() -> None:
    from tracesim.api import replay
    small = {"model": "llama3-8b", "cluster": "h100x8", "tp": 4, "dp": 2, "micro_batch": 1,
             "global_batch": 4, "seq_len": 1024}
    on = replay(**small, grad_nan_check=True, grad_nan_syncs=1).to_dict()["stack"]
    assert on["grad_nan_check"] == {"syncs_per_bucket": 1}
    assert "grad_nan_check" not in replay(**small).to_dict()["stack"]


ROW = "DGX-H100,llama3-8b,16,bf16,16,1,4096,0,4,1,1,,1,4,1.0"


def _table_opts(tmp_path, columns: str, *cells: str) -> list[dict]:
    """The replay options of a one-table run whose rows end with ``cells`` under ``columns``."""
    from tracesim.pipeline.published import table_rows
    head = "system,model,gpus,precision,gbs,mbs,seq_len,fsdp,tp,pp,cp,vp,ep,ga,step_time_s"
    table = tmp_path / "runs.csv"
    table.write_text(f"{head},{columns}\n" + "".join(f"{ROW},{c}\n" for c in cells))
    return [o for *_, o, _, _ in table_rows([table], None)]


def test_a_table_row_may_say_grad_nan_check(tmp_path) -> None:
    from tracesim.errors import InputError
    opts = _table_opts(tmp_path, "grad_nan_check", "true", "")
    assert opts[0]["grad_nan_check"] is True and "grad_nan_check" not in opts[1]
    opts = _table_opts(tmp_path, "grad_nan_check,grad_nan_syncs", "true,0", "false,1")
    assert opts[0]["grad_nan_syncs"] == 0 and "grad_nan_syncs" not in opts[1]
    with pytest.raises(InputError, match="grad_nan_check"):
        _table_opts(tmp_path, "grad_nan_check", "maybe")


def test_a_table_row_may_give_its_bucket_size(tmp_path) -> None:
    from tracesim.errors import InputError
    opts = _table_opts(tmp_path, "bucket_params", "768000000", "")
    assert opts[0]["bucket_params"] == 768_000_000 and "bucket_params" not in opts[1]
    with pytest.raises(InputError, match="bucket_params"):
        _table_opts(tmp_path, "bucket_params", "big")
