"""How close replays of the same kind came to published runs, said beside a retarget's numbers.

``tracesim validate published`` replays the published tables of docs/accuracy.md (the
command there); ``scripts/validation_summary.py`` replays the same tables, groups the rows by
the software stack, the model's kind (dense, MoE, hybrid Mamba) and the GPU, and writes each
group's row count, mean signed error (positive: the replay predicted more throughput than
the run measured, i.e. it is too fast), mean absolute error and rows within 10% / 20% to
``validation.yaml`` beside this module. A retarget looks its own stack, kind and GPU up
(:func:`lookup`): the group of that GPU, else the stack and kind over every GPU that has rows,
else nothing. The numbers are a measurement of the replay against runs it never saw, not a
correction: nothing in a prediction is scaled by them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

FILE = Path(__file__).with_name("validation.yaml")


def model_kind(family: str, experts: int) -> str:
    """``hybrid`` (Mamba layers), ``moe`` (routed experts) or ``dense``."""
    return "hybrid" if family == "hybrid" else "moe" if experts else "dense"


def _stats(errors: list[float]) -> dict[str, Any]:
    n = len(errors)
    largest: float = max(errors, key=abs)
    return {"rows": n, "mean_error": round(sum(errors) / n, 4),
            "mean_abs_error": round(sum(abs(e) for e in errors) / n, 4),
            "within_10pct": sum(abs(e) <= 0.10 for e in errors),
            "within_20pct": sum(abs(e) <= 0.20 for e in errors),
            "largest": round(largest, 4)}


def summarize(rows: Iterable[tuple[str, str, str, float]]) -> dict[str, Any]:
    """``(stack, kind, device, relative error)`` per replayed row -> the ``groups`` (one per
    stack, kind and GPU) and ``kinds`` (one per stack and kind, every GPU together) of
    ``validation.yaml``."""
    by_gpu: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    by_kind: dict[tuple[str, str], list[float]] = defaultdict(list)
    devices: dict[tuple[str, str], set[str]] = defaultdict(set)
    for stack, kind, device, err in rows:
        by_gpu[(stack, kind, device)].append(err)
        by_kind[(stack, kind)].append(err)
        devices[(stack, kind)].add(device)
    return {
        "groups": [{"stack": s, "kind": k, "device": d, **_stats(e)}
                   for (s, k, d), e in sorted(by_gpu.items())],
        "kinds": [{"stack": s, "kind": k, "devices": sorted(devices[(s, k)]), **_stats(e)}
                  for (s, k), e in sorted(by_kind.items())],
    }


@cache
def _shipped() -> dict[str, Any]:
    with FILE.open() as fh:
        data = yaml.safe_load(fh)
    return data if isinstance(data, dict) else {}


def lookup(stack: str, kind: str, device: str,
           data: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The validation group of a replay: ``scope`` ``device`` (this stack, kind and GPU),
    ``stack`` (this stack and kind on the GPUs listed in ``devices``) or None (no published run
    of this stack and kind was replayed)."""
    d = _shipped() if data is None else data
    for g in d.get("groups") or ():
        if (g.get("stack"), g.get("kind"), g.get("device")) == (stack, kind, device):
            return {"scope": "device", "source": "docs/accuracy.md", **g}
    for g in d.get("kinds") or ():
        if (g.get("stack"), g.get("kind")) == (stack, kind):
            return {"scope": "stack", "source": "docs/accuracy.md", **g}
    return None


def validation_text(v: Mapping[str, Any] | None, stack: str = "", kind: str = "") -> str:
    """One line for the report: how close this kind of replay came to published runs."""
    if not v:
        return (f"no published {kind} runs of the {stack} stack replayed (docs/accuracy.md)"
                if stack else "no published runs of this kind replayed (docs/accuracy.md)")
    where = (f"on {v['device']}" if v.get("scope") == "device"
             else "on " + ", ".join(v.get("devices") or ()) + " (none on this GPU)")
    mean = float(v["mean_error"])
    sense = "faster" if mean > 0 else "slower"
    return (f"{v['rows']} published {v['kind']} {v['stack']} runs {where}: predicted "
            f"{abs(mean):.1%} {sense} than measured on average (mean |error| "
            f"{float(v['mean_abs_error']):.1%}, {v['within_20pct']} of {v['rows']} within 20%; "
            "docs/accuracy.md)")
