"""Trace-derived layer templates: extract the repeated block from a recorded op table.

:func:`extract_template` reads the canonical op table of one recorded step (rank 0) and
returns a :class:`~tracesim.template.layer.LayerTemplate`:

1. *ops*: the outermost CPU ops (whose parent is not a CPU op: ``aten::linear``,
   ``aten::layer_norm``, ``autograd::engine::evaluate_function: AddmmBackward0``, optimizer
   ops). Their cost is that of their leaf descendants (the ops that call nothing else).
   Ops that cost nothing (views, reshapes) are dropped and their time, with the idle time
   before them, is added to the next op kept, so the kept ops' times sum to the step.
2. *sections*: from the ``nn.Module`` scope: ``blocks.<i>...`` is the block (layer ``i``),
   ``embed...`` the prologue, ``norm_f`` / ``head`` / ``loss`` the epilogue, the optimizer
   phase the optimizer; unscoped ops join the section of the op before them. This is the
   module-scope detection; :func:`repeating_period` is the fallback for traces without
   scopes (the shortest period of the op-name sequence).
3. *the block*: the ops of the first layer (of each kind: dense, MoE) are the template; the
   measured time of each is the median over all layers of that kind with the same op
   sequence. Backward ops are tied to their forward op through the autograd sequence number.
4. *shapes*: every recorded dimension is mapped to an expression of the model dimensions
   (the bundle's model spec, batch and sequence length; the tiny stored models have pairwise
   distinct sizes so each value names one dimension). Unmapped values stay literal numbers
   and are counted in ``meta['unmapped_dims']``.
5. *parallel rules* come from module names (Megatron's): ``qkv``/``q``/``k``/``v``/``fc1``/
   ``gate``/``up``/``head`` are column-parallel, ``proj``/``fc2``/``down`` row-parallel,
   ``embed.tok`` vocab-parallel, attention core and activations feature-split, norms and
   residuals sequence-split with SP. EP all-to-all and the vocab-parallel loss all-reduce are
   added as explicit communication ops (a single-process trace has none).
6. *times*: the profiler's cost per event (the collector's loop microbenchmark,
   :func:`tracesim.trace.overhead.profiler_overhead`) is taken out of each op where its events are (an AdamW step
   of 250 tiny ops carries ~30x the overhead per millisecond of a GEMM), then every op is
   scaled by the bundle's unprofiled step time over what is left of the profiled step
   (``meta['residual_scale']``, the rest of the profiler's cost, spread in proportion to
   time). Without a calibration, every op is scaled by the unprofiled over the profiled
   step (``meta['time_scale']``, recorded in any case) as before.
7. *the optimizer*: its ops become one op per local parameter (``optimizer.step``) that
   keeps its host calls apart (``calls``, per parameter tensor), so that their fixed time
   follows the tensor count and only the bytes follow the parameter count.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from statistics import median
from typing import Any

import pandas as pd

from tracesim.errors import InputError
from tracesim.fileio import read_yaml
from tracesim.specs.model import ModelSpec, model_from_dict
from tracesim.template.layer import LayerTemplate, TemplateOp, evaluate, load_template
from tracesim.template.scopes import (
    classify_scope,
    comm_op,
    dim_expressions,
    module_params,
    module_tensors,
    moe_tensors,
    parallel_rules,
    repeating_period,
    short_name,
    symbolic,
)
from tracesim.trace.overhead import OverheadTaker, profiler_overhead

_EVAL = "autograd::engine::evaluate_function: "


def bundle_meta(source: str | Path) -> dict[str, Any] | None:
    p = Path(source)
    if p.is_dir() and (p / "meta.yaml").exists():
        meta = read_yaml(p / "meta.yaml")
        return meta if isinstance(meta, dict) else None
    return None


def template_from_source(source: str | Path, model: ModelSpec | None = None) -> LayerTemplate:
    """The template of a bundle (extracted), or a workload directory's ``template.yaml``."""
    p = Path(source)
    if p.is_dir() and (p / "template.yaml").exists():
        return load_template(p / "template.yaml")
    from tracesim.trace.sources import load_source, source_kind

    kind = source_kind(p)
    if kind != "bundle":
        raise InputError(
            "retargeting needs a bundle (its meta.yaml gives the recorded model dimensions) or a "
            "workload directory with template.yaml", p)
    src = load_source(p)
    meta = src.meta
    rec = model_from_dict(meta["model"], p / "meta.yaml")
    return extract_template(src.op_table, rec, int(meta["batch"]), int(meta["seq_len"]),
                            device=str(meta.get("device") or src.device),
                            step_time_s=_median_step(meta), source=str(p),
                            overhead_ns=profiler_overhead(meta, rank=0))


