"""Layer templates: safe expressions, first-principles FLOPs, YAML round trip, and templates
extracted from the stored CPU bundles (module scopes, shapes mapped to model dimensions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracesim.specs.model import ModelSpec, model_from_dict
from tracesim.specs.parallel import ParallelSpec
from tracesim.template.analytic import first_principles_template
from tracesim.template.from_trace import template_from_source
from tracesim.template.layer import compile_expr, evaluate, load_template, symbol_env
from tracesim.template.resolve import model_flops_per_iteration, op_numbers, resolve_template
from tracesim.template.scopes import dim_expressions, repeating_period

from .helpers import op_time

BUNDLES = Path(__file__).resolve().parents[1] / "workloads" / "bundles"


@pytest.mark.parametrize("bad", ["__import__('os')", "h.real", "foo*2", "[h]", "'a'", "lambda: 1"])
def test_expressions_reject_anything_but_arithmetic(bad: str) -> None:
    with pytest.raises(ValueError):
        compile_expr(bad)


def test_expression_values() -> None:
    env = {"b": 2.0, "s": 8.0, "h": 4.0, "tp": 2.0}
    assert evaluate("2*b*s*h*h/tp", env) == 256.0
    assert evaluate("max(h, s) + ceil(s/3)", env) == 11.0


def test_gpt_model_flops_match_narayanan_formula() -> None:
    m = ModelSpec(name="g", family="gpt", layers=24, hidden=2304, heads=24, vocab=51200,
                  seq_len=2048, kv_heads=24, ffn_hidden=9216)
    par = ParallelSpec(global_batch=512, seq_len=2048, dp=32)
    res = resolve_template(first_principles_template(m), m, par, op_time)
    B, s, n, h, V = 512, 2048, 24, 2304, 51200
    paper = 72 * B * s * n * h * h * (1 + s / (6 * h) + V / (12 * n * h))  # no recomputation
    # the template also counts norms, activations and softmax (a fraction of a percent)
    assert model_flops_per_iteration(res, m, par) == pytest.approx(paper, rel=0.01)


def test_template_yaml_round_trip(tmp_path: Path) -> None:
    m = ModelSpec(name="m", family="moe", layers=2, hidden=64, heads=4, vocab=100, seq_len=32,
                  kv_heads=2, ffn_hidden=128, activation="swiglu", norm="rmsnorm", experts=4,
                  top_k=2, moe_ffn_hidden=64)
    tpl = first_principles_template(m, "unfused")
    tpl.save(tmp_path / "template.yaml")
    back = load_template(tmp_path / "template.yaml")
    assert back.ops == tpl.ops and back.meta["attention"] == "unfused"


def test_repeating_period_finds_the_layer() -> None:
    layer = ["ln", "mm", "attn", "mm", "add", "ln", "mm", "gelu", "mm", "add"]
    assert repeating_period(["emb"] + layer * 4 + ["head"]) == len(layer)


def _bundle(name: str) -> Path:
    p = BUNDLES / name
    if not (p / "meta.yaml").exists():
        pytest.skip(f"stored bundle {p} not present")
    return p


@pytest.mark.parametrize("name", ["gpt-tiny", "llama-tiny", "moe-tiny"])
def test_extracted_template_recosts_to_the_recorded_numbers(name: str) -> None:
    import yaml

    path = _bundle(name)
    meta = yaml.safe_load((path / "meta.yaml").read_text())
    rec = model_from_dict(meta["model"])
    tpl = template_from_source(path)
    assert tpl.meta["device"] == meta["device"] and not tpl.meta["unmapped_dims"] or \
        set(tpl.meta["unmapped_dims"]) <= {2, 3}
    par = ParallelSpec(global_batch=int(meta["batch"]), micro_batch=int(meta["batch"]),
                       seq_len=int(meta["seq_len"]), dtype=rec.dtype)
    env = symbol_env(rec, par)
    recorded = [op for op in tpl.ops if op.leaves and op.section != "optimizer"]
    assert len(recorded) > 10
    for op in recorded:
        flops, nbytes = op_numbers(op, env, env, par.dtype)
        assert flops == pytest.approx(op.src_flops, rel=1e-6), op.name
        assert nbytes == pytest.approx(op.src_bytes, rel=0.05, abs=64), op.name  # 0-d tensors
    parts = {op.part for op in tpl.select("block", "fwd")}
    assert {"attn", "mlp" if not rec.is_moe else "moe"} <= parts
    # backward ops point at the forward op they differentiate
    fwd_names = {op.name for op in tpl.select("block", "fwd")}
    linked = [op for op in tpl.select("block", "bwd") if op.fwd]
    assert linked and all(op.fwd in fwd_names for op in linked)
    styles = {op.tp_style for op in tpl.select("block", "fwd")}
    assert {"colwise", "rowwise"} <= styles


def test_extracted_gpt_template_scales_to_a_large_model() -> None:
    tpl = template_from_source(_bundle("gpt-tiny"))
    big = ModelSpec(name="b", family="gpt", layers=4, hidden=2048, heads=16, vocab=32000,
                    seq_len=1024, kv_heads=16, ffn_hidden=8192, dtype="bf16")
    par = ParallelSpec(tp=2, global_batch=2, micro_batch=2, seq_len=1024)
    res = resolve_template(tpl, big, par, op_time)
    qkv = next(r for r in res.dense.fwd if r.name.startswith("attn.qkv"))
    assert qkv.flops == pytest.approx(2 * 2 * 1024 * 2048 * 3 * 2048 / 2, rel=1e-6)
    fc2 = next(r for r in res.dense.bwd if r.name.startswith("mlp.fc2"))
    assert fc2.flops == pytest.approx(2 * 2 * 2 * 1024 * 8192 * 2048 / 2, rel=0.01)
    # Megatron's f / g: two all-reduces forward and two backward per layer
    ar = [r for r in res.dense.fwd + res.dense.bwd if r.collective == "all_reduce"]
    assert len(ar) == 4 and all(r.msg_bytes == 2 * 1024 * 2048 * 2 for r in ar)


def test_dimension_table_is_unambiguous_for_the_tiny_models() -> None:
    for name in ("gpt-tiny", "llama-tiny", "moe-tiny"):
        import yaml

        meta = yaml.safe_load((_bundle(name) / "meta.yaml").read_text())
        table = dim_expressions(model_from_dict(meta["model"]), int(meta["batch"]), int(meta["seq_len"]))
        for dim in ("b*s", "h", "s", "b", "ffn", "vocab"):
            assert dim in table.values(), (name, dim, json.dumps(table))


def test_unfused_attention_grows_linearly_with_the_micro_batch() -> None:
    """The unfused core (scores, softmax, dropout, context) holds ``b heads s^2 / tp``
    probabilities per micro-batch: FLOPs and bytes 4x at micro-batch 4, not 16x."""
    m = ModelSpec(name="g", family="gpt", layers=2, hidden=256, heads=4, vocab=1000,
                  seq_len=512, kv_heads=4, ffn_hidden=1024)
    tpl = first_principles_template(m, "unfused")
    core = ("attn.scores", "attn.softmax", "attn.dropout", "attn.context")

    def ops(b: int) -> dict[str, tuple[float, float]]:
        par = ParallelSpec(global_batch=8, micro_batch=b, seq_len=512, dp=1, tp=2)
        res = resolve_template(tpl, m, par, op_time)
        return {o.name: (o.flops, o.bytes) for o in res.dense.fwd if o.name in core}

    one, four = ops(1), ops(4)
    assert set(one) == set(core)
    for name in core:
        assert four[name][0] == pytest.approx(4 * one[name][0])
        assert four[name][1] == pytest.approx(4 * one[name][1])
    # softmax reads and writes every probability once (2-byte elements, heads split by tp)
    assert one["attn.softmax"][1] == pytest.approx(2 * 2 * (4 / 2) * 512 * 512)


def test_a_template_with_a_bad_meta_or_an_unnamed_block_part_is_an_input_error(tmp_path: Path) -> None:
    """Both came out of truncated template files (tests/test_fuzz_specs.py): ``meta`` cut to a
    string, and a backward block op cut before its ``part`` while the others name theirs
    (the builder selects block ops by part, so the layer's backward had no compute op)."""
    from tracesim.errors import InputError
    from tracesim.template.layer import template_from_dict

    m = ModelSpec(name="g", family="gpt", layers=2, hidden=64, heads=4, vocab=100, seq_len=32,
                  kv_heads=4, ffn_hidden=256)
    data = first_principles_template(m, "flash").to_dict()
    assert template_from_dict(data).select("block", "bwd")
    with pytest.raises(InputError) as err:
        template_from_dict({**data, "meta": "s"}, tmp_path / "t.yaml")
    assert err.value.where == "meta"
    ops = [dict(o) for o in data["ops"]]
    k = next(i for i, o in enumerate(ops) if o["section"] == "block" and o["phase"] == "bwd")
    ops[k].pop("part")
    with pytest.raises(InputError, match="has no part") as err:
        template_from_dict({**data, "ops": ops}, tmp_path / "t.yaml")
    assert err.value.where == "ops"
