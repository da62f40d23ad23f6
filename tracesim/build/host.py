"""The host that launches the kernels: when kernels are short, the GPU waits for the CPU.

A training step's GPU kernels are issued one by one by the host: the Python module code,
PyTorch's dispatcher and the CUDA launch call cost host time per kernel. The host runs ahead
of the GPU (kernels queue on their stream) except where the program waits for the GPU: a
device-to-host copy that sizes later work. Megatron-Core's MoE all-to-all token dispatcher
is such a point: the number of tokens each expert receives is copied to the host before the
dispatch all-to-all can be sized (``MoEAlltoAllTokenDispatcher``: the split sizes go to the
CPU, then a stream synchronisation), once per MoE layer in every forward pass. CUDA graphs
(``--cuda-graphs``) replay captured scopes with one launch each.

:func:`host_bound` walks the chain of one unit (one pass of one model chunk) in program order
as a two-stage flow: the host issues task ``i`` ``h_i`` after issuing task ``i - 1``; the GPU
starts it at ``max(end of i - 1, issue of i)``. What the GPU waits is added to the compute
task it delays, or, before a communication task, to the compute task before that (the wait
then shows as compute time of that layer: it is the GPU idling in that layer). Communication tasks count as launches of zero GPU time (their duration is the
network's), which can only overstate the waits after them. A sync point puts the host
``sync_us`` after the GPU's arrival there. The scan starts at the unit's first sync point
and wraps around (the unit repeats every micro-batch). A unit without one starts in lock
step with the GPU when the pass before it waited for the GPU (``lockstep``: the backward
pass after a forward with sync points, the host having just issued that forward's last
kernels behind the GPU): it is walked from the start, its first kernels waiting for their
launches, whether or not its host time exceeds its GPU time. Otherwise it is host-bound only
when its host time exceeds its GPU time (walked from the start the same way: the host then
falls behind each micro-batch), else the host runs ahead and the GPU never waits.

Host time per launch: the medians over the public real GPU traces of the median gap between
consecutive kernel launches on the forward (Python) thread, 37 us, and on the autograd
(backward) thread, 30 us; the chunks of an op that C++ code issues cost the launch call
alone, 5.3 us, the median launch-call duration of the same traces
(``benchmarks/traces/host_launch.py``; docs/stacks.md): a transfer chunk (``name#k``), a
compute task that repeats the one right before it, and current scaling's amax all-reduce
(Transformer Engine's C++ quantizer calls the process group, ``quantizer.cpp``). In the chunk
pipelines of :mod:`tracesim.build.overlap` the GEMM chunks alternate with transfer chunks;
the first costs the op's price (the Python module's call), each further one a cuBLAS GEMM
issued from Transformer Engine's C++ loop, priced at a whole ``torch.nn.Linear`` forward's
CPU time (:data:`LAUNCH_US_GEMM_CHUNK`, divided by the host's speed like the op price); tasks
that stand for several chunks (``chunks`` > 1, the closed forms) are walked as those chunks
in that order (:func:`_piecewise`). Kernels per task: one, except
the routed experts' grouped GEMMs and their FP8 casts: Transformer Engine's
``GroupedLinear`` runs one GEMM (and one quantisation) per local expert, twice in the
backward (data and weight gradients), and the experts' bias added expert by expert
(``moe.expert_bias``, Megatron-Core's ``TEGroupedMLP._apply_bias``): two kernels per local
expert and a concatenation forward, four per expert backward; and Megatron-Core's MoE router
(``router_kernels``, from the stack's template: 31 kernels per forward with router fusion, the
gating GEMM ``moe.router`` and the rest ``moe.topk``; backward one kernel each, as no count is
published); and the Mamba-2 chunked scan, five Triton kernels forward and fourteen backward
(state-spaces/mamba ``ssd_combined.py``: its backward re-runs four forward kernels); and the
eager chains of the ``transformers`` stack, one launch per PyTorch op of the module
(``op_kernels`` of its template, :data:`tracesim.template.eager_chains.HF_KERNELS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tracesim.template.fp8 import AMAX_SUFFIX
from tracesim.template.mamba_ops import SSD_KERNELS_BWD, SSD_KERNELS_FWD
from tracesim.template.moe_ops import EXPERT_BIAS
from tracesim.template.stacks import MCORE_ROUTER_KERNELS_UNFUSED

#: host time per kernel launch, forward and backward threads (us): benchmarks/traces/host_launch.py
LAUNCH_US_FWD = 37.0
LAUNCH_US_BWD = 30.0
#: the launch call alone (us): a kernel that C++ code issues without Python in between (the
#: userbuffers transfers of a Transformer Engine overlapped GEMM)
LAUNCH_US_CALL = 5.3
#: a GEMM chunk after the first of a Transformer Engine overlapped GEMM (us, x86): the C++
#: loop (``CommOverlapBase::split_overlap_rs``, ``CommOverlapP2PBase::split_overlap_ag``)
#: issues it through ``nvte_cublas_gemm`` with no Python in between; priced at the CPU time
#: of a whole ``torch.nn.Linear`` forward (Python module, dispatcher and the cuBLAS call),
#: 13.48 us on a DGX H100's Xeon (NVIDIA/TransformerEngine issue #2053, the microbenchmark
#: the host speeds come from), an upper bound for the cuBLAS call alone
LAUNCH_US_GEMM_CHUNK = 13.48
#: a device-to-host copy of a few bytes and a stream synchronisation (us); order of a PCIe
#: round trip plus the CUDA event wait (NCCL src/graph/tuning.cc puts a kernel launch round
#: trip at a few us); small next to the launch times above
SYNC_US = 10.0
#: one CUDA graph launch (us): a captured scope costs this once instead of its kernels
GRAPH_LAUNCH_US = 10.0

#: the template ops each --cuda-graphs scope captures (tracesim.specs.names.GRAPH_SCOPES);
#: "full_iteration" captures every op
_SCOPE_PREFIX = {
    "attn": ("ln1", "attn."),
    "mlp": ("ln2", "mlp."),
    "moe_router": ("moe.router", "moe.topk"),
    "moe_preprocess": ("moe.permute", "moe.route_prep"),
    "moe": ("moe.",),
    "mamba": ("mamba.",),
}
_EXPERT_OPS = ("moe.fc1", "moe.fc2")


@dataclass(frozen=True)
class HostModel:
    """Host launch costs (us) and the CUDA-graph scopes of a replay (module docstring)."""

    launch_us_fwd: float = LAUNCH_US_FWD
    launch_us_bwd: float = LAUNCH_US_BWD
    launch_us_call: float = LAUNCH_US_CALL
    launch_us_gemm_chunk: float = LAUNCH_US_GEMM_CHUNK
    sync_us: float = SYNC_US
    graph_launch_us: float = GRAPH_LAUNCH_US
    graphs: tuple[str, ...] = ()
    local_experts: int = 1
    router_kernels: int = 0
    #: kernels of an op an eager stack runs as a chain of PyTorch ops: op name -> (forward,
    #: backward), from the stack's template (``meta["op_kernels"]``)
    op_kernels: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    #: the host CPU's speed relative to the x86 servers the launch times come from (the
    #: cluster spec's ``host_cpu``): the per-launch times (not the launch call alone, a
    #: graph launch or a sync) are divided by it
    cpu_speed: float = 1.0

    def scope(self, name: str) -> str:
        """The captured scope ``name`` (a task name) belongs to, or ""."""
        base = name.split(":", 1)[-1]
        if "full_iteration" in self.graphs:
            return "full_iteration"
        for s in self.graphs:
            if any(base.startswith(p) for p in _SCOPE_PREFIX.get(s, ())):
                return s
        return ""

    def launches(self, name: str, phase: str) -> int:
        """Kernel launches of one task (module docstring)."""
        base = name.split(":", 1)[-1]
        if base == "moe.topk" and phase == "fwd" and self.router_kernels > 1:
            return self.router_kernels - 1  # the router's kernels after its gating GEMM
        if base == EXPERT_BIAS:  # per expert a product and a sum, then a concatenation
            return 2 * self.local_experts + 1 if phase == "fwd" else 4 * self.local_experts
        if base.startswith(_EXPERT_OPS):
            return self.local_experts * (2 if phase == "bwd" and ".fp8_cast" not in base else 1)
        if base == "mamba.ssd":  # the chunked scan's Triton kernels (tracesim.template.mamba_ops)
            return SSD_KERNELS_BWD if phase == "bwd" else SSD_KERNELS_FWD
        if base in self.op_kernels:  # an eager chain (tracesim.template.stacks)
            return self.op_kernels[base][1 if phase == "bwd" else 0]
        return 1

    def gemm_chunk_ns(self) -> float:
        """Host time (ns) of a further GEMM chunk of an overlapped GEMM (its C++ loop)."""
        return self.launch_us_gemm_chunk / self.cpu_speed * 1e3

    def issue_ns(self, name: str, phase: str, prev_scope: str, chunk: bool = False,
                 gemm_chunk: bool = False) -> tuple[float, str]:
        """Host time (ns) to issue task ``name`` and its scope (a graph launch is paid when
        a captured scope starts); a ``chunk`` (a further piece of the op before it, issued
        by C++ code) costs the launch call alone, a ``gemm_chunk`` (a further GEMM chunk of
        an overlapped GEMM) :meth:`gemm_chunk_ns`."""
        sc = self.scope(name)
        if sc:
            return (self.graph_launch_us * 1e3 if sc != prev_scope else 0.0), sc
        if gemm_chunk:
            return self.gemm_chunk_ns(), ""
        if chunk:
            return self.launch_us_call * 1e3, ""
        per = (self.launch_us_bwd if phase == "bwd" else self.launch_us_fwd) / self.cpu_speed
        return per * 1e3 * self.launches(name, phase), ""


def is_sync(name: str, phase: str) -> bool:
    """Whether the host waits for the GPU before issuing task ``name``: the forward MoE
    dispatch all-to-all (its split sizes come from the GPU), recomputed forwards included."""
    return name.split(":", 1)[-1].startswith("moe.dispatch") and (phase == "fwd" or name.startswith("recompute:"))


def host_waits(names: list[str], phases: list[str], gpu_ns: list[int], host: HostModel,
               pieces: list[int] | None = None, lockstep: bool = False) -> list[float]:
    """What the GPU waits for the host before each task (ns), for tasks in program order
    with their GPU times (0 for communication); module docstring. ``pieces``: the kernels a
    task stands for (1 if None; the merged chunks of an overlapped GEMM, :func:`_piecewise`)."""
    n = len(names)
    issue = []
    prev = ""
    for i in range(n):
        # a chunk: a comm piece ``name#k`` or a compute task repeating the one before it;
        # current scaling's amax all-reduce, which Transformer Engine's C++ quantizer issues
        chunk = ("#" in names[i] or (i > 0 and names[i] == names[i - 1] and gpu_ns[i] > 0)
                 or names[i].endswith(AMAX_SUFFIX))
        h, prev = host.issue_ns(names[i], phases[i], prev, chunk, _gemm_chunk(names, gpu_ns, i))
        issue.append(h)
    if pieces is not None and any(p > 1 for p in pieces):
        return _piecewise(issue, gpu_ns, pieces, names, phases, host, lockstep)
    return _walk(issue, names, phases, gpu_ns, host, lockstep)


def _gemm_chunk(names: list[str], gpu_ns: list[int], i: int) -> bool:
    """Whether compute task ``i`` is a further GEMM chunk of an overlapped GEMM: the same op
    before it with only that op's transfer chunks (``name#k``) in between."""
    if gpu_ns[i] <= 0 or "#" in names[i]:
        return False
    j = i - 1
    while j >= 0 and "#" in names[j] and gpu_ns[j] <= 0:
        j -= 1
    return j < i - 1 and j >= 0 and names[j] == names[i]


