"""Software stacks: which kernels the GPU runs and which overlaps the framework sets up.

A :class:`Stack` is one training framework as people run it: the kernels of its transformer
layer (fused or eager norms, activation and rotary embedding; flash or 2021-era unfused
attention; fused or unfused cross-entropy; a multi-tensor optimizer step) and the defaults
of its communication overlaps (sequence parallelism, distributed optimizer or FSDP,
gradient reduction during the backward, parameter all-gather during the next forward,
userbuffers TP overlap, overlapped pipeline transfers). :func:`stack_template` is the
stack's layer template (the first-principles op list of :mod:`tracesim.template.analytic`
with the stack's kernels); :func:`stack_defaults` its switches for a layout (the ones the
user did not give); docs/stacks.md is the manual, with the sources of every default.

Stacks, registered by :func:`register_stack`:

* ``megatron-core`` (the default for a GPU target): Megatron-Core with Transformer Engine as
  the Megatron-Bridge performance recipes run it (NVIDIA-NeMo/Megatron-Bridge v0.2.1,
  ``scripts/performance``, ``training/comm_overlap.py``);
* ``megatron-2021``: Megatron-LM as in Narayanan et al., SC'21 (unfused attention, no
  overlaps, blocking pipeline transfers, no sequence parallelism);
* ``torchtitan``: PyTorch-native: FSDP2 with prefetch, SDPA flash attention, eager BF16
  norms / SwiGLU / rotary, fused AdamW, float8 from torchao;
* ``deepspeed``: Megatron-DeepSpeed with ZeRO-1: flash attention, fused norms, eager SwiGLU
  and rotary, gradient reduction overlapped (``overlap_comm``), parameter all-gather after
  the step;
* ``transformers``: Hugging Face transformers' modules in eager PyTorch (``modeling_llama``:
  RMSNorm computed in fp32, unfused SwiGLU, ``rotate_half`` rotary, SDPA attention, logits
  cast to fp32 for the loss), the parameters in the compute dtype (no fp32 master copy,
  ``torch.optim.AdamW``), DDP's overlapped gradient all-reduce; dense models only;
* ``eager``: the op list recorded on the host CPU (the model family's stored bundle, fp32,
  one kernel per PyTorch op, per-tensor Adam) with DDP's overlapped gradient all-reduce:
  what tracesim replayed before stacks existed, and the default on a CPU target.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tracesim.errors import InputError
from tracesim.specs.model import ModelSpec
from tracesim.template.analytic import first_principles_template
from tracesim.template.eager_chains import HF_KERNELS, HF_PASSES, TORCH_CE_PASSES
from tracesim.template.layer import LayerTemplate, TemplateOp
from tracesim.template.moe_ops import expert_bias_ops
from tracesim.template.optimizer import SUMMARY as OPTIMIZER_SUMMARY
from tracesim.template.optimizer import grad_buffer_ops, optimizer_op


@dataclass(frozen=True)
class Stack:
    """One software stack (module docstring).

    Attributes:
        name, summary: registry name and one line for the report.
        attention: ``flash`` or ``unfused`` (the attention kernel of its template).
        norm_passes, act_passes, rope_passes: memory traffic of the RMSNorm, the SwiGLU
            activation and the rotary embedding over that of one fused kernel (1: fused;
            eager PyTorch runs them as several kernels, each a pass over the tensor).
        bwd_passes: the backward's passes where they differ from the forward's, by kernel
            (``norm``, ``act``, ``rope``).
        ce_passes: PyTorch's cross_entropy over the template's fp32 loss ops, (forward,
            backward), where neither fused nor Megatron's cross-entropy runs
            (:mod:`tracesim.template.eager_chains`).
        master_weights: the optimizer updates fp32 master weights (mixed precision); False:
            the parameters themselves, in the compute dtype (:mod:`tracesim.template.optimizer`).
        dense_only: its templates cover dense transformer blocks only (no MoE, MLA or Mamba).
        fused_ce: cross-entropy as one fused kernel pair (Transformer Engine / Megatron's
            fused vocab-parallel cross-entropy) instead of an fp32 softmax, loss and backward.
        megatron_ce: unfused, Megatron's ``VocabParallelCrossEntropy`` (:func:`_kernel`);
            else the template's fp32 log-softmax and loss (PyTorch's ``cross_entropy``).
        sp_regather: with sequence parallelism a column-parallel linear keeps its input
            sharded and all-gathers it again in the backward (Megatron-Core, TE).
        fp8_recipes: FP8 recipes it runs, the first the default; () = no FP8.
        defaults: ``(layout, device) -> {ParallelSpec field: value}``, the overlaps and
            sharding it sets up unless the user says otherwise.
        kernels: the kernels, in words, for the report and the docs.
        recorded: its template is the family's stored bundle (``eager``).
        chain_kernels: kernel launches of its eager chains, (forward, backward) by kernel
            (``norm``, ``act``, ``rope``), for the host launch model (one launch where absent).
        mcore_paths: runs Megatron-Core 0.15's code for model variants (:func:`_unfused`):
            a YaRN rotary embedding unfused, a clamped SwiGLU's clamp and concatenation
            eagerly, the routed experts' bias added expert by expert.
        grad_buffer: Megatron's contiguous gradient buffer (:func:`tracesim.template.
            optimizer.grad_buffer_ops`): ``"normed"`` zeroed every step, its shard copied to
            fp32 and normed for clipping; ``"scaled"`` also the clip's scale every step;
            ``""`` none (the stack's optimizer works on the parameters' own gradients).
    """

    name: str
    summary: str
    attention: str = "flash"
    norm_passes: float = 1.0
    act_passes: float = 1.0
    rope_passes: float = 1.0
    bwd_passes: Mapping[str, float] = field(default_factory=dict)
    ce_passes: tuple[float, float] = (1.0, 1.0)
    master_weights: bool = True
    dense_only: bool = False
    chain_kernels: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    fused_ce: bool = False
    megatron_ce: bool = False
    sp_regather: bool = False
    fp8_recipes: tuple[str, ...] = ()
    defaults: Callable[[Any, Any], dict[str, Any]] = field(default=lambda par, dev: {})
    kernels: Mapping[str, str] = field(default_factory=dict)
    recorded: bool = False
    mcore_paths: bool = False
    grad_buffer: str = ""


STACKS: dict[str, Stack] = {}

#: kernels Megatron-Core's MoE router launches per layer and forward pass with
#: ``--moe-router-fusion`` (gating GEMM, scores, top-k, auxiliary-loss statistics and their
#: collectives): 31, against 72 unfused; measured on DeepSeek-V3 with Nsight Systems by
#: NVIDIA ("Optimizing DeepSeek-V3 Training Performance on NVIDIA GB200 NVL72", NVIDIA/
#: Megatron-LM docs/discussions, section 2.1.4; Transformer Engine PR 1883). Other routers
#: are taken to launch as many (no count published).
MCORE_ROUTER_KERNELS = 31
MCORE_ROUTER_KERNELS_UNFUSED = 72


def register_stack(stack: Stack) -> Stack:
    """Register ``stack`` under its name (house style rule 5)."""
    STACKS[stack.name] = stack
    return stack


def get_stack(name: str) -> Stack:
    try:
        return STACKS[name]
    except KeyError:
        raise InputError(f"unknown stack {name!r} (known: {', '.join(STACKS)})", "--stack") from None


def _interleaved(par: Any) -> bool:
    return par.schedule == "interleaved" and par.pp > 1


def _megatron_core(par: Any, dev: Any) -> dict[str, Any]:
    sp = par.tp > 1
    return {"sp": sp, "zero": 1, "dp_overlap": True, "overlap_param_gather": True,
            "tp_comm_overlap": sp, "tp_bwd_overlap": par.tp > 1,
            "p2p_blocking": not _interleaved(par), "comm_interference": True, "host_launch": True}


def _megatron_2021(par: Any, dev: Any) -> dict[str, Any]:
    return {"dp_overlap": False, "p2p_blocking": True, "comm_interference": True, "host_launch": True}


def _torchtitan(par: Any, dev: Any) -> dict[str, Any]:
    return {"sp": par.tp > 1, "fsdp": par.dp * par.cp > 1, "dp_overlap": True,
            "p2p_blocking": False, "comm_interference": True, "host_launch": True,
            "grad_reduce_fp32": True}


def _deepspeed(par: Any, dev: Any) -> dict[str, Any]:
    return {"zero": 1, "dp_overlap": True, "p2p_blocking": True, "comm_interference": True,
            "host_launch": True}


def _transformers(par: Any, dev: Any) -> dict[str, Any]:
    # DistributedDataParallel: bucketed all-reduce during the backward, no sharding
    return {"dp_overlap": True, "p2p_blocking": True, "comm_interference": True, "host_launch": True}


def _eager(par: Any, dev: Any) -> dict[str, Any]:
    # recorded kernel times already hold the slowdown of the communication that overlapped
    # them: charging it again would count it twice
    return {"dp_overlap": True, "p2p_blocking": True, "comm_interference": False}


register_stack(Stack(
    "megatron-core", "Megatron-Core + Transformer Engine (Megatron-Bridge recipes)",
    sp_regather=True, fused_ce=True, megatron_ce=True,
    fp8_recipes=("current", "delayed", "mxfp8", "nvfp4", "blockwise"),
    mcore_paths=True, grad_buffer="scaled",
    defaults=_megatron_core,
    kernels={"norm": "TE fused LayerNorm/RMSNorm (LayerNormLinear)", "activation":
             "fused bias-SwiGLU / bias-GeLU", "rotary": "fused RoPE (apply_rope_fusion)",
             "cross_entropy": "TE fused vocab-parallel cross-entropy",
             "optimizer": "distributed fused Adam (multi-tensor)"}))
register_stack(Stack(
    "megatron-2021", "Megatron-LM 2021 (Narayanan et al., SC'21)", attention="unfused",
    megatron_ce=True, grad_buffer="normed", defaults=_megatron_2021,
    kernels={"norm": "apex fused LayerNorm", "activation": "fused bias-GeLU",
             "rotary": "-", "cross_entropy": "vocab-parallel cross-entropy (fp32 softmax)",
             "optimizer": "apex FusedAdam (multi-tensor)"}))
register_stack(Stack(
    "torchtitan", "torchtitan (FSDP2, SDPA, eager BF16 kernels, torchao float8)",
    norm_passes=2.5, act_passes=5 / 3, rope_passes=3.0, ce_passes=TORCH_CE_PASSES,
    fp8_recipes=("current", "mxfp8"),
    defaults=_torchtitan,
    kernels={"norm": "eager RMSNorm (pow, mean, rsqrt, mul, mul: 5 passes for the fused 2)",
             "activation": "eager SiLU x up (5 passes for the fused 3)",
             "rotary": "eager complex multiply (3x the fused traffic)",
             "cross_entropy": "torch cross_entropy (fp32 log-softmax)",
             "optimizer": "fused AdamW over FSDP2 shards"}))
register_stack(Stack(
    "deepspeed", "Megatron-DeepSpeed with ZeRO-1", act_passes=5 / 3, rope_passes=3.0,
    fp8_recipes=("delayed", "current"), megatron_ce=True, defaults=_deepspeed,
    kernels={"norm": "fused LayerNorm/RMSNorm", "activation": "eager SwiGLU (fused bias-GeLU)",
             "rotary": "eager rotary", "cross_entropy": "vocab-parallel cross-entropy",
             "optimizer": "DeepSpeed FusedAdam over ZeRO-1 shards"}))
register_stack(Stack(
    "transformers", "Hugging Face transformers, eager PyTorch (SDPA attention, DDP)",
    norm_passes=HF_PASSES["norm"][0], act_passes=HF_PASSES["act"][0],
    rope_passes=HF_PASSES["rope"][0], bwd_passes={k: v[1] for k, v in HF_PASSES.items()},
    ce_passes=TORCH_CE_PASSES, master_weights=False, dense_only=True, chain_kernels=HF_KERNELS,
    defaults=_transformers,
    kernels={"norm": "eager RMSNorm in fp32 (cast, pow, mean, rsqrt, mul, cast back, weight: "
             "7.1x the fused kernel's time forward, 9.4x backward)",
             "activation": "eager SiLU x up (5 passes for the fused 3; backward 9 for 4.5)",
             "rotary": "eager rotate_half rotary (negation, concatenation, two products, sum: "
             "8.8x the fused kernel's time forward, 7.0x backward)",
             "cross_entropy": "torch cross_entropy on logits cast to fp32 (ForCausalLMLoss)",
             "optimizer": "torch.optim.AdamW (foreach) over the compute-dtype weights"}))
register_stack(Stack(
    "eager", "eager PyTorch op list recorded on the host CPU (the family's stored bundle)",
    recorded=True, defaults=_eager,
    kernels={"ops": "one kernel per recorded PyTorch op (fp32 RMSNorm as pow/mean/rsqrt/mul, "
             "unfused SwiGLU and rotary, per-tensor Adam), timed by the cost model"}))

STACK_NAMES = tuple(STACKS)


def default_stack(device: Any, recorded_source: bool) -> str:
    """``megatron-core`` for a GPU target built from first principles; ``eager`` for a CPU
    target (its recorded kernels) and for a source the user recorded (its own kernels
    are kept; a named stack adds that stack's overlaps)."""
    if getattr(device, "kind", "gpu") == "cpu" or recorded_source:
        return "eager"
    return "megatron-core"


def stack_defaults(stack: Stack, par: Any, given: Any, device: Any, mesh: bool = False
                   ) -> dict[str, Any]:
    """The ParallelSpec fields ``stack`` sets for layout ``par`` that ``given`` (the
    option names the user gave) leaves open, with the stack's name. ``overlap_p2p`` and
    ``p2p_blocking`` are one switch; the distributed optimizer (``zero``) and FSDP are
    left alone when either is given; the TP overlaps only exist with ``tp > 1`` (the
    userbuffers also need ``sp``, and a switched NVLink domain: on a full-mesh node,
    ``mesh``, they are off unless given, docs/stacks.md)."""
    out = dict(stack.defaults(par, device))
    given = set(given)
    if "overlap_p2p" in given:
        given.add("p2p_blocking")
    if "overlap_grad_reduce" in given:
        given.add("dp_overlap")
    if "zero" in given or "fsdp" in given:
        out.pop("zero", None)
        out.pop("fsdp", None)
    if par.dp * par.cp <= 1:
        out.pop("zero", None)
    out = {k: v for k, v in out.items() if k not in given}
    sp = out.get("sp", par.sp)
    if par.dtype == "fp8":
        if "fp8_recipe" not in given and stack.fp8_recipes:
            out["fp8_recipe"] = stack.fp8_recipes[0]
        if "fp8_param_gather" not in given and stack.name == "megatron-core":
            # Megatron-Bridge's FP8 precision configs; bf16_with_nvfp4_mixed sets it off
            out["fp8_param_gather"] = out.get("fp8_recipe", par.fp8_recipe) != "nvfp4"
    # Megatron-Bridge's recipes run NVFP4 without the userbuffers TP overlap
    # (``tp_comm_overlap = False if precision == "nvfp4"``, every model's llm_pretrain.py)
    nvfp4 = par.dtype == "fp8" and out.get("fp8_recipe", par.fp8_recipe) == "nvfp4"
    if "tp_comm_overlap" in out:
        out["tp_comm_overlap"] = (bool(out["tp_comm_overlap"]) and par.tp > 1 and bool(sp)
                                  and not nvfp4 and not mesh)
    out["stack"] = stack.name
    return out


def with_cross_entropy(stack: Stack, fused: bool | None) -> Stack:
    """``stack`` with its cross-entropy fused or not (``--cross-entropy-fusion``; None: as
    the stack runs it): Megatron's fused vocab-parallel kernels or its fp32 softmax, loss and
    gradient (``VocabParallelCrossEntropy``, Megatron-LM's default)."""
    if fused is None or fused == stack.fused_ce:
        return stack
    label = ("fused vocab-parallel cross-entropy" if fused
             else "vocab-parallel cross-entropy (fp32 softmax)")
    return dataclasses.replace(stack, fused_ce=fused, kernels={**stack.kernels, "cross_entropy": label})


def check_stack(stack: Stack, par: Any, device: Any) -> None:
    """InputError when ``stack`` cannot run ``par`` on ``device``: FP8 on a stack without
    FP8 kernels, on a device without FP8 tensor cores, or MXFP8 off Blackwell."""
    if par.dtype != "fp8":
        if par.fp8_attention:
            raise InputError("FP8 attention needs --dtype fp8", "--fp8-attention")
        return
    if not stack.fp8_recipes:
        raise InputError(f"stack {stack.name} has no FP8 kernels (FP8 needs Transformer Engine or "
                         "torchao: megatron-core, torchtitan, deepspeed)", "--dtype")
    peaks = getattr(device, "peak_tflops", {})
    if "fp8" not in peaks:
        raise InputError(f"device {device.name} has no FP8 tensor cores", "--dtype")
    if par.fp8_recipe not in stack.fp8_recipes:
        raise InputError(f"stack {stack.name} runs FP8 recipes {', '.join(stack.fp8_recipes)}, "
                         f"not {par.fp8_recipe!r}", "--fp8-recipe")
    if par.fp8_recipe == "mxfp8" and "mxfp8" not in peaks:
        raise InputError(f"mxfp8 (MX block scaling) needs Blackwell tensor cores; device "
                         f"{device.name} has none (use current or delayed)", "--fp8-recipe")
    if par.fp8_recipe == "nvfp4" and "nvfp4" not in peaks:
        raise InputError(f"nvfp4 needs FP4 tensor cores (Blackwell); device {device.name} has "
                         "none (use current or delayed)", "--fp8-recipe")
    if par.fp8_recipe == "nvfp4" and par.fp8_param_gather:
        raise InputError("nvfp4 gathers BF16 parameters (Transformer Engine keeps no NVFP4 "
                         "parameters): drop --fp8-param-gather", "--fp8-param-gather")


def attention_kernel(stack: Stack, attention: str, device: Any) -> str:
    """The attention kernel, in words: the kernel the device profile's attention class was
    calibrated on (FlashAttention-2 on Ampere, cuDNN's fused attention on Hopper and
    Blackwell)."""
    if attention == "unfused":
        return "unfused (scores, scale-mask-softmax, dropout, context)"
    name = str(getattr(device, "name", ""))
    if attention == "flash2":
        return f"FlashAttention-2 (causal blocks only; the {name} profile's flash2 parameters)"
    fit = getattr(getattr(getattr(device, "shape_model", None), "attention", None), "cudnn", "")
    ver = f"cuDNN {fit} " if fit else "cuDNN "
    gen = ("FlashAttention-2" if name in ("a100", "a100-40gb") else f"{ver}fused attention"
           if name in ("h100", "h200", "b200", "b300", "gb200", "gb300") else "flash")
    return f"{gen} (causal blocks only; the {name} profile's attention curve)"


def stack_template(model: ModelSpec, stack: Stack, attention: str | None = None,
                   compiled: bool = False, optimizer: str | None = None,
                   loss_fp32: bool = True) -> LayerTemplate:
    """The first-principles template with ``stack``'s kernels (``attention`` overrides the
    stack's attention kernel; ``compiled``: torch.compile fuses the eager elementwise
    chains, each one kernel as the fused stacks run it; ``optimizer``: ``adam`` (the
    default) or ``sgd``, over the stack's master weights or its compute-dtype weights,
    :mod:`tracesim.template.optimizer`; ``loss_fp32`` False: PyTorch's cross-entropy on the
    compute-dtype logits, ``eb / 4`` of the fp32 loss's bytes)."""
    if stack.dense_only and (model.is_moe or model.is_mla or model.is_hybrid):
        raise InputError(f"stack {stack.name} models dense transformer blocks; {model.name} has "
                         "MoE, MLA or Mamba layers (use megatron-core or torchtitan)", "--stack")
    att = attention or stack.attention
    base = first_principles_template(model, att)
    swiglu = model.activation == "swiglu"
    rms = model.norm == "rmsnorm"
    if compiled:
        stack = dataclasses.replace(stack, norm_passes=1.0, act_passes=1.0, rope_passes=1.0,
                                    bwd_passes={}, ce_passes=(1.0, 1.0), chain_kernels={})
    unfused = _unfused(stack, model)
    opt = optimizer or "adam"
    ops = [optimizer_op(opt, stack.master_weights) if o.section == "optimizer"
           and o.name == "optimizer.step" else _variant(_kernel(o, stack, swiglu, rms, loss_fp32),
                                                        unfused)
           for o in base.ops]
    if stack.grad_buffer:
        ops += grad_buffer_ops(stack.grad_buffer == "scaled")
    if "expert_bias" in unfused:
        fwd, bwd = expert_bias_ops()
        i = next(k for k, o in enumerate(ops) if o.module == "moe.fc2" and o.phase == "fwd")
        ops.insert(i + 1, fwd)
        j = next(k for k, o in enumerate(ops) if o.module == "moe.fc2" and o.phase == "bwd")
        ops.insert(j, bwd)
    meta = {**dict(base.meta), "stack": stack.name, "sp_regather": stack.sp_regather,
            "attention": att, "compiled": compiled, "unfused": unfused, "optimizer": opt,
            "master_weights": stack.master_weights, "loss_fp32": loss_fp32}
    if stack.chain_kernels:
        meta["op_kernels"] = {o.name: stack.chain_kernels[kind] for o in ops if o.phase == "fwd"
                              and (kind := _chain(o, swiglu, rms)) in stack.chain_kernels}
    if stack.mcore_paths and model.is_moe:
        meta["router_kernels"] = MCORE_ROUTER_KERNELS
    tpl = LayerTemplate(tuple(ops), meta)
    tpl.check()
    return tpl


#: memory traffic of Megatron-Core's unfused rotary embedding (``_apply_rotary_pos_emb_bshd``:
#: rotate-half split, negation and concatenation, two products and a sum) over the fused kernel's
YARN_ROPE_PASSES = 3.0
#: a clamped SwiGLU's element passes over the fused kernel's (forward: read 2w, write w; its
#: backward 1.5x that), with Megatron-Core 0.15's eager clamps and concatenation: forward two
#: clamps (read and write w each) and the concatenation (read and write 2w), +8w; backward the
#: two clamps' gradients (read the gradient and the input, write, w each), +6w
CLAMPED_GLU_PASSES = {"fwd": 11 / 3, "bwd": 10.5 / 4.5}


def _unfused(stack: Stack, model: ModelSpec) -> dict[str, str]:
    """The model variants ``stack`` runs with Megatron-Core 0.15's unfused code
    (``Stack.mcore_paths``), by report key, in words: Megatron-Bridge switches rope fusion off
    for anything but plain RoPE (``validate_rope_fusion_compatibility``: a YaRN model runs
    Megatron-Core's unfused rotary); Megatron-Core fuses only the gated product of a clamped
    SwiGLU (``fusions/fused_bias_geglu.py``: the clamps and the concatenation run eagerly) and
    adds the routed experts' bias expert by expert (``TEGroupedMLP._apply_bias``)."""
    if not stack.mcore_paths:
        return {}
    out = {}
    if model.rope_scaling == "yarn":
        out["rotary"] = "unfused rotary (YaRN: Megatron-Bridge turns rope fusion off)"
    if model.glu_clamp:
        out["activation"] = "bias-SwiGLU fused, its clamps and concatenation eager"
    if model.expert_bias and model.is_moe:
        out["expert_bias"] = "the routed experts' bias added expert by expert (Python loop)"
    return out


def _variant(o: TemplateOp, unfused: Mapping[str, str]) -> TemplateOp:
    """``o`` with the memory traffic of the unfused paths in ``unfused`` (:func:`_unfused`)."""
    if o.module.endswith(".rope") and "rotary" in unfused:
        return o.replace(bytes=_times(o.bytes, YARN_ROPE_PASSES))
    if o.module.endswith(".act") and "activation" in unfused and o.phase in CLAMPED_GLU_PASSES:
        return o.replace(bytes=_times(o.bytes, CLAMPED_GLU_PASSES[o.phase]))
    return o


def _times(expr: str, k: float) -> str:
    return expr if k == 1 or expr in ("", "0") else f"{k:g}*({expr})"


def _chain(o: TemplateOp, swiglu: bool, rms: bool) -> str:
    """Which eager chain ``o`` is (``norm``, ``act``, ``rope``), or ""."""
    if o.op_class == "norm" and rms:
        return "norm"
    if o.module.endswith(".act") and swiglu:
        return "act"
    return "rope" if o.module.endswith(".rope") else ""


def _kernel(o: TemplateOp, stack: Stack, swiglu: bool, rms: bool, loss_fp32: bool = True
            ) -> TemplateOp:
    """``o`` as ``stack`` runs it (memory passes of eager kernels, the fused cross-entropy)."""
    if kind := _chain(o, swiglu, rms):
        fwd = {"norm": stack.norm_passes, "act": stack.act_passes, "rope": stack.rope_passes}[kind]
        return o.replace(bytes=_times(o.bytes, stack.bwd_passes.get(kind, fwd)
                                      if o.phase == "bwd" else fwd))
    if o.module == "loss" and o.kind == "compute" and stack.fused_ce:
        # one pass for max and sum-exp, one that writes the gradient in place (forward);
        # the backward scales that gradient by the loss's (a read and a write)
        ce_passes = 3 if o.phase == "fwd" else 2
        return o.replace(bytes=f"{ce_passes}*eb*(b*s/cp)*vocab/tp")
    if o.module == "loss" and o.kind == "compute" and stack.megatron_ce:
        # VocabParallelCrossEntropy on fp32 logits, bytes per logit: forward the cast (eb in,
        # 4 out), the max (4), the max subtracted in place (8), exp in place (8), the sum (4)
        # and the softmax divided in place (8); backward the softmax scaled by the loss's
        # gradient in place (8) and its cast back (4 in, eb out)
        per = "(eb + 36)" if o.phase == "fwd" else "(eb + 12)"
        return o.replace(bytes=f"{per}*(b*s/cp)*vocab/tp")
    if o.module == "loss" and o.kind == "compute":  # PyTorch's cross_entropy
        nbytes = o.bytes if loss_fp32 else f"eb/4*({o.bytes})"
        return o.replace(bytes=_times(nbytes, stack.ce_passes[o.phase == "bwd"]))
    return o


def stack_info(stack: Stack, par: Any, device: Any, template: LayerTemplate) -> dict[str, Any]:
    """What the report says about the stack: its kernels and the overlaps switched on."""
    att = str(template.meta.get("attention", stack.attention))
    recorded = template.meta.get("source") not in (None, "first-principles")
    kernels = ({"ops": f"recorded ({template.meta.get('source')})"} if recorded
               else {**dict(stack.kernels), "attention": attention_kernel(stack, att, device)})
    if not recorded:
        kernels.update(template.meta.get("unfused") or {})
        if template.meta.get("loss_fp32") is False and "cross_entropy" in kernels:
            kernels["cross_entropy"] = "torch cross_entropy on the compute-dtype logits"
        opt = str(template.meta.get("optimizer", "adam"))
        if opt != "adam":
            kernels["optimizer"] = OPTIMIZER_SUMMARY[(opt, bool(template.meta.get("master_weights", True)))]
        if stack.grad_buffer:
            kernels["grad_buffer"] = ("zeroed every step; the shard copied to fp32, normed"
                                      + (" and clip-scaled" if stack.grad_buffer == "scaled" else ""))
    if template.meta.get("compiled") and not recorded:
        for key, passes in (("norm", stack.norm_passes), ("activation", stack.act_passes),
                            ("rotary", stack.rope_passes)):
            if passes != 1 and key in kernels:
                kernels[key] = "torch.compile: one fused Inductor kernel"
    overlaps = [name for name, on in (
        ("tp_comm_overlap", par.tp_comm_overlap), ("tp_bwd_overlap", par.tp_bwd_overlap),
        ("overlap_grad_reduce", par.dp_overlap and par.dp * par.cp > 1),
        ("overlap_param_gather", par.overlap_param_gather and 1 <= par.zero < 3),
        ("overlap_p2p", not par.p2p_blocking and par.pp > 1),
        ("cp_overlap", par.cp_overlap and par.cp > 1),
        ("fsdp_prefetch", par.shard_params)) if on]
    out: dict[str, Any] = {"name": stack.name, "summary": stack.summary, "kernels": kernels,
                           "overlaps": overlaps, "comm_interference": par.comm_interference}
    if template.meta.get("compiled") and not recorded:
        out["compiled"] = True
    if par.dtype == "fp8":
        out["fp8"] = {"recipe": par.fp8_recipe, "param_gather": par.fp8_param_gather,
                      "attention": par.fp8_attention}
        if par.fp8_recipe == "delayed":  # whose amaxes each reduction covers
            out["fp8"]["amax_group"] = "tp x cp" if par.fp8_amax_tp_only else "tp x dp x cp"
        if par.fp8_plan:
            out["fp8"]["plan"] = {g: r for g, r in par.fp8_plan}
        if any(par.bf16_layers):
            out["fp8"]["bf16_layers"] = list(par.bf16_layers)
    if par.grad_reduce_fp32:
        out["grad_reduce"] = "fp32"
    if par.grad_nan_check and par.dp * par.cp > 1 and not par.shard_params:
        # Megatron-Core's check of each bucket (build.dpsync): its host syncs per bucket
        out["grad_nan_check"] = {"syncs_per_bucket": par.grad_nan_syncs}
    return out
