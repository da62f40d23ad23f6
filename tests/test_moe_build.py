"""MoE as Megatron-Core runs it, in the built graph: first-k dense layers, shared experts, MLA,
all-to-all sizes in closed form, load imbalance and capacity, memory, and a replay of every
new spec on the shipped 1024-GPU cluster (docs/moe.md)."""

from __future__ import annotations

import pandas as pd
import pytest

from tracesim.catalog import load_model
from tracesim.errors import InputError
from tracesim.hardware.device import get_device
from tracesim.report.memory import layer_activation_bytes
from tracesim.specs.model import ModelSpec
from tracesim.specs.parallel import ParallelSpec
from tracesim.template.analytic import first_principles_template
from tracesim.template.durations import make_op_time
from tracesim.template.resolve import model_flops_per_iteration, resolve_template

from .helpers import build, retarget

#: a small DeepSeek-style model: MLA, 8 routed experts top-2, 1 shared expert, first layer dense
TINY = ModelSpec(name="ds-tiny", family="moe", layers=4, hidden=256, heads=4, kv_heads=4,
                 vocab=1024, seq_len=128, ffn_hidden=512, activation="swiglu", norm="rmsnorm",
                 tied_embeddings=False, experts=8, top_k=2, moe_ffn_hidden=64, shared_experts=1,
                 first_k_dense=1, q_lora_rank=96, kv_lora_rank=64, qk_nope_head_dim=32,
                 qk_rope_head_dim=16, v_head_dim=32)
EB = 2  # bf16


def rank0(b) -> pd.DataFrame:
    t = b.graph.tasks
    return t[t["rank"] == 0]


def _names(x: pd.DataFrame, layer: int, phase: str = "fwd") -> set[str]:
    sel = x[(x["layer"] == layer) & (x["phase"] == phase)]
    return set(sel["name"].astype(str))


def test_first_k_dense_layers_and_shared_experts_in_the_graph() -> None:
    x = rank0(build(TINY, dp=2, ep=2, global_batch=2))
    dense, moe = _names(x, 0), _names(x, 1)
    assert {"mlp.fc1", "mlp.fc2"} <= dense and not any(n.startswith("moe.") for n in dense)
    assert {"moe.shared.fc1", "moe.shared.fc2", "moe.fc1", "moe.fc2", "moe.dispatch",
            "moe.combine"} <= moe and "mlp.fc1" not in moe
    for layer in (2, 3):
        assert _names(x, layer) == moe
    assert {"moe.shared.fc1", "moe.fc1"} <= _names(x, 1, "bwd")
    # Megatron-Core order: shared experts, router, dispatch, grouped GEMMs, combine
    order = list(x[(x["layer"] == 1) & (x["phase"] == "fwd")]["name"].astype(str))
    pos = {n: order.index(n) for n in ("moe.shared.fc1", "moe.router", "moe.dispatch",
                                       "moe.fc1", "moe.combine")}
    assert sorted(pos.values()) == list(pos.values())
    shared = x[(x["name"] == "moe.shared.fc1") & (x["phase"] == "fwd")]["flops"].iloc[0]
    assert shared == 2 * 2 * 128 * 256 * TINY.shared_ffn  # every token, gate and up


def test_mla_ops_and_flops() -> None:
    x = rank0(build(TINY, global_batch=1))
    attn = _names(x, 0)
    assert {"attn.q_down", "attn.kv_down", "attn.q_norm", "attn.kv_norm", "attn.q_up",
            "attn.kv_up", "attn.core", "attn.proj"} <= attn and "attn.qkv" not in attn
    core = x[(x["name"] == "attn.core") & (x["phase"] == "fwd")]["flops"].iloc[0]
    qk, v = TINY.qk_head_dim, TINY.v_dim  # 48 and 32 (DeepSeek-V3: 192 and 128)
    assert core == 2 * 128 * 128 * TINY.heads * (qk + v)
    kv_down = x[(x["name"] == "attn.kv_down") & (x["phase"] == "fwd")]["flops"].iloc[0]
    assert kv_down == 2 * 128 * 256 * (TINY.kv_lora_rank + TINY.qk_rope_head_dim)


def test_mla_with_tensor_parallelism_gathers_the_latents() -> None:
    x = rank0(build(TINY, tp=2, sp=True, global_batch=1))
    ag = x[(x["name"] == "attn.q_up.tp_f") & (x["phase"] == "fwd")]
    lat = TINY.q_lora_rank + TINY.kv_lora_rank + TINY.qk_rope_head_dim
    assert (ag["collective"] == "all_gather").all() and len(ag) == TINY.layers
    assert (ag["msg_bytes"] == 128 * lat * EB).all()


