"""Recomputation by module (--recompute-modules) and by layer count (--recompute-layers)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from tests.helpers import build
from tracesim.catalog import load_model

GPT = load_model("gpt3-1.7b")
MOE = load_model("qwen3-30b-a3b")


def _names(b, prefix: str = "recompute:") -> list[str]:
    t = b.graph.tasks
    r0 = t[t["rank"] == 0]
    return [str(n) for n in r0["name"] if str(n).startswith(prefix)]


def _dur(b) -> int:
    t = b.graph.tasks
    return int(t[(t["rank"] == 0) & (t["kind"] == "gpu")]["dur_ns"].sum())


def test_default_selective_is_the_attention_core() -> None:
    a = build(GPT, tp=2, dp=2, global_batch=4, sp=True, recompute="selective")
    b = build(GPT, tp=2, dp=2, global_batch=4, sp=True, recompute="selective",
              recompute_modules=("core_attn",))
    assert _names(a) == _names(b) and set(_names(a)) == {"recompute:attn.core"}
    assert _dur(a) == _dur(b)


def test_mlp_and_layernorm_rerun_their_forward_ops() -> None:
    base = build(GPT, dp=2, global_batch=4, recompute="selective")
    more = build(GPT, dp=2, global_batch=4, recompute="selective",
                 recompute_modules=("core_attn", "mlp", "layernorm"))
    got = set(_names(more))
    assert {"recompute:mlp.fc1", "recompute:mlp.fc2", "recompute:ln1", "recompute:ln2"} <= got
    # the extra backward time is exactly those forward ops' time, once per layer and micro-batch
    t = more.graph.tasks
    r0 = t[t["rank"] == 0]
    extra = int(r0[r0["name"].astype(str).isin([n for n in got if n != "recompute:attn.core"])]["dur_ns"].sum())
    assert _dur(more) - _dur(base) == extra > 0
    again = [n.split(":", 1)[1] for n in got if n != "recompute:attn.core"]
    fwd = r0[(r0["phase"] == "fwd") & r0["name"].astype(str).isin(again)]
    assert extra == int(fwd["dur_ns"].sum())


def test_moe_modules() -> None:
    kw = dict(ep=2, dp=2, global_batch=4, recompute="selective")
    act = set(_names(build(MOE, recompute_modules=("moe_act",), **kw)))
    assert act == {"recompute:moe.act"}
    whole = set(_names(build(MOE, recompute_modules=("moe",), **kw)))
    assert {"recompute:moe.dispatch", "recompute:moe.fc1", "recompute:moe.combine"} <= whole


def test_recompute_first_layers_of_each_chunk() -> None:
    full = build(GPT, pp=2, dp=2, global_batch=4, recompute="full")
    two = build(GPT, pp=2, dp=2, global_batch=4, recompute="full", recompute_layers=2)
    per_layer_all = {int(x) for x in np.unique(full.graph.tasks[full.graph.tasks["name"].astype(str)
                                                               .str.startswith("recompute:")]["layer"])}
    t = two.graph.tasks
    layers = {int(x) for x in np.unique(t[t["name"].astype(str).str.startswith("recompute:")]["layer"])}
    half = GPT.layers // 2
    assert per_layer_all == set(range(GPT.layers))
    assert layers == {0, 1, half, half + 1}  # the first two layers of each stage


def test_unknown_module_exits_2() -> None:
    p = subprocess.run([sys.executable, "-m", "tracesim.cli", "replay", "--model", "gpt3-1.7b",
                        "--cluster", "h100x8", "--dp", "8", "--recompute", "selective",
                        "--recompute-modules", "core_attn,decoder"], capture_output=True, text=True)
    assert p.returncode == 2
    assert "--recompute-modules" in p.stderr and "decoder" in p.stderr and "Traceback" not in p.stderr
