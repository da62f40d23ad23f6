"""Pipeline splits: transformer layers per pipeline stage and per model chunk.

Megatron's rules, generalised to uneven splits: ``stage_layers`` (per stage or per model
chunk), ``first_stage_layers`` / ``last_stage_layers`` with the rest split evenly
(Megatron-Core's ``decoder_first/last_pipeline_num_layers``), else ``layers / pp``; a stage's
layers are dealt to its model chunks (interleaved schedule) as evenly as possible.
:func:`check_split` raises :class:`~tracesim.errors.InputError` naming the option to give.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from tracesim.errors import InputError
from tracesim.specs.model import ModelSpec


class Layout(Protocol):
    """What the pipeline split reads of a :class:`tracesim.specs.parallel.ParallelSpec`
    (whose validation calls this module, so it imports this one)."""

    @property
    def pp(self) -> int: ...
    @property
    def chunks(self) -> int: ...
    @property
    def stage_layers(self) -> tuple[int, ...] | None: ...
    @property
    def first_stage_layers(self) -> int: ...
    @property
    def last_stage_layers(self) -> int: ...


def _err(message: str, where: str) -> InputError:
    return InputError(message, "layout", where)


def stage_layer_counts(model: ModelSpec, par: Layout) -> tuple[int, ...]:
    """Transformer layers per pipeline stage (``pp`` entries, all model chunks of a stage).

    ``stage_layers`` with ``pp`` entries; else ``first_stage_layers`` / ``last_stage_layers``
    with the rest split evenly over the other stages (Megatron-Core's
    ``get_num_layers_to_build``); else ``layers / pp`` each. ``stage_layers`` given per model
    chunk (``pp * vpp`` entries) are summed per stage."""
    pp, n = par.pp, par.pp * par.chunks
    if par.stage_layers:
        sl = tuple(int(x) for x in par.stage_layers)
        if len(sl) == n and n != pp:
            return tuple(sum(sl[c] for c in range(st, n, pp)) for st in range(pp))
        return sl
    f, last = par.first_stage_layers, par.last_stage_layers
    if f or last:
        left = pp - (f > 0) - (last > 0)
        mid = (model.layers - f - last) // left if left > 0 else 0
        out = [mid] * pp
        if f:
            out[0] = f
        if last:
            out[-1] = last
        return tuple(out)
    return tuple([model.layers // pp] * pp)


def stage_split(model: ModelSpec, par: Layout) -> tuple[int, ...]:
    """Transformer layers per model chunk, in chunk order (``pp * chunks`` entries).

    Chunk ``c`` (0-based, pipeline-order) runs on pipeline rank ``c % pp`` as its virtual
    stage ``c // pp``. ``stage_layers`` with ``pp * chunks`` entries is the split itself;
    otherwise each stage's layers (:func:`stage_layer_counts`) are dealt to its chunks as
    evenly as possible, earlier chunks taking the remainder (a stage of 7 layers with
    ``vpp`` 2 runs chunks of 4 and 3).
    """
    pp, v = par.pp, par.chunks
    if par.stage_layers and len(par.stage_layers) == pp * v:
        return tuple(int(x) for x in par.stage_layers)
    per_stage = stage_layer_counts(model, par)
    if v == 1:
        return per_stage
    out = [0] * (pp * v)
    for st, k in enumerate(per_stage):
        for c in range(v):
            out[c * pp + st] = k // v + (1 if c < k % v else 0)
    return tuple(out)


_SPLIT_HINT = ("give --stage-layers N,N,... or --first-stage-layers / --last-stage-layers "
               "for an uneven split")


def check_split(model: ModelSpec, par: Layout) -> None:
    """The pipeline split: options consistent, every stage and model chunk has a layer (but
    a first or last chunk that ``stage_layers`` leaves bare: the embedding or the loss alone)."""
    pp, n_chunks = par.pp, par.pp * par.chunks
    f, last = par.first_stage_layers, par.last_stage_layers
    if par.stage_layers and (f or last):
        raise _err("give either stage_layers or first/last_stage_layers, not both", "stage_layers")
    if par.stage_layers:
        if len(par.stage_layers) not in (pp, n_chunks):
            raise _err(f"stage_layers has {len(par.stage_layers)} entries, expected pp = {pp}"
                       + (f" or pp x vpp = {n_chunks}" if n_chunks != pp else ""), "stage_layers")
        inner = [int(x) for x in par.stage_layers][1:-1]
        if any(x < 1 for x in inner) or len(par.stage_layers) < 3 and 0 in par.stage_layers:
            raise _err("every stage needs at least one layer, but the first and the last entry "
                       "of three or more (the embedding's and the loss's), got "
                       f"{list(par.stage_layers)}", "stage_layers")
        if sum(par.stage_layers) != model.layers:
            raise _err(f"stage_layers sum to {sum(par.stage_layers)}, the model has "
                       f"{model.layers} layers", "stage_layers")
    elif f or last:
        key = "first_stage_layers" if f else "last_stage_layers"
        if pp < 2 or (f and last and pp < 3 and f + last != model.layers):
            raise _err(f"first/last_stage_layers need pp >= 2 (pp >= 3 with both unless they "
                       f"sum to the layers), got pp {pp}", key)
        left = pp - (f > 0) - (last > 0)
        rest = model.layers - f - last
        if rest < left or (left == 0 and rest != 0):
            raise _err(f"first_stage_layers {f} + last_stage_layers {last} leave {rest} of "
                       f"{model.layers} layers for the other {left} stage(s)", key)
        if left and rest % left:
            raise _err(f"first_stage_layers {f} + last_stage_layers {last} leave {rest} of "
                       f"{model.layers} layers, not divisible by the other {left} stages "
                       "(give --stage-layers for any split)", key)
    else:
        if model.layers < n_chunks:
            raise _err(f"layers {model.layers} are fewer than pipeline stages pp {pp} x vpp "
                       f"{par.chunks} = {n_chunks}", "pp")
        if model.layers % pp:
            raise _err(f"layers {model.layers} are not divisible by pp {pp} ({_SPLIT_HINT})",
                       "pp")
    counts = stage_layer_counts(model, par)
    for c, k in enumerate(stage_split(model, par)):
        # only the model's first and last chunk may be bare, and only when given so: they
        # run the embedding alone, or the output layer and loss alone
        if k < 1 and not (par.stage_layers and c in (0, n_chunks - 1)):
            st = c % pp
            raise _err(f"pipeline stage {st} has {counts[st]} layer(s) for vpp {par.chunks} "
                       "model chunks: every chunk needs a layer", "vpp" if par.chunks > 1 else "pp")


def default_vpp(layers: int, pp: int) -> int:
    """Virtual stages per pipeline rank when ``--schedule interleaved`` has no ``--vpp``:
    the smallest divisor > 1 of the layers per stage (2 when even), so each model chunk is
    as large as possible while the bubble still shrinks (Narayanan et al. 2021 use 2+)."""
    per = layers // pp if pp and layers % pp == 0 else 0
    for v in range(2, per + 1):
        if per % v == 0:
            return v
    return 1


def vpp_basis(opts: Mapping[str, Any], layers: int, pp: int) -> int:
    """Layers of the stage whose count sets the default interleaving depth: a middle stage
    of an uneven split (the smallest of ``stage_layers``), else ``layers / pp`` (0 when it
    does not divide)."""
    sl = opts.get("stage_layers")
    if sl and len(sl) == pp:
        return int(min(sl))
    f, last = int(opts.get("first_stage_layers") or 0), int(opts.get("last_stage_layers") or 0)
    left = pp - (f > 0) - (last > 0)
    if (f or last) and left > 0 and (layers - f - last) % left == 0:
        return (layers - f - last) // left
    return layers // pp if pp and layers % pp == 0 else 0
