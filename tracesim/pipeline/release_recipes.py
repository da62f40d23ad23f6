"""The performance recipes of the Megatron-Bridge tables' rows of other releases than 25.11
(:data:`RELEASE_RECIPES`), where a release's config differs from the 25.11 recipe in what
tracesim expresses, and the 25.11 rows whose run had its config's layout where the table
printed another; :func:`tracesim.pipeline.recipes.find_recipe` looks here first."""

from __future__ import annotations

from tracesim.pipeline.recipe_spec import (
    DS3,
    DS_MTP_LAYOUT,
    FP8_DPA,
    L8V2,
    L405V2,
    OSS,
    OSS3,
    QWV2,
    TE_ATTN_MOE,
    TE_MOE,
    V05,
    V05_TAGS,
    Recipe,
)

#: rows whose recipe differs from the 25.11 one in what tracesim expresses, by (release, system,
#: model, precision): Megatron-Bridge v0.3.0 (NeMo 26.02) runs DeepSeek-V3 with one MTP layer
#: (``deepseek_v3_pretrain_config``) and the layout ``Et*4|(t*4|)*14tmL`` (GB300: the config's
#: ``pp_layout``; GB200 pp 4 x vp 4, B200 and B300 pp 16: ``set_deepseek_v3_pipeline_model_
#: parallel_layout``'s map), HybridEP on all four (the table's TFLOP/s agree with one MTP layer,
#: tests/test_megatron_flops.py); DGX B300 rows take their v0.3.0 B300 configs; the other
#: entries say what differs (docs/published_configs.md gives every one with its source)
RELEASE_RECIPES: dict[tuple[str, str, str, str], Recipe] = {
    # 25.11's B200 gpt-oss row prints EP 8; it ran its config's EP 64 (docs/published_configs.md)
    ("25.11", "DGX-B200", "gpt-oss-120b", "bf16"): Recipe(
        f"v0.2.0:{OSS}", "GPT_OSS_120B_B200_BF16_BASE_CONFIG", "ep 64 (table 8)",
        recompute="selective:layernorm,moe_act", granularity=False, options=(("ep", 64),)),
    ("26.02", "DGX-GB300", "deepseek-v3", "fp8-mx"): Recipe(
        f"v0.3.0:{DS3}", "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V2",
        recompute="selective:mla_up_proj", dispatcher="hybridep",
        pp_layout=DS_MTP_LAYOUT, mtp_layers=1),
    ("26.02", "DGX-GB200", "deepseek-v3", "fp8-mx"): Recipe(
        f"v0.3.0:{DS3}", "DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2",
        recompute="selective:mla_up_proj", cuda_graph=TE_ATTN_MOE, dispatcher="hybridep",
        pp_layout=DS_MTP_LAYOUT, mtp_layers=1),
    ("26.02", "DGX-B200", "deepseek-v3", "fp8-mx"): Recipe(
        f"v0.3.0:{DS3}", "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V1",
        recompute="selective:mla_up_proj", dispatcher="hybridep",
        pp_layout=DS_MTP_LAYOUT, mtp_layers=1),
    # H100 Qwen3 30B-A3B at v0.3.0: the flex dispatcher's DeepEP backend (v0.2.0: alltoall)
    ("26.02", "DGX-H100", "qwen3-30b-a3b", "fp8-cs"): Recipe(
        f"v0.3.0:{QWV2}", "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1", a2a_overlap=True,
        dispatcher="deepep"),
    # GB200 gpt-oss from v0.3.0 to v0.4.x: no flex backend, so the alltoall dispatcher (25.11's
    # r0.2.0-test config set HybridEP); its listed modules recomputed (Megatron-Bridge v0.2.1 on)
    **{(rel, "DGX-GB200", "gpt-oss-120b", "bf16"): Recipe(
        f"{tag}:{OSS3}", "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2",
        recompute="selective:layernorm,moe_act")
       for rel, tag in (("26.02", "v0.3.0"), ("26.02.01", "v0.3.1"), ("26.04", "v0.4.0"),
                        ("26.04.01", "v0.4.0"))},
    # B200 Qwen3 235B at v0.3.0: no EP overlap, and no fp8_mx exception turning the parameter
    # all-gather overlap off (v0.2.0's qwen3_235b_a22b_b200_config had one)
    ("26.02", "DGX-B200", "qwen3-235b-a22b", "fp8-mx"): Recipe(
        f"v0.3.0:{QWV2}", "QWEN3_235B_A22B_PRETRAIN_CONFIG_B200_FP8_MX_V2"),
    # the 26.02 table's NVFP4 rows: the Llama recipes turn the userbuffers TP overlap off for
    # NVFP4 (llama3_llm_pretrain.py / llama31_llm_pretrain.py: ``tp_comm_overlap = False if
    # precision == "nvfp4"``) and run no CUDA graph (``cuda_graph_impl="none"``)
    ("26.02", "DGX-GB300", "llama3-70b", "nvfp4"): Recipe(
        f"v0.3.0:{L8V2}", "LLAMA3_70B_PRETRAIN_CONFIG_GB300_NVFP4_V2", tp_comm_overlap=False),
    ("26.02", "DGX-GB200", "llama3-70b", "nvfp4"): Recipe(
        f"v0.3.0:{L8V2}", "LLAMA3_70B_PRETRAIN_CONFIG_GB200_NVFP4_V2", tp_comm_overlap=False),
    ("26.02", "DGX-GB300", "llama3.1-405b", "nvfp4"): Recipe(
        f"v0.3.0:{L405V2}", "LLAMA31_405B_PRETRAIN_CONFIG_GB300_NVFP4_V2", tp_comm_overlap=False),
    ("26.02", "DGX-GB200", "llama3.1-405b", "nvfp4"): Recipe(
        f"v0.3.0:{L405V2}", "LLAMA31_405B_PRETRAIN_CONFIG_GB200_NVFP4_V2", tp_comm_overlap=False),
    # the 26.02 table's MXFP8 rows of Llama 3.1 405B (25.11 published FP8 current scaling
    # there): llama31_llm_pretrain.py gives every precision but BF16 the B200 h16384 FP8
    # userbuffers configuration, TP overlap on
    **{("26.02", f"DGX-{g}", "llama3.1-405b", "fp8-mx"): Recipe(
        f"v0.3.0:{L405V2}", f"LLAMA31_405B_PRETRAIN_CONFIG_{g}_FP8_MX_V2") for g in ("GB300", "GB200")},
    # the 26.02 table's DGX B300 rows (v0.3.0 has B300 configs; 25.11 had no B300 row)
    ("26.02", "DGX-B300", "deepseek-v3", "fp8-mx"): Recipe(
        f"v0.3.0:{DS3}", "DEEPSEEK_V3_PRETRAIN_CONFIG_B300_FP8_MX_V2",
        recompute="selective:mla_up_proj", dispatcher="hybridep",
        pp_layout=DS_MTP_LAYOUT, mtp_layers=1),
    ("26.02", "DGX-B300", "gpt-oss-120b", "bf16"): Recipe(
        f"v0.3.0:{OSS3}", "GPT_OSS_120B_PRETRAIN_CONFIG_B300_BF16_V2", cuda_graph=TE_ATTN_MOE),
    ("26.02", "DGX-B300", "qwen3-30b-a3b", "fp8-mx"): Recipe(
        f"v0.3.0:{QWV2}", "QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_MX_V1",
        cuda_graph=TE_MOE, dispatcher="hybridep"),
    ("26.02", "DGX-B300", "qwen3-235b-a22b", "fp8-mx"): Recipe(
        f"v0.3.0:{QWV2}", "QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_FP8_MX_V2", a2a_overlap=True),
    # the NVL72 Qwen3 235B rows in MXFP8 (25.11 published BF16 there): v0.3.0 to v0.4.2 (alike)
    # set HybridEP and TE graphs; GB300 from v0.3.1 on takes its BF16 config's scopes (the
    # ``_FP8_CS_V2 = _BF16_V2`` alias); v0.5.0 (26.06) on runs other kernels (CuTe DSL MLP)
    **{(rel, f"DGX-{g}", "qwen3-235b-a22b", "fp8-mx"): Recipe(
        f"{tag}:{QWV2}", f"QWEN3_235B_A22B_PRETRAIN_CONFIG_{g}_FP8_MX_V2",
        cuda_graph=TE_MOE if g == "GB300" and rel != "26.02" else TE_ATTN_MOE,
        dispatcher="hybridep")
       for g in ("GB300", "GB200")
       for rel, tag in (("26.02", "v0.3.0"), ("26.02.01", "v0.3.1"), ("26.04", "v0.4.0"),
                        ("26.04.01", "v0.4.0"))},
    # v0.5.0 / v0.5.1 (26.06, 26.06.01; alike): the NVL72 Qwen3 and DeepSeek-V3 MXFP8 runs graph
    # the whole iteration and run the EP overlap and TE's CuTe DSL fused grouped MLP; FP8
    # attention but on GB200 DeepSeek-V3, which recomputes mla_up_proj (GB300 nothing)
    **{(rel, f"DGX-{g}", model, "fp8-mx"): V05(
        f"{tag}:{QWV2}", f"QWEN3_{size}_PRETRAIN_CONFIG_{g}_FP8_MX_V{v}", options=FP8_DPA)
       for g in ("GB300", "GB200") for rel, tag in V05_TAGS
       for model, size, v in (("qwen3-30b-a3b", "30B_A3B", 1), ("qwen3-235b-a22b", "235B_A22B", 2))},
    **{(rel, f"DGX-{g}", "deepseek-v3", "fp8-mx"): V05(
        f"{tag}:{DS3}", f"DEEPSEEK_V3_PRETRAIN_CONFIG_{g}_FP8_MX_V2", recompute=rc,
        pp_layout=DS_MTP_LAYOUT, mtp_layers=1, options=FP8_DPA if g == "GB300" else ())
       for g, rc in (("GB300", ""), ("GB200", "selective:mla_up_proj")) for rel, tag in V05_TAGS},
}


