"""A retarget end to end: the replay --json object, breakdown, memory, warnings, errors."""

from __future__ import annotations

import pytest

from tests.helpers import retarget
from tracesim.errors import InputError

KEYS = ("iteration_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "gpus", "model", "parallel",
        "cluster", "breakdown", "memory_gib_per_gpu")


def _sum(bd: dict) -> float:
    return bd["compute_s"] + sum(bd["exposed_comm_s"].values()) + bd["bubble_s"] + bd["idle_s"]


def test_result_object_and_breakdown_sum() -> None:
    res = retarget({"model": "gpt3-1.7b", "cluster": "h100x8", "tp": 2, "pp": 2,
                              "global_batch": 16, "seq_len": 1024, "template": "analytic"}).to_dict()
    for k in KEYS:
        assert k in res, k
    assert res["gpus"] == 8 and res["parallel"]["dp"] == 2
    it = res["iteration_time_s"]
    assert _sum(res["breakdown"]) == pytest.approx(it, rel=1e-6)
    assert res["breakdown"]["bubble_s"] > 0 and res["breakdown"]["exposed_comm_s"]["tp"] > 0
    assert res["tokens_per_s"] == pytest.approx(16 * 1024 / it)
    assert 0 < res["mfu"] < 1
    assert res["tflops_per_gpu"] == pytest.approx(res["model_flops_per_iteration"] / it / 8 / 1e12)
    assert res["memory"]["fits"] and res["memory_gib_per_gpu"] > 0


def test_default_template_is_the_stored_bundle() -> None:
    res = retarget({"model": "llama3-8b", "cluster": "h100x8", "tp": 8,
                              "global_batch": 1, "seq_len": 2048}).to_dict()
    src = res["template"]["source"]
    assert src.endswith("llama-tiny") or src == "first-principles"
    assert res["duration_methods"].get("model", 0) > 0  # CPU-recorded: the model times GPU ops


def test_moe_expert_parallel_runs_and_reports_ep() -> None:
    res = retarget({"model": "mixtral-8x7b", "cluster": "h100x8", "tp": 2, "ep": 4,
                              "global_batch": 4, "seq_len": 1024, "recompute": "full"}).to_dict()
    assert res["parallel"]["sp"] is True
    assert any("sequence parallelism" in w for w in res["warnings"])
    assert res["breakdown"]["exposed_comm_s"]["ep"] > 0


def test_memory_overflow_warns_or_fails_with_strict() -> None:
    opts = {"model": "llama3-70b", "cluster": "h100x8", "global_batch": 8, "seq_len": 1024,
            "template": "analytic"}
    res = retarget(opts).to_dict()
    assert not res["memory"]["fits"] and any("GiB" in w for w in res["warnings"])
    with pytest.raises(InputError, match="GiB per GPU"):
        retarget({**opts, "strict": True}).to_dict()


def test_layout_errors_name_the_numbers() -> None:
    with pytest.raises(InputError, match="tp 4 x pp 2 x dp 2 x cp 1 = 16 GPUs.*has 8"):
        retarget({"model": "gpt3-1.7b", "cluster": "h100x8", "tp": 4, "pp": 2, "dp": 2}).to_dict()
    with pytest.raises(InputError, match="heads 24 are not divisible by tp 16"):
        retarget({"model": "gpt3-1.7b", "cluster": "h100x128", "tp": 16}).to_dict()
    res = retarget({"model": "gpt3-1.7b", "cluster": "h100x128", "tp": 8, "dp": 1,
                              "seq_len": 512, "template": "analytic"}).to_dict()
    assert any("uses 8 of the cluster's 128 GPUs" in w for w in res["warnings"])


def test_symmetric_and_full_replays_agree() -> None:
    opts = {"model": "gpt3-1.7b", "cluster": "h100x128", "tp": 8, "pp": 2, "global_batch": 16,
            "seq_len": 512, "template": "analytic", "network": "estimate"}
    sym = retarget(opts).to_dict()
    full = retarget({**opts, "full": True}).to_dict()
    assert sym["replay"]["symmetric"] and not full["replay"]["symmetric"]
    assert sym["replay"]["tasks"] * 16 < full["replay"]["tasks"]
    assert sym["iteration_time_s"] == pytest.approx(full["iteration_time_s"], rel=1e-9)