@pytest.mark.parametrize(("tp", "ep"), [(1, 2), (2, 4), (1, 8)])
def test_all_to_all_sizes_are_tokens_topk_hidden(tp: int, ep: int) -> None:
    b = build(TINY, tp=tp, sp=tp > 1, dp=ep, ep=ep, global_batch=ep, micro_batch=1)
    a2a = rank0(b)
    a2a = a2a[a2a["collective"] == "all_to_all"]
    moe_layers = sum(TINY.moe_layer(i) for i in range(TINY.layers))
    assert len(a2a) == 4 * moe_layers  # dispatch and combine, forward and backward
    # per rank and direction: its (sequence-parallel) tokens x top_k x hidden x dtype bytes
    assert (a2a["msg_bytes"] == 128 // tp * TINY.top_k * 256 * EB).all()
    assert {b.graph.groups[g] for g in a2a["group"]} == {tuple(range(0, ep * tp, tp))}


def test_imbalance_scales_the_expert_gemms_and_capacity_caps_them() -> None:
    m = load_model("mixtral-8x7b")
    dev = get_device("h100")
    tpl = first_principles_template(m)

    def section(**kw: object):
        par = ParallelSpec(dp=8, ep=8, seq_len=4096, global_batch=8, **kw)  # type: ignore[arg-type]
        op_t, _ = make_op_time(tpl, dev, par.dtype)
        res = resolve_template(tpl, m, par, op_t)
        assert res.moe is not None
        ops = {(r.name, r.phase): r for r in res.moe.fwd + res.moe.bwd}
        return res, par, ops

    res1, par1, one = section()
    res2, _, two = section(moe_imbalance=1.5)
    for key, r in one.items():
        name = key[0]
        if name in ("moe.fc1", "moe.act", "moe.fc2"):
            assert two[key].flops == pytest.approx(1.5 * r.flops)
            if name != "moe.act":  # the grouped GEMMs are compute-bound at this size
                assert two[key].dur_ns == pytest.approx(1.5 * r.dur_ns, rel=0.05)
        elif name in ("moe.dispatch", "moe.combine"):  # the busiest rank's receive / send side
            assert two[key].msg_bytes == pytest.approx(1.5 * r.msg_bytes)
        else:
            assert (two[key].flops, two[key].msg_bytes, two[key].dur_ns) == \
                (r.flops, r.msg_bytes, r.dur_ns)
    # model FLOPs (MFU) count the balanced work
    assert model_flops_per_iteration(res2, m, par1) == model_flops_per_iteration(res1, m, par1)
    _, _, capped = section(moe_imbalance=1.5, moe_capacity_factor=1.25)
    assert capped[("moe.fc1", "fwd")].flops == pytest.approx(1.25 * one[("moe.fc1", "fwd")].flops)
    _, _, dropped = section(moe_capacity_factor=0.5)  # half the routed tokens dispatched
    assert dropped[("moe.dispatch", "fwd")].msg_bytes == one[("moe.dispatch", "fwd")].msg_bytes // 2


def test_imbalance_slows_the_step() -> None:
    opts = {"model": "mixtral-8x7b", "cluster": "h100x8", "ep": 8, "global_batch": 8,
            "seq_len": 1024, "recompute": "full", "template": "analytic"}
    base = retarget(opts).iteration_time_s
    slow = retarget({**opts, "moe_imbalance": 1.5}).iteration_time_s
    assert base * 1.1 < slow < base * 1.5


def test_imbalance_beyond_every_token_on_one_expert_is_an_input_error() -> None:
    """Mixtral's 8 experts, top 2: the busiest expert gets at most 4x the mean (every token);
    10^12 overflowed the expert GEMMs' times (an internal OverflowError)."""
    opts = {"model": "mixtral-8x7b", "cluster": "h100x8", "ep": 8, "global_batch": 8,
            "seq_len": 1024}
    assert retarget({**opts, "moe_imbalance": 4.0}).iteration_time_s > 0
    for bad in (4.01, 1e12):
        with pytest.raises(InputError) as e:
            retarget({**opts, "moe_imbalance": bad})
        assert e.value.where == "moe_imbalance"


def test_expert_parallelism_across_nodes_goes_over_the_network() -> None:
    """The same all-to-all bytes per rank take longer when the EP group leaves the node."""
    opts = {"model": "deepseek-moe-16b", "cluster": "h100x128", "dp": 16, "global_batch": 16,
            "seq_len": 1024, "recompute": "full", "network": "estimate"}
    inside = retarget({**opts, "ep": 8}).to_dict()["breakdown"]["exposed_comm_s"]["ep"]
    across = retarget({**opts, "ep": 16}).to_dict()["breakdown"]["exposed_comm_s"]["ep"]
    assert across > 3 * inside > 0


def test_memory_counts_expert_inputs_shared_experts_and_mla() -> None:
    m = load_model("deepseek-v3")
    par = ParallelSpec(dp=64, ep=64, seq_len=4096)
    dense, moe = (layer_activation_bytes(m, par, i, flash=True) for i in (0, 3))
    s, h = 4096, m.hidden
    routed = 2 * s * h * m.top_k + 6 * s * (m.top_k * m.moe_ffn + m.shared_ffn)
    assert moe - dense == pytest.approx(routed - 6 * s * m.ffn_hidden)
    heavy = layer_activation_bytes(m, par.replace(moe_imbalance=2.0), 3, flash=True)
    assert heavy - moe == pytest.approx(2 * s * h * m.top_k + 6 * s * m.top_k * m.moe_ffn)


LAYOUTS = [
    {"model": "deepseek-v3", "pp": 16, "ep": 64, "stage_layers": (4,) * 15 + (1,),
     "global_batch": 1024, "recompute": "full", "zero": 1},
    {"model": "qwen3-235b-a22b", "tp": 2, "pp": 8, "vpp": 4, "ep": 32,
     "stage_layers": (2,) + (3,) * 30 + (2,), "global_batch": 2048, "recompute": "full", "zero": 1},
    {"model": "qwen3-30b-a3b", "pp": 2, "vpp": 12, "ep": 8, "micro_batch": 2,
     "global_batch": 2048, "zero": 1},
    {"model": "gpt-oss-120b", "pp": 4, "ep": 8, "micro_batch": 4, "global_batch": 2048,
     "recompute": "selective", "zero": 1},
    {"model": "llama3.1-405b", "tp": 8, "sp": True, "pp": 8, "cp": 2, "vpp": 8,
     "stage_layers": (1,) + (2,) * 62 + (1,), "global_batch": 512, "zero": 1},
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda d: str(d["model"]))
def test_new_specs_replay_on_1024_gpus(layout: dict) -> None:
    res = retarget({"cluster": "h100x1024", **layout}).to_dict()
    assert res["gpus"] == 1024 and res["iteration_time_s"] > 0
    assert res["memory"]["fits"], res["memory"]
    # a sanity range, not an accuracy check: with the megatron-core overlaps the TP time of
    # llama3.1-405b (tp 8) is almost all hidden and its MFU is 0.75, set by the H100
    # profile's GEMM rates (its MLP GEMMs at about 0.8 of the dense peak)
    assert 0.05 < res["mfu"] < 0.8
    if load_model(str(layout["model"])).is_moe:
        assert res["breakdown"]["exposed_comm_s"]["ep"] > 0
    # on a GPU the default stack (megatron-core) builds every layer from first principles,
    # the MoE layers with their router, dispatch and expert GEMMs
    assert res["stack"]["name"] == "megatron-core"
    assert res["template"]["source"] == "first-principles"


def test_dispatched_tokens_are_sorted_by_local_expert_where_a_rank_holds_several() -> None:
    """Megatron-Core's alltoall dispatcher sorts the received tokens by local expert after the
    dispatch and back before the combine (``sort_chunks_by_idxs``): one read and one write of
    the rank's routed tokens each, forward and backward, only with more than one local expert."""
    x = rank0(build(TINY, dp=2, ep=2, global_batch=2, micro_batch=1))  # 4 local experts
    order = list(x[(x["layer"] == 1) & (x["phase"] == "fwd")]["name"].astype(str))
    names = ("moe.dispatch", "moe.sort", "moe.fc1", "moe.fc2", "moe.unsort", "moe.combine")
    assert [order.index(n) for n in names] == sorted(order.index(n) for n in names)
    assert {"moe.sort", "moe.unsort"} <= _names(x, 1, "bwd")
    sort = x[(x["name"] == "moe.sort") & (x["phase"] == "fwd")].iloc[0]
    assert sort["bytes"] == 2 * EB * 128 * TINY.top_k * 256 and sort["flops"] == 0
    one = rank0(build(TINY, dp=8, ep=8, global_batch=8, micro_batch=1))  # 1 expert per rank
    assert not any(n in ("moe.sort", "moe.unsort") for n in one["name"].astype(str))


def test_the_when_expression_survives_a_template_file(tmp_path) -> None:
    from tracesim.errors import InputError
    from tracesim.template.layer import load_template, template_from_dict

    tpl = first_principles_template(TINY)
    sort = next(o for o in tpl.ops if o.name == "moe.sort" and o.phase == "fwd")
    assert sort.when == "(experts/ep - 1)*a2a_sorted"
    tpl.save(tmp_path / "template.yaml")
    assert load_template(tmp_path / "template.yaml").ops == tpl.ops
    doc = tpl.to_dict()
    bad = next(o for o in doc["ops"] if o["name"] == "moe.sort")
    bad["when"] = "experts/"
    with pytest.raises(InputError, match="ops\\["):
        template_from_dict(doc, "t.yaml")
