"""The data of a resolved template: one op (:class:`ROp`), one section or layer kind's op lists
(:class:`Section`) and a model's sections for one layout (:class:`Resolved`), which
:mod:`tracesim.template.resolve` computes."""

from __future__ import annotations

from dataclasses import dataclass, field

from tracesim.specs.model import ModelSpec
from tracesim.template.layer import TemplateOp


@dataclass(frozen=True)
class ROp:
    """A resolved op: numbers for one rank of one layout.

    ``kind`` is ``gpu`` (compute) or ``coll`` (collective); ``gkind`` is the placement
    group kind the collective runs on (``tp``, ``ep``, ...); ``msg_bytes`` follows the
    nccl-tests convention; ``recompute`` marks the selective-recompute set.

    ``overlap`` marks a TP collective that can run beside a neighbouring GEMM
    (:mod:`tracesim.build.overlap`): ``ag_next`` (an all-gather feeding the next GEMM, or its
    data-gradient half in the backward), ``rs_prev`` (a reduce-scatter of the previous
    GEMM's output), ``bulk_dgrad`` (beside the next backward GEMM's data gradient),
    ``bulk_wgrad`` (beside the previous backward GEMM's weight gradient); ``ub`` names the
    linear of a transformer layer for the userbuffers settings (``qkv``, ``proj``, ``fc1``,
    ``fc2``; "" elsewhere).
    """

    name: str
    kind: str
    op_class: str
    phase: str
    flops: float = 0.0
    bytes: float = 0.0
    dur_ns: int = 0
    collective: str = ""
    gkind: str = ""
    msg_bytes: int = 0
    recompute: bool = False
    params: float = 0.0
    overlap: str = ""
    ub: str = ""
    #: ``((splits, ratio), ...)``: a userbuffers overlap runs this GEMM as ``splits`` chunks,
    #: each its own cuBLAS call of ``1 / splits`` of the tokens; ``ratio`` is one chunk's time
    #: over ``dur_ns / splits`` (:func:`chunk_slowdown`)
    chunk_slow: tuple[tuple[int, float], ...] = ()
    #: the network algorithm the collective asks for ("" = the model's choice)
    algorithm: str = ""
    #: on a side stream beside the EP all-to-all before it (:mod:`tracesim.build.shared_overlap`)
    side: bool = False
    #: a backward GEMM's data-gradient share of ``dur_ns`` (the rest its weight gradient; the
    #: two at their own shapes, :func:`tracesim.template.durations.backward_gemm_ns`)
    dgrad_share: float = 0.5
    #: a row-parallel forward GEMM under the userbuffers overlap: the time of the reduction
    #: kernel that ends a ring-exchange reduce-scatter of its output
    #: (:func:`tracesim.template.resolve.ub_reduce_ns`; 0: none)
    ub_reduce_ns: int = 0

    @property
    def is_comm(self) -> bool:
        return self.kind != "gpu"

    def chunk_ratio(self, splits: int) -> float:
        """One of ``splits`` chunks' time over ``dur_ns / splits`` (1 where not computed)."""
        for n, r in self.chunk_slow:
            if n == splits:
                return r
        return 1.0


@dataclass(frozen=True)
class Section:
    """Resolved forward and backward op lists of one template section (or layer kind)."""

    fwd: tuple[ROp, ...]
    bwd: tuple[ROp, ...]
    params: float  # local parameters of the section (this rank)
    expert_params: float = 0.0  # of which MoE expert weights (reduced over the expert-DP group)
    model_flops_fwd: float = 0.0  # forward FLOPs of the full (unsharded) section, one micro-batch
    tensors: float = 0.0  # parameter tensors of the section on this rank (sharded ones count once)


@dataclass(frozen=True)
class Resolved:
    """A template resolved for one model and layout.

    A layer is ``dense`` (attention + dense MLP) or ``moe`` (attention + MoE block), with full
    attention or, for the windowed layers of a sliding-window model, with the template's
    ``win`` bound to the window (``dense_windowed``, ``moe_windowed``). A layer index past the
    model's last layer is a multi-token-prediction module's layer, built as the last layer
    (a hybrid model's: attention and MoE, as Nemotron 3 Super's ``*E`` module).
    """

    prologue: Section
    dense: Section
    moe: Section | None
    epilogue: Section
    optimizer: tuple[TemplateOp, ...]
    env: dict = field(default_factory=dict)
    dense_windowed: Section | None = None
    moe_windowed: Section | None = None
    #: the ops around each multi-token-prediction module's transformer layer (``mtp_layers``
    #: > 0; :mod:`tracesim.template.mtp`): before it (``mtp_in``) and after it (``mtp_out``)
    mtp_in: Section | None = None
    mtp_out: Section | None = None
    #: a hybrid model's layers by pattern character (``M``, ``*``, ``-``, ``E``): one part each
    #: (:mod:`tracesim.specs.hybrid`)
    hybrid: tuple[tuple[str, Section], ...] = ()
    #: the layers kept in BF16 under FP8 (``ParallelSpec.bf16_layers``: the first and the
    #: last so many, multi-token-prediction modules with the last) and their sections
    bf16_layers: tuple[int, int] = (0, 0)
    plain: Resolved | None = None

    def layer(self, model: ModelSpec, index: int) -> Section:
        """The resolved ops of transformer layer ``index`` (0-based)."""
        first, last = self.bf16_layers
        if self.plain is not None and (index < first or index >= model.layers - last):
            return self.plain.layer(model, index)
        if self.hybrid:
            if index >= model.layers and self.moe is not None:
                return self.moe  # a multi-token-prediction module: attention and MoE ("*E")
            return dict(self.hybrid)[model.layer_kind(min(index, model.layers - 1))]
        index = min(index, model.layers - 1)
        moe = model.moe_layer(index) and self.moe is not None
        if model.window(index):
            windowed = self.moe_windowed if moe else self.dense_windowed
            if windowed is not None:
                return windowed
        if moe and self.moe is not None:
            return self.moe
        return self.dense
