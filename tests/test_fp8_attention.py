"""FP8 dot-product attention (``--fp8-attention``, Transformer Engine's FP8 DPA): the fused
attention core at the device's FP8 attention rate after the casts of its FP8 operands;
docs/stacks.md, "FP8"."""

from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner

from tracesim.catalog import load_model
from tracesim.cli import cli as main
from tracesim.errors import InputError
from tracesim.options import ReplayOptions
from tracesim.pipeline.run import predict
from tracesim.template.analytic import first_principles_template
from tracesim.template.fp8 import fp8_template, is_fused_attention
from tracesim.template.layer import compile_expr

BASE = {"model": "llama3-8b", "cluster": "h100x8", "tp": 1, "pp": 1, "dp": 8, "micro_batch": 1,
        "global_batch": 8, "seq_len": 8192, "dtype": "fp8", "fp8_recipe": "current",
        "stack": "megatron-core", "template": "analytic", "full": True}


def _ops(**kw: object) -> tuple[float, pd.DataFrame]:
    res = predict(None, ReplayOptions.from_mapping({**BASE, **kw}), detail=True)
    t = res.graph.tasks
    df = pd.DataFrame({c: t[c].to_numpy() for c in ("rank", "kind", "name", "dur_ns", "phase")})
    return res.iteration_time_s, df[(df["rank"] == 0) & (df["kind"] == "gpu")]


def _value(expr: str, **env: float) -> float:
    return float(eval(compile_expr(expr), {}, env))  # noqa: S307 - the template's own expressions


def test_the_template_quantizes_q_k_v_forward_and_o_do_backward() -> None:
    """Llama 3 8B (32 query heads, 8 key/value heads of 128): the forward cast covers Q, K
    and V of the rank (with CP its own shard of the keys and values), the backward's O and
    dO, at current scaling's bytes per element without the transpose (5: Transformer Engine's
    attention quantizers are row-wise only); the attention itself runs in FP8."""
    m = load_model("llama3-8b")
    base = first_principles_template(m)
    tpl = fp8_template(base, "current", False, attention=True)
    ops = {(o.name, o.phase): o for o in tpl.ops}
    assert ops[("attn.core", "fwd")].dtype == "fp8" and ops[("attn.core", "bwd")].dtype == "fp8"
    env = {"b": 1, "s": 8192, "tp": 1, "qd": 4096, "kvh": 1024, "eb": 2}
    for cp in (1, 2):
        fwd = _value(ops[("attn.core.fp8_cast", "fwd")].bytes, cp=cp, **env)
        assert fwd == pytest.approx(5 * 8192 / cp * (4096 + 2 * 1024))
    bwd = _value(ops[("attn.core.fp8_cast", "bwd")].bytes, cp=1, **env)
    assert bwd == pytest.approx(5 * 2 * 8192 * 4096)
    assert ops[("attn.core.fp8_cast", "bwd")].fwd == "attn.core"
    # the linears' block-scaled recipe: the attention casts stay per tensor (current scaling)
    nv = {(o.name, o.phase): o for o in fp8_template(base, "nvfp4", False, "nvfp4", attention=True).ops}
    assert nv[("attn.core.fp8_cast", "fwd")].bytes.startswith("5*")
    assert nv[("attn.core", "fwd")].dtype == "fp8" and nv[("attn.qkv", "fwd")].dtype == "nvfp4"
    # off: the attention untouched, no cast of its own
    off = fp8_template(base, "current", False)
    assert not any(o.name == "attn.core.fp8_cast" for o in off.ops)
    assert all(o.dtype == "" for o in off.ops if is_fused_attention(o))


def test_fp8_attention_is_faster_on_the_attention_and_pays_its_casts() -> None:
    """On H100 at 8k tokens the FP8 attention kernels take less time than the BF16 ones
    (the profile's FP8 attention curve at twice the peak), forward and backward; the casts
    are extra kernels; the step is faster overall."""
    it16, bf16 = _ops()
    it8, fp8 = _ops(fp8_attention=True)
    for phase in ("fwd", "bwd"):
        a16 = bf16[(bf16["name"] == "attn.core") & (bf16["phase"] == phase)]["dur_ns"].sum()
        a8 = fp8[(fp8["name"] == "attn.core") & (fp8["phase"] == phase)]["dur_ns"].sum()
        assert 0.5 < a8 / a16 < 0.95
        assert (fp8["name"] == "attn.core.fp8_cast").sum() > 0
    assert not (bf16["name"] == "attn.core.fp8_cast").any()
    assert it8 < it16


def test_fp8_attention_needs_fp8_and_a_fused_kernel() -> None:
    with pytest.raises(InputError, match="fp8-attention"):
        predict(None, ReplayOptions.from_mapping({**BASE, "dtype": "bf16", "fp8_recipe": None,
                                                  "fp8_attention": True}))
    res = predict(None, ReplayOptions.from_mapping({**BASE, "fp8_attention": True,
                                                    "attention": "unfused", "full": False}))
    assert any("--fp8-attention ignored" in w for w in res.warnings)


def test_the_cli_flag_and_report() -> None:
    args = ["replay", "--model", "llama3-8b", "--cluster", "h100x8", "--tp", "1", "--dp", "8",
            "--micro-batch", "1", "--seq-len", "4096", "--dtype", "fp8", "--fp8-attention"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    assert "FP8 attention" in out.output
    bad = CliRunner().invoke(main, args[:-3] + ["--fp8-attention"])
    assert bad.exit_code == 2 and "--fp8-attention" in bad.output


def test_with_context_parallelism_the_ring_holds_the_casts() -> None:
    """Under CP the casts run inside ring attention's core: the ring's key / value sends are
    the same with FP8 attention as without (one ring per layer and pass)."""
    def sends(**kw: object) -> int:
        res = predict(None, ReplayOptions.from_mapping({**BASE, "dp": 4, "cp": 2, **kw}), detail=True)
        t = res.graph.tasks
        return int(((t["kind"] == "send") & (t["group_kind"] == "cp") & (t["rank"] == 0)).sum())

    assert sends(fp8_attention=True) == sends() > 0


def test_a_table_row_with_fp8_attention_but_no_fp8_is_bad_input(tmp_path) -> None:  # noqa: ANN001
    table = tmp_path / "runs.csv"
    table.write_text("system,model,gpus,precision,gbs,mbs,seq_len,fsdp,tp,pp,cp,vp,ep,ga,"
                     "tokens_per_s_per_gpu,fp8_attention\n"
                     "DGX-B200,llama3-8b,8,bf16,16,2,8192,0,1,1,1,,1,1,30000,true\n")
    out = CliRunner().invoke(main, ["validate", "published", str(table)])
    assert out.exit_code == 2 and "fp8_attention" in out.output and "Traceback" not in out.output