def _median_step(meta: Mapping[str, Any]) -> float | None:
    m = meta.get("measured_step_time_s")
    if isinstance(m, Mapping) and isinstance(m.get("median"), (int, float)):
        return float(m["median"])
    return None


def extract_template(
    ops: pd.DataFrame,
    model: ModelSpec,
    batch: int,
    seq_len: int,
    *,
    device: str,
    step_time_s: float | None = None,
    source: str = "",
    overhead_ns: tuple[float, float] | None = None,
) -> LayerTemplate:
    """Extract the layer template from the op table of one recorded step (see module doc).

    ``step_time_s`` is the unprofiled step time (s) the op times are mapped to;
    ``overhead_ns`` the profiler's cost per traced op and per annotation (ns), measured
    apart from this step (:func:`~tracesim.trace.overhead.profiler_overhead`), taken out of each op where it was
    paid; without it every op is scaled alike.
    """
    t = ops[ops["rank"] == ops["rank"].min()] if len(ops) else ops
    steps = [s for s in t["step"].unique() if s]
    if steps:
        t = t[t["step"] == steps[0]]
    prof_step = t[(t["cat"] == "annotation") & t["name"].str.startswith("ProfilerStep")]
    cpu = t[t["cat"] == "cpu_op"].sort_values(["ts_ns", "dur_ns"], ascending=[True, False])
    if cpu.empty:
        raise InputError("the trace has no CPU ops to extract a template from", source or None)
    if not (cpu["scope"].str.startswith("blocks.")).any():
        names = cpu["name"].tolist()
        raise InputError(
            f"no 'nn.Module: blocks.<i>' scopes in the trace (op-sequence period "
            f"{repeating_period(names[:2000])}); record with the tracesim collector's module "
            "annotations", source or None)
    eids = cpu["event_id"].to_numpy()
    parent = dict(zip(eids.tolist(), cpu["parent_id"].to_numpy().tolist(), strict=True))
    is_cpu = set(eids.tolist())
    top_of: dict[int, int] = {}
    for e in eids.tolist():  # parents start no later than their children
        p = parent[e]
        top_of[e] = top_of.get(p, int(p)) if p in is_cpu else int(e)
    # the outermost ops with a cost: an op's own cost includes what it calls; wrappers
    # (autograd nodes, module calls) cost nothing, so their costed descendants stand in
    flops_of = dict(zip(eids.tolist(), cpu["flops"].to_numpy().tolist(), strict=True))
    bytes_of = dict(zip(eids.tolist(), cpu["bytes"].to_numpy().tolist(), strict=True))
    name_of = dict(zip(eids.tolist(), cpu["name"].tolist(), strict=True))
    shapes_of = dict(zip(eids.tolist(), cpu["shapes"].tolist(), strict=True))
    costed_anc: dict[int, bool] = {}
    leaves: dict[int, list[tuple[str, str, float, float]]] = {}
    for e in eids.tolist():  # parents come first
        p = parent[e]
        covered = p in is_cpu and (costed_anc.get(p, False) or flops_of[p] > 0 or bytes_of[p] > 0)
        costed_anc[e] = covered
        if not covered and (flops_of[e] > 0 or bytes_of[e] > 0):
            leaves.setdefault(top_of[e], []).append(
                (str(name_of[e]), str(shapes_of[e] or ""), float(flops_of[e]), float(bytes_of[e])))
    tops = cpu[cpu["event_id"].isin([e for e in eids.tolist() if top_of[e] == e])]
    seq_owner: dict[int, int] = {}
    for e, s, ph in zip(cpu["event_id"].tolist(), cpu["seq_nr"].tolist(), cpu["phase"].tolist(), strict=True):
        if s >= 0 and ph == "fwd":
            seq_owner.setdefault(int(s), top_of[e])
    table = dim_expressions(model, batch, seq_len)
    unmapped: list[int] = []
    start = int(prof_step["ts_ns"].min()) if len(prof_step) else int(tops["ts_ns"].min())
    prof_dur = float(prof_step["dur_ns"].max()) if len(prof_step) else float(tops["ts_ns"].max() + tops["dur_ns"].max() - start)
    scale = (step_time_s * 1e9 / prof_dur) if step_time_s and prof_dur > 0 else 1.0
    overhead = OverheadTaker(t, start, prof_dur, overhead_ns)
    resid = overhead.residual_scale(step_time_s)
    kept: list[dict[str, Any]] = []
    prev_end = start
    last_ctx = ("prologue", -1, "", -1)
    for _, r in tops.iterrows():
        e = int(r["event_id"])
        phase = str(r["phase"]) if r["phase"] in ("fwd", "bwd", "opt") else ("opt" if last_ctx[0] == "optimizer" else "fwd")
        section, layer, module, ex = classify_scope(str(r["scope"]))
        if phase == "opt":
            section, layer, module = "optimizer", -1, "optimizer"
        elif not section:
            section, layer, module, ex = last_ctx
        last_ctx = (section, layer, module, ex)
        end = int(r["ts_ns"] + r["dur_ns"])
        lv = leaves.get(e, [])
        if not lv:
            continue
        dur = overhead.take(prev_end, end, max(end - prev_end, int(r["dur_ns"]))) * resid
        prev_end = max(prev_end, end)
        fwd_top = seq_owner.get(int(r["seq_nr"]), -1) if phase == "bwd" else -1
        kept.append({"eid": e, "phase": phase, "section": section, "layer": layer, "module": module,
                     "expert": ex, "name": str(r["name"]), "op_class": str(r["op_class"]),
                     "dur": dur, "leaves": lv, "fwd_top": fwd_top})
    info: dict[str, Any] = {"time_scale": round(scale, 6), "residual_scale": round(resid, 6)}
    if overhead.active:
        info["profiler_overhead_ns"] = [round(x, 1) for x in overhead.per_ns]
    return _assemble(kept, model, table, unmapped, device, source, info)


