"""Shared experts beside the EP all-to-alls (Megatron-Core's ``--moe-shared-expert-overlap``).

Without the option Megatron-Core runs a MoE layer's shared experts first, on the compute
stream (``MoELayer.shared_experts_compute``, core_v0.15.0). With it the all-to-all token
dispatcher drives them on a stream of their own (``SharedExpertMLP.stream``,
``token_dispatcher.py``):

* forward: the side stream waits for the compute stream before the permutation
  (``pre_forward_comm``, with the sequence-parallel all-gather when TP > 1), the first
  linear and the activation are issued right after the dispatch all-to-all
  (``dispatch_postprocess``), the second linear (and the reduce-scatter) right after the
  combine all-to-all (``combine_postprocess``), and the compute stream waits for the side
  stream before it adds the shared output (``get_output``);
* backward: the shared experts' autograd nodes get the largest sequence number
  (``set_tensor_grad_fn_sequence_sr``), so they run as soon as the layer's output gradient
  is there, on the side stream, beside the un-permutation and the combine's all-to-all;
  the input gradient waits for them.

In the task graph (:meth:`tracesim.build.units.Unit.side_chain`) the shared experts' ops
move to just after the all-to-all they run beside and do not wait for it: forward, ``fc1``
and the activation after ``moe.dispatch``, ``fc2`` after ``moe.combine``; backward, all of
them after the combine's backward all-to-all. The compute lane still runs one kernel at a
time, so what the option gains is the compute lane's idle time during those all-to-alls
(the time the shared experts' kernels share the GPU with the routed path's is not free);
the shared experts' kernels beside an all-to-all lose the SMs its kernels take
(``--comm-interference``, NCCL's 16, :func:`tracesim.build.overlap.overlap_extra_ns`). Their
TP collectives run as plain NCCL collectives (``explicit_expert_comm``: no userbuffers).

Megatron-Core's conditions (``TransformerConfig.__post_init__``): shared experts, the
``alltoall`` dispatcher, not with ``--moe-a2a-overlap`` (which places the shared experts
itself) and not with the shared experts recomputed; :func:`why_not` says which fails. On the
PyTorch-native stacks the dispatcher is free: NeMo AutoModel's MoE layer
(``components/moe/layers.py``) runs the shared experts on a side stream of their own beside
the routed path, DeepEP's dispatch included.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from tracesim.build.overlap import Overlaps, overlap_extra_ns, spread
from tracesim.specs.model import ModelSpec
from tracesim.specs.parallel import ParallelSpec
from tracesim.template.resolve import Resolved, ROp, Section

SHARED = "moe.shared"
DISPATCH, COMBINE = "moe.dispatch", "moe.combine"


def why_not(par: ParallelSpec, model: ModelSpec) -> str:
    """Why Megatron-Core would not run ``--moe-shared-expert-overlap`` on this layout ("" if
    it would)."""
    if not model.is_moe or model.shared_experts <= 0:
        return f"{model.name} has no shared experts"
    if par.moe_dispatcher != "alltoall" and par.stack in ("", "megatron-core"):
        return f"Megatron-Core runs it with the alltoall dispatcher only, not {par.moe_dispatcher}"
    if par.moe_a2a_overlap:
        return "--moe-a2a-overlap places the shared experts itself"
    if par.recompute == "selective" and "shared_experts" in par.recompute_modules:
        return "the shared experts are recomputed"
    return ""


def _shared(r: ROp) -> bool:
    return r.name.startswith(SHARED)


def _side(r: ROp) -> ROp:
    """``r`` on the side stream: no TP overlap pattern (plain collectives)."""
    return dataclasses.replace(r, side=True, overlap="", ub="", chunk_slow=())


def _comm_index(ops: Sequence[ROp], name: str) -> int:
    return next((i for i, r in enumerate(ops) if r.is_comm and r.name == name), -1)


def _split(ops: Sequence[ROp]) -> tuple[list[ROp], list[ROp]] | None:
    """(the other ops, the shared experts' ops) of a layer with both and its EP all-to-alls;
    None otherwise."""
    rest = [r for r in ops if not _shared(r)]
    shared = [r for r in ops if _shared(r)]
    if not shared or _comm_index(rest, DISPATCH) < 0 or _comm_index(rest, COMBINE) < 0:
        return None
    return rest, shared


def forward(ops: Sequence[ROp]) -> list[ROp] | None:
    """The forward ops with the shared experts beside the dispatch and the combine; None
    where the layer has no shared experts or no EP all-to-alls."""
    if (parts := _split(ops)) is None:
        return None
    rest, shared = parts
    cut = next((i for i, r in enumerate(shared) if r.name.startswith(f"{SHARED}.fc2")),
               len(shared))
    d = _comm_index(rest, DISPATCH) + 1
    rest[d:d] = [_side(r) for r in shared[:cut]]
    c = _comm_index(rest, COMBINE) + 1
    rest[c:c] = [_side(r) for r in shared[cut:]]
    return rest


def backward(ops: Sequence[ROp]) -> list[ROp] | None:
    """The backward ops with the shared experts' backward beside the combine's backward
    all-to-all; None as :func:`forward`."""
    if (parts := _split(ops)) is None:
        return None
    rest, shared = parts
    c = _comm_index(rest, COMBINE) + 1
    rest[c:c] = [_side(r) for r in shared]
    return rest


def _slowed(ops: list[ROp], ov: Overlaps) -> list[ROp]:
    """Each run of side ops' compute lasts longer by the SMs of the all-to-all before it,
    for the time they overlap (its uncongested estimate)."""
    out = list(ops)
    i = 0
    while i < len(out):
        if not out[i].side:
            i += 1
            continue
        j = i
        while j < len(out) and out[j].side:
            j += 1
        comm = out[i - 1]
        est = ov.est(comm.collective, comm.gkind, comm.msg_bytes, comm.algorithm) or 0.0
        idx = [k for k in range(i, j) if not out[k].is_comm]
        durs = [out[k].dur_ns for k in idx]
        extra = overlap_extra_ns(ov, est, float(sum(durs)), ov.nccl_sms(comm.gkind))
        if extra > 0 and sum(durs) > 0:
            new = spread(np.asarray(durs, dtype=np.int64), extra)
            for k, d in zip(idx, new.tolist(), strict=True):
                out[k] = dataclasses.replace(out[k], dur_ns=int(d))
        i = j
    return out


def _section(sec: Section | None, ov: Overlaps) -> Section | None:
    if sec is None:
        return None
    fwd, bwd = forward(sec.fwd), backward(sec.bwd)
    if fwd is None or bwd is None:
        return sec
    return dataclasses.replace(sec, fwd=tuple(_slowed(fwd, ov)), bwd=tuple(_slowed(bwd, ov)))


def apply(res: Resolved, ov: Overlaps) -> Resolved:
    """``res`` with the MoE layers' shared experts beside the EP all-to-alls (module
    docstring); the other sections as they are."""
    return dataclasses.replace(res, moe=_section(res.moe, ov),
                               moe_windowed=_section(res.moe_windowed, ov),
                               plain=apply(res.plain, ov) if res.plain is not None else None,
                               hybrid=tuple((c, (_section(sec, ov) or sec) if c == "E" else sec)
                                            for c, sec in res.hybrid))


__all__ = ["apply", "backward", "forward", "why_not"]
