"""What a Megatron-Bridge performance recipe sets, as tracesim reads it (:class:`Recipe`), and
the Megatron-Bridge files and settings the recipe tables share: the config files' paths in
the repository, DeepSeek-V3's pipeline layouts, the CUDA-graph scopes and the v0.5 MoE
configs' common settings. The tables: :data:`tracesim.pipeline.recipes.RECIPES` (release
25.11) and :data:`tracesim.pipeline.release_recipes.RELEASE_RECIPES` (other releases)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial


@dataclass(frozen=True)
class Recipe:
    """What a row's performance recipe sets beyond the table's columns.

    ``config``: the config name in ``source``'s ``workload_base_configs.py``; ``differs``: where
    that config's layout / batch differs from the table row (the table is replayed as published;
    the run overrode them on the command line); ``recompute``: ``""`` (none), ``"full-block:N"``
    (N layers per stage recomputed whole), or ``"selective:"`` + Megatron recompute modules;
    ``cpu_offload_layers``: layers whose activations are offloaded to host memory;
    ``cuda_graph``: ``""``, ``"local:full_iteration"`` or ``"te:"`` + TE graph scopes;
    ``dispatcher``: MoE token dispatcher (``alltoall``, ``hybridep`` or ``deepep``, the last two
    through Megatron's ``flex`` dispatcher; flex sets moe_shared_expert_overlap off);
    ``shared_overlap``: moe_shared_expert_overlap (the DeepSeek provider's default, kept with
    the alltoall dispatcher and without the EP overlap, which both turn it off);
    ``a2a_overlap``: overlap_moe_expert_parallel_comm + delay_wgrad_compute; ``tp_comm_overlap``
    / ``overlap_param_gather``: None where the recipe keeps the megatron-core default
    (userbuffers TP overlap with tp > 1; parameter all-gather overlapped); ``pp_layout``:
    Megatron pipeline_model_parallel_layout; ``mtp_layers``: MTP layers; ``options``: further
    replay options (name, value); ``granularity``: the config sets ``recompute_granularity``
    itself (False: its ``recompute_modules`` ran only from Megatron-Bridge v0.2.1 on, module
    docstring); ``etp``: the expert tensor-parallel size a table row gives (:func:`row_recipe`;
    None: the config file's, :attr:`expert_tp`); ``fp8_plan`` / ``bf16_layers``: ``--fp8-plan``
    and ``--bf16-layers`` (modules and layers kept in another precision; Megatron-Bridge's
    ``te_quant.cfg``, ``first_last_layers_bf16``); ``notes``: further settings the replay has no
    mechanism for (:func:`unmodelled`).
    """

    source: str
    config: str
    differs: str = ""
    recompute: str = ""
    cpu_offload_layers: int = 0
    cuda_graph: str = ""
    dispatcher: str = "alltoall"
    shared_overlap: bool = False
    a2a_overlap: bool = False
    tp_comm_overlap: bool | None = None
    overlap_param_gather: bool | None = None
    pp_layout: str | None = None
    mtp_layers: int = 0
    options: tuple[tuple[str, object], ...] = ()
    fsdp_notes: str = ""
    granularity: bool = True
    etp: int | None = None
    fp8_plan: str = ""
    bf16_layers: str = ""
    notes: str = ""

    @property
    def expert_tp(self) -> int | None:
        """Expert tensor-parallel degree the config sets (None: Megatron's default, = TP)."""
        if self.etp is not None:
            return self.etp
        return 1 if self.source.split(":", 1)[1] in ETP1 else None


L8 = "scripts/performance/configs/llama3/workload_base_configs.py"
L8V2 = "scripts/performance/configs/llama/llama3_workload_base_configs.py"
L405 = "scripts/performance/configs/llama31/workload_base_configs.py"
L405V2 = "scripts/performance/configs/llama/llama31_workload_base_configs.py"
DS = "scripts/performance/configs/deepseek/workload_base_configs.py"
OSS = "scripts/performance/configs/gpt_oss/workload_base_configs.py"
QW = "scripts/performance/configs/qwen3/workload_base_configs.py"
QWV2 = "scripts/performance/configs/qwen/qwen3_workload_base_configs.py"
#: config files whose MoE base configs set ``expert_tensor_parallel_size=1`` (BASE_DEEPSEEK_V3_,
#: BASE_GPT_OSS_120B_, BASE_QWEN3_235B_A22B_, BASE_QWEN3_30B_A3B_CONFIG at every commit used)
DS3 = "scripts/performance/configs/deepseek/deepseek_workload_base_configs.py"
OSS3 = "scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py"
ETP1 = (DS, DS3, OSS, OSS3, QW, QWV2)
DS_LAYOUT = "Et*3|(t*4|)*14ttL"  # deepseek_llm_pretrain.py @ r0.2.0-test, GB200 and GB300
#: DeepSeek-V3's 16-chunk layout with the MTP layer (``m``) on the last stage: the B200 recipe
#: at v0.2.0 and every 26.02 (v0.3.0) row
DS_MTP_LAYOUT = "Et*4|(t*4|)*14tmL"
FSDP = "optim_grads_params, fsdp_double_buffer, suggested_communication_unit_size 8e8"
TE_MOE = "te:moe_router,moe_preprocess"
TE_ATTN_MOE = "te:attn,moe_router,moe_preprocess"
#: the v0.5 MoE configs' common settings (:data:`RELEASE_RECIPES`)
V05 = partial(Recipe, cuda_graph="local:full_iteration", dispatcher="hybridep", a2a_overlap=True,
              notes="Transformer Engine's CuTe DSL fused grouped MLP (cutedsl_fused_grouped_mlp)")
FP8_DPA: tuple[tuple[str, object], ...] = (("fp8_attention", True),)
V05_TAGS = (("26.06", "v0.5.0"), ("26.06.01", "v0.5.1"))

#: NeMo Framework container -> the cuDNN it ships (Megatron-Bridge ``docs/releases/
#: software-versions.md`` at v0.6.0, 51885cf1): the version a release's rows ran (``--cudnn``)
NEMO_CUDNN = {"25.09": "9.11.0", "25.11": "9.13.1", "26.02": "9.18.0", "26.04": "9.20.0",
              "26.06": "9.21.1"}


def nemo_cudnn(release: str) -> str | None:
    """The cuDNN version of a Megatron-Bridge release's NeMo container (a patch release such as
    ``26.02.01`` taken as its month's container: the file lists months only), None where the
    file does not list it."""
    return NEMO_CUDNN.get(".".join(release.split(".")[:2]))