def _walk(issue: list[float], names: list[str], phases: list[str], gpu_ns: list[int] | list[float],
          host: HostModel, lockstep: bool = False) -> list[float]:
    """The two-stage flow of :func:`host_waits` over tasks with their host ``issue`` times."""
    n = len(names)
    syncs = [i for i in range(n) if is_sync(names[i], phases[i])]
    sync_set = set(syncs)
    waits = [0.0] * n
    if not syncs:
        if sum(issue) <= sum(gpu_ns) and not lockstep:
            return waits  # the host runs ahead
        order = list(range(n))
        host_t = gpu_t = 0.0
    else:
        order = list(range(syncs[0], n)) + list(range(syncs[0]))
        host_t = gpu_t = 0.0
    for i in order:
        if i in sync_set:
            host_t = max(host_t, gpu_t) + host.sync_us * 1e3
        host_t += issue[i]
        start = max(gpu_t, host_t)
        waits[i] = start - gpu_t
        gpu_t = start + gpu_ns[i]
    return waits


def _piecewise(issue: list[float], gpu_ns: list[int], pieces: list[int], names: list[str],
               phases: list[str], host: HostModel, lockstep: bool = False) -> list[float]:
    """:func:`host_waits` with every task of ``p`` pieces walked as the ``p`` tasks it
    stands for (:mod:`tracesim.build.overlap`'s closed forms): each piece issued as the
    task's first (nothing more inside a captured scope) with ``1 / p`` of its GPU time, the
    waits of a task's pieces summed. Two consecutive tasks of ``p > 1`` pieces each (a
    merged GEMM and the merged transfers beside it) alternate their pieces, the first
    task's first, as the chunks are issued one by one."""
    flat: list[tuple[int, int]] = []  # (task, piece)
    i, n = 0, len(pieces)
    while i < n:
        p = max(1, int(pieces[i]))
        if p > 1 and i + 1 < n and int(pieces[i + 1]) == p:
            flat += [(t, k) for k in range(p) for t in (i, i + 1)]
            i += 2
        else:
            flat += [(i, k) for k in range(p)]
            i += 1
    owner = [t for t, _ in flat]
    # a compute task's further pieces are further GEMM chunks of its overlapped GEMM (the C++
    # loop), a transfer task's the launch calls its first piece already costs
    flat_issue = [issue[t] if k == 0 else 0.0 if host.scope(names[t])
                  else host.gemm_chunk_ns() if gpu_ns[t] > 0 and "#" not in names[t] else issue[t]
                  for t, k in flat]
    flat_gpu = [gpu_ns[t] / max(1, int(pieces[t])) for t in owner]
    waits = _walk(flat_issue, [names[t] for t in owner], [phases[t] for t in owner], flat_gpu, host,
                  lockstep)
    out = [0.0] * n
    for w, t in zip(waits, owner, strict=True):
        out[t] += w
    return out


