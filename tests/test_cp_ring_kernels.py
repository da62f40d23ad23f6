"""Ring attention's kernels under context parallelism (Transformer Engine's
``AttnFuncWithCPAndKVP2P``): each step's kernel priced at its own keys per query, and the
merge of each step's partial result (``attn.cp_merge``); docs/retarget.md, "CP"."""

from __future__ import annotations

import pytest

from tracesim.options import ReplayOptions
from tracesim.pipeline.run import predict
from tracesim.template.attention_ops import CP_MERGE
from tracesim.template.layer import TemplateOp
from tracesim.template.resolve import _timed

from .helpers import build
from .test_builder import LLAMA, rank_tasks

CORE = TemplateOp("attn.core", "block", "fwd", "attention", flops="1", causal=True,
                  shape="b*heads/tp, s/cp, win, qd/heads")


def _env(cp: int, s: int = 8192, win: int = 8192) -> dict[str, float]:
    return {"b": 1, "heads": 32, "tp": 1, "s": s, "cp": cp, "win": win, "qd": 4096}


@pytest.mark.parametrize("cp", [1, 2, 4, 8])
def test_the_steps_keys_per_query_are_their_harmonic_mean(cp: int) -> None:
    """The diagonal step and the steps from lower ranks hold s/(2cp) keys per query, those
    from higher ranks s/cp (half the queries), the ranks half and half: at equal FLOPs per
    step the harmonic mean is 2s/(3cp+1); s/2, the causal square's mean, at cp 1."""
    timed, flops = _timed(CORE, _env(cp), 1000.0)
    kv = float(timed.shape.split(",")[2])
    s = 8192
    # steps per rank at each length: the diagonal and (cp-1)/2 from lower ranks, (cp-1)/2 from higher
    weights = {s / (2 * cp): 1 + (cp - 1) / 2, s / cp: (cp - 1) / 2}
    harmonic = sum(weights.values()) / sum(w / k for k, w in weights.items())
    assert kv == pytest.approx(harmonic, rel=1e-5)
    assert kv == pytest.approx(2 * s / (3 * cp + 1), rel=1e-5)
    assert flops == 500.0  # the causal half, whatever the ring
    assert float(timed.shape.split(",")[1]) == s / cp


def test_a_sliding_window_is_not_a_ring_of_causal_squares() -> None:
    timed, flops = _timed(CORE, _env(2, win=128), 1000.0)
    assert float(timed.shape.split(",")[2]) == 128 and flops == 1000.0


def test_the_merges_run_once_per_step_only_under_cp() -> None:
    """One attn.cp_merge task after each of the cp kernels, forward and backward, per layer;
    none without context parallelism."""
    for cp in (2, 4):
        x = rank_tasks(build(LLAMA, cp=cp, global_batch=1))
        merges = x[x["name"].astype(str) == CP_MERGE]
        assert len(merges[merges["phase"] == "fwd"]) == cp * LLAMA.layers
        assert len(merges[merges["phase"] == "bwd"]) == cp * LLAMA.layers
    x = rank_tasks(build(LLAMA, global_batch=1))
    assert not (x["name"].astype(str) == CP_MERGE).any()


def test_the_merges_bytes() -> None:
    """Forward: (2 + 2.25 (cp - 1)) passes over the rank's output; backward: over its query
    gradient and its own keys' and values' gradients (GQA: 4 key/value heads of 8)."""
    cp, s, h, eb = 2, 128, 256, 2
    x = rank_tasks(build(LLAMA, cp=cp, global_batch=1))
    merges = x[x["name"].astype(str) == CP_MERGE]
    passes = 2 + 2.25 * (cp - 1)
    fwd = merges[merges["phase"] == "fwd"]["bytes"].sum() / LLAMA.layers
    bwd = merges[merges["phase"] == "bwd"]["bytes"].sum() / LLAMA.layers
    q = s // cp * h
    kv = 2 * s // cp * LLAMA.kv_heads * LLAMA.head_dim
    assert fwd == pytest.approx(eb * passes * q)
    assert bwd == pytest.approx(eb * passes * (q + kv))


def test_context_parallelism_costs_more_time_per_attention_flop() -> None:
    """Llama 3 8B at 8k tokens on 16 B200: with CP 2 each rank computes half the attention
    FLOPs of CP 1 on 8 ranks' worth of tokens, but in shorter kernels plus merges: the
    attention time per FLOP is higher."""
    base = {"model": "llama3-8b", "cluster": "dgx-b200", "tp": 1, "pp": 1, "micro_batch": 1,
            "seq_len": 8192, "nodes": 2, "full": True}

    def per_flop(**kw: object) -> float:
        res = predict(None, ReplayOptions.from_mapping({**base, **kw}), detail=True)
        t = res.graph.tasks
        t = t[(t["rank"] == 0) & (t["kind"] == "gpu")]
        att = t[t["name"].astype(str).isin(["attn.core", CP_MERGE])]
        core = t[t["name"].astype(str) == "attn.core"]
        return float(att["dur_ns"].sum()) / float(core["flops"].sum())

    assert per_flop(cp=2, dp=8, global_batch=8) > 1.1 * per_flop(cp=1, dp=16, global_batch=16)
