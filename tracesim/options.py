"""The options of a replay, in one place: a frozen dataclass shared by the CLI and the API.

Every field of :class:`ReplayOptions` is one ``tracesim replay`` flag (``micro_batch`` is
``--micro-batch``) and one key of a sweep point. Its help text, type and allowed values are
the field's metadata (:class:`Option`); the command's flags (``tracesim/commands/replay.py``),
the sweep's checks and the options table of ``docs/api.md`` are made from them. ``None``
means "not given": the default of the model, the layout or the recorded run applies.

An unknown or misspelt key is an error naming it, with the closest known key::

    >>> ReplayOptions.from_mapping({"tpp": 2})
    Traceback (most recent call last):
    tracesim.errors.InputError: options: tpp: unknown option (did you mean tp?)
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.option_values import Option, checked
from tracesim.specs.cluster import ClusterSpec
from tracesim.specs.model import ModelSpec
from tracesim.specs.parallel import MOE_DISPATCHERS, MOE_ROUTINGS


def _opt(help: str, kind: str = "str", *, group: str = "layout", choices: tuple[str, ...] = (),
         minimum: float | None = None, maximum: float | None = None, metavar: str | None = None,
         default: Any = None) -> Any:
    return field(default=default, metadata={"option": Option(help, kind, group, choices, minimum,
                                                              maximum, metavar)})


SCHEDULES = ("gpipe", "1f1b", "interleaved")
RECOMPUTE = ("none", "selective", "full", "op")
DTYPES = ("bf16", "fp16", "fp8", "fp32")
NETWORKS = ("flow", "flow-relays", "flow-steps", "estimate")
ATTENTION = ("flash", "flash2", "unfused")
STACKS = ("megatron-core", "megatron-2021", "torchtitan", "deepspeed", "transformers", "eager")
OPTIMIZERS = ("adam", "sgd")
FP8_RECIPES = ("current", "delayed", "mxfp8", "nvfp4", "blockwise")
TP_STYLES = ("colwise", "rowwise", "replicate")


@dataclass(frozen=True)
class ReplayOptions:
    """How to replay: the model, the cluster, the parallel layout and the replay's own choices.

    Every field defaults to ``None`` / ``False``: not given. With none of ``model``, the layout
    fields or ``template`` given, a recorded source is replayed as recorded (on ``cluster``'s
    network when one is given); with any of them, the model is built from a layer template
    for that layout (a retarget).
    """

    # what runs
    model: str | ModelSpec | None = _opt(
        "Model spec: a shipped name (`tracesim list models`), a YAML file, or a Hugging Face "
        "config.json (or its checkpoint folder; docs/formats.md).", "spec",
        group="what", metavar="NAME|YAML")
    # where it runs
    cluster: str | ClusterSpec | None = _opt(
        "Cluster spec: a shipped name (`tracesim list clusters`), a YAML file, or an ASTRA-sim "
        "network config.", "spec", group="where", metavar="NAME|YAML")
    nodes: int | None = _opt(
        "Nodes (NVLink domains: DGX boxes, NVL72 racks) of the cluster spec, scaled to the job "
        "(`--cluster dgx-b200 --nodes 16`); more than one needs its inter-node fabric.", "int",
        group="where", minimum=1, metavar="N")
    device: str | None = _opt(
        "Device to run on: a shipped profile (`tracesim list devices`) or a profile YAML "
        "(default: the cluster's device; without --cluster, the recorded one).", "spec",
        group="where", metavar="NAME|YAML")
    source_device: str | None = _opt(
        "Device the source was recorded on, where the trace does not say or says wrongly "
        "(default: the trace's own device properties or the bundle's meta.yaml).", "spec",
        group="where", metavar="NAME|YAML")
    host_speed: float | None = _opt(
        "Speed of the target's host CPU relative to the recorded one: recorded host time "
        "(Python, dispatch, kernel launches) is divided by it; building a model (no source, "
        "or --retarget template), the host launch model's times, measured on x86 servers. "
        "Default: the cluster spec's host_cpu speed where it names one (0.364 on the "
        "Grace-hosted NVL72 racks, against an x86 recording), else 1 (docs/stacks.md); "
        "0.01 to 100.", "float", group="where", metavar="X", minimum=0.01, maximum=100)
    # how: the parallel layout and training options
    tp: int | None = _opt("Tensor-parallel degree.", "int", minimum=1)
    pp: int | None = _opt("Pipeline-parallel degree (stages).", "int", minimum=1)
    dp: int | None = _opt("Data-parallel degree (default: the GPUs the other degrees leave).",
                          "int", minimum=1)
    cp: int | None = _opt("Context-parallel degree.", "int", minimum=1)
    ep: int | None = _opt("Expert-parallel degree (divides dp; with --etp, ep x etp divides "
                          "tp x cp x dp).", "int", minimum=1)
    etp: int | None = _opt(
        "Expert tensor-parallel degree (Megatron's expert_tensor_parallel_size): the routed "
        "experts use etp x ep x edp ranks of each pipeline stage, MoE parallel folding "
        "(docs/moe.md). Default: the experts use the TP group and EP the DP ranks.", "int", minimum=1)
    sp: bool | None = _opt("Sequence parallelism with TP (default: on for MoE with tp > 1).", "bool")
    vpp: int | None = _opt("Virtual stages (model chunks) per pipeline rank, for the interleaved "
                           "schedule.", "int", minimum=1)
    zero: int | None = _opt("ZeRO stage: 1 optimizer states, 2 + gradients, 3 + parameters "
                            "sharded over data parallelism.", "int", minimum=0, maximum=3)
    fsdp: bool | None = _opt("Fully sharded data parallel (per-layer parameter all-gather with "
                             "prefetch; as --zero 3).", "flag")
    fsdp_reshard: bool | None = _opt(
        "With --fsdp: free the gathered parameters after each forward and gather them again "
        "for the backward (FSDP2's reshard_after_forward). Off: gathered once per micro-batch. "
        "Default: on.", "bool")
    fsdp_defer_sync: bool | None = _opt(
        "With --fsdp: reduce-scatter the gradients at each model chunk's last backward of the "
        "iteration only, accumulating them unsharded before (FSDP2's gradient sync off between "
        "micro-batches). Default: off, at every micro-batch.", "flag")
    fsdp_keep_gathered: bool | None = _opt(
        "With --fsdp: gather the parameters at each model chunk's first forward of the "
        "iteration and keep them to its last backward (FSDP2's resharding off between "
        "micro-batches; with --fsdp-defer-sync NeMo AutoModel's FSDP optimizations). Default: "
        "off, gathered at every micro-batch.", "flag")
    micro_batch: int | None = _opt("Sequences per micro-batch per data-parallel replica.", "int",
                                   minimum=1)
    global_batch: int | None = _opt("Sequences per iteration over all replicas (default: one "
                                    "micro-batch per replica).", "int", minimum=1)
    seq_len: int | None = _opt("Sequence length in tokens (default: the model's).", "int", minimum=1)
    schedule: str | None = _opt("Pipeline schedule.", "choice", choices=SCHEDULES)
    pp_rounds: int | None = _opt(
        "Runs of the pipeline schedule per iteration: the micro-batches split into N equal "
        "rounds, each a whole schedule with its own warm-up and drain, the optimizer stepped "
        "once after the last (trainers that accumulate gradients over local batches, each "
        "through torch.distributed.pipelining's schedule, as NeMo AutoModel; docs/stacks.md). "
        "Default 1: one schedule over every micro-batch (Megatron).", "int", minimum=1,
        metavar="N")
    recompute: str | None = _opt(
        "Activation recomputation: selective (the modules of --recompute-modules), full (whole "
        "layers) or op (torchtitan's op-level selective checkpointing: every second matmul "
        "of a dense block and its other ops but flash attention; docs/stacks.md).", "choice",
        choices=RECOMPUTE)
    recompute_modules: str | None = _opt(
        "With --recompute selective: the modules recomputed, comma-separated, as Megatron-Core's "
        "--recompute-modules: core_attn, mlp, moe_act, moe, shared_experts, layernorm, "
        "mla_up_proj. Default: core_attn.", "str", metavar="MODULES")
    recompute_layers: int | None = _opt(
        "With --recompute full: recompute only the first N transformer layers of each model "
        "chunk on a stage (Megatron's --recompute-method block --recompute-num-layers N). "
        "Default: every layer.", "int", minimum=1, metavar="N")
    dtype: str | None = _opt("Compute dtype (default: the model's).", "choice", choices=DTYPES)
    stage_layers: tuple[int, ...] | None = _opt(
        "Transformer layers per pipeline stage, an uneven split (pp numbers, or pp x vpp in model-"
        "chunk order), e.g. 7,8x14,7 (the Llama 3 405B split on 16 stages); the first and the "
        "last entry may be 0 (a stage or chunk that runs only the embedding, or only the "
        "output layer and loss).", "ints", metavar="N,N,...")
    tp_plan: tuple[tuple[str, str], ...] | None = _opt(
        "Overrides of the Megatron column / row rule: module-name glob = colwise | rowwise | "
        "replicate, e.g. 'attn.*=replicate'.", "plan", metavar="GLOB=STYLE,...")
    bucket_params: int | None = _opt("Gradient bucket size in parameters (default: Megatron's "
                                     "max(40e6, 1e6 x dp)).", "int", minimum=1)
    first_bucket_params: int | None = _opt("Size of the first gradient bucket in parameters "
                                           "(PyTorch DDP caps it at 1 MiB); default: as the "
                                           "others.", "int", minimum=1)
    dp_overlap: bool | None = _opt("Reduce gradient buckets during the backward pass (DDP, Megatron "
                                   "--overlap-grad-reduce); --no-dp-overlap reduces after it. "
                                   "Default: on.", "bool")
    p2p_blocking: bool | None = _opt("A pipeline pass starts only when the previous pass's send "
                                     "has completed (Megatron's default schedules). Default: on.", "bool")
    moe_imbalance: float | None = _opt(
        "MoE load imbalance: the busiest expert's routed tokens over the mean (>= 1); scales "
        "the expert GEMMs of the rank that gates the all-to-all and the all-to-all's size "
        "(that rank receives and sends back that much). Default 1: balanced.", "float", metavar="X")
    moe_capacity_factor: float | None = _opt(
        "MoE expert capacity in multiples of the mean tokens per expert (tokens beyond it are "
        "dropped). Default: dropless, as Megatron-Core.", "float", metavar="X")
    moe_dispatcher: str | None = _opt(
        "MoE token dispatcher: alltoall (Megatron-Core's: every routed copy of a token is "
        "sent), deepep or hybridep (the flex dispatcher's backends: a token is sent once per "
        "destination rank, across nodes once per node and forwarded over NVLink; docs/moe.md). "
        "Default alltoall.", "choice", choices=MOE_DISPATCHERS)
    moe_routing: str | None = _opt(
        "How balanced routing picks a token's experts: uniform (distinct experts at random, "
        "Megatron-Core's forced load balancing) or round-robin (top_k consecutive experts per "
        "token, NeMo AutoModel's fake balanced gate: a token reaches one or two ranks). It sets "
        "what deepep and hybridep send. Default uniform.", "choice", choices=MOE_ROUTINGS)
    moe_a2a_overlap: bool | None = _opt(
        "Overlap the MoE all-to-all with another micro-batch's compute (Megatron-Core's "
        "--overlap-moe-expert-parallel-comm): each steady-state forward / backward pair runs "
        "merged, one pass's dispatch and combine beside the other's attention and experts "
        "(docs/moe.md). Default off.", "bool")
    moe_shared_expert_overlap: bool | None = _opt(
        "Run the shared experts on their own stream beside the MoE all-to-alls "
        "(Megatron-Core's --moe-shared-expert-overlap, with the alltoall dispatcher only; "
        "PyTorch-native stacks' side stream, as NeMo AutoModel's, with any; docs/moe.md). "
        "Default off.", "bool")
    mtp_layers: int | None = _opt(
        "Multi-token prediction modules (DeepSeek-V3's MTP; Megatron-Core's --mtp-num-layers): "
        "each runs one more transformer layer, two norms, a projection, the shared output head "
        "and a loss on the last pipeline stage (docs/moe.md). Default 0.", "int", minimum=0, metavar="N")
    moe_router_padding: bool | None = _opt(
        "The router pads each expert's tokens to the FP8 / FP4 GEMMs' alignment (Megatron-Core's "
        "--moe-router-padding-for-quantization: 16, MXFP8 32, NVFP4 128), the padding dispatched "
        "too; else the experts pad what they receive (docs/moe.md). Default off.", "bool")
    moe_router_fusion: bool | None = _opt(
        "Megatron-Core's fused MoE router (--moe-router-fusion): 31 kernels per forward, 72 "
        "unfused, which the host launches one by one unless CUDA graphs capture the router "
        "(docs/stacks.md). Default on.", "bool")
    mtp_repeated: bool | None = _opt(
        "The MTP depths run one module's weights (Megatron-Core's --mtp-use-repeated-layer): "
        "its parameters, gradients and optimizer state once. Default off.", "bool")
    cpu_offload_layers: int | None = _opt(
        "Activation offloading to host memory (Transformer Engine's CPU offload, Megatron-Core's "
        "--cpu-offloading-num-layers N): the first N layers' saved activations go to the host "
        "after their forward and come back before their backward, at the cluster spec's host_link "
        "rates (docs/stacks.md). Needs pp 1 and no recomputation.", "int", minimum=1, metavar="N")
    first_stage_layers: int | None = _opt(
        "Transformer layers of the first pipeline stage (Megatron's decoder_first_pipeline_"
        "num_layers); the stages without a given count split the rest evenly.", "int",
        minimum=1)
    last_stage_layers: int | None = _opt(
        "Transformer layers of the last pipeline stage (Megatron's decoder_last_pipeline_"
        "num_layers).", "int", minimum=1)
    # the software stack: kernels and overlaps
    stack: str | None = _opt(
        "Software stack: the kernels the GPU runs and the overlaps set up by default "
        "(docs/stacks.md). Default: megatron-core on a GPU, eager (the recorded op list) on "
        "a CPU or for a source you recorded.", "choice", group="stack", choices=STACKS)
    tp_comm_overlap: bool | None = _opt(
        "Transformer Engine userbuffers TP overlap: sequence-parallel all-gathers and reduce-"
        "scatters in chunks pipelined with the GEMM chunks, bulk overlap in the backward "
        "(needs --sp and tp > 1). Default: the stack's.", "bool", group="stack")
    tp_comm_overlap_cfg: str | None = _opt(
        "Userbuffers configuration of the TP overlap (Megatron-LM's --tp-comm-overlap-cfg): a "
        "YAML file of Transformer Engine layer names (qkv_fprop, proj_fprop, ...) and their "
        "method, num_sm, num_splits, fp8_buf (also NeMo's ub_tp_comm_overlap_cfg), or a shipped "
        "name: bridge-bf16, bridge-bf16-blackwell, bridge-fp8, te-defaults, "
        "bridge-{bf16,fp8}-{h100,b200}-h16384 (docs/stacks.md). "
        "Default: the stack's.", group="stack", metavar="NAME|YAML")
    tp_bwd_overlap: bool | None = _opt(
        "A column-parallel linear's gradient all-reduce / reduce-scatter during its weight-"
        "gradient GEMM and its input re-gather during the data-gradient GEMM (asynchronous "
        "NCCL). Default: the stack's.", "bool", group="stack")
    overlap_grad_reduce: bool | None = _opt(
        "Megatron's name for --dp-overlap: reduce gradient buckets during the backward pass.",
        "bool", group="stack")
    grad_nan_check: bool | None = _opt(
        "Megatron-Core checks each gradient bucket for NaN and Inf before reducing it "
        "(check_for_nan_in_grad: the bucket's norm and host syncs, --grad-nan-syncs; "
        "docs/stacks.md). "
        "Default: off, as Megatron-Bridge's performance scripts run; Megatron-LM's "
        "--check-for-nan-in-loss-and-grad and NeMo 2's recipes turn it on.", "bool",
        group="stack")
    grad_nan_syncs: int | None = _opt(
        "Host syncs per bucket of --grad-nan-check, by Megatron-Core version: 2 (0.12 on: a "
        "NaN and an Inf test), 1 (up to 0.9), 0 (0.10 and 0.11 with the rerun state machine "
        "disabled: the norm alone). Given alone (neither --grad-nan-check nor --no-grad-nan-check): "
        "exit 2. Default: 2.", "int", group="stack",
        minimum=0, maximum=2)
    overlap_param_gather: bool | None = _opt(
        "Distributed optimizer (--zero 1/2): all-gather the updated parameters per bucket in "
        "the next iteration's first forward pass instead of after the step. Default: the "
        "stack's.", "bool", group="stack")
    grad_reduce_fp32: bool | None = _opt(
        "Reduce the gradients in fp32, 4 bytes per parameter: Megatron-LM's default with bf16 "
        "(--accumulate-allreduce-grads-in-fp32 unless --grad-reduce-in-bf16), torchtitan's FSDP "
        "mixed_precision_reduce. Default: the stack's (torchtitan on; megatron-core off, as "
        "Megatron-Bridge's and NeMo's recipes run: grad_reduce_in_fp32 False).", "bool",
        group="stack")
    overlap_p2p: bool | None = _opt(
        "Pipeline sends overlap the next pass (Megatron's overlap_p2p_comm; the opposite of "
        "--p2p-blocking). Default: the stack's (megatron-core: with the interleaved "
        "schedule).", "bool", group="stack")
    cp_overlap: bool | None = _opt(
        "Ring attention's key/value exchange during the attention chunks. Default: on.",
        "bool", group="stack")
    comm_interference: bool | None = _opt(
        "Communication kernels take SMs from the compute they overlap (docs/stacks.md). "
        "Default: the stack's (on, except for eager, whose recorded times hold it).", "bool",
        group="stack")
    fp8_recipe: str | None = _opt(
        "Recipe with --dtype fp8: current (FP8 current scaling, Megatron-Bridge fp8-cs), delayed, "
        "mxfp8, nvfp4 (linears in NVFP4, FP4 rate; Blackwell), or blockwise (1x128 / 128x128 "
        "FP32-scaled blocks, Megatron --fp8-recipe blockwise, fp8-sc; megatron-core). Default: "
        "the stack's first.", "choice",
        group="stack", choices=FP8_RECIPES)
    fp8_plan: str | None = _opt(
        "Per-linear precision under --dtype fp8, GLOB=RECIPE pairs (e.g. "
        "'attn.*=bf16,moe.latent_*=bf16,mamba.out_proj=mxfp8'): the template's module globs and "
        "the recipe each runs (bf16, current, delayed, mxfp8, nvfp4; the first match wins, the "
        "others run --fp8-recipe), as Transformer Engine's quantization config (Megatron-Bridge's "
        "te_quant.cfg). Default: every linear at --fp8-recipe.", "str", group="stack",
        metavar="GLOB=RECIPE,...")
    bf16_layers: str | None = _opt(
        "Transformer layers kept in BF16 under --dtype fp8, FIRST,LAST: the first FIRST and the "
        "last LAST layers (multi-token-prediction modules count with the last), as Megatron's "
        "--first-last-layers-bf16 with --num-layers-at-start-in-bf16 / "
        "--num-layers-at-end-in-bf16. Default: 0,0.", "str", group="stack", metavar="FIRST,LAST")
    fp8_param_gather: bool | None = _opt(
        "Keep FP8 parameters for the data-parallel all-gather (half the bytes). Default: on "
        "for megatron-core with --dtype fp8.", "bool", group="stack")
    fp8_amax_tp_only: bool | None = _opt(
        "Delayed FP8 scaling reduces its amaxes over the TP x CP group only, not the pipeline "
        "stage's TP x DP x CP ranks (Megatron's --tp-only-amax-red). Default: off.", "bool",
        group="stack")
    fp8_attention: bool | None = _opt(
        "With --dtype fp8, the fused attention in FP8 too (Transformer Engine's FP8 dot-product "
        "attention, Megatron's --fp8-dot-product-attention). Default: off.", "bool", group="stack")
    host_launch: bool | None = _opt(
        "Model the host that launches the kernels: the GPU waits when the CPU issues kernels "
        "more slowly than they run, and at the MoE dispatcher's device-to-host sync (docs/"
        "stacks.md, \"Host launch time and CUDA graphs\"). Default: on for the named GPU "
        "stacks, off for eager.", "bool", group="stack")
    cuda_graphs: str | None = _opt(
        "CUDA-graph scopes, comma-separated: attn, mlp, moe, moe_router, moe_preprocess, mamba "
        "(Transformer Engine per-layer graphs) or full_iteration; a captured scope costs one "
        "graph launch on the host instead of its kernels. Default: none.", "str",
        group="stack", metavar="SCOPES")
    # the layer template
    template: str | None = _opt(
        "Layer template: 'analytic' (first principles) or a bundle, trace or workload to take it "
        "from (default: the source, else the model family's stored bundle).", group="template",
        metavar="analytic|PATH")
    cudnn: str | None = _opt(
        "cuDNN version the job runs (its container's), for Transformer Engine's fused attention: "
        "the device profile's attention fitted on the newest cuDNN it has that is not newer "
        "(its oldest fit for an older one). Blackwell profiles: 9.10 (B200, GB200), 9.13 and 9.17 "
        "(their default); other profiles have one fit (docs/devices.md). Default: the profile's "
        "own.", "version",
        group="template", metavar="VERSION")
    attention: str | None = _opt(
        "Attention kernel of the analytic template: flash (the fused kernel the device profile "
        "was calibrated on), flash2 (FlashAttention-2, as PyTorch SDPA and flash-attn 2 run on "
        "Hopper) or unfused (2021-era softmax kernels).", "choice", group="template",
        choices=ATTENTION)
    compile: bool | None = _opt(
        "torch.compile the transformer blocks (torchtitan's --training.compile): Inductor fuses "
        "each eager elementwise chain (RMSNorm, SwiGLU, rotary) into one kernel; nothing changes "
        "for stacks whose kernels are fused. Default: off.", "flag", group="template")
    optimizer: str | None = _opt(
        "Optimizer of the analytic template: adam (Adam / AdamW) or sgd (plain SGD, no "
        "momentum), over fp32 master weights or, with the transformers stack, over the "
        "compute-dtype weights (docs/stacks.md). Default: adam.", "choice", group="template",
        choices=OPTIMIZERS)
    loss_fp32: bool | None = _opt(
        "PyTorch's cross-entropy (the torchtitan and transformers stacks) on logits cast to fp32, "
        "as transformers' and torchtitan's losses do; off: on the compute-dtype logits, a loss "
        "computed outside the model on its BF16 output (half the memory traffic). Default on.",
        "bool", group="template")
    cross_entropy_fusion: bool | None = _opt(
        "The fused vocab-parallel cross-entropy (Megatron's --cross-entropy-loss-fusion); off: "
        "fp32 softmax, loss and gradient kernels. Default: the stack's.", "bool", group="template")
    # the replay itself
    retarget: str | None = _opt(
        "How a recorded source is replayed elsewhere: trace (its own kernels, scaled to the "
        "target device, and its collectives re-timed on the target network) or template (a layer "
        "template built into the model's layout; needs a model spec). Default: template when the "
        "source has a model spec or a layout flag other than --dp is given, else trace.",
        "choice", group="replay", choices=("trace", "template"))
    network: str | None = _opt(
        "Network model: flow (flow-level max-min sharing of links; in a symmetry-reduced replay "
        "the absent ranks' copies load the links they share), flow-relays (flow with the NVLink "
        "hop of every PXN relay in its flow: slower at scale; docs/network.md, 'PXN relays'), "
        "flow-steps (flow with every ring step on its own, not grouped into rounds: the "
        "reference the rounds approximate, slower; docs/network.md, 'Collective algorithms') or "
        "estimate (each collective's uncongested time, faster, blind to contention). Default: "
        "flow.", "choice", group="replay", choices=NETWORKS)
    full: bool = _opt("Simulate every rank (no symmetry reduction).", "flag", group="replay",
                      default=False)
    strict: bool = _opt("Error (not warn) when the layout does not fit in the device's memory.",
                        "flag", group="replay", default=False)
    per_op: bool | None = _opt("Keep one task per template op in a full replay (default: when "
                               "writing a result directory); otherwise runs of compute tasks "
                               "are merged, which changes no time.", "flag", group="replay")
    straggler: tuple[tuple[int, float], ...] | None = _opt(
        "Slow ranks: RANK:FACTOR pairs, e.g. 17:1.3 (rank 17's compute and host tasks take 1.3x "
        "as long). Every rank is then simulated; the report gives the impact on the iteration "
        "and which rank the others waited for.", "stragglers", group="replay",
        metavar="RANK:FACTOR,...")
    jitter: float | None = _opt(
        "Per-rank variability: each rank's compute and host time is scaled by a log-normal "
        "factor with mean 1 and this coefficient of variation (e.g. 0.05), drawn with --seed. "
        "Every rank is then simulated. At most 1.", "float", group="replay", metavar="CV",
        maximum=1)
    seed: int | None = _opt("Seed of the --jitter draw (default 0).", "int", group="replay",
                            minimum=0)
    degrade_link: tuple[str, ...] | None = _opt(
        "A degraded or failed link: NAME:FACTOR (0.5: half its bandwidth, 0: failed), NAME as "
        "gpuN, gpuA-gpuB, nicN, leafL.up[J], spineS or spineS.up[M] (docs/network.md, 'Degraded "
        "links and background traffic'); repeatable or comma-separated. Failed links are routed "
        "around. Every rank is then simulated; the report gives the impact against the healthy "
        "fabric.", "links", group="replay", metavar="NAME:FACTOR")
    nccl_max_ctas: str | None = _opt(
        "NCCL's CTA (channel) cap per communicator, as Megatron-Core's --nccl-communicator-"
        "config-path sets it: NAME=COUNT pairs (dp_cp=8,cp=1,pp=2) or that YAML file; over the "
        "cluster spec's collectives.max_ctas (docs/network.md, 'CTA caps per communicator').",
        group="where", metavar="NAME=N,...|YAML")
    background: tuple[str, ...] | None = _opt(
        "Traffic from outside the job on the same fabric (repeatable): a second job's collective, "
        "e.g. all_reduce:size=1G:nodes=8-15:every=20ms, shared max-min with the job's flows, or a "
        "constant-rate load, e.g. load:fraction=0.3:on=fabric (docs/network.md, 'Degraded links "
        "and background traffic'). Every rank is then simulated.",
        "background", group="replay", metavar="SPEC")

    def __new__(cls, *args: Any, **kwargs: Any) -> ReplayOptions:
        # an unknown keyword: InputError naming it, before the generated __init__'s TypeError
        if bad := set(kwargs).difference(option_names()):
            raise unknown_option(next(k for k in kwargs if k in bad))
        return super().__new__(cls)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, check_value(f.name, getattr(self, f.name)))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], file: str | Path | None = None,
                     where: str = "") -> ReplayOptions:
        """Options from a mapping (a sweep point, JSON); an unknown key is an InputError
        naming it and the closest known key."""
        names = option_names()
        for key in data:
            if key not in names:
                raise unknown_option(str(key), file, where)
        return cls(**{k: check_value(k, v, file, f"{where}.{k}" if where else k)
                      for k, v in data.items()})

    def replace(self, **changes: Any) -> ReplayOptions:
        for key in changes:
            if key not in option_names():
                raise unknown_option(key)
        return dataclasses.replace(self, **changes)

    def given(self) -> dict[str, Any]:
        """The options that were given (other than their defaults), as a plain mapping."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) is not None and getattr(self, f.name) != f.default}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready :meth:`given` (lists for tuples, a mapping for the TP plan)."""
        out = self.given()
        if "stage_layers" in out:
            out["stage_layers"] = list(out["stage_layers"])
        if "tp_plan" in out:
            out["tp_plan"] = dict(out["tp_plan"])
        for k in ("degrade_link", "background"):
            if k in out:
                out[k] = list(out[k])
        return out

    @property
    def builds_model(self) -> bool:
        """Whether the graph is built from a template (a model, a layout or a template given)."""
        return any(getattr(self, k) is not None for k in BUILD_KEYS)


