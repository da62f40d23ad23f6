"""Communication metadata of extracted graphs: collective, size, dtype, group, peer, joined
from ``record_param_comms`` and the ops around a launch to the kernel, with the kernel name as
the fallback; matching across ranks by process group, sequence and peer."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tracesim.engine.replay import replay
from tracesim.trace.comms import collective_from_kernel, group_kind_of, kernel_comm
from tracesim.trace.extract import extract
from tracesim.trace.kineto import read_kineto
from tracesim.trace.rankgraph import ExtractOptions
from tracesim.trace.sources import load_source

DATA = Path(__file__).resolve().parent / "data" / "traces"


def _write(tmp_path: Path, events: list[dict], rank: int = 0, world: int = 8, name: str = "t",
           **top) -> Path:
    p = tmp_path / f"{name}{rank}.json"
    ev = [{"ph": "X", "pid": 1, "tid": 1, **e} for e in events]
    p.write_text(json.dumps({"traceEvents": ev, "distributedInfo": {"rank": rank, "world_size": world},
                             **top}))
    return p


def _launch(ts: float, corr: int, kernel: str, stream: int = 20, dur: float = 50.0) -> list[dict]:
    return [{"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 2,
             "args": {"correlation": corr}},
            {"cat": "kernel", "name": kernel, "pid": 0, "tid": stream, "ts": ts + 5, "dur": dur,
             "args": {"correlation": corr, "stream": stream, "device": 0}}]


def _nccl(ts: float, corr: int, rpc: dict, kernel: str, op: str = "c10d::allreduce_",
          ann: str = "nccl:all_reduce", dims: list | None = None, types: list | None = None,
          stream: int = 20) -> list[dict]:
    """c10d op > record_param_comms > nccl:<op> annotation > launch of the NCCL kernel."""
    inner = {"Input Dims": dims or [], "Input type": types or []}
    return [{"cat": "cpu_op", "name": op, "ts": ts, "dur": 30, "args": dict(inner)},
            {"cat": "cpu_op", "name": "record_param_comms", "ts": ts + 1, "dur": 28, "args": rpc},
            {"cat": "user_annotation", "name": ann, "ts": ts + 2, "dur": 20, "args": dict(inner)},
            *_launch(ts + 3, corr, kernel, stream)]


def _comm_kernels(ops: pd.DataFrame) -> pd.DataFrame:
    return ops[(ops["cat"] == "kernel") & (ops["op_class"] == "comm")].reset_index(drop=True)


def test_record_param_comms_metadata_reaches_the_kernel(tmp_path):
    ranks30 = str(list(range(0, 60, 2))[:30])  # the recorded list stops after 30 ranks
    ag = {"Collective name": "_allgather_base", "In msg nelems": 100, "Out msg nelems": 3200,
          "dtype": "BFloat16", "Group size": 32, "Process Group Ranks": ranks30,
          "Global rank start": 0, "Global rank stride": 2, "Process Group Name": "3",
          "Process Group Description": "mesh_tp", "Seq": 12}
    send = {"Collective name": "send", "In msg nelems": 10, "Out msg nelems": 10, "dtype": "Float",
            "Group size": 2, "Process Group Ranks": "[4, 5]", "Rank": 1, "Dst Rank": 5}
    recv = {"Collective name": "recv", "In msg nelems": 10, "Out msg nelems": 10, "dtype": "Float",
            "Group size": 2, "Process Group Ranks": "[4, 5]", "Rank": 1}
    wait = {"Collective name": "wait", "In msg nelems": 0, "dtype": "Byte", "Group size": 1}
    ev = (_nccl(0, 1, ag, "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                "c10d::_allgather_base_", "nccl:_all_gather_base")
          + [{"cat": "cpu_op", "name": "record_param_comms", "ts": 40, "dur": 2, "args": wait}]
          + _nccl(100, 2, send, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
                  "c10d::send", "nccl:send 4->5")
          + _nccl(200, 3, recv, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
                  "c10d::recv_", "nccl:recv 4<-5"))
    k = _comm_kernels(read_kineto(_write(tmp_path, ev, rank=4, world=64)))
    assert k["collective"].tolist() == ["all_gather", "send", "recv"]
    assert k["msg_bytes"].tolist() == [3200 * 2, 40, 40]  # all_gather: the gathered output
    assert json.loads(k.at[0, "group_ranks"]) == list(range(0, 64, 2))  # start / stride
    assert (k.at[0, "pg"], k.at[0, "comm_seq"], k.at[0, "group_kind"]) == ("3", 12, "tp")
    assert k["dtype"].tolist() == ["BFloat16", "Float", "Float"]
    assert k["peer"].tolist() == [-1, 5, 5]  # Dst Rank; a group rank mapped to the global one
    assert set(k["comm_meta"]) == {"full"} and set(k["group_source"]) == {"recorded"}


def test_older_traces_concrete_inputs_and_shapes(tmp_path):
    """PyTorch ~2.2: record_param_comms has only Concrete Inputs [tensors, seq, pg, rank, '',
    in_split, out_split, group size]; the collective and size come from the ops around it."""
    rpc = {"Concrete Inputs": ["", "337", "93825114103440", "1", "", "[]", "[]", "8"],
           "Input type": ["TensorList", "Scalar", "Scalar", "Scalar", "", "ScalarList",
                          "ScalarList", "Scalar"], "Input Dims": [[[4, 2048]], [], [], [], [], [], [], []]}
    ev = _nccl(0, 1, rpc, "ncclDevKernel_AllReduce_Sum_f16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
               dims=[[4, 2048]], types=["c10::Half"])
    k = _comm_kernels(read_kineto(_write(tmp_path, ev, rank=9, world=16)))
    assert (k.at[0, "collective"], k.at[0, "msg_bytes"], k.at[0, "dtype"]) == ("all_reduce", 4 * 2048 * 2, "Half")
    assert k.at[0, "comm_seq"] == 337 and k.at[0, "group_source"] == "size"
    # only the size (8) is known: a plausible group, the block of 8 ranks holding rank 9
    assert json.loads(k.at[0, "group_ranks"]) == list(range(8, 16))


def test_kernel_name_is_the_fallback(tmp_path):
    ev = (_launch(0, 1, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)")
          + _launch(100, 2, "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)")
          + _launch(200, 3, "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"))
    ops = read_kineto(_write(tmp_path, ev, world=4))
    k = _comm_kernels(ops)
    assert k["collective"].tolist() == ["all_reduce", "reduce_scatter", ""]
    assert k["dtype"].tolist() == ["Float", "BFloat16", ""]
    assert k["comm_meta"].tolist() == ["kernel_name", "kernel_name", "none"]
    assert (k["msg_bytes"] == 0).all() and set(k["group_source"]) == {"world"}
    g = extract(ops)
    cm = g.meta["comm_metadata"]
    assert (cm["tasks"], cm["kernel_name"], cm["none"], cm["size_unknown"]) == (3, 2, 1, 3)
    assert cm["group_source"]["world"] == 3 and cm["groups_assumed"] == [0]
    assert g.groups == ((0, 1, 2, 3),)


@pytest.mark.parametrize(("name", "coll", "dtype"), [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "all_reduce", "Float"),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "broadcast", ""),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "send", ""),
    ("ncclDevKernel_AllReduce_Sum_f16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce", "Half"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather", ""),
    ("ncclDevKernel_Reduce_Sum_bf16_TREE_LL128", "reduce", "BFloat16"),
    ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", "", ""),
    ("void at::native::vectorized_elementwise_kernel<4>", "", ""),
])
def test_kernel_names(name, coll, dtype):
    assert kernel_comm(name) == (coll, dtype)


def test_group_kinds_and_legacy_names():
    assert [group_kind_of(d) for d in ("mesh_tp", "mesh_dp_shard", "TENSOR_MODEL_PARALLEL_GROUP",
                                       "DATA_PARALLEL_GROUP_WITH_CP", "default_pg", "undefined")] == \
        ["tp", "dp", "tp", "dp", "", ""]
    assert collective_from_kernel("foo") == "other"


def test_rccl_kernels_join_through_the_launch_flow(tmp_path):
    """ROCm: the RCCL kernel's launch call is not traced; its ac2g flow start is inside the
    record_param_comms that describes it."""
    rpc = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000,
           "dtype": "BFloat16", "Group size": 8, "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]",
           "Process Group Name": "0"}
    ev = [{"cat": "cpu_op", "name": "record_param_comms", "ts": 0, "dur": 30, "args": rpc},
          {"cat": "user_annotation", "name": "nccl:all_reduce", "ts": 2, "dur": 20},
          {"cat": "kernel", "name": "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "pid": 2,
           "tid": 4, "ts": 40, "dur": 10, "args": {"correlation": 77, "stream": 4, "device": 2,
                                                   "kind": "Dispatch Kernel"}},
          {"cat": "cuda_runtime", "name": "hipLaunchKernel", "ts": 60, "dur": 2, "args": {"correlation": 78}}]
    p = _write(tmp_path, ev)
    data = json.loads(p.read_text())
    data["traceEvents"].append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 77, "pid": 1,
                                "tid": 1, "ts": 10})
    p.write_text(json.dumps(data))
    ops = read_kineto(p)
    k = _comm_kernels(ops)
    assert (k.at[0, "collective"], k.at[0, "msg_bytes"], k.at[0, "comm_meta"]) == ("all_reduce", 2000, "full")
    assert k.at[0, "device"] == "0"  # HIP: the GPU's ordinal, not its HSA agent index (2)


def _two_ranks(tmp_path) -> pd.DataFrame:
    """Ranks 0 and 1 with two process groups over the same ranks (each with its own NCCL
    stream), whose all-reduces they issue in opposite orders, and a send / recv exchange."""
    def rpc(coll: str, pg: str, seq: int, **kw) -> dict:
        return {"Collective name": coll, "In msg nelems": 256, "Out msg nelems": 256,
                "dtype": "Float", "Group size": 2, "Process Group Ranks": "[0, 1]",
                "Process Group Name": pg, "Seq": seq, **kw}

    ar = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)"
    sr = "ncclDevKernel_SendRecv(x)"
    r0 = (_nccl(0, 1, rpc("allreduce", "1", 1), ar, stream=21)
          + _nccl(100, 2, rpc("allreduce", "2", 1), ar, stream=22)
          + _nccl(200, 3, rpc("send", "0", 1, **{"Dst Rank": 1}), sr, "c10d::send", "nccl:send 0->1")
          + _nccl(300, 4, rpc("recv", "0", 2, **{"Src Rank": 1}), sr, "c10d::recv_", "nccl:recv 0<-1"))
    r1 = (_nccl(0, 1, rpc("allreduce", "2", 1), ar, stream=22)
          + _nccl(100, 2, rpc("allreduce", "1", 1), ar, stream=21)
          + _nccl(200, 3, rpc("recv", "0", 1, **{"Src Rank": 0}), sr, "c10d::recv_", "nccl:recv 1<-0")
          + _nccl(300, 4, rpc("send", "0", 2, **{"Dst Rank": 0}), sr, "c10d::send", "nccl:send 1->0"))
    return pd.concat([read_kineto(_write(tmp_path, r0, 0, 2)), read_kineto(_write(tmp_path, r1, 1, 2))],
                     ignore_index=True)


def test_matching_by_process_group_sequence_and_peer(tmp_path):
    g = extract(_two_ranks(tmp_path), ExtractOptions(joint_ranks=True))
    t = g.tasks
    comm = t[t["kind"].isin(["coll", "send", "recv"])]
    assert len(comm) == 8 and g.meta["comm_metadata"]["unmatched"] == 0
    by = {(int(r), n): k for r, n, k in zip(comm["rank"], comm["src_event"], comm["match_key"], strict=True)}
    keys0 = [by[k] for k in sorted(by) if k[0] == 0]
    keys1 = [by[k] for k in sorted(by) if k[0] == 1]
    # rank 1 issued the two groups' all-reduces in the other order: matched by group, not order
    assert keys0[0] == keys1[1] and keys0[1] == keys1[0] and keys0[0] != keys0[1]
    assert {"pg:1:0,1|s1.0", "pg:2:0,1|s1.0"} == set(keys0[:2])
    assert sorted(comm.loc[comm["kind"] == "send", "match_key"]) == ["p2p:0->1|#0", "p2p:1->0|#0"]
    assert (comm.loc[comm["kind"] == "send", "peer"].tolist()) == [1, 0]
    assert g.groups == ((0, 1),)
    r = replay(g)
    assert dict(r.fallbacks) == {}
    ends = {k: set(r.end_ns[comm.index[comm["match_key"] == k]]) for k in set(comm["match_key"])}
    assert all(len(v) == 1 for v in ends.values())  # members of each operation end together


def test_members_of_absent_ranks_keep_their_recorded_time(tmp_path):
    """A group of 4 of which the graph holds 2 ranks: not a joint collective (the engine
    would wait for absent members), the recorded time is kept; the group names all 4."""
    rpc = {"Collective name": "allreduce", "In msg nelems": 256, "Out msg nelems": 256,
           "dtype": "Float", "Group size": 4, "Process Group Ranks": "[0, 1, 2, 3]"}
    ev = _nccl(0, 1, rpc, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)")
    ops = pd.concat([read_kineto(_write(tmp_path, ev, r, 4)) for r in (0, 1)], ignore_index=True)
    g = extract(ops, ExtractOptions(joint_ranks=True))
    t = g.tasks
    k = t[t["op_class"] == "comm"]
    k = k[k["kind"] == "gpu"]
    assert len(k) == 2 and g.groups == ((0, 1, 2, 3),)
    assert (k["group"] == 0).all() and g.meta["comm_metadata"]["unmatched"] == 2
    assert dict(replay(g).fallbacks) == {}


def test_real_traces(public_traces):
    """Metadata of recorded NCCL / RCCL traces: PyTorch 2.4 (a100), ROCm with kernels joined
    through their launch flows (MI300X), a 2023 trace without NCCL metadata (16 ranks)."""
    t = extract(read_kineto(public_traces / "a100_2rank_nccl.json.gz")).tasks
    k = t[(t["kind"] == "gpu") & (t["op_class"] == "comm")]
    assert len(k) == 21 and set(k["comm_meta"]) == {"full"} and (k["msg_bytes"] > 0).all()
    assert set(k["collective"]) == {"all_reduce", "broadcast"} and (k["group"] == 0).all()

    g = extract(read_kineto(public_traces / "tracelens-mi300x-resnet-actckpt/resnet_act_checkpoint.json.gz"))
    cm = g.meta["comm_metadata"]
    assert cm["tasks"] == 17 and cm["full"] == 12 and g.groups == (tuple(range(8)),)

    g = extract_source_of(DATA / "hta-a100-16rank-r0-cudagraph-alltoall/rank0.json.gz")
    cm = g.meta["comm_metadata"]
    assert cm["tasks"] == 80 and cm["full"] == 75 and cm["group_source"]["world"] == 80
    assert g.groups == (tuple(range(16)),) and cm["groups_assumed"] == [0]
    k = g.tasks[g.tasks["comm_meta"] == "full"]
    assert set(k["collective"]) == {"all_to_all", "all_reduce", "all_gather", "reduce_scatter"}


def extract_source_of(path: Path):
    from tracesim.trace.extract import extract_source

    return extract_source(load_source(path))


def test_newest_format_b200():
    g = extract_source_of(DATA / "tracelens-b200-tp8-r0-eager/eager_trace.json.gz")
    t = g.tasks
    ag = t[(t["collective"] == "all_gather") & (t["kind"] == "gpu")]
    assert len(ag) == 1 and int(ag["msg_bytes"].iat[0]) == 201088 * 2
    assert ag["pg"].iat[0] == "3" and ag["group_source"].iat[0] == "recorded"
    # vLLM's all-reduces bypass NCCL (symmetric memory): named by their ops, group assumed
    ar = t[(t["collective"] == "all_reduce") & (t["kind"] == "gpu")]
    assert len(ar) == 73 and set(ar["group_source"]) == {"world"} and (ar["msg_bytes"] > 0).all()