def _nemotron3() -> dict[tuple[str, str, str, str], Recipe]:
    """Nemotron 3's runs in every release that published them (26.02.01: Nano, v0.3.1's
    ``nemotron_3_nano_workload_base_configs.py``; 26.04 on: Nano and Super, v0.4.0's
    ``nemotron_3_workload_base_configs.py`` and ``nemotron_3_llm_pretrain.py``, unchanged
    through v0.6.0): HybridEP, ETP 1, no EP overlap, the router unfused; Super two MTP passes
    of one layer, router padding for MXFP8 / NVFP4, no TP overlap, NVFP4 with ``te_quant.cfg``
    and the last 14 layers in BF16. Blackwell: TE graphs over attn, mamba, router, preprocess."""
    g4, base = "te:attn,mamba,moe_router,moe_preprocess", "scripts/performance/configs/nemotronh/"
    raw = (("moe_router_fusion", False),)  # nemotron_3_nano.py; Super: Megatron's default
    h100 = {"bf16": ("selective:moe,layernorm", "te:attn,mamba"),
            "fp8-cs": ("selective:moe,layernorm,core_attn,moe_act", "te:mamba")}
    out = {}
    for rel in ("26.02.01", "26.04", "26.04.01", "26.06", "26.06.01", "26.08"):
        tag, name = (("v0.3.1", "nemotron_3_nano_workload_base_configs.py") if rel == "26.02.01"
                     else ("v0.4.0", "nemotron_3_workload_base_configs.py"))
        for sysn in ("DGX-GB300", "DGX-GB200", "DGX-B300", "DGX-B200", "DGX-H100"):
            gpu = sysn.removeprefix("DGX-")
            for prec in (("bf16", "fp8-cs") if gpu == "H100" else ("bf16", "fp8-mx", "nvfp4")):
                tail = prec.upper().replace("-", "_")
                rec, graph = h100.get(prec, ("", g4)) if gpu == "H100" else ("", g4)
                out[(rel, sysn, "nemotron-3-nano", prec)] = Recipe(
                    f"{tag}:{base}{name}", f"NEMOTRON_3_NANO_PRETRAIN_CONFIG_{gpu}_{tail}_V1",
                    recompute=rec, cuda_graph=graph, dispatcher="hybridep", etp=1, options=raw)
                if rel == "26.02.01" or gpu == "H100":
                    continue
                rec = {("B300", "bf16"): "moe_act,layernorm", ("B300", "nvfp4"): "moe_act,layernorm",
                       ("B200", "bf16"): "moe_act,moe,layernorm,core_attn",
                       ("B200", "fp8-mx"): "moe_act,layernorm"}.get((gpu, prec), "")
                nv = prec == "nvfp4"
                out[(rel, sysn, "nemotron-3-super", prec)] = Recipe(
                    f"{tag}:{base}{name}", f"NEMOTRON_3_SUPER_PRETRAIN_CONFIG_{gpu}_{tail}_V1",
                    recompute=f"selective:{rec}" if rec else "",
                    cuda_graph="" if gpu == "B200" and not nv else g4, dispatcher="hybridep",
                    etp=1, mtp_layers=2, tp_comm_overlap=False,
                    options=(*raw, ("mtp_repeated", True), ("moe_router_padding", prec != "bf16")),
                    fp8_plan="attn.*=bf16,mamba.out_proj=mxfp8" if nv else "",
                    bf16_layers="0,14" if nv else "")
    return out


RELEASE_RECIPES.update(_nemotron3())
