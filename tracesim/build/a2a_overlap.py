"""The MoE all-to-all overlapped with another micro-batch's compute (Megatron-Core's
``--overlap-moe-expert-parallel-comm``, Megatron-Bridge ``moe_a2a_overlap``).

Megatron-Core runs each steady-state forward / backward pair of the 1F1B schedule as one
merged step (``combined_1f1b``; ``TransformerModelChunkSchedulePlan.run`` and
``TransformerLayerSchedulePlan.run``, core_v0.15.0
``megatron/core/models/common/model_chunk_schedule_plan.py``): the forward's preprocessing
and the backward's postprocessing (the loss and head), then layer ``i`` of the forward
beside layer ``n - 1 - i`` of the backward, then the forward's postprocessing and the
backward's preprocessing. Within a layer pair the all-to-alls of one pass run on the
communication stream while the other computes::

    comm stream:    combine bwd        | dispatch fwd, dispatch bwd    | combine fwd
    compute stream: attention fwd (+   | MLP bwd (data and weight      | attention bwd
                    router, permute)   | gradients), then MLP fwd      |

:func:`merge` builds that step from the two passes' units: each pass's tasks are cut at its
EP all-to-alls into ``before dispatch / experts / after combine`` (forward) and ``before
combine / experts / after dispatch`` (backward) and the pieces are placed in the order above
(a lane runs its tasks in order; every pass keeps its own order and dependencies). A layer
without exactly two EP all-to-alls per pass (a dense layer, a recomputed one) runs whole,
the forward's first. The compute beside an all-to-all runs on the SMs its kernels leave
(:data:`DISPATCHER_SMS`, with ``--comm-interference``: :func:`slowdown`); nothing else of
the merged step costs time (stream synchronization, host work). The schedule takes one more
warm-up forward (:func:`reorder`, as
Megatron-Core does with the overlap), so each steady-state pair is a forward and the
backward of an earlier micro-batch (``pp = 1``: ``F0, (F1, B0), (F2, B1), ...``);
:func:`pairs` merges them, except a pass whose unit is changed for the parameter all-gather
or the last gradient reduction. The pipeline transfers of the pair are not serialized
between its two passes. Megatron-Core's conditions (:func:`why_not`): expert parallelism,
the interleaved schedule when ``pp > 1``, no full recomputation; elsewhere the option is
ignored with a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from tracesim.build.overlap import NCCL_SMS, Overlaps, overlap_extra_ns, spread
from tracesim.build.schedules import Item
from tracesim.build.units import COLUMNS, Unit
from tracesim.specs.model import ModelSpec
from tracesim.specs.parallel import ParallelSpec

_A2A = "comm:ep"


def why_not(par: ParallelSpec, model: ModelSpec) -> str:
    """Why the overlap cannot run on this layout ("" when it can), as Megatron-Core's
    configuration checks (``TransformerConfig.__post_init__``): expert parallelism, a
    virtual pipeline when ``pp > 1``, no full recomputation."""
    if not model.is_moe or par.ep < 2:
        return "it needs MoE layers with --ep > 1"
    if par.pp > 1 and par.schedule != "interleaved":
        return "with --pp > 1 it needs the interleaved schedule (--vpp)"
    if par.recompute == "full":
        return "it does not run with full recomputation"
    return ""


def reorder(items: list[Item]) -> tuple[list[Item], list[int]]:
    """One more warm-up forward, so that each steady-state pair is a forward and the
    backward of an earlier micro-batch, independent of each other (Megatron-Core's
    ``get_pp_rank_microbatches`` with the overlap; ``pp = 1``: ``F0, F1, B0, F2, B1, ...``).
    Returns the items and the index of each steady-state pair's forward (the backward right
    after it); with every micro-batch in the warm-up there are none."""
    f = [it for it in items if it.kind == "F"]
    b = [it for it in items if it.kind == "B"]
    lead = next((i for i, it in enumerate(items) if it.kind == "B"), len(items))
    out = f[:lead]
    steady = []
    for k in range(len(f) - lead):
        steady.append(len(out))
        out += [f[lead + k], b[k]]
    return out + b[len(f) - lead:], steady


def pairs(items: Sequence[Item], steady: Sequence[int], alone: set[int]) -> dict[int, int]:
    """Forward item index -> the backward item right after it that runs merged with it: the
    steady-state pairs of :func:`reorder`, but a pass in ``alone``."""
    return {i: i + 1 for i in steady if i not in alone and i + 1 not in alone
            and (items[i].chunk, items[i].mb) != (items[i + 1].chunk, items[i + 1].mb)}


def _layers(a: dict[str, np.ndarray]) -> tuple[list[int], list[np.ndarray], list[int]]:
    """(tasks before the first layer, each layer's tasks in order, tasks after the last)."""
    layer = a["layer"]
    idx = np.arange(len(layer))
    inside = np.flatnonzero(layer >= 0)
    if not len(inside):
        return idx.tolist(), [], []
    first, last = int(inside[0]), int(inside[-1])
    body = layer[first:last + 1]
    cuts = np.flatnonzero(np.diff(body)) + 1
    groups = np.split(np.arange(first, last + 1), cuts)
    return idx[:first].tolist(), groups, idx[last + 1:].tolist()


def _cut(a: dict[str, np.ndarray], tasks: np.ndarray) -> list[list[int]] | None:
    """A layer's tasks cut at its two EP all-to-alls: [head, a2a, middle, a2a, rest], or
    None where it has not exactly two."""
    at = [k for k, t in enumerate(tasks.tolist())
          if a["lane"][t] == _A2A and a["collective"][t] == "all_to_all"]
    if len(at) != 2:
        return None
    t = tasks.tolist()
    return [t[:at[0]], [t[at[0]]], t[at[0] + 1:at[1]], [t[at[1]]], t[at[1] + 1:]]


Piece = tuple[str, list[int]]


def _order(fa: dict[str, np.ndarray], ba: dict[str, np.ndarray]
           ) -> tuple[list[tuple[str, int]], list[tuple[list[Piece], list[Piece]]]]:
    """The merged step's tasks as (pass, local index), in Megatron's order (module
    docstring), and which all-to-alls run beside which compute: (all-to-all pieces,
    compute pieces) per overlap window."""
    f_pre, f_layers, f_post = _layers(fa)
    b_pre, b_layers, b_post = _layers(ba)
    out = [("F", t) for t in f_pre] + [("B", t) for t in b_pre]
    windows: list[tuple[list[Piece], list[Piece]]] = []
    for i in range(max(len(f_layers), len(b_layers))):
        fl = f_layers[i] if i < len(f_layers) else None
        bl = b_layers[i] if i < len(b_layers) else None
        fc = _cut(fa, fl) if fl is not None else None
        bc = _cut(ba, bl) if bl is not None else None
        if fc is None or bc is None:
            out += [("F", t) for t in (fl.tolist() if fl is not None else [])]
            out += [("B", t) for t in (bl.tolist() if bl is not None else [])]
            continue
        f0, d_f, f1, c_f, f2 = fc
        b0, c_b, b1, d_b, b2 = bc
        for p, seg in (("B", b0), ("B", c_b), ("F", f0), ("B", b1), ("F", d_f), ("B", d_b),
                       ("F", f1), ("F", c_f), ("B", b2), ("F", f2)):
            out += [(p, t) for t in seg]
        windows += [([("B", c_b)], [("F", f0)]), ([("F", d_f), ("B", d_b)], [("B", b1), ("F", f1)]),
                    ([("F", c_f)], [("B", b2)])]
    return out + [("F", t) for t in f_post] + [("B", t) for t in b_post], windows


def _interfere(arrays: dict[str, np.ndarray], windows: list[tuple[list[Piece], list[Piece]]],
               new: dict[str, np.ndarray], slow: SlowFn,
               comm_ns: Callable[[str, int, str], float]) -> None:
    """Stretch the compute of each overlap window by what its all-to-alls take from it."""
    dur = arrays["dur_ns"]
    for comms, computes in windows:
        c_pos = [int(new[p][t]) for p, seg in comms for t in seg]
        x_pos = np.array([int(new[p][t]) for p, seg in computes for t in seg
                          if arrays["lane"][new[p][t]] == "compute"], dtype=np.int64)
        if not len(x_pos):
            continue
        c = sum(comm_ns(str(arrays["collective"][q]), int(arrays["msg_bytes"][q]),
                        str(arrays["algorithm"][q])) for q in c_pos)
        dur[x_pos] = spread(dur[x_pos], slow(c, float(dur[x_pos].sum())))


def _remap(u: Unit, new: np.ndarray, arrays: dict[str, np.ndarray]) -> Unit:
    """``u`` as a view of the merged unit: its chain markers at their merged indices."""
    def m(i: int) -> int:
        return int(new[i]) if i >= 0 else i
    return replace(u, arrays=arrays, entry=[m(i) for i in u.entry], tail=m(u.tail),
                   first_compute=m(u.first_compute),
                   layer_end={k: m(v) for k, v in u.layer_end.items()},
                   layer_start={k: m(v) for k, v in u.layer_start.items()},
                   marks={k: m(v) for k, v in u.marks.items()}, joins=[m(i) for i in u.joins])


#: the compute time (ns) an all-to-all of ``comm_ns`` costs the ``compute_ns`` beside it
SlowFn = Callable[[float, float], float]
#: SMs the dispatch / combine kernels take, by dispatcher: Megatron-Core's
#: ``moe_deepep_num_sms`` default (core_v0.15.0), Megatron-Bridge's ``moe_hybridep_num_sms``
#: (``set_common_perf_overrides``), NCCL's all-to-all as every NCCL collective here
DISPATCHER_SMS = {"alltoall": NCCL_SMS, "deepep": 20, "hybridep": 32}


def slowdown(ov: Overlaps, dispatcher: str) -> tuple[SlowFn, Callable[[str, int, str], float]]:
    """(``slow``, ``comm_ns``) of :func:`merge` for a layout's overlaps and dispatcher."""
    sms = ov.nccl_sms("ep") if dispatcher == "alltoall" else DISPATCHER_SMS.get(dispatcher, NCCL_SMS)
    return (lambda comm, compute: overlap_extra_ns(ov, comm, compute, sms),
            lambda coll, nbytes, algo: ov.est(coll, "ep", nbytes, algo) or 0.0)


def merge(fu: Unit, bu: Unit, cache: dict | None = None, slow: SlowFn | None = None,
          comm_ns: Callable[[str, int, str], float] | None = None
          ) -> tuple[Unit, Unit, Unit] | None:
    """(merged unit, the forward's view of it, the backward's view of it), None where a
    pass has an edge pointing backwards (the in-order lanes could then deadlock). ``cache``:
    results by the two units' identities (a stage merges the same pair of chunks often).
    ``slow`` and ``comm_ns`` (an all-to-all's uncongested time from its collective, size and
    algorithm): the compute beside each all-to-all lasts that much longer (the SMs the
    all-to-all kernels take, :func:`tracesim.build.overlap.overlap_extra_ns`)."""
    if cache is not None:
        key = (id(fu), id(bu))
        if key not in cache:  # the units kept alive: ids stay theirs
            cache[key] = (fu, bu, merge(fu, bu, None, slow, comm_ns))
        return cache[key][2]
    fa, ba = fu.arrays, bu.arrays
    assert fa is not None and ba is not None
    if (fa["src"] >= fa["dst"]).any() or (ba["src"] >= ba["dst"]).any():
        return None
    order, windows = _order(fa, ba)
    f_new = np.empty(len(fa["lane"]), dtype=np.int64)
    b_new = np.empty(len(ba["lane"]), dtype=np.int64)
    for pos, (p, t) in enumerate(order):
        (f_new if p == "F" else b_new)[t] = pos
    arrays: dict[str, np.ndarray] = {}
    for col in fa:
        if col in ("src", "dst"):
            continue
        out = np.empty(len(order), dtype=fa[col].dtype)
        out[f_new], out[b_new] = fa[col], ba[col]
        arrays[col] = out
    if slow is not None and comm_ns is not None:
        _interfere(arrays, windows, {"F": f_new, "B": b_new}, slow, comm_ns)
    keys = arrays["key"]  # the two passes' local keys stay distinct
    keys[f_new] = ["F" + str(k) for k in fa["key"].tolist()]
    keys[b_new] = ["B" + str(k) for k in ba["key"].tolist()]
    arrays["src"] = np.concatenate([f_new[fa["src"]], b_new[ba["src"]]])
    arrays["dst"] = np.concatenate([f_new[fa["dst"]], b_new[ba["dst"]]])
    fv, bv = _remap(fu, f_new, arrays), _remap(bu, b_new, arrays)
    merged = Unit(cols={c: arrays[c].tolist() for c in COLUMNS}, entry=fv.entry + bv.entry,
                  tail=max(fv.tail, bv.tail), arrays=arrays)
    return merged, fv, bv
