"""The torchtitan table format of ``tracesim validate published`` (:mod:`tracesim.pipeline.published`):
one row per run of a PyTorch-native trainer (torchtitan, Hugging Face transformers, NeMo
AutoModel), its replay options from its cells (:func:`titan_options`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.options import check_value
from tracesim.pipeline.published_cells import (
    PRECISIONS,
    flag_cell,
    int_cell,
    known_cell,
    layout_dp,
    model_cell,
    pipeline_split,
    positive_cell,
    row_cluster,
    system_cell,
)
from tracesim.specs.parallel import MOE_DISPATCHERS, MOE_ROUTINGS
from tracesim.template.optimizer import OPTIMIZERS

#: stacks a torchtitan-format row may name in its ``stack`` column
TITAN_STACKS = ("torchtitan", "transformers")


def titan_options(row: dict[str, str], path: Path, k: int) -> dict[str, Any]:
    """The replay options of a torchtitan row (module docstring): FSDP over the GPUs TP leaves,
    the row's local batch as one micro-batch, its activation checkpointing (``ac``: none,
    op, full), torch.compile and attention kernel, torchao float8 as FP8 current scaling
    (``fp8-cs``; ``fsdp_fp8_all_gather``: FP8 parameters all-gathered). Optional ``stack``
    (``transformers``: Hugging Face modules in eager PyTorch with DDP instead of FSDP),
    ``optimizer`` (``adam``, ``sgd``), ``loss_fp32`` (true / false), ``cudnn`` (the run's
    cuDNN version), ``ga`` (local batches per step, gradient accumulation; default 1), ``ep``
    (expert parallelism), ``dispatcher`` (the MoE token dispatcher), ``pp`` and ``vp`` (a
    pipeline and its model chunks per rank, split as :func:`pipeline_split`) and ``mbs`` (the
    pipeline's micro-batch; default the local batch), ``cp`` (context parallelism, FSDP then
    over data x context parallel ranks), ``grad_reduce`` (fp32 / bf16), ``routing``
    (``uniform``, ``round-robin``: how the run's balanced gate picks experts),
    ``shared_overlap`` (true: the shared experts run beside the dispatch), and FSDP2's timing:
    ``reshard_after_forward`` (true / false; default true), ``defer_sync`` (true: gradients
    reduce-scattered once per iteration) and ``keep_gathered`` (true: parameters gathered
    once per iteration) cells. With a pipeline each of the ``ga`` local batches runs the whole
    schedule (``pp_rounds``), as torch.distributed.pipelining does when a trainer accumulates
    gradients over local batches. The numbers are checked before the names (a malformed cell
    is bad input on a row that names an unknown system too)."""
    gpus, tp = positive_cell(row, "gpus", path, k), positive_cell(row, "tp", path, k)
    if gpus % tp:
        raise InputError(f"tp {tp} does not divide the {gpus} GPUs", path, f"row {k + 2}: tp")
    ac = (row.get("ac") or "").strip()
    if ac not in ("none", "op", "full"):
        raise InputError(f"unknown ac {ac!r} (known: none, op, full)", path, f"row {k + 2}: ac")
    pp, vp = positive_cell(row, "pp", path, k, 1), positive_cell(row, "vp", path, k, 1)
    cp = positive_cell(row, "cp", path, k, 1)
    if gpus % (tp * pp * cp):
        raise InputError(f"tp x pp x cp {tp * pp * cp} does not divide the {gpus} GPUs", path,
                         f"row {k + 2}: {'cp' if cp > 1 else 'pp'}")
    lb, dp = positive_cell(row, "local_batch", path, k), layout_dp(row, gpus, {"tp": tp, "pp": pp, "cp": cp}, path, k)
    mbs = int_cell(row, "mbs", path, k, lb)  # the pipeline's micro-batch
    ga = int_cell(row, "ga", path, k, 1)  # local batches per step (gradient accumulation)
    if ga < 1 or mbs < 1 or lb % mbs:
        raise InputError(f"expected ga >= 1 and an mbs that divides the local batch {lb}", path,
                         f"row {k + 2}: {'ga' if ga < 1 else 'mbs'}")
    seq = positive_cell(row, "seq_len", path, k)
    system, prec = system_cell(row, path, k), known_cell(row, "precision", ("bf16", "fp8-cs"), path, k)
    stack = known_cell(row, "stack", TITAN_STACKS, path, k) if (row.get("stack") or "").strip() else "torchtitan"
    dtype, recipe = PRECISIONS[prec]
    opts: dict[str, Any] = {
        "model": model_cell(row, path, k)[0], "cluster": row_cluster(system, gpus, path, k),
        "tp": tp, "pp": pp, "cp": cp, "dp": dp, "fsdp": dp * cp > 1 and stack == "torchtitan",
        "micro_batch": mbs,
        "global_batch": lb * dp * ga, "seq_len": seq, "dtype": dtype,
        "stack": stack, "template": "analytic", "recompute": ac,
        "compile": flag_cell(row, "compile", path, k)}
    if vp > 1:
        opts["vpp"] = vp
    if pp > 1 and ga > 1:  # each local batch runs the whole schedule, warm-up and drain
        opts["pp_rounds"] = ga
    if pp > 1 and (split := pipeline_split(model_cell(row, path, k)[1].layers, pp, vp)) is not None:
        opts["stage_layers"] = split
    if (row.get("reshard_after_forward") or "").strip():  # FSDP2's, per row
        opts["fsdp_reshard"] = flag_cell(row, "reshard_after_forward", path, k)
    for cell, key in (("defer_sync", "fsdp_defer_sync"), ("keep_gathered", "fsdp_keep_gathered")):
        if flag_cell(row, cell, path, k):  # reduced / gathered once per iteration
            opts[key] = True
    if (row.get("grad_reduce") or "").strip():  # the gradient reduce-scatter's dtype
        opts["grad_reduce_fp32"] = known_cell(row, "grad_reduce", ("fp32", "bf16"), path, k) == "fp32"
    if positive_cell(row, "ep", path, k, 1) > 1:  # experts sharded over the FSDP group's GPUs
        opts["ep"] = int_cell(row, "ep", path, k)
    if (row.get("dispatcher") or "").strip():
        opts["moe_dispatcher"] = known_cell(row, "dispatcher", MOE_DISPATCHERS, path, k)
    if (row.get("routing") or "").strip():  # how the run's balanced gate picks experts
        opts["moe_routing"] = known_cell(row, "routing", MOE_ROUTINGS, path, k)
    if flag_cell(row, "shared_overlap", path, k):  # shared experts on a side stream
        opts["moe_shared_expert_overlap"] = True
    if (row.get("attention") or "").strip():  # the run's attention kernel
        opts["attention"] = check_value("attention", row["attention"].strip(), path, f"row {k + 2}: attention")
    if (row.get("optimizer") or "").strip():
        opts["optimizer"] = known_cell(row, "optimizer", OPTIMIZERS, path, k)
    if (row.get("loss_fp32") or "").strip():  # the loss on fp32 or on the compute-dtype logits
        opts["loss_fp32"] = flag_cell(row, "loss_fp32", path, k)
    if (row.get("cudnn") or "").strip():  # the cuDNN version the run's container had
        opts["cudnn"] = check_value("cudnn", row["cudnn"].strip(), path, f"row {k + 2}: cudnn")
    if recipe:
        opts.update(fp8_recipe=recipe, fp8_param_gather=flag_cell(row, "fsdp_fp8_all_gather", path, k))
    return opts
