"""The GPT tables of published measurements: Megatron-LM's SC'21 Table 1 (A100) and
Megatron-LM's H100 weak-scaling table, their replay options and their FLOP formulas
(:mod:`tracesim.pipeline.published` reads the tables and replays the rows)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracesim.catalog import load_model
from tracesim.errors import InputError
from tracesim.pipeline.published_cells import (
    batch_split,
    layout_dp,
    number_cell,
    positive_cell,
    row_cluster,
    system_cell,
)
from tracesim.specs.model import ModelSpec


def sc21_flops(row: dict[str, str], path: Path | None = None, k: int = 0) -> float:
    """The paper's model FLOPs per iteration: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
    ``path`` and ``k`` name the table and row in the error of a malformed cell."""
    b, s, v = positive_cell(row, "global_batch", path, k), 2048, 51200
    h, n_layers = positive_cell(row, "hidden", path, k), positive_cell(row, "layers", path, k)
    return 96 * b * s * n_layers * h * h * (1 + s / (6 * h) + v / (16 * n_layers * h))


#: how NVIDIA ran each SC'21 Table 1 row, by (layers, hidden): (micro-batch size, layers per
#: virtual pipeline stage (0: no interleaving), data-parallel gradients overlapped with the
#: backward pass (PyTorch DDP, ``DDP=torch``; Megatron's ``local`` DDP reduces after it));
#: NVIDIA/Megatron-LM ``examples/sc21/run_table_1.sh`` (MBS, ``--num-layers-per-virtual-
#: pipeline-stage``, DDP), the paper's reproduction script
SC21_RUNS: dict[tuple[int, int], tuple[int, int, bool]] = {
    (24, 2304): (16, 0, True), (30, 3072): (16, 0, True), (36, 4096): (16, 0, True),
    (40, 6144): (8, 0, True), (48, 8192): (4, 0, False), (60, 10240): (2, 5, False),
    (80, 12288): (2, 5, False), (96, 16384): (1, 3, False), (105, 20480): (1, 1, False),
    (128, 25600): (1, 0, False),
}


def sc21_options(row: dict[str, str], path: Path, k: int) -> dict[str, Any]:
    """The replay options of an SC'21 Table 1 row (module docstring): the micro-batch size,
    the pipeline schedule (interleaved where the run set layers per virtual stage, else
    1F1B) and the data-parallel overlap of its run in :data:`SC21_RUNS`; a row not there
    takes micro-batch 1, the interleaved schedule with its default chunks and no overlap.
    The model: :func:`sc21_model`."""
    params = number_cell(row, "params_billion", path, k)
    tp, pp, gpus = positive_cell(row, "tp", path, k), positive_cell(row, "pp", path, k), positive_cell(row, "gpus", path, k)
    layers, hidden = positive_cell(row, "layers", path, k), positive_cell(row, "hidden", path, k)
    mbs, per_chunk, overlap = SC21_RUNS.get((layers, hidden), (1, -1, False))
    dp, gbs = layout_dp(row, gpus, {"tp": tp, "pp": pp}, path, k), positive_cell(row, "global_batch", path, k)
    batch_split(gbs, mbs, dp, path, k, "global_batch")
    opts: dict[str, Any] = {
        "model": sc21_model(row, params, path, k), "cluster": "a100-selene", "tp": tp, "pp": pp, "dp": dp,
        "global_batch": gbs, "recompute": "full",
        "micro_batch": mbs, "template": "analytic", "attention": "unfused",
        "dp_overlap": overlap, "stack": "megatron-2021",
    }
    if pp > 1:
        opts["schedule"] = "1f1b" if per_chunk == 0 else "interleaved"
        if per_chunk > 0 and layers % (pp * per_chunk) == 0:
            opts["vpp"] = layers // (pp * per_chunk)
    return opts


def sc21_model(row: dict[str, str], params: float, path: Path, k: int) -> str | ModelSpec:
    """The GPT of an SC'21 row of ``params`` billion parameters: the shipped one of that size
    (``gpt3-7.5b``, the paper's) where its layers, hidden size and heads are the row's (an
    empty ``heads`` cell: the shipped spec's), else one built from the row's columns as those
    are (MLP 4h, GELU, LayerNorm, tied embeddings, vocabulary 51200 and sequence 2048, the
    paper's setup), named ``gpt-<params>b``: the replay runs the model whose FLOPs the
    formula counts (:func:`sc21_flops` reads the row's columns)."""
    name = f"gpt3-{params:g}b" if params < 1000 else "gpt3-1t"
    layers, hidden = positive_cell(row, "layers", path, k), positive_cell(row, "hidden", path, k)
    try:
        spec: ModelSpec | None = load_model(name)
    except InputError:
        spec = None
    heads = positive_cell(row, "heads", path, k, spec.heads if spec is not None else None)
    if spec is not None and (spec.layers, spec.hidden, spec.heads) == (layers, hidden, heads):
        return name
    return ModelSpec(name=f"gpt-{params:g}b", family="gpt", layers=layers, hidden=hidden, heads=heads,
                     kv_heads=heads, ffn_hidden=4 * hidden, vocab=51200, seq_len=2048,
                     activation="gelu", norm="layernorm", tied_embeddings=True, dtype="bf16")


def mcore_flops(row: dict[str, str], path: Path | None = None, k: int = 0) -> float:
    """Megatron-LM's model FLOPs per iteration of a GPT (MLP 4h, no recomputation counted):
    72 B s l h^2 (1 + s/(6h) + V/(12 l h)). ``path`` and ``k`` name the table and row in the
    error of a malformed cell."""
    b, s, v = (positive_cell(row, c, path, k) for c in ("global_batch", "seq_len", "vocab"))
    h, n_layers = positive_cell(row, "hidden", path, k), positive_cell(row, "layers", path, k)
    return 72 * b * s * n_layers * h * h * (1 + s / (6 * h) + v / (12 * n_layers * h))


def mcore_options(row: dict[str, str], path: Path, k: int) -> dict[str, Any]:
    """The replay options of a Megatron-Core GPT table row (module docstring): the row's GPT
    (MLP 4h, GELU, LayerNorm, untied embeddings, BF16) on its system's cluster spec with the
    megatron-core stack, micro-batch 1, the distributed optimizer, the interleaved schedule
    with pipeline parallelism, gradients reduced in fp32 (Megatron-LM's default with bf16:
    ``accumulate_allreduce_grads_in_fp32`` unless ``--grad-reduce-in-bf16``, which the table
    does not name) and the unfused cross-entropy (Megatron-LM's default: the
    ``--cross-entropy-loss-fusion`` flag, opt-in since 2024-06, is not among the flags the
    table names); with TP, the userbuffers overlap at Transformer Engine's defaults (the table
    names ``--tp-comm-overlap`` and no ``--tp-comm-overlap-cfg``, which Megatron-LM's
    ``_initialize_tp_communicators`` passes to Transformer Engine as ``ub_cfgs = {}``); and
    Megatron-Core's gradient NaN check, Megatron-LM's default (``--no-check-for-nan-in-loss-
    and-grad`` is not among the flags), one host sync per bucket as its code did when the
    table was published (f2e5db402c, 2024-07: ``assert not norm.isnan()``). The data-parallel
    size is the GPUs over tp x pp, which must divide them; a ``dp`` cell must agree."""
    tp, pp, gpus = positive_cell(row, "tp", path, k), positive_cell(row, "pp", path, k), positive_cell(row, "gpus", path, k)
    h, heads = positive_cell(row, "hidden", path, k), positive_cell(row, "heads", path, k)
    seq = positive_cell(row, "seq_len", path, k)
    dp, gbs = layout_dp(row, gpus, {"tp": tp, "pp": pp}, path, k), positive_cell(row, "global_batch", path, k)
    batch_split(gbs, 1, dp, path, k, "global_batch")
    model = ModelSpec(
        name=f"gpt-{number_cell(row, 'params_billion', path, k):g}b", family="gpt",
        layers=positive_cell(row, "layers", path, k), hidden=h, heads=heads, kv_heads=heads,
        ffn_hidden=4 * h, vocab=positive_cell(row, "vocab", path, k), seq_len=seq, activation="gelu",
        norm="layernorm", tied_embeddings=False, dtype="bf16")
    system = system_cell(row, path, k)
    opts: dict[str, Any] = {
        "model": model, "cluster": row_cluster(system, gpus, path, k), "tp": tp, "pp": pp,
        "dp": dp, "micro_batch": 1, "global_batch": gbs,
        "seq_len": seq, "dtype": "bf16", "stack": "megatron-core", "template": "analytic",
        "zero": 1, "grad_reduce_fp32": True, "cross_entropy_fusion": False,
        "grad_nan_check": True, "grad_nan_syncs": 1}
    if pp > 1:
        opts["schedule"] = "interleaved"
    if tp > 1:  # --tp-comm-overlap without --tp-comm-overlap-cfg: Transformer Engine's defaults
        opts["tp_comm_overlap_cfg"] = "te-defaults"
    return opts