#: the fields whose presence makes a replay a retarget (built from a layer template)
BUILD_KEYS = ("model", "tp", "pp", "dp", "cp", "ep", "sp", "vpp", "zero", "fsdp", "fsdp_reshard",
              "fsdp_defer_sync", "fsdp_keep_gathered", "micro_batch",
              "global_batch", "seq_len", "schedule", "pp_rounds", "recompute", "recompute_modules",
              "recompute_layers", "dtype", "stage_layers",
              "tp_plan", "bucket_params", "first_bucket_params", "dp_overlap", "p2p_blocking",
              "moe_imbalance", "moe_capacity_factor", "moe_dispatcher", "moe_routing", "moe_a2a_overlap",
              "moe_shared_expert_overlap", "mtp_layers", "mtp_repeated", "moe_router_padding",
              "moe_router_fusion", "cpu_offload_layers", "template", "attention", "cudnn", "compile",
              "cross_entropy_fusion", "optimizer", "loss_fp32",
              "first_stage_layers", "last_stage_layers", "stack", "tp_comm_overlap",
              "tp_comm_overlap_cfg",
              "tp_bwd_overlap", "overlap_grad_reduce", "grad_nan_check", "grad_nan_syncs",
              "overlap_param_gather", "overlap_p2p",
              "grad_reduce_fp32", "cp_overlap", "comm_interference", "fp8_recipe", "fp8_plan",
              "bf16_layers", "fp8_param_gather", "fp8_amax_tp_only", "fp8_attention", "host_launch", "cuda_graphs",
              "etp")


def option_fields() -> list[tuple[str, Option, Any]]:
    """(name, :class:`Option`, default) of every field, in declaration order."""
    return [(f.name, f.metadata["option"], f.default) for f in dataclasses.fields(ReplayOptions)]


def option_names() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(ReplayOptions))


def unknown_option(key: str, file: str | Path | None = None, where: str = "") -> InputError:
    close = difflib.get_close_matches(key, option_names(), n=1)
    hint = f" (did you mean {close[0]}?)" if close else f" (known: {', '.join(option_names())})"
    return InputError(f"unknown option{hint}", file or "options", f"{where}.{key}" if where else key)


def _option(name: str) -> Option:
    for f in dataclasses.fields(ReplayOptions):
        if f.name == name:
            return f.metadata["option"]
    raise unknown_option(name)


def check_value(name: str, value: Any, file: str | Path | None = None, where: str | None = None) -> Any:
    """``value`` checked (and normalised: tuples for lists) for option ``name``; InputError
    naming ``file`` and ``where`` (default: the option's flag) otherwise."""
    opt = _option(name)
    place = where or name
    src = file if file is not None else f"--{name.replace('_', '-')}"
    return checked(opt, value, src, place if file else None)
