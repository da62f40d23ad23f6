"""Model variants the megatron-core stack runs with Megatron-Core 0.15's own code: a YaRN
rotary embedding unfused, a clamped SwiGLU's clamps and concatenation eagerly, the routed
experts' bias added expert by expert (``rope_scaling``, ``glu_clamp``, ``expert_bias``)."""

from __future__ import annotations

import pytest

from tests.helpers import retarget
from tracesim.build.host import HostModel
from tracesim.catalog import load_model
from tracesim.errors import InputError
from tracesim.specs.model import model_from_dict
from tracesim.template.moe_ops import EXPERT_BIAS
from tracesim.template.stacks import CLAMPED_GLU_PASSES, YARN_ROPE_PASSES, get_stack, stack_template

OSS = load_model("gpt-oss-120b")
PLAIN = OSS.replace(rope_scaling="", glu_clamp=0.0, expert_bias=False)


def _ops(model, stack="megatron-core"):
    return {(o.name, o.phase): o for o in stack_template(model, get_stack(stack)).ops}


def test_the_shipped_gpt_oss_spec_names_its_variants() -> None:
    assert (OSS.rope_scaling, OSS.glu_clamp, OSS.expert_bias) == ("yarn", 7.0, True)
    d = OSS.to_dict()
    assert model_from_dict(d) == OSS
    assert not {"rope_scaling", "glu_clamp", "expert_bias"} & set(load_model("llama3-8b").to_dict())


@pytest.mark.parametrize("change, key", [
    ({"rope_scaling": "ntk"}, "rope_scaling"),
    ({"glu_clamp": 7.0, "activation": "gelu"}, "glu_clamp"),
    ({"glu_clamp": -1.0}, "glu_clamp"),
    ({"expert_bias": "yes"}, "expert_bias"),
])
def test_bad_variants_name_their_key(change: dict, key: str) -> None:
    with pytest.raises(InputError) as err:
        model_from_dict({**OSS.to_dict(), **change}, "m.yaml")
    assert key in str(err.value)
    with pytest.raises(InputError, match="expert_bias"):
        model_from_dict({**load_model("llama3-8b").to_dict(), "expert_bias": True}, "m.yaml")


def test_megatron_core_prices_the_variants_as_its_code_runs_them() -> None:
    var, plain = _ops(OSS), _ops(PLAIN)
    rope = ("attn.rope", "fwd")
    assert var[rope].bytes == f"{YARN_ROPE_PASSES:g}*({plain[rope].bytes})"
    for phase, k in CLAMPED_GLU_PASSES.items():
        assert var["moe.act", phase].bytes == f"{k:g}*({plain['moe.act', phase].bytes})"
    assert var["moe.fc1", "fwd"].bytes == plain["moe.fc1", "fwd"].bytes
    names = [(o.name, o.phase) for o in stack_template(OSS, get_stack("megatron-core")).ops]
    f2, b2 = names.index(("moe.fc2", "fwd")), names.index(("moe.fc2", "bwd"))
    assert names[f2 + 1] == (EXPERT_BIAS, "fwd") and names[b2 - 1] == (EXPERT_BIAS, "bwd")
    assert (EXPERT_BIAS, "fwd") not in plain
    # other stacks run their own kernels: no Megatron-Core paths there
    assert (EXPERT_BIAS, "fwd") not in _ops(OSS, "torchtitan")


def test_the_report_names_the_unfused_paths() -> None:
    base = {"cluster": "h100x8", "ep": 8, "dp": 8, "micro_batch": 1, "global_batch": 8,
            "seq_len": 4096}
    kernels = retarget({**base, "model": OSS}).to_dict()["stack"]["kernels"]
    assert "unfused" in kernels["rotary"] and "eager" in kernels["activation"]
    assert "expert by expert" in kernels["expert_bias"]
    plain = retarget({**base, "model": PLAIN}).to_dict()["stack"]["kernels"]
    assert plain["rotary"].startswith("fused") and "expert_bias" not in plain


def test_the_bias_loop_costs_host_launches_per_expert() -> None:
    host = HostModel(local_experts=16)
    assert host.launches(EXPERT_BIAS, "fwd") == 33 and host.launches(EXPERT_BIAS, "bwd") == 64
    assert host.launches("recompute:" + EXPERT_BIAS, "bwd") == 64


def test_a_gpt_oss_step_takes_longer_with_its_variants() -> None:
    base = {"cluster": "h100x8", "ep": 8, "dp": 8, "micro_batch": 1, "global_batch": 8,
            "seq_len": 4096}
    t_var = retarget({**base, "model": OSS}).iteration_time_s
    t_plain = retarget({**base, "model": PLAIN}).iteration_time_s
    assert t_plain * 1.05 < t_var < t_plain * 1.3


def test_qwen3_normalises_each_query_and_key_head() -> None:
    qwen = load_model("qwen3-30b-a3b")
    assert qwen.qk_norm
    ops = _ops(qwen)
    norm = ops["attn.qk_norm", "fwd"]
    assert norm.op_class == "norm" and norm.params == "2*head_dim"
    names = [o.name for o in stack_template(qwen, get_stack("megatron-core")).ops if o.phase == "fwd"]
    assert names.index("attn.qkv") < names.index("attn.qk_norm") < names.index("attn.rope")
    assert ("attn.qk_norm", "fwd") not in _ops(load_model("llama3-8b"))
    assert qwen.attention_params() == qwen.replace(qk_norm=False).attention_params() + 2 * 128
    with pytest.raises(InputError, match="qk_norm"):
        model_from_dict({**load_model("deepseek-v3").to_dict(), "qk_norm": True}, "m.yaml")
