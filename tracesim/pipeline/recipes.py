"""The Megatron-Bridge performance recipes behind the 25.11 performance table, row by row.

Each row of ``megatron_bridge_25_11.csv`` (system, model, precision) was measured with a
Megatron-Bridge performance recipe (``scripts/performance``) that sets much more than the
table's columns. :data:`RECIPES` holds, per row, what that recipe sets, read from the
repository NVIDIA-NeMo/Megatron-Bridge at the commit named in ``source`` (docs/published_configs.md
gives every row with its file and config name). Four commits are used:

* ``7af9601c`` = tag v0.2.0 (2025-11-26), the release in the NeMo 25.11 container;
* ``4a82e165`` = branch ``gaod/r0.2.0_test`` (2025-12-06): r0.2.0 plus the GB200 / GB300 DeepSeek-V3
  and GPT-OSS configs whose layout and batch are the table's (PP2 x EP32 and GBS 4096 on GB300,
  no MTP, pipeline layout ``Et*3|(t*4|)*14ttL``; GPT-OSS GBS 1280 at 8192 tokens);
* ``e940d997`` (2026-01-12, "support multiple perf configs"): the ``_V2`` configs, the
  table's larger runs (Llama 3 70B GBS 256, Llama 3.1 405B on 256 GB200/GB300 GPUs with GBS
  1536, Qwen3 235B on 256 GPUs with GBS 8192);
* ``21b02e0c`` = tag v0.3.0, the NeMo 26.02 release: the recipes of the 26.02 table's
  rows whose recipe changed or that 25.11 did not publish (DeepSeek-V3, the DGX B300 rows,
  the NVL72 Qwen3 235B rows in MXFP8, B200 Qwen3 235B, H100 Qwen3 30B-A3B, GB200 gpt-oss;
  :data:`RELEASE_RECIPES` in :mod:`tracesim.pipeline.release_recipes`, with later releases').

:class:`Recipe` and the config files' paths live in :mod:`tracesim.pipeline.recipe_spec`.

Selective recomputation ran in the 25.11 table's runs only where the config sets
``recompute_granularity = "selective"`` itself (DeepSeek-V3: ``set_deepseek_v3_common_configs``):
at these commits ``set_recompute_overrides`` (``scripts/performance/utils/helpers.py``) sets
``recompute_modules`` alone, which Megatron-Core ignores without a granularity (its default
is None). Megatron-Bridge ``6afd5c74`` ("selective recompute", 2025-12-10, first in v0.2.1)
sets it with the modules, so later releases' runs recompute them. The GPT-OSS configs list
``layernorm, moe_act`` (``Recipe.granularity`` False; :data:`INACTIVE_RECOMPUTE`), which
:func:`recipe_options` drops for rows of release 25.11.

:func:`recipe_options` turns what tracesim can express into replay options; :func:`unmodelled`
names, per row, the settings tracesim has no mechanism for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.pipeline.recipe_spec import (
    DS,
    DS_LAYOUT,
    DS_MTP_LAYOUT,
    FSDP,
    L8,
    L8V2,
    L405,
    L405V2,
    OSS,
    QW,
    QWV2,
    TE_ATTN_MOE,
    TE_MOE,
    Recipe,
)
from tracesim.pipeline.release_recipes import RELEASE_RECIPES
from tracesim.specs.parallel import FP8_RECIPES, MOE_DISPATCHERS
from tracesim.specs.textopts import first_last, layout_chunks, plan_pairs

#: the commits (NVIDIA-NeMo/Megatron-Bridge) the recipes are read from
COMMITS = {"v0.2.0": "7af9601c9da746d21481194356295bfe23df3737",
           "r0.2.0-test": "4a82e165124ad4bd2e77155ee8f964f241f0bbbd",
           "v2-configs": "e940d997d7bdb7810f621f5b32bf70255b5aa2d9",
           "v0.3.0": "21b02e0cfb2f8ff907e0d8baee0c5205876c6812",
           "v0.3.1": "9c9dd848966322fc3ed7706747ec13219ef49dda",
           "v0.4.0": "0fbfe7d3e970fbd75c1281d71cee586ce1f3df5e",
           "v0.5.0": "fcbb6031103d0ca845c1a54d4fee55ecfcca17b6",
           "v0.5.1": "5cb3444c43f7499cf3872b2d46870cf8bc2e00ce"}

#: (system, model, precision column) -> the recipe the row ran
RECIPES: dict[tuple[str, str, str], Recipe] = {
    # DGX-GB300
    ("DGX-GB300", "llama3-8b", "fp8-cs"): Recipe(
        f"v0.2.0:{L8}", "LLAMA3_8B_GB300_FP8_CS_BASE_CONFIG", "mbs 4 (table 2)",
        cuda_graph="local:full_iteration"),
    ("DGX-GB300", "llama3-70b", "fp8-cs"): Recipe(
        f"v2-configs:{L8V2}", "LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_CS_V2",
        cpu_offload_layers=20, fsdp_notes=FSDP),
    ("DGX-GB300", "llama3.1-405b", "fp8-cs"): Recipe(
        f"v2-configs:{L405V2}", "LLAMA31_405B_PRETRAIN_CONFIG_GB300_FP8_CS_V2"),
    ("DGX-GB300", "deepseek-v3", "bf16"): Recipe(
        f"r0.2.0-test:{DS}", "DEEPSEEK_V3_GB300_BF16_BASE_CONFIG",
        "16-chunk layout on pp 2: 8 chunks per rank (table vp 4)",
        recompute="selective:mlp,moe_act", cuda_graph=TE_MOE, dispatcher="hybridep",
        pp_layout=DS_LAYOUT),
    ("DGX-GB300", "deepseek-v3", "fp8-mx"): Recipe(
        f"r0.2.0-test:{DS}", "DEEPSEEK_V3_GB300_FP8_MX_BASE_CONFIG",
        "16-chunk layout on pp 2: 8 chunks per rank (table vp 4)",
        recompute="selective:mlp,moe_act", cuda_graph=TE_MOE, dispatcher="hybridep",
        overlap_param_gather=False, pp_layout=DS_LAYOUT),
    ("DGX-GB300", "gpt-oss-120b", "bf16"): Recipe(
        f"r0.2.0-test:{OSS}", "GPT_OSS_120B_GB300_BF16_BASE_CONFIG",
        cuda_graph=TE_ATTN_MOE),
    ("DGX-GB300", "qwen3-30b-a3b", "fp8-mx"): Recipe(
        f"v0.2.0:{QW}", "QWEN3_30B_A3B_GB300_FP8_MX_BASE_CONFIG", "mbs 8 (table 4)",
        cuda_graph=TE_MOE, dispatcher="hybridep"),
    ("DGX-GB300", "qwen3-235b-a22b", "bf16"): Recipe(
        f"v2-configs:{QWV2}", "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_BF16_V2",
        cuda_graph=TE_MOE, dispatcher="hybridep"),
    # DGX-GB200
    ("DGX-GB200", "llama3-8b", "fp8-cs"): Recipe(
        f"v0.2.0:{L8}", "LLAMA3_8B_GB200_FP8_CS_BASE_CONFIG", cuda_graph="local:full_iteration"),
    ("DGX-GB200", "llama3-70b", "fp8-cs"): Recipe(
        f"v2-configs:{L8V2}", "LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V2",
        cpu_offload_layers=40, fsdp_notes=FSDP),
    ("DGX-GB200", "llama3.1-405b", "fp8-cs"): Recipe(
        f"v2-configs:{L405V2}", "LLAMA31_405B_PRETRAIN_CONFIG_GB200_FP8_CS_V2"),
    ("DGX-GB200", "deepseek-v3", "bf16"): Recipe(
        f"r0.2.0-test:{DS}", "DEEPSEEK_V3_GB200_BF16_BASE_CONFIG",
        recompute="selective:mla_up_proj", cuda_graph=TE_MOE, dispatcher="hybridep",
        pp_layout=DS_LAYOUT),
    ("DGX-GB200", "deepseek-v3", "fp8-mx"): Recipe(
        f"r0.2.0-test:{DS}", "DEEPSEEK_V3_GB200_FP8_MX_BASE_CONFIG",
        "config pp 4 ep 64 (table pp 8 ep 32); 16-chunk layout on pp 8: 2 per rank (table vp 4)",
        recompute="selective:mla_up_proj", cuda_graph=TE_MOE, dispatcher="hybridep",
        overlap_param_gather=False, pp_layout=DS_LAYOUT),
    ("DGX-GB200", "gpt-oss-120b", "bf16"): Recipe(
        f"r0.2.0-test:{OSS}", "GPT_OSS_120B_GB200_BF16_BASE_CONFIG",
        recompute="selective:layernorm,moe_act", dispatcher="hybridep", granularity=False),
    ("DGX-GB200", "qwen3-30b-a3b", "fp8-mx"): Recipe(
        f"v0.2.0:{QW}", "QWEN3_30B_A3B_GB200_FP8_MX_BASE_CONFIG",
        cuda_graph=TE_MOE, dispatcher="hybridep"),
    ("DGX-GB200", "qwen3-235b-a22b", "bf16"): Recipe(
        f"v2-configs:{QWV2}", "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_BF16_V2",
        "config pp 8 vp 1 ep 8 (table vp 3 ep 32)",
        cuda_graph=TE_ATTN_MOE, dispatcher="hybridep"),
    # DGX-B200
    ("DGX-B200", "llama3-8b", "fp8-cs"): Recipe(
        f"v0.2.0:{L8}", "LLAMA3_8B_B200_FP8_CS_BASE_CONFIG", cuda_graph="local:full_iteration"),
    ("DGX-B200", "llama3.1-405b", "fp8-cs"): Recipe(
        f"v0.2.0:{L405}", "LLAMA31_405B_B200_FP8_CS_BASE_CONFIG"),
    ("DGX-B200", "deepseek-v3", "fp8-mx"): Recipe(
        f"v0.2.0:{DS}", "DEEPSEEK_V3_B200_FP8_MX_BASE_CONFIG",
        recompute="selective:mla_up_proj", pp_layout=DS_MTP_LAYOUT, mtp_layers=1,
        shared_overlap=True),
    ("DGX-B200", "gpt-oss-120b", "bf16"): Recipe(
        f"v0.2.0:{OSS}", "GPT_OSS_120B_B200_BF16_BASE_CONFIG", "ep 64 (table 8)",
        recompute="selective:layernorm,moe_act", granularity=False),
    ("DGX-B200", "qwen3-30b-a3b", "fp8-mx"): Recipe(
        f"v0.2.0:{QW}", "QWEN3_30B_A3B_B200_FP8_MX_BASE_CONFIG", cuda_graph=TE_MOE),
    ("DGX-B200", "qwen3-235b-a22b", "fp8-mx"): Recipe(
        f"v0.2.0:{QW}", "QWEN3_235B_A22B_B200_FP8_MX_BASE_CONFIG", "vp 4 (table 2)",
        a2a_overlap=True, overlap_param_gather=False),
    # DGX-H100
    ("DGX-H100", "llama3-8b", "fp8-cs"): Recipe(
        f"v0.2.0:{L8}", "LLAMA3_8B_H100_FP8_CS_BASE_CONFIG",
        "no FSDP in the config (table FSDP; the recipe sets nccl_ub when FSDP is on)",
        recompute="full-block:5"),
    ("DGX-H100", "llama3-70b", "fp8-cs"): Recipe(
        f"v0.2.0:{L8}", "LLAMA3_70B_H100_FP8_CS_BASE_CONFIG"),
    ("DGX-H100", "llama3.1-405b", "fp8-cs"): Recipe(
        f"v0.2.0:{L405}", "LLAMA31_405B_H100_FP8_CS_BASE_CONFIG"),
    ("DGX-H100", "gpt-oss-120b", "bf16"): Recipe(
        f"v0.2.0:{OSS}", "GPT_OSS_120B_H100_BF16_BASE_CONFIG", "mbs 1 (table 4)",
        recompute="selective:layernorm,moe_act", granularity=False),
    ("DGX-H100", "qwen3-30b-a3b", "fp8-cs"): Recipe(
        f"v0.2.0:{QW}", "QWEN3_30B_A3B_H100_FP8_CS_BASE_CONFIG", "mbs 1 vp 12 (table 2, 24)",
        a2a_overlap=True),
    ("DGX-H100", "qwen3-235b-a22b", "fp8-cs"): Recipe(
        f"v0.2.0:{QW}", "QWEN3_235B_A22B_H100_FP8_CS_BASE_CONFIG", a2a_overlap=True,
        tp_comm_overlap=False),
}


#: (system, model) whose config lists ``recompute_modules`` without setting
#: ``recompute_granularity``: no recomputation ran in release 25.11 (module docstring)
INACTIVE_RECOMPUTE = frozenset(key[:2] for key, r in RECIPES.items()
                               if r.recompute.startswith("selective:") and not r.granularity)


def find_recipe(system: str, model: str, precision: str, release: str = "25.11") -> Recipe | None:
    """The recipe of a Bridge table row: the release's own where :data:`RELEASE_RECIPES`
    has it, else the 25.11 one (:data:`RECIPES`)."""
    return RELEASE_RECIPES.get((release, system, model, precision)) or RECIPES.get((system, model, precision))


#: columns with which a table row gives its own run settings instead of a Megatron-Bridge
#: recipe (:func:`row_recipe`)
ROW_RECIPE_COLUMNS = ("recompute", "dispatcher", "a2a_overlap", "cuda_graph", "etp", "pp_layout",
                      "mtp_layers", "fp8_plan", "bf16_layers", "tp_comm_overlap")


def row_recipe(row: Mapping[str, str | None], path: Path, where: str) -> Recipe | None:
    """The run settings a table row gives itself (None: the table has none of
    :data:`ROW_RECIPE_COLUMNS`), in :class:`Recipe`'s terms: ``recompute`` ``""``, ``full``
    (every layer), ``full-block:N`` or ``selective:MODULES``; ``dispatcher`` alltoall, deepep
    or hybridep; ``a2a_overlap`` true / false; ``cuda_graph`` ``local:full_iteration`` or
    ``te:SCOPES``; ``etp`` the expert tensor-parallel size (empty: Megatron's default, TP);
    ``pp_layout`` a Megatron pipeline layout (:func:`layout_chunks`); ``mtp_layers`` the
    multi-token-prediction modules; ``fp8_plan`` GLOB=RECIPE pairs and ``bf16_layers``
    FIRST,LAST (:class:`Recipe`); ``tp_comm_overlap`` true / false (empty: the stack's: on with
    tp > 1). ``where`` names the row of the table at ``path`` in errors."""
    if not any(c in row for c in ROW_RECIPE_COLUMNS):
        return None

    def text(key: str) -> str:
        return (row.get(key) or "").strip()

    rec = text("recompute")
    if rec and rec != "full" and not re.fullmatch(r"full-block:\d+|selective:[a-z_]+(,[a-z_]+)*", rec):
        raise InputError(f"expected '', full, full-block:N or selective:MODULES, got {rec!r}",
                         path, f"{where}: recompute")
    disp = text("dispatcher") or "alltoall"
    if disp not in MOE_DISPATCHERS:
        raise InputError(f"unknown dispatcher {disp!r} (known: {', '.join(MOE_DISPATCHERS)})",
                         path, f"{where}: dispatcher")
    overlap, tp_overlap = text("a2a_overlap").lower(), text("tp_comm_overlap").lower()
    for key, value in (("a2a_overlap", overlap), ("tp_comm_overlap", tp_overlap)):
        if value not in ("", "true", "false"):
            raise InputError(f"expected true or false, got {value!r}", path, f"{where}: {key}")
    graph = text("cuda_graph")
    if graph and not graph.startswith(("local:", "te:")):
        raise InputError(f"expected local:SCOPES or te:SCOPES, got {graph!r}", path, f"{where}: cuda_graph")
    def count(key: str) -> int | None:
        value = text(key)
        if value and not value.isdigit():
            raise InputError(f"expected a number, got {value!r}", path, f"{where}: {key}")
        return int(value) if value else None

    layout = text("pp_layout")
    if layout:
        layout_chunks(layout, path, f"{where}: pp_layout")
    try:  # the two cells' forms (a cell error names the file, the row and the column)
        plan_pairs(text("fp8_plan"), "fp8_plan", ("bf16", *FP8_RECIPES))
    except InputError as exc:
        raise InputError(exc.message, path, f"{where}: fp8_plan") from None
    try:
        first_last(text("bf16_layers"))
    except InputError as exc:
        raise InputError(exc.message, path, f"{where}: bf16_layers") from None
    return Recipe("table:row", "", recompute=rec, dispatcher=disp, a2a_overlap=overlap == "true",
                  cuda_graph=graph, etp=count("etp"), pp_layout=layout or None,
                  mtp_layers=count("mtp_layers") or 0, fp8_plan=text("fp8_plan"),
                  bf16_layers=text("bf16_layers"),
                  tp_comm_overlap=None if not tp_overlap else tp_overlap == "true")


def row_run(row: Mapping[str, str | None], path: Path, k: int) -> Recipe | None:
    """The run settings of a Megatron-Bridge-format row: its own columns where the table has
    them (a table of the user's runs, :func:`row_recipe`), else the performance recipe of
    its release, system, model and precision (:func:`find_recipe`), else None."""
    own = row_recipe(row, path, f"row {k + 2}")
    if own is not None:
        return own
    system, model, precision, release = ((row.get(c) or "").strip()
                                         for c in ("system", "model", "precision", "release"))
    return find_recipe(system, model, precision, release or "25.11")


def row_unmodelled(row: Mapping[str, str | None], path: Path, k: int) -> tuple[str, ...]:
    """The settings of the row's run that the replay cannot express (module docstring)."""
    run = row_run(row, path, k)
    return () if run is None else unmodelled(run)


def bridge_ub_config(recipe: Recipe, device: str, dtype: str) -> str | None:
    """The userbuffers configuration a Megatron-Bridge recipe sets where it is not the
    megatron-core stack's default (``None``): the Llama 3.1 405B recipes their h16384 ones
    (``llama31_llm_pretrain.py``: H100's on H100, B200's on the Blackwell GPUs; BF16's or FP8's),
    the Qwen3 recipes none (``CommOverlapConfig(tp_comm_overlap=True)`` alone: Transformer
    Engine's defaults). The Llama 3 70B recipes' are the stack's own (docs/stacks.md)."""
    path = recipe.source.split(":", 1)[-1]
    if path in (L405, L405V2):
        return f"bridge-{'bf16' if dtype == 'bf16' else 'fp8'}-{'h100' if device == 'h100' else 'b200'}-h16384"
    return "te-defaults" if path in (QW, QWV2) else None


def recipe_options(recipe: Recipe, opts: dict[str, Any], layers: int,
                   release: str = "25.11") -> dict[str, Any]:
    """``opts`` (a row's replay options, of a model of ``layers`` layers) with what tracesim can express of ``recipe``: the
    pipeline layout (its chunks decide the chunks per rank, as in Megatron-Core, where a
    layout of ``pp x v`` stages gives ``v`` virtual stages), TP overlap and the parameter
    all-gather overlap where the recipe turns them off, and full recomputation where the
    recipe's recomputation (full, of the first N layers of each chunk with the block method;
    selective, by module, unless the row's ``release`` ran without it: module docstring), and its
    CUDA-graph scopes."""
    out = dict(opts)
    if recipe.pp_layout is not None:
        chunks = layout_chunks(recipe.pp_layout)
        if len(chunks) % out["pp"]:
            raise InputError(f"layout of {len(chunks)} chunks does not split over pp "
                             f"{out['pp']}", "pp_layout")
        vpp = len(chunks) // out["pp"]
        out.pop("vpp", None)
        if vpp > 1:
            out["vpp"] = vpp
        out["stage_layers"] = chunks
    if recipe.tp_comm_overlap is not None and out["tp"] > 1:
        out["tp_comm_overlap"] = recipe.tp_comm_overlap
    if out["tp"] > 1 and recipe.tp_comm_overlap is not False and "tp_comm_overlap_cfg" not in out:
        if (ub := bridge_ub_config(recipe, str(out["cluster"].device), str(out["dtype"]))):
            out["tp_comm_overlap_cfg"] = ub
    if recipe.overlap_param_gather is not None and not out.get("fsdp"):
        out["overlap_param_gather"] = recipe.overlap_param_gather
    if recipe.expert_tp is not None:
        out["etp"] = recipe.expert_tp
    # activation offloading; multi-token prediction (DeepSeek-V3: the layout's ``m``)
    flags = (("cpu_offload_layers", recipe.cpu_offload_layers), ("mtp_layers", recipe.mtp_layers))
    out.update([*((k, v) for k, v in flags if v), *recipe.options])
    if recipe.dispatcher != "alltoall":  # the flex dispatcher's DeepEP / HybridEP backend
        out["moe_dispatcher"] = recipe.dispatcher
    if recipe.shared_overlap:  # shared experts on their own stream beside the all-to-alls
        out["moe_shared_expert_overlap"] = True
    if recipe.fp8_plan:  # modules in another precision than the recipe's (te_quant.cfg)
        out["fp8_plan"] = recipe.fp8_plan
    if recipe.bf16_layers:  # first_last_layers_bf16 with its start / end counts
        out["bf16_layers"] = recipe.bf16_layers
    if recipe.cuda_graph:  # "local:full_iteration" or "te:" + Transformer Engine scopes
        out["cuda_graphs"] = recipe.cuda_graph.split(":", 1)[1]
    if recipe.recompute.startswith("full"):  # "full" (every layer) or "full-block:N"
        out["recompute"] = "full"
        n = int(recipe.recompute.split(":")[1]) if ":" in recipe.recompute else 0
        if n and n < max(out.get("stage_layers") or (layers // (out["pp"] * out.get("vpp", 1)),)):
            out["recompute_layers"] = n
    elif recipe.recompute.startswith("selective:") and (recipe.granularity or release != "25.11"):
        out["recompute"] = "selective"
        out["recompute_modules"] = recipe.recompute.split(":", 1)[1]
    return out


def unmodelled(recipe: Recipe) -> tuple[str, ...]:
    """The recipe's settings the replay does not apply (module docstring): the EP
    all-to-all overlap (``--moe-a2a-overlap`` models it, overlapping ideally: on the one
    published pair, Megatron-MoE-ModelZoo's H100 Qwen3 235B rows, it gains 2.1 times what the
    run gained, docs/moe.md, so published rows replay without it), and the FSDP recipes'
    double buffer and communication unit size (``fsdp_notes``; the replay's FSDP gathers
    per layer)."""
    out = []
    if recipe.a2a_overlap:
        out.append("EP all-to-all overlapped with the other micro-batch (delay_wgrad_compute)")
    if recipe.fsdp_notes:
        out.append(f"Megatron FSDP settings ({recipe.fsdp_notes})")
    if recipe.notes:
        out.append(recipe.notes)
    return tuple(out)
