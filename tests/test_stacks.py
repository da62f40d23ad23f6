"""Software stacks (docs/stacks.md): stack selection and its report line, the TP overlaps'
exposed time, the distributed optimizer's overlaps, FP8 GEMMs and casts, stage layers."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.helpers import retarget
from tracesim.build.overlap import Overlaps, emit
from tracesim.build.units import Unit
from tracesim.catalog import load_model
from tracesim.errors import InputError
from tracesim.options import ReplayOptions
from tracesim.pipeline.build import build
from tracesim.report.terminal import metric_rows
from tracesim.specs.layout_options import parallel_from_options
from tracesim.specs.stages import check_split, stage_layer_counts, stage_split
from tracesim.template.analytic import first_principles_template
from tracesim.template.fp8 import fp8_template, is_fp8_gemm
from tracesim.template.resolve import ROp
from tracesim.template.stacks import STACKS, default_stack

ROOT = Path(__file__).resolve().parents[1]
# short kernels: the host would gate them; these tests are about the GPU side (test_host.py)
SMALL = {"model": "gpt3-1.7b", "cluster": "h100x8", "tp": 2, "dp": 4, "global_batch": 8,
         "micro_batch": 1, "seq_len": 512, "host_launch": False}


def _built(**extra):
    return build(None, ReplayOptions.from_mapping({**SMALL, **extra}))


def _names(b, lane: str | None = None) -> set[str]:
    t = b.graph.tasks
    if lane is not None:
        lanes = b.graph.lanes["name"].to_numpy().astype(str)
        t = t[lanes[t["lane"].to_numpy()] == lane]
    return set(t["name"].astype(str))


# ---------------------------------------------------------------- selection, report line


def test_default_stack_by_target_and_source() -> None:
    assert default_stack(SimpleNamespace(kind="gpu"), recorded_source=False) == "megatron-core"
    assert default_stack(SimpleNamespace(kind="cpu"), recorded_source=False) == "eager"
    assert default_stack(SimpleNamespace(kind="gpu"), recorded_source=True) == "eager"
    assert set(STACKS) == {"megatron-core", "megatron-2021", "torchtitan", "deepspeed", "transformers",
                           "eager"}


def test_megatron_core_defaults_and_report_line() -> None:
    b = _built()
    assert b.stack["name"] == "megatron-core"
    assert b.template.meta["source"] == "first-principles"
    par = b.par
    assert par.sp and par.zero == 1 and par.dp_overlap and par.overlap_param_gather
    assert par.tp_comm_overlap and par.tp_bwd_overlap and par.comm_interference
    assert b.stack["overlaps"] == ["tp_comm_overlap", "tp_bwd_overlap", "overlap_grad_reduce",
                                   "overlap_param_gather"]
    rows = dict(metric_rows({"stack": b.stack}))
    assert rows["stack"] == ("megatron-core; overlapped: tp comm, tp backward, grad reduce, "
                             "param gather")
    # what the user gives wins over the stack's default
    off = _built(tp_comm_overlap=False, zero=0)
    assert not off.par.tp_comm_overlap and off.par.zero == 0 and off.par.tp_bwd_overlap
    assert dict(metric_rows({"stack": _built(stack="megatron-2021").stack}))["stack"] == (
        "megatron-2021; no overlaps")


def test_eager_keeps_the_recorded_op_list_and_its_numbers() -> None:
    b = _built(stack="eager")
    assert "bundles/gpt-tiny" in str(b.template.meta["source"])
    assert not b.par.comm_interference and not b.par.tp_comm_overlap and b.par.zero == 0
    # the README's tour layout on the eager stack (golden value): the recorded op list, its
    # TP all-reduces NCCL collectives that pay NCCL's protocol latencies
    # (tracesim.network.protocols)
    res = retarget({"model": "gpt3-1.7b", "cluster": "h100x8", "tp": 2, "pp": 2, "dp": 2,
                    "micro_batch": 1, "global_batch": 8, "stack": "eager"})
    assert res.iteration_time_s == pytest.approx(0.090709296, abs=1e-9)


def test_a_recorded_source_keeps_its_kernels() -> None:
    bundle = ROOT / "workloads" / "bundles" / "gpt-tiny"
    opts = {"cluster": "h100x8", "dp": 8, "global_batch": 8, "micro_batch": 1}
    own = build(bundle, ReplayOptions.from_mapping(opts))
    assert own.stack["name"] == "eager"
    named = build(bundle, ReplayOptions.from_mapping({**opts, "stack": "megatron-core"}))
    # the recorded ops are kept; the named stack adds its overlaps
    assert named.template.meta["source"] == own.template.meta["source"] != "first-principles"
    assert [o.name for o in named.template.ops] == [o.name for o in own.template.ops]
    assert named.stack["kernels"] == {"ops": f"recorded ({own.template.meta['source']})"}
    assert own.stack["overlaps"] == ["overlap_grad_reduce"]
    assert named.stack["overlaps"] == ["overlap_grad_reduce", "overlap_param_gather"]
    assert named.par.zero == 1 and own.par.zero == 0


# ------------------------------------------------------------------------- TP overlaps


def _makespan(u: Unit) -> int:
    """Lanes run their tasks in order; a task starts when its lane is free and its
    predecessors are done; a collective lasts 1 ns per byte."""
    preds: dict[int, list[int]] = defaultdict(list)
    for a, b in zip(u.src, u.dst, strict=True):
        preds[b].append(a)
    end: dict[int, int] = {}
    free: dict[str, int] = defaultdict(int)
    c = u.cols
    for i in range(len(u)):
        d = c["dur_ns"][i] if c["kind"][i] == "gpu" else c["msg_bytes"][i]
        s = max([free[c["lane"][i]]] + [end[p] for p in preds[i]])
        end[i] = free[c["lane"][i]] = s + d
    return max(end.values())


def _gemm(dur: int, ub: str, phase: str = "fwd") -> ROp:
    return ROp(f"{ub}.gemm", "gpu", "gemm", phase, flops=1e9, bytes=1e6, dur_ns=dur, ub=ub)


def _tp(coll: str, nbytes: int, mark: str, ub: str) -> ROp:
    return ROp(f"{ub}.{coll}", "coll", "comm", "fwd", collective=coll, gkind="tp",
               msg_bytes=nbytes, overlap=mark, ub=ub)


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("comm_ns", [3000, 7000, 12000])
def test_ring_exchange_exposes_what_the_gemm_chunks_cannot_hide(n: int, comm_ns: int) -> None:
    g_ns = 8000
    u = Unit()
    emit(u, [_tp("all_gather", comm_ns, "ag_next", "qkv"), _gemm(g_ns, "qkv")],
         Overlaps(tp=n, ub=True), layer=0, phase="fwd")
    exposed = _makespan(u) - g_ns
    assert exposed == pytest.approx(max(0.0, comm_ns - g_ns * (n - 1) / n), abs=n)
    # without the overlap the all-gather runs before the GEMM
    plain = Unit()
    emit(plain, [_tp("all_gather", comm_ns, "ag_next", "qkv"), _gemm(g_ns, "qkv")],
         Overlaps(tp=n), layer=0, phase="fwd")
    assert _makespan(plain) == comm_ns + g_ns


def test_pipelined_reduce_scatter_exposes_its_last_chunk() -> None:
    u = Unit()
    emit(u, [_gemm(8000, "proj"), _tp("reduce_scatter", 4000, "rs_prev", "proj")],
         Overlaps(tp=4, ub=True), layer=0, phase="fwd")
    assert Overlaps(tp=4, ub=True).ub_method("proj", "fprop") == ("pipe", 24)
    assert _makespan(u) == 8000 + 4000 // 4  # 4 splits, the last one's reduce-scatter exposed
    # in closed form: the first chunk, then 3 chunks beside 3 reduce-scatter chunks, then the
    # last reduce-scatter chunk (tests/test_overlap_closed_form.py)
    gpu = [k for c, k in zip(u.cols["kind"], u.cols["chunks"], strict=True) if c == "gpu"]
    comm = [k for c, k in zip(u.cols["kind"], u.cols["chunks"], strict=True) if c != "gpu"]
    assert gpu == [1, 3] and comm == [3, 1]


def test_comm_interference_slows_the_overlapped_gemm() -> None:
    ov = Overlaps(tp=2, ub=True, interference=True, sm_count=132)
    assert ov.slowed(1000, 24) == round(1000 * 132 / 108)
    assert ov.slowed(1000, 24, overlapped_ns=500) == round(1000 + 500 * 24 / 108)
    assert Overlaps(tp=2, ub=True, sm_count=132).slowed(1000, 24) == 1000  # interference off
    u = Unit()
    emit(u, [_gemm(8000, "proj"), _tp("reduce_scatter", 4000, "rs_prev", "proj")], ov,
         layer=0, phase="fwd")
    assert sum(d for d, k in zip(u.cols["dur_ns"], u.cols["kind"], strict=True) if k == "gpu") == (
        4 * round(2000 * 132 / 108))


# ------------------------------------------------------------- distributed optimizer


def test_distributed_optimizer_overlaps_param_gather_and_grad_reduce() -> None:
    on = _built()
    ag = _names(on, "comm:dp_ag")
    assert ag == {"dp.param_all_gather"}
    assert "dp.reduce_scatter" in _names(on, "comm:dp") and "zero.all_gather" not in _names(on)
    # every first-forward segment waits for its bucket's all-gather
    t = on.graph.tasks
    gathers = set(np.flatnonzero((t["name"] == "dp.param_all_gather").to_numpy()).tolist())
    e = on.graph.edges
    waiting = e["dst"].to_numpy()[np.isin(e["src"].to_numpy(), list(gathers))]
    assert len(waiting) and (t["kind"].to_numpy()[waiting] == "gpu").all()
    off = _built(overlap_param_gather=False)
    assert "zero.all_gather" in _names(off) and "dp.param_all_gather" not in _names(off)
    late = _built(overlap_param_gather=False, dp_overlap=False, comm_interference=False)
    fast = retarget({**SMALL, "comm_interference": False}).iteration_time_s
    slow = retarget({**SMALL, "comm_interference": False, "overlap_param_gather": False,
                     "dp_overlap": False}).iteration_time_s
    assert late.par.zero == 1 and fast < slow


# -------------------------------------------------------------------------------- FP8


@pytest.mark.parametrize("recipe,per_elem", [("current", 6.0), ("delayed", 4.0),
                                             ("mxfp8", 4.0625)])
def test_fp8_template_casts(recipe: str, per_elem: float) -> None:
    base = first_principles_template(load_model("gpt3-1.7b"))
    tpl = fp8_template(base, recipe, param_gather=False)
    gemms = [o for o in tpl.ops if is_fp8_gemm(o) and o.kind == "compute"]
    casts = [o for o in tpl.ops if o.name.endswith(".fp8_cast")]
    assert gemms and all(o.dtype == "fp8" for o in gemms) and len(casts) == len(gemms)
    # what sequence parallelism gathers (a column-parallel input, a row-parallel output
    # gradient) is cast on the shard; on Hopper its transpose waits for the gather
    gathered = [o for o in casts if o.shard == "sequence"]
    assert len(gathered) == 4 and all(o.bytes.endswith("/tps") for o in gathered)
    head = f"({per_elem:g}-min(tps-1,1))*" if recipe in ("current", "delayed") else f"{per_elem:g}*"
    assert all(o.bytes.startswith(head) for o in gathered)
    assert all(o.bytes.startswith(f"{per_elem:g}*") for o in casts if o not in gathered)
    assert not any(o.dtype == "fp8" for o in tpl.ops if o.op_class == "attention")
    weight = [o for o in tpl.ops if o.name == "fp8.weight_cast"]
    assert [o.bytes for o in weight] == ["4*params"]
    assert [o.bytes for o in fp8_template(base, recipe, True).ops
            if o.name == "fp8.weight_cast"] == ["2*params"]


@pytest.mark.parametrize("recipe,cast", [("current", 5.0), ("delayed", 3.0)])
def test_fp8_transposes_by_gpu(recipe: str, cast: float) -> None:
    """Hopper's FP8 GEMMs take one layout: the per-tensor recipes write transposed copies,
    of a gathered tensor after the gather (Transformer Engine ``update_usage``); Blackwell's
    take either, so no transposes at all (``is_non_tn_fp8_gemm_supported``)."""
    base = first_principles_template(load_model("gpt3-1.7b"))
    hopper = fp8_template(base, recipe, param_gather=False)
    tr = [o for o in hopper.ops if o.name.endswith(".fp8_transpose")]
    assert sorted(o.name for o in tr) == ["attn.proj.fp8_transpose", "attn.qkv.fp8_transpose",
                                          "mlp.fc1.fp8_transpose", "mlp.fc2.fp8_transpose"]
    assert all(o.phase == "bwd" and o.when == "tps-1" and o.bytes.startswith("2*") for o in tr)
    blackwell = fp8_template(base, recipe, param_gather=False, transposes=False)
    assert not any(o.name.endswith(".fp8_transpose") for o in blackwell.ops)
    assert all(o.bytes.startswith(f"{cast:g}*") for o in blackwell.ops if o.name.endswith(".fp8_cast"))
    assert [o.bytes for o in blackwell.ops if o.name == "fp8.weight_cast"] == ["3*params"]
    assert [o.bytes for o in fp8_template(base, recipe, True, transposes=False).ops
            if o.name == "fp8.weight_cast"] == []
    # block-scaled recipes quantize both layouts on every GPU
    mx = fp8_template(base, "mxfp8", param_gather=False, gemm_dtype="mxfp8", transposes=False)
    assert not any(o.name.endswith(".fp8_transpose") for o in mx.ops)
    assert all(o.bytes.startswith("4.0625*") for o in mx.ops if o.name.endswith(".fp8_cast"))


def test_fp8_transposes_in_the_replay() -> None:
    def transposes(**kw: object) -> int:
        t = _built(dtype="fp8", **kw).graph.tasks
        return int(t["name"].astype(str).str.contains("fp8_transpose").sum())

    assert transposes(tp=2, dp=1) > 0  # h100x8, TP 2 with SP: the gathered tensors
    assert transposes(tp=1, dp=2) == 0  # nothing gathered: cast and transpose together


def test_fp8_gemms_run_at_the_fp8_rate() -> None:
    def qkv_ns(b) -> float:
        t = b.graph.tasks
        return float(t[t["name"].astype(str).str.startswith("attn.qkv")
                       & (t["kind"] == "gpu")]["dur_ns"].sum())

    bf16, fp8 = _built(), _built(dtype="fp8")
    assert fp8.par.fp8_recipe == "current" and fp8.par.fp8_param_gather
    assert fp8.stack["fp8"] == {"recipe": "current", "param_gather": True, "attention": False}
    assert 0.4 < qkv_ns(fp8) / qkv_ns(bf16) < 0.8
    assert any(".fp8_cast" in n for n in _names(fp8))


@pytest.mark.parametrize("recipe,cluster,wire", [("current", "h100x8", 1.0),
                                                  ("mxfp8", "dgx-b200", 1.0 + 1 / 32)])
def test_fp8_tp_gathers_move_the_quantized_tensor(recipe: str, cluster: str, wire: float) -> None:
    """With sequence parallelism, what feeds an FP8 GEMM is gathered in FP8 (Transformer
    Engine's LayerNormLinear / Linear): the forward all-gather of the QKV / fc1 input and its
    backward re-gather, and a row-parallel linear's output gradient; the reduce-scatters
    carry BF16. The all-gathers moved 0 bytes when the cast op had no output size."""
    seq, h = 512, load_model("gpt3-1.7b").hidden
    full = seq * h  # one micro-batch's tokens x hidden, gathered over TP

    def sizes(b) -> dict[tuple[str, str, str], set[int]]:
        t = b.graph.tasks
        c = t[t["kind"] == "coll"]
        out: dict[tuple[str, str, str], set[int]] = defaultdict(set)
        for name, coll, phase, m in zip(c["name"].astype(str), c["collective"].astype(str),
                                        c["phase"].astype(str), c["msg_bytes"], strict=True):
            out[(name.split("#")[0], coll, phase)].add(int(m))
        return out

    bf16 = sizes(_built(cluster=cluster, tp_comm_overlap=False))
    fp8 = sizes(_built(cluster=cluster, dtype="fp8", fp8_recipe=recipe, tp_comm_overlap=False))
    for mod in ("attn.qkv", "mlp.fc1"):
        assert bf16[(f"{mod}.tp_f", "all_gather", "fwd")] == {2 * full}
        assert fp8[(f"{mod}.tp_f", "all_gather", "fwd")] == {round(wire * full)}
        assert fp8[(f"{mod}.tp_regather", "all_gather", "bwd")] == {round(wire * full)}
        assert fp8[(f"{mod}.tp_f", "reduce_scatter", "bwd")] == {2 * full}
    for mod in ("attn.residual", "mlp.residual"):
        assert fp8[(f"{mod}.tp_g", "reduce_scatter", "fwd")] == {2 * full}
        assert fp8[(f"{mod}.tp_g", "all_gather", "bwd")] == {round(wire * full)}
    assert min(min(v) for v in fp8.values()) > 0


def test_mxfp8_needs_blackwell() -> None:
    with pytest.raises(InputError, match="Blackwell"):
        _built(dtype="fp8", fp8_recipe="mxfp8")
    with pytest.raises(InputError, match="no FP8 kernels"):
        _built(dtype="fp8", stack="megatron-2021")


# ------------------------------------------------------------------------ stage layers


def test_126_layers_on_pp16_with_first_and_last_stage_layers() -> None:
    model = load_model("llama3.1-405b")
    assert model.layers == 126
    opts = {"tp": 8, "pp": 16, "first_stage_layers": 7, "last_stage_layers": 7}
    par = parallel_from_options(opts, model, 128)
    assert stage_layer_counts(model, par) == (7,) + (8,) * 14 + (7,)
    check_split(model, par)
    with pytest.raises(InputError, match="not divisible by pp 16"):
        check_split(model, parallel_from_options({"tp": 8, "pp": 16}, model, 128))
    with pytest.raises(InputError, match="not divisible by the other 14 stages"):
        check_split(model, parallel_from_options({**opts, "last_stage_layers": 6}, model, 128))


def test_interleaved_uneven_split() -> None:
    model = dataclasses.replace(load_model("gpt3-1.7b"), layers=26)
    par = parallel_from_options({"pp": 4, "vpp": 2, "schedule": "interleaved",
                                 "first_stage_layers": 5, "last_stage_layers": 5}, model, 4)
    check_split(model, par)
    assert stage_layer_counts(model, par) == (5, 8, 8, 5)
    # chunk c runs on stage c % pp; a stage's layers dealt to its chunks, earlier ones first
    assert stage_split(model, par) == (3, 4, 4, 3, 2, 4, 4, 2)


def test_126_layers_on_pp16_from_the_command_line() -> None:
    import json

    from click.testing import CliRunner

    from tracesim.cli import cli

    r = CliRunner().invoke(cli, ["replay", "--model", "llama3.1-405b", "--cluster", "h100x128",
                                 "--tp", "8", "--pp", "16", "--first-stage-layers", "7",
                                 "--last-stage-layers", "7", "--global-batch", "32",
                                 "--seq-len", "2048", "--network", "estimate", "--json"], obj={})
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    compute = [v["compute_s"] for v in res["per_stage_breakdown"].values()]
    assert len(compute) == 16 and len(set(compute[1:15])) == 1  # 8 layers each
    mid = compute[1]
    # 7 layers, plus the embedding (first) or the LM head and loss (last)
    assert 7 / 8 * mid < compute[0] < 7 / 8 * mid * 1.02
    assert 7 / 8 * mid < compute[15] < mid


def test_no_userbuffers_default_on_a_full_mesh_node() -> None:
    """On a full-mesh node the userbuffers ring exchange would use one link of the mesh per
    step: the megatron-core stack leaves the TP overlap off there unless it is given, and
    says so."""
    opts = {"model": "gpt3-1.7b", "cluster": "mi300x-platform", "tp": 4, "dp": 2,
            "micro_batch": 1, "global_batch": 8}
    off = retarget(opts)
    assert "tp_comm_overlap" not in off.to_dict()["stack"]["overlaps"]
    assert any("full mesh" in w for w in off.warnings)
    on = retarget({**opts, "tp_comm_overlap": True})
    assert "tp_comm_overlap" in on.to_dict()["stack"]["overlaps"]
    assert any("on as given" in w for w in on.warnings)
    nvl = retarget({**opts, "cluster": "h100x8"})  # a switched NVLink node keeps it
    assert "tp_comm_overlap" in nvl.to_dict()["stack"]["overlaps"]
    assert not any("full mesh" in w for w in nvl.warnings)
