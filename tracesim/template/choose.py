"""Which layer template a retarget uses: the source's, a stored bundle's, or the analytic one."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from tracesim.errors import InputError
from tracesim.specs import hybrid
from tracesim.specs.model import ModelSpec
from tracesim.template.analytic import first_principles_template
from tracesim.template.from_trace import template_from_source
from tracesim.template.layer import LayerTemplate


def _files_stamp(directory: Path) -> tuple[tuple[str, int, int], ...]:
    """(name, size, mtime_ns) of every file under ``directory``: a cache key that changes
    when the stored bundle does."""
    stats = ((f, f.stat()) for f in directory.rglob("*") if f.is_file())
    return tuple(sorted((str(f.relative_to(directory)), st.st_size, st.st_mtime_ns) for f, st in stats))


@functools.lru_cache(maxsize=8)
def _stored_template(bundle: str, stamp: tuple[tuple[str, int, int], ...]) -> LayerTemplate:
    """The template of a stored default bundle, extracted once per process (a sweep or a
    notebook replays many points from the same bundle; extracting takes ~0.3 s). The
    template is a frozen dataclass; ``stamp`` (:func:`_files_stamp`) keys the cache on the
    bundle's files."""
    return template_from_source(bundle)


def choose_template(source: str | Path | None, model: ModelSpec, template: str | None = None,
                    attention: str | None = None,
                    default_bundle: Path | None = None) -> tuple[LayerTemplate, list[str]]:
    """The layer template for ``model``, and warnings.

    ``template == "analytic"``: the first-principles template of the family (with
    ``attention`` ``flash`` | ``flash2`` | ``unfused``); else the template of ``source`` (a bundle:
    extracted; a workload directory: its ``template.yaml``); else that of
    ``default_bundle`` (the family's stored bundle), falling back to first principles when
    it cannot be used.
    """
    warnings: list[str] = []
    att = attention or "flash"
    if template == "analytic":
        return first_principles_template(model, att), warnings
    if source:
        tpl = template_from_source(source, model)
        _check_hybrid_parts(tpl, model, source)
        return tpl, warnings
    if default_bundle is not None:
        try:
            stored = _stored_template(str(default_bundle), _files_stamp(default_bundle))
        except InputError as exc:
            warnings.append(f"default template {default_bundle} unusable ({exc.message}); "
                            "using first principles")
        else:
            missing = missing_features(stored, model)
            if not missing:
                return stored, warnings
            warnings.append(f"{model.name} has {', '.join(missing)}, which the stored "
                            f"{default_bundle.name} template does not record; using first "
                            "principles")
    return first_principles_template(model, att), warnings


def _hybrid_kinds_lacking(template: LayerTemplate, model: ModelSpec) -> list[str]:
    """The names of a hybrid model's layer kinds the template has no ops for."""
    if not model.is_hybrid:
        return []
    have = {o.part for o in template.select("block", "fwd")}
    return [hybrid.KIND_NAMES[c] for c in sorted(set(model.hybrid_pattern))
            if hybrid.PARTS[c] not in have]


def _check_hybrid_parts(template: LayerTemplate, model: ModelSpec, source: str | Path) -> None:
    """A hybrid model's layer kinds each need their part in a recorded template (InputError
    naming the source and the kinds it has no ops for)."""
    lacking = _hybrid_kinds_lacking(template, model)
    if lacking:
        raise InputError(f"the template recorded here has no {', '.join(lacking)} ops for "
                         f"{model.name}'s layers; replay the model with --template analytic",
                         source, "--template")


def _uses(template: LayerTemplate, symbol: str) -> bool:
    word = re.compile(rf"\b{symbol}\b")
    return any(word.search(o.flops) for o in template.ops)


def missing_features(template: LayerTemplate, model: ModelSpec) -> list[str]:
    """The architectural features of ``model`` that ``template`` has no ops for (a template
    taken from the trace of another model): multi-head latent attention, sliding-window
    attention, a query width other than ``hidden``, shared experts, dense MLP layers beside
    the MoE ones."""
    names = {o.module for o in template.ops}
    out = []
    if model.is_mla and "attn.kv_down" not in names:
        out.append("multi-head latent attention")
    if model.sliding_window and not _uses(template, "win"):
        out.append("sliding-window attention")
    if not model.is_mla and model.q_width != model.hidden and not _uses(template, "qd"):
        out.append(f"a query width of {model.q_width} (heads x head_dim) != hidden")
    if model.shared_experts and not any(n.startswith("moe.shared") for n in names):
        out.append("shared experts")
    if (model.is_moe and not model.is_hybrid and any(not model.moe_layer(i) for i in range(model.layers))
            and not template.select("block", "fwd", ("mlp",))):
        out.append("dense MLP layers")
    out += [f"{kind} layers" for kind in _hybrid_kinds_lacking(template, model)]
    return out
