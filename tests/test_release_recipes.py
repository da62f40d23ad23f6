"""Rows replayed with the configuration their run had where it differs from the 25.11 recipe
(tracesim/pipeline/release_recipes.py, docs/published_configs.md): each release's own, and
only for that release."""

from __future__ import annotations

from tracesim.pipeline.recipes import RELEASE_RECIPES, find_recipe, recipe_options


def test_the_25_11_b200_gpt_oss_row_runs_its_configs_ep_64_and_later_releases_their_own() -> None:
    run = find_recipe("DGX-B200", "gpt-oss-120b", "bf16", "25.11")
    assert run is not None and ("ep", 64) in run.options
    opts = recipe_options(run, {"tp": 1, "pp": 1, "ep": 8, "dp": 64}, 36, "25.11")
    assert opts["ep"] == 64 and "recompute" not in opts  # modules listed, inactive in 25.11
    for rel in ("26.02.01", "26.04", "26.04.01"):  # the table's EP 8 runs
        later = find_recipe("DGX-B200", "gpt-oss-120b", "bf16", rel)
        assert later is not None and ("ep", 64) not in later.options
        assert recipe_options(later, {"tp": 1, "pp": 1, "ep": 8, "dp": 64}, 36, rel)["ep"] == 8


def test_26_02_rows_take_their_v0_3_0_dispatchers_and_overlaps() -> None:
    h100 = find_recipe("DGX-H100", "qwen3-30b-a3b", "fp8-cs", "26.02")
    assert h100 is not None and h100.dispatcher == "deepep" and h100.source.startswith("v0.3.0:")
    assert find_recipe("DGX-H100", "qwen3-30b-a3b", "fp8-cs").dispatcher == "alltoall"  # 25.11
    for rel in ("26.02", "26.02.01", "26.04", "26.04.01"):
        oss = find_recipe("DGX-GB200", "gpt-oss-120b", "bf16", rel)
        assert oss is not None and oss.dispatcher == "alltoall"
        opts = recipe_options(oss, {"tp": 1, "pp": 1, "ep": 64, "dp": 64}, 36, rel)
        assert "moe_dispatcher" not in opts and opts["recompute_modules"] == "layernorm,moe_act"
    assert find_recipe("DGX-GB200", "gpt-oss-120b", "bf16").dispatcher == "hybridep"  # 25.11
    b200 = find_recipe("DGX-B200", "qwen3-235b-a22b", "fp8-mx", "26.02")
    assert b200 is not None and not b200.a2a_overlap and b200.overlap_param_gather is None
    assert find_recipe("DGX-B200", "qwen3-235b-a22b", "fp8-mx").overlap_param_gather is False


def test_every_release_recipe_names_its_commit_and_config() -> None:
    for (release, _, _, _), run in RELEASE_RECIPES.items():
        tag, path = run.source.split(":", 1)
        assert tag.startswith("v0.") and path.startswith("scripts/performance/configs/"), release
        assert run.config.isupper() and "CONFIG" in run.config
