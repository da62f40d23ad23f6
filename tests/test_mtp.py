"""Multi-token prediction (DeepSeek-V3's MTP, Megatron-Core's --mtp-num-layers): each module
is one more transformer layer with two norms, a projection, the shared output head and a
loss, on the last pipeline stage (tracesim.template.mtp)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracesim.engine.replay import replay
from tracesim.errors import InputError
from tracesim.options import ReplayOptions
from tracesim.specs.parallel import ParallelSpec
from tracesim.template.analytic import first_principles_template
from tracesim.template.resolve import model_flops_per_iteration, resolve_template

from .helpers import build, op_time
from .test_moe_build import TINY

REF = Path(__file__).resolve().parents[2] / "shared" / "reference"


def _stage(b, rank: int):
    t = b.graph.tasks
    return t[(t["rank"] == rank) & (t["kind"] == "gpu")]


def test_a_module_runs_a_layer_norms_projection_and_the_shared_head_on_the_last_stage() -> None:
    base = build(TINY, pp=2, global_batch=4)
    b = build(TINY, pp=2, global_batch=4, mtp_layers=1)
    first, last = _stage(b, 0), _stage(b, 1)
    assert not first["name"].astype(str).str.startswith("mtp.").any()
    names = set(last["name"].astype(str))
    assert {"mtp.embed.tok", "mtp.enorm", "mtp.hnorm", "mtp.concat", "mtp.eh_proj",
            "mtp.norm_f", "mtp.head", "mtp.loss"} <= names
    # the module's layer is keyed past the model's last layer and built as that (MoE) layer
    layer_names = set(last[last["layer"] == TINY.layers]["name"].astype(str))
    assert "moe.router" in layer_names and any(n.startswith("attn.") for n in layer_names)
    # the shared head costs what the main head costs, forward and backward
    for phase in ("fwd", "bwd"):
        head = last[(last["name"] == "head") & (last["phase"] == phase)]["dur_ns"].sum()
        mhead = last[(last["name"] == "mtp.head") & (last["phase"] == phase)]["dur_ns"].sum()
        assert head == mhead > 0
    # the first stage runs what it ran without MTP; the step is longer
    assert first["dur_ns"].sum() == _stage(base, 0)["dur_ns"].sum()
    assert last["dur_ns"].sum() > _stage(base, 1)["dur_ns"].sum()
    assert replay(b.graph).end_ns.max() > replay(base.graph).end_ns.max()


def test_module_parameters_and_the_embedding_copy_count_on_the_last_stage() -> None:
    par = ParallelSpec(pp=2, global_batch=4, seq_len=128, mtp_layers=2)
    res = resolve_template(first_principles_template(TINY), TINY, par, op_time)
    base = build(TINY, pp=2, global_batch=4)
    b = build(TINY, pp=2, global_batch=4, mtp_layers=2)
    assert res.mtp_in is not None and res.mtp_out is not None
    h = TINY.hidden
    # the projection 2h x h and the two norms are the module's own; the head is shared
    assert res.mtp_in.params == pytest.approx(2 * h * h + 2 * h)
    assert res.mtp_out.params == 0
    layer = res.layer(TINY, TINY.layers - 1)
    own = 2 * (res.mtp_in.params + layer.params)
    assert b.stage_params[0] == base.stage_params[0]
    # untied embeddings: the last stage keeps a copy of the word embeddings for the lookup
    assert b.stage_params[1] - base.stage_params[1] == pytest.approx(own + res.prologue.params)
    assert b.stage_expert_params[1] - base.stage_expert_params[1] == pytest.approx(2 * layer.expert_params)
    # on one stage the embedding is there already
    one = build(TINY, global_batch=2, mtp_layers=1)
    one0 = build(TINY, global_batch=2)
    assert one.stage_params[0] - one0.stage_params[0] == pytest.approx(res.mtp_in.params + layer.params)


def test_model_flops_count_the_modules() -> None:
    tpl = first_principles_template(TINY)
    par0 = ParallelSpec(global_batch=2, seq_len=128)
    par1 = par0.replace(mtp_layers=1)
    r0 = resolve_template(tpl, TINY, par0, op_time)
    r1 = resolve_template(tpl, TINY, par1, op_time)
    assert r1.mtp_in is not None and r1.mtp_out is not None
    extra = (r1.layer(TINY, TINY.layers - 1).model_flops_fwd + r1.mtp_in.model_flops_fwd
             + r1.mtp_out.model_flops_fwd)
    assert model_flops_per_iteration(r1, TINY, par1) - model_flops_per_iteration(r0, TINY, par0) \
        == pytest.approx(3.0 * extra * 2)


def test_interleaved_and_recomputed_modules_sit_in_the_last_chunk() -> None:
    m = TINY.replace(layers=8)
    b = build(m, pp=2, vpp=2, schedule="interleaved", global_batch=4, mtp_layers=1,
              recompute="full")
    t = b.graph.tasks
    mtp = t[t["layer"] == m.layers]
    assert set(mtp["rank"]) == {1}
    # full recomputation reruns the module's layer forward in its backward
    assert mtp["name"].astype(str).str.startswith("recompute:").any()
    assert replay(b.graph).end_ns.max() > 0


def test_option_and_bad_values() -> None:
    o = ReplayOptions.from_mapping({"mtp_layers": 1}, "cfg.yaml", "replay")
    assert o.mtp_layers == 1
    with pytest.raises(InputError) as e:
        ReplayOptions.from_mapping({"mtp_layers": -1}, "cfg.yaml", "replay")
    assert "mtp" in str(e.value).replace("-", "_")


def test_the_b200_deepseek_row_runs_its_recipes_mtp_layer() -> None:
    from tracesim.pipeline.published import bridge_options, read_table, row_unmodelled

    path = REF / "megatron_bridge_25_11.csv"
    _, rows = read_table(path)
    seen = 0
    for k, row in enumerate(rows):
        if row["model"] != "deepseek-v3":
            continue
        opts = bridge_options(row, path, k)
        assert not any("MTP" in u for u in row_unmodelled(row, Path("t.csv"), 0))
        # only the B200 row ran with MTP (the GB rows' notes: "without MTP")
        assert opts.get("mtp_layers", 0) == (1 if row["system"] == "DGX-B200" else 0)
        seen += 1
    assert seen == 5


def test_a_recorded_template_gets_the_module_with_its_own_embedding_and_head_ops() -> None:
    from .helpers import retarget

    p = retarget({"model": "llama-tiny", "cluster": "h100x8", "dp": 2, "pp": 2,
                  "micro_batch": 1, "global_batch": 4, "mtp_layers": 1, "stack": "eager",
                  "per_op": True}, detail=True)
    names = set(p.graph.tasks["name"].astype(str))
    assert {"mtp.embed.tok:embedding", "mtp.head:linear", "mtp.eh_proj"} <= names


def test_the_last_stages_embedding_copy_is_all_reduced_with_the_first_stage() -> None:
    # untied embeddings: only MTP's copy on the last stage makes the embedding group reduce
    # the word-embedding gradient (Megatron-Core's finalize_model_grads), once per stage
    for mtp, count in ((0, 0), (1, 2)):
        b = build(TINY, pp=2, global_batch=4, mtp_layers=mtp)
        t = b.graph.tasks
        emb = t[t["name"].astype(str) == "emb.all_reduce"]
        assert len(emb) == count
        if count:
            assert sorted(emb["rank"].tolist()) == [0, 1]
            assert set(emb["msg_bytes"].tolist()) == {TINY.vocab * TINY.hidden * 2}
    # one stage holds the embedding already: nothing to reduce
    one = build(TINY, pp=1, global_batch=4, mtp_layers=1).graph.tasks
    assert not (one["name"].astype(str) == "emb.all_reduce").any()


def test_repeated_depths_share_one_modules_parameters() -> None:
    """``--mtp-repeated`` (Megatron-Core's --mtp-use-repeated-layer): two depths, both run
    forward and backward, one module's parameters on the stage and in its gradient buckets."""
    one = build(TINY, pp=2, dp=2, global_batch=8, mtp_layers=1)
    two = build(TINY, pp=2, dp=2, global_batch=8, mtp_layers=2)
    rep = build(TINY, pp=2, dp=2, global_batch=8, mtp_layers=2, mtp_repeated=True)
    assert rep.stage_params == one.stage_params != two.stage_params
    assert rep.stage_expert_params == one.stage_expert_params
    t = {k: _stage(b, 2) for k, b in (("two", two), ("rep", rep))}  # ranks 2, 3: the last stage
    passes = {k: v[v["phase"].astype(str).isin(["fwd", "bwd"])]["dur_ns"].sum() for k, v in t.items()}
    assert passes["rep"] == passes["two"]  # every depth's forward and backward
    step = {k: v[~v["phase"].astype(str).isin(["fwd", "bwd"])]["dur_ns"].sum() for k, v in t.items()}
    assert step["rep"] < step["two"]  # the optimizer: one module's state
    dp = {k: b.graph.tasks[b.graph.tasks["group_kind"].astype(str).isin(["dp", "dpcp", "edp"])]
          for k, b in (("one", one), ("two", two), ("rep", rep))}
    assert dp["rep"]["msg_bytes"].sum() == dp["one"]["msg_bytes"].sum() < dp["two"]["msg_bytes"].sum()


def test_repeated_needs_modules() -> None:
    with pytest.raises(InputError) as e:
        build(TINY, global_batch=2, mtp_repeated=True)
    assert e.value.where == "mtp_repeated"


def test_more_depths_than_layers_is_an_input_error() -> None:
    """A typo such as 10^9 depths names the field (it built for minutes before)."""
    with pytest.raises(InputError) as e:
        build(TINY, global_batch=2, mtp_layers=TINY.layers + 1)
    assert e.value.where == "mtp_layers"