def _part(k: dict[str, Any], by_eid: Mapping[int, dict[str, Any]], kept: list[dict[str, Any]]) -> str:
    mod = k["module"]
    if k["phase"] == "bwd" and k["fwd_top"] in by_eid:
        mod = by_eid[k["fwd_top"]]["module"]
    if mod.startswith(("attn", "ln1")):
        return "attn"
    if mod.startswith(("ln2", "mlp")):
        return "mlp"
    return "attn" if _before_ln2(k, kept) else "mlp"


def _assemble(kept: list[dict[str, Any]], model: ModelSpec, table: Mapping[int, str],
              unmapped: list[int], device: str, source: str, info: Mapping[str, Any]) -> LayerTemplate:
    by_eid = {k["eid"]: k for k in kept}
    for k in kept:
        k["part"] = _part(k, by_eid, kept) if k["section"] == "block" else ""
    layers = sorted({k["layer"] for k in kept if k["section"] == "block"})
    dense_layers = [li for li in layers if not model.moe_layer(li)]
    names: dict[int, str] = {}
    groups: list[tuple[str, str, str, dict[int, list[dict[str, Any]]]]] = []
    for phase in ("fwd", "bwd"):
        parts = [("attn", layers), ("mlp", dense_layers)]
        for part, lys in (parts if phase == "fwd" else parts[::-1]):
            per = {li: [k for k in kept if k["section"] == "block" and k["layer"] == li
                        and k["phase"] == phase and k["part"] == part] for li in lys}
            per = {li: sq for li, sq in per.items() if sq}
            if per:
                groups.append(("block", phase, part, per))
    for section in ("prologue", "epilogue", "optimizer"):
        for phase in ("fwd", "bwd", "opt"):
            seq = [k for k in kept if k["section"] == section and k["phase"] == phase]
            if seq:
                groups.append((section, phase, "", {0: seq}))
    ops: dict[tuple[str, str, str], list[TemplateOp]] = {}
    for section, phase, part, per in groups:
        ops[(section, phase, part)] = _make_ops(per, section, part, model, table, unmapped, names)
    block: list[TemplateOp] = []
    block += ops.get(("block", "fwd", "attn"), []) + ops.get(("block", "fwd", "mlp"), [])
    moe_fwd: list[TemplateOp] = []
    if model.is_moe:
        from tracesim.template.analytic import _moe_ops, backward_of

        moe_fwd = [op.replace(tensors=moe_tensors(op, model))
                   for op in _moe_ops(model, model.norm == "layernorm")]
        block += moe_fwd
        for op in reversed(moe_fwd):
            if op.kind == "comm":
                block.append(op.replace(phase="bwd"))
            else:
                block.append(backward_of(op))
    block += ops.get(("block", "bwd", "mlp"), []) + ops.get(("block", "bwd", "attn"), [])
    out: list[TemplateOp] = []
    for section in ("prologue", "block", "epilogue", "optimizer"):
        if section == "block":
            out += block
            continue
        for phase in ("fwd", "bwd", "opt"):
            out += ops.get((section, phase, ""), [])
    out = _fix_loss(out)
    if any(op.section == "optimizer" for op in out):
        out = _collapse_optimizer(out, model)
    meta = {"source": source or "trace", "family": model.family, "device": device,
            "dtype": model.dtype, "attention": "flash", **info,
            "unmapped_dims": sorted(set(unmapped)),
            "moe": "analytic expert block (recorded per-expert loop has data-dependent sizes)"
            if model.is_moe else ""}
    tpl = LayerTemplate(tuple(out), meta)
    tpl.check()
    return tpl


