"""The host that launches the kernels (tracesim.build.host): closed forms of the two-stage
flow, sync points, CUDA-graph scopes, and what it does to replays."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import retarget
from tracesim.build.host import HostModel, host_waits, is_sync


def _uniform(n: int, g_ns: int, h_us: float) -> list[float]:
    host = HostModel(launch_us_fwd=h_us, launch_us_bwd=h_us)
    return host_waits([f"op{i}" for i in range(n)], ["fwd"] * n, [g_ns] * n, host)


def test_long_kernels_never_wait_for_the_host() -> None:
    assert sum(_uniform(50, 100_000, 37.0)) == 0.0  # 100 us kernels, 37 us launches


def test_short_kernels_wait_for_each_launch() -> None:
    # h > g: the first kernel waits h, every later one h - g (the host is the bottleneck)
    n, g, h = 40, 5_000, 30.0
    waits = _uniform(n, g, h)
    assert waits[0] == pytest.approx(h * 1e3)
    assert waits[1:] == pytest.approx([h * 1e3 - g] * (n - 1))
    # GPU span = n launches end to end + the last kernel
    assert sum(waits) + n * g == pytest.approx(n * h * 1e3 + g)


def test_a_sync_point_drains_the_queue() -> None:
    # long kernels, but the MoE dispatch waits for the GPU: the kernels after it wait for
    # the sync round trip and their own launches
    names = ["ln2", "moe.router", "moe.topk", "moe.permute", "moe.dispatch", "moe.fc1", "moe.act"]
    gpu = [100_000, 100_000, 100_000, 100_000, 0, 100_000, 100_000]
    host = HostModel(launch_us_fwd=20.0, sync_us=10.0, local_experts=4)
    assert is_sync("moe.dispatch", "fwd") and not is_sync("moe.dispatch", "bwd")
    assert is_sync("recompute:moe.dispatch", "bwd")
    waits = host_waits(names, ["fwd"] * len(names), gpu, host)
    # at the dispatch: sync 10 us + its own launch 20 us; then fc1: 4 expert GEMMs = 80 us
    assert waits[4] == pytest.approx(30_000)
    assert waits[5] == pytest.approx(80_000)
    assert waits[6] == 0.0  # the 100 us GEMMs let the host run ahead again
    assert waits[:4] == [0.0] * 4  # wrapped around: the host caught up before the next layer


def test_a_backward_after_a_synced_forward_starts_in_lock_step() -> None:
    """A pass without sync points that follows a forward with them (``lockstep``) waits for
    its first launches even when it is GPU-bound overall, and a slower kernel never shortens
    it; without ``lockstep`` a GPU-bound pass never waits (the host runs ahead)."""
    names = [f"op{i}" for i in range(10)]
    host = HostModel(launch_us_bwd=30.0)

    def span(big_ns: int, lockstep: bool) -> float:
        gpu = [1_000] * 5 + [big_ns] * 5
        return sum(gpu) + sum(host_waits(names, ["bwd"] * 10, gpu, host, lockstep=lockstep))

    # five 1 us kernels first, each waiting for its 30 us launch in lock step: the sixth
    # starts at its own launch, 180 us, and the five 100 us kernels run back to back
    assert span(100_000, True) == pytest.approx(30_000 * 6 + 100_000 * 5)
    assert span(100_000, False) == 5 * 1_000 + 5 * 100_000
    spans = [span(b, True) for b in range(50_000, 70_000, 1_000)]
    assert spans == sorted(spans)  # monotone across the host time = GPU time crossing


def test_cuda_graphs_launch_a_scope_once() -> None:
    names = ["ln1", "attn.qkv", "attn.core", "attn.proj", "ln2", "mlp.fc1"]
    plain = HostModel(launch_us_fwd=30.0)
    graphed = HostModel(launch_us_fwd=30.0, graph_launch_us=10.0, graphs=("attn",))
    cost = [plain.issue_ns(n, "fwd", "")[0] for n in names]
    prev, got = "", []
    for n in names:
        ns, prev = graphed.issue_ns(n, "fwd", prev)
        got.append(ns)
    assert cost == [30_000.0] * 6
    assert got == [10_000.0, 0.0, 0.0, 0.0, 30_000.0, 30_000.0]
    full = HostModel(graphs=("full_iteration",))
    assert full.scope("moe.fc1") == "full_iteration"


def test_expert_gemms_launch_per_local_expert() -> None:
    host = HostModel(local_experts=16)
    assert host.launches("moe.fc1", "fwd") == 16
    assert host.launches("moe.fc1", "bwd") == 32  # data and weight gradients
    assert host.launches("moe.fc2.fp8_cast", "bwd") == 16
    assert host.launches("moe.shared.fc1", "fwd") == 1
    assert host.launches("attn.qkv", "fwd") == 1


def test_megatron_core_router_launches_its_measured_kernels() -> None:
    """Megatron-Core's fused MoE router: 31 kernels per forward (NVIDIA's DeepSeek-V3 GB200
    Nsight count), the gating GEMM and 30 more; one each backward (no count published); a
    graphed router scope still launches once; only the megatron-core stack's MoE templates
    carry the count."""
    from tracesim.catalog import load_model
    from tracesim.template.stacks import MCORE_ROUTER_KERNELS, get_stack, stack_template

    host = HostModel(router_kernels=MCORE_ROUTER_KERNELS)
    assert MCORE_ROUTER_KERNELS == 31
    assert host.launches("moe.router", "fwd") + host.launches("moe.topk", "fwd") == 31
    assert host.launches("moe.topk", "bwd") == 1 and HostModel().launches("moe.topk", "fwd") == 1
    graphed = HostModel(router_kernels=31, graph_launch_us=10.0, graphs=("moe_router",))
    assert graphed.issue_ns("moe.topk", "fwd", "")[0] == 10_000.0
    assert graphed.issue_ns("moe.topk", "fwd", "moe_router")[0] == 0.0
    qwen = load_model("qwen3-30b-a3b")
    assert stack_template(qwen, get_stack("megatron-core")).meta["router_kernels"] == 31
    assert "router_kernels" not in stack_template(qwen, get_stack("torchtitan")).meta
    assert "router_kernels" not in stack_template(load_model("llama3-8b"), get_stack("megatron-core")).meta


MOE = {"model": "qwen3-30b-a3b", "cluster": "dgx-b200", "ep": 8, "dp": 8, "micro_batch": 1,
       "global_batch": 16, "seq_len": 4096, "dtype": "fp8", "fp8_recipe": "mxfp8"}


def test_moe_replay_is_host_bound_and_graphs_help() -> None:
    on = retarget(MOE)
    off = retarget({**MOE, "host_launch": False})
    graphs = retarget({**MOE, "cuda_graphs": "attn,moe_router,moe_preprocess"})
    full = retarget({**MOE, "cuda_graphs": "full_iteration"})
    assert on.iteration_time_s > 1.5 * off.iteration_time_s  # many short expert kernels
    assert off.iteration_time_s < graphs.iteration_time_s < on.iteration_time_s
    assert full.iteration_time_s < graphs.iteration_time_s
    host = on.details["stack"]["host"]
    assert host["wait_s_per_microbatch"] > 0 and host["cuda_graphs"] == []
    assert off.details["stack"].get("host") is None


def test_unfused_router_launches_72_kernels_unless_graphed() -> None:
    """``--no-moe-router-fusion`` (Megatron-Core's default, the Nemotron 3 recipes): NVIDIA's
    count of 72 router kernels per forward instead of 31; nothing changes where the router's
    scope is a CUDA graph."""
    from tracesim.build.host import router_kernels

    assert router_kernels({"router_kernels": 31}, True) == 31
    assert router_kernels({"router_kernels": 31}, False) == 72
    assert router_kernels({}, False) == 0  # no megatron-core MoE router
    fused, unfused = retarget(MOE), retarget({**MOE, "moe_router_fusion": False})
    assert unfused.iteration_time_s > fused.iteration_time_s
    graphs = {**MOE, "cuda_graphs": "attn,moe_router,moe_preprocess"}
    assert retarget({**graphs, "moe_router_fusion": False}).iteration_time_s == \
        retarget(graphs).iteration_time_s


def test_compute_bound_dense_step_does_not_change() -> None:
    dense = {"model": "llama3-8b", "cluster": "h100x8", "dp": 8, "micro_batch": 2,
             "global_batch": 16, "seq_len": 8192}
    on, off = retarget(dense), retarget({**dense, "host_launch": False})
    assert on.iteration_time_s == pytest.approx(off.iteration_time_s, rel=1e-3)


def test_unknown_graph_scope_exits_2() -> None:
    p = subprocess.run([sys.executable, "-m", "tracesim.cli", "replay", "--model", "gpt3-1.7b",
                        "--cluster", "h100x8", "--dp", "8", "--cuda-graphs", "attn,decoder"],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "--cuda-graphs" in p.stderr and "decoder" in p.stderr and "Traceback" not in p.stderr


def test_a_slower_host_cpu_stretches_each_launch_but_not_the_launch_call() -> None:
    """``cpu_speed`` (a cluster spec's ``host_cpu``) divides the per-launch host time of an
    op; a chunk issued by C++ (the launch call alone) and a CUDA-graph launch keep theirs."""
    x86, grace = HostModel(), HostModel(cpu_speed=0.5)
    assert grace.issue_ns("attn.qkv", "fwd", "")[0] == 2 * x86.issue_ns("attn.qkv", "fwd", "")[0]
    assert grace.issue_ns("mlp.fc1", "bwd", "")[0] == 2 * x86.issue_ns("mlp.fc1", "bwd", "")[0]
    assert grace.issue_ns("attn.qkv#1", "fwd", "", chunk=True) == x86.issue_ns("attn.qkv#1", "fwd", "", chunk=True)
    g1, g2 = HostModel(graphs=("attn",)), HostModel(graphs=("attn",), cpu_speed=0.5)
    assert g1.issue_ns("attn.qkv", "fwd", "") == g2.issue_ns("attn.qkv", "fwd", "")


def test_grace_hosts_hold_a_host_bound_moe_step_up() -> None:
    """gb200-nvl72 names its Grace CPUs (speed 0.364, TE issue #2053's torch.nn.Linear CPU
    times): a host-bound MoE step is slower than on the same rack with an x86-speed host; a
    compute-bound dense step is not."""
    import tracesim
    from tracesim.catalog import load_cluster, shipped

    grace = load_cluster("gb200-nvl72")
    assert grace.host_cpu is not None and grace.host_cpu.speed == pytest.approx(13.48 / 37.08, abs=1e-3)
    listed = {e.name: e for e in shipped("clusters")}
    assert "NVIDIA Grace" in listed["gb300-nvl72"].summary and "host" not in listed["h100x8"].summary
    x86 = grace.replace(host_cpu=None)
    moe = {**MOE, "fp8_recipe": "mxfp8"}
    moe.pop("cluster")
    slow, fast = tracesim.replay(**moe, cluster=grace), tracesim.replay(**moe, cluster=x86)
    assert slow.iteration_time_s > 1.3 * fast.iteration_time_s
    host = slow.details["stack"]["host"]
    assert host["cpu_speed"] == grace.host_cpu.speed
    assert host["launch_us"]["fwd"] == pytest.approx(37.0 / grace.host_cpu.speed)
    assert fast.details["stack"]["host"]["cpu_speed"] == 1.0
    dense = {"model": "llama3-8b", "dp": 8, "micro_batch": 2, "global_batch": 16, "seq_len": 8192}
    assert tracesim.replay(**dense, cluster=grace).iteration_time_s == pytest.approx(
        tracesim.replay(**dense, cluster=x86).iteration_time_s, rel=1e-3)


def test_host_cpu_in_the_cluster_spec() -> None:
    from tracesim.errors import InputError
    from tracesim.specs.cluster import cluster_from_dict

    spec = {"name": "x", "nodes": 1, "gpus_per_node": 4, "device": "gb200",
            "intra_node": {"kind": "nvswitch", "bandwidth_GBps": 900, "latency_us": 0.6},
            "host_cpu": {"name": "Grace", "speed": 0.364}}
    c = cluster_from_dict(spec, "x.yaml")
    assert c.host_cpu is not None and c.host_cpu.speed == 0.364
    assert cluster_from_dict(c.to_dict(), "y.yaml") == c
    for bad in ({"name": "Grace"}, {"name": "Grace", "speed": -1}, {"name": "Grace", "speed": 1, "clock": 3}):
        with pytest.raises(InputError) as e:
            cluster_from_dict({**spec, "host_cpu": bad}, "x.yaml")
        assert "host_cpu" in str(e.value) and "x.yaml" in str(e.value)


def test_host_speed_sets_the_host_cpu_of_a_built_model() -> None:
    """``--host-speed`` on a replay built from a model spec divides the host launch times
    (over the cluster spec's ``host_cpu``); without a host launch model it is said to be
    ignored, not dropped silently."""
    base = retarget(MOE)
    slow = retarget({**MOE, "host_speed": 0.5})
    assert slow.iteration_time_s > base.iteration_time_s
    host = slow.details["stack"]["host"]
    assert host["cpu_speed"] == 0.5 and host["launch_us"]["fwd"] == pytest.approx(74.0)
    x86 = retarget({**MOE, "cluster": "gb200-nvl72", "host_speed": 1.0})
    assert x86.details["stack"]["host"]["cpu_speed"] == 1.0
    eager = retarget({"model": "gpt3-1.7b", "cluster": "h100x8", "dp": 8, "micro_batch": 1,
                      "global_batch": 8, "seq_len": 512, "host_launch": False, "host_speed": 0.5})
    assert any("--host-speed ignored" in w for w in eager.warnings)


def test_an_overlapped_gemms_further_chunks_cost_a_cpp_gemm_call() -> None:
    """A ring-exchange GEMM of n chunks (GEMM chunks alternating with transfer chunks, as
    Transformer Engine's C++ loop issues them): the first GEMM chunk costs the op's price,
    each further one a cuBLAS call from C++ (a torch.nn.Linear forward's CPU time, divided by
    the host's speed), each transfer chunk the launch call; chunk by chunk and as the closed
    form's merged tasks (pieces) alike."""
    n, g = 8, 1_000  # 1 us GEMM chunks: the host is the bottleneck throughout
    names, gpu = [], []
    for k in range(n):
        if k:
            names.append(f"mlp.fc2_rs#{k}")
            gpu.append(0)
        names.append("mlp.fc2")
        gpu.append(g)
    for speed in (1.0, 0.364):
        host = HostModel(cpu_speed=speed)
        waits = host_waits(names, ["fwd"] * len(names), gpu, host)
        issued = (host.launch_us_fwd / speed + (n - 1) * 13.48 / speed
                  + (n - 1) * host.launch_us_call) * 1e3
        # the host-bound span: every issue end to end, then the last chunk
        assert sum(waits) + n * g == pytest.approx(issued + g)
        # the closed form: one GEMM task of n - 1 chunks beside a transfer task of n - 1
        # chunks, then the last GEMM chunk (tracesim.build.overlap._ring_in)
        merged = ["mlp.fc2", "mlp.fc2_rs#1-7", "mlp.fc2"]
        w2 = host_waits(merged, ["fwd"] * 3, [g * (n - 1), 0, g], host, pieces=[n - 1, n - 1, 1])
        assert sum(w2) == pytest.approx(sum(waits))