def host_bound(cols: dict[str, list], chain: list[int], host: HostModel, lockstep: bool = False) -> float:
    """Add the GPU's waits for the host (:func:`host_waits`) over the ``chain`` tasks of a
    unit's columns ``cols`` to the compute task before each wait (the first compute task
    for a wait before any); returns the total added (ns)."""
    names = [str(cols["name"][i]) for i in chain]
    phases = [str(cols["phase"][i]) for i in chain]
    is_gpu = [cols["kind"][i] == "gpu" for i in chain]
    gpu = [int(cols["dur_ns"][i]) if g else 0 for i, g in zip(chain, is_gpu, strict=True)]
    computes = [k for k, g in enumerate(is_gpu) if g]
    if not computes:
        return 0.0
    pieces = [int(cols["chunks"][i]) for i in chain] if "chunks" in cols else None
    waits = host_waits(names, phases, gpu, host, pieces, lockstep)
    total = 0.0
    target = computes[0]  # a wait before any compute task goes to the first one
    for k, w in enumerate(waits):
        if is_gpu[k]:
            target = k  # a compute task absorbs its own wait; a comm task's goes to the one before
        if w > 0:
            cols["dur_ns"][chain[target]] += int(round(w))
            total += w
    return total


def host_model(model: Any, par: Any, meta: Mapping[str, Any], cpu_speed: float = 1.0) -> HostModel:
    """The host of a replay of ``model`` (a ModelSpec) on layout ``par`` (a ParallelSpec) with
    a template of ``meta``: its CUDA-graph scopes, local experts, router kernels and CPU."""
    kernels = {str(k): (int(v[0]), int(v[1])) for k, v in (meta.get("op_kernels") or {}).items()}
    return HostModel(graphs=par.cuda_graphs, local_experts=max(1, model.experts // par.ep) if model.is_moe else 1,
                     router_kernels=router_kernels(meta, par.moe_router_fusion), op_kernels=kernels,
                     cpu_speed=cpu_speed)


def router_kernels(meta: Mapping[str, Any], fused: bool) -> int:
    """The router's kernels per forward of a template (``meta["router_kernels"]``, fused: the
    stack's count) when the run fuses it or not (``--no-moe-router-fusion``: Megatron-Core's
    unfused router, 72 in NVIDIA's count)."""
    n = int(meta.get("router_kernels", 0))
    return n if fused or not n else MCORE_ROUTER_KERNELS_UNFUSED