def _make_ops(per: dict[int, list[dict[str, Any]]], section: str, part: str, model: ModelSpec,
              table: Mapping[int, str], unmapped: list[int], names: dict[int, str]) -> list[TemplateOp]:
    """Template ops of one (section, phase, part): the first layer's op list, each op's time
    the median over the layers with the same op sequence."""
    first = next(iter(per.values()))
    taken: dict[str, int] = {}
    labels = []
    for k in first:
        base = f"{k['module']}:{short_name(k['name'])}"
        n = taken.get(base, 0)
        taken[base] = n + 1
        labels.append(base if n == 0 else f"{base}#{n}")
    sig = [(k["module"], k["name"]) for k in first]
    same = [sq for sq in per.values() if [(k["module"], k["name"]) for k in sq] == sig]
    for sq in same:
        for i, k in enumerate(sq):
            names.setdefault(k["eid"], labels[i])
    out = []
    seen_modules: set[str] = set()
    for i, k in enumerate(first):
        lv_rows = k["leaves"]
        sym = [[n, symbolic(json.loads(sh) if sh else [], table, unmapped, False)] for n, sh, _, _ in lv_rows]
        rules = parallel_rules(section, k["module"], model)
        params = tensors = "0"
        if k["phase"] == "fwd" and k["module"] not in seen_modules:
            params = module_params(k["module"], model)
            tensors = module_tensors(k["module"], model) if params != "0" else "0"
            seen_modules.add(k["module"])
        out.append(TemplateOp(
            name=labels[i], section=section, phase=k["phase"], op_class=k["op_class"],
            flops=rules["flops"], bytes=rules["bytes"], out="b*s/cp*h", params=params, part=part,
            shard=rules["shard"], tp_style=rules["tp_style"], recompute=rules["recompute"],
            measured_ns=float(median(sq[i]["dur"] for sq in same)),
            src_flops=sum(x[2] for x in lv_rows), src_bytes=sum(x[3] for x in lv_rows),
            src_units=_src_units(lv_rows),
            count=len(lv_rows), leaves=json.dumps(sym),
            fwd=names.get(k["fwd_top"], "") if k["phase"] == "bwd" else "", tensors=tensors,
        ))
    return out


