"""Options the layout makes meaningless are named in a warning, never dropped silently."""

from __future__ import annotations

from tests.helpers import retarget

BASE = {"model": "gpt3-1.7b", "cluster": "h100x8", "tp": 2, "micro_batch": 1, "global_batch": 8}


def _warned(opts: dict, *needles: str) -> list[str]:
    ws = [w for w in retarget({**BASE, **opts}).warnings if "ignored" in w]
    for n in needles:
        assert any(n in w for w in ws), (n, ws)
    return ws


def test_pipeline_options_without_a_pipeline() -> None:
    _warned({"vpp": 4, "schedule": "interleaved"}, "--vpp, --schedule ignored: one pipeline stage")
    _warned({"pp_rounds": 2}, "--pp-rounds ignored")


def test_recompute_precision_and_moe_options_out_of_place() -> None:
    _warned({"recompute_layers": 4}, "--recompute-layers ignored")
    _warned({"recompute": "full", "recompute_modules": "mlp"}, "--recompute-modules ignored")
    _warned({"fp8_param_gather": True}, "--fp8-param-gather ignored: the run is bf16")
    _warned({"moe_dispatcher": "deepep", "moe_imbalance": 2.0},
            "--moe-dispatcher, --moe-imbalance ignored: gpt3-1.7b has no MoE layers")
    _warned({"cuda_graphs": "attn,mamba"}, "--cuda-graphs mamba ignored")
    _warned({"cp_overlap": True}, "--cp-overlap ignored")


def test_options_that_apply_give_no_such_warning() -> None:
    assert _warned({"pp": 2, "dp": 2, "vpp": 2, "recompute": "full", "recompute_layers": 4}) == []
    assert _warned({"recompute": "selective", "recompute_modules": "mlp"}) == []


def test_plan_globs_that_match_no_module() -> None:
    ws = _warned({"dtype": "fp8", "fp8_plan": "nonexist.*=bf16,attn.*=bf16",
                  "tp_plan": "bogus=replicate"})
    assert any(w.startswith("--fp8-plan nonexist.*: matches no module") for w in
               retarget({**BASE, "dtype": "fp8", "fp8_plan": "nonexist.*=bf16"}).warnings)
    assert not any("attn.*" in w for w in ws)
    assert any(w.startswith("--tp-plan bogus: matches no module") and "mlp.*" in w
               for w in retarget({**BASE, "tp_plan": "bogus=replicate"}).warnings)