def _src_units(rows: list) -> float:
    """Work units of the leaf with the most FLOPs (rows: name, shapes JSON, flops, bytes)."""
    from tracesim.ops.rules import work_units_of_dims

    if not rows:
        return 1.0
    name, sh, _, _ = max(rows, key=lambda x: x[2])
    return work_units_of_dims(name, json.loads(sh) if sh else [])


def _before_ln2(k: dict[str, Any], kept: list[dict[str, Any]]) -> bool:
    same = [x for x in kept if x["layer"] == k["layer"] and x["phase"] == "fwd"]
    ln2 = next((x["eid"] for x in same if x["module"].startswith(("ln2", "mlp"))), None)
    ref = k["fwd_top"] if k["phase"] == "bwd" else k["eid"]
    return ln2 is None or ref < ln2


def _fix_loss(ops: list[TemplateOp]) -> list[TemplateOp]:
    """Add the vocab-parallel loss all-reduce (max, sum, target logit) after the loss."""
    out: list[TemplateOp] = []
    for i, op in enumerate(ops):
        out.append(op)
        nxt = ops[i + 1] if i + 1 < len(ops) else None
        if op.section == "epilogue" and op.phase == "fwd" and op.module == "loss" and (
                nxt is None or nxt.module != "loss" or nxt.phase != "fwd"):
            out.append(comm_op("loss.allreduce", "all_reduce", "tp", "12*b*s/cp", "fwd", "epilogue", ""))
    return out


def _collapse_optimizer(ops: list[TemplateOp], model: ModelSpec) -> list[TemplateOp]:
    """The recorded optimizer ops as one op whose cost is per local parameter.

    Its host calls (``calls``: the recorded calls per parameter tensor times ``tensors``)
    are kept apart: a single-tensor optimizer (``torch.optim.AdamW`` without ``foreach``)
    makes the same calls for every tensor whatever its size, so their fixed time follows
    the tensor count, not the parameter count (:func:`tracesim.template.durations.make_op_time`).
    The recorded tensors are those of the template's forward ops at the recorded model.
    """
    opt = [op for op in ops if op.section == "optimizer"]
    rest = [op for op in ops if op.section != "optimizer"]
    n_params = float(model.params())
    flops = sum(op.src_flops for op in opt)
    nbytes = sum(op.src_bytes for op in opt)
    count = sum(op.count for op in opt)
    n_tensors = recorded_tensors(rest, model)
    calls = f"{count / n_tensors:.6g}*tensors" if n_tensors > 0 else "0"
    step = TemplateOp(
        "optimizer.step", "optimizer", "opt", "optimizer",
        flops=f"{flops / n_params:.6g}*params", bytes=f"{nbytes / n_params:.6g}*params",
        measured_ns=sum(op.measured_ns for op in opt), src_flops=flops, src_bytes=nbytes,
        count=count, calls=calls,
    )
    return rest + [step]


def recorded_tensors(ops: list[TemplateOp], model: ModelSpec) -> float:
    """Parameter tensors of the recorded model: the prologue's and epilogue's forward ops'
    ``tensors`` plus the block's times the layers (dense and MoE layers apart)."""
    def total(section: str, parts: tuple[str, ...] | None = None) -> float:
        return sum(float(evaluate(op.tensors, {"experts": float(max(model.experts, 1)), "ep": 1.0}))
                   for op in ops if op.section == section and op.phase == "fwd"
                   and (parts is None or op.part in parts))
    dense = sum(1 for i in range(model.layers) if not model.moe_layer(i))
    return (total("prologue") + total("epilogue") + dense * total("block", ("attn", "mlp"))
            + (model.layers - dense) * total("block", ("attn", "moe")))
