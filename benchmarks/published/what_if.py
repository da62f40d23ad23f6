"""A published row replayed as `tracesim validate published` replays it, with some of its
options changed: what the prediction would be had the run used another setting (for
example the layout its recipe's config names where the table prints another).

    .venv/bin/python benchmarks/published/what_if.py TABLE --only TEXT KEY=VALUE ...

KEY is a replay option of the row (``ep``, ``micro_batch``, ``vpp``, ...; the row's options
are printed first); VALUE takes the type of the row's value, and ``KEY=`` (no value) unsets
the option, the replay taking its default (``cuda_graphs=``: no CUDA graphs). ``routing=ecmp`` (or
``adaptive``) sets the row's cluster's inter-node routing (docs/network.md, "Routing"). A
change the layout cannot take (``vpp`` on a row whose ``stage_layers`` were set for another)
is reported, exit 2; a row the replay cannot run as published is reported and skipped. ``sustained_clock=VALUE`` runs the row's GPU (its cluster's
device profile) with that ratio for every dtype, ``sustained_clock=1`` at its kernel
benchmarks' burst rate, ``sustained_fleet=none`` with every GPU of the job at the profile's
rate (no slowest-GPU factor; docs/devices.md), ``grad_buffer=none`` without the Megatron
stacks' per-step gradient-buffer work (docs/stacks.md, "Gradient buffer"). Prints the row's predicted iteration time and
metric per GPU (the table's: tokens/s or TFLOP/s) with and without the change; ``--all``
replays every row whose label contains TEXT (``--only ''``: the whole table) and ends with
the mean absolute and signed errors against the published values with and without it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from tracesim.catalog import load_cluster
from tracesim.errors import InputError
from tracesim.pipeline.published import (
    TOKEN_FORMATS,
    metric_of,
    predicted_metric,
    published_value,
    steady_iteration_s,
    table_rows,
)
from tracesim.template.stacks import STACKS


def _typed(opts: dict[str, Any], item: str) -> tuple[str, Any]:
    key, _, raw = item.partition("=")
    if not raw:
        print(f"expected KEY=VALUE, got {item!r}", file=sys.stderr)
        raise SystemExit(2)
    old = opts.get(key)
    if isinstance(old, bool):
        return key, raw.lower() in ("1", "true", "yes")
    if isinstance(old, (int, float)):
        return key, type(old)(raw)
    if old is None:  # an option the row does not set: a switch or a number where the text is one
        if raw.lower() in ("true", "false"):
            return key, raw.lower() == "true"
        for kind in (int, float):
            try:
                return key, kind(raw)
            except ValueError:
                pass
    return key, raw


def _device_at(opts: dict[str, Any], raw: str, tmp: Path, key: str = "sustained_clock") -> str:
    """A profile YAML of the row's GPU with ``sustained_clock`` ``raw``, or with
    ``sustained_fleet: null`` (``key`` ``sustained_fleet``, ``raw`` ``none``: every GPU of the
    job at the profile's rate); its path."""
    dev = load_cluster(opts["cluster"]).device
    if not isinstance(dev, str):
        raise InputError("the row's cluster has an inline device profile", key)
    if key == "sustained_fleet":
        if raw != "none":
            raise ValueError(f"sustained_fleet takes 'none', got {raw!r}")
        out = tmp / f"{dev}-even.yaml"
        text = f"base: {dev}\nname: {dev}-even\nsustained_fleet: null\n"
    else:
        out = tmp / f"{dev}-clock-{raw}.yaml"
        text = f"base: {dev}\nname: {dev}-clock-{raw}\nsustained_clock: {float(raw)}\n"
    if not out.exists():  # one per device and value for the whole table
        out.write_text(text)
    return str(out)


@contextlib.contextmanager
def _without_grad_buffer(on: bool) -> Iterator[None]:
    """Every stack without its gradient-buffer ops while the block runs (``on``)."""
    saved = dict(STACKS)
    if on:
        STACKS.update({n: dataclasses.replace(s, grad_buffer="") for n, s in saved.items()})
    try:
        yield
    finally:
        STACKS.update(saved)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("table")
    ap.add_argument("--only", required=True, help="the first row whose label contains TEXT")
    ap.add_argument("--all", action="store_true", help="every row whose label contains TEXT")
    ap.add_argument("changes", nargs="*", metavar="KEY=VALUE")
    args = ap.parse_intermixed_args()
    errs: dict[str, list[float]] = {"as published": [], "changed": []}
    with tempfile.TemporaryDirectory() as tmp:
        for p, k, fmt, row, opts, label, _ in table_rows([args.table], lambda lb: args.only in lb,
                                                              skip_unmodelled=True):
            rc = _row(args.changes, p, k, fmt, row, opts, label, Path(tmp), errs)
            if rc or not args.all:
                return rc
    if not errs["changed"]:
        print(f"{args.table}: no row contains {args.only!r}", file=sys.stderr)
        return 2
    for name, e in errs.items():
        print(f"{name:13s} {len(e)} rows: mean absolute error {np.mean(np.abs(e)):.1%}, "
              f"signed {np.mean(e):+.1%}")
    return 0


def _row(changes: list[str], p: Path, k: int, fmt: str, row: dict[str, str], opts: dict[str, Any],
         label: str, tmp: Path, errs: dict[str, list[float]]) -> int:
    """One row as published and changed (printed; its errors appended to ``errs``)."""
    changed = dict(opts)
    no_buffer = False
    for c in changes:
        if c.startswith("grad_buffer="):
            if c != "grad_buffer=none":
                print(f"grad_buffer takes 'none', got {c.partition('=')[2]!r}", file=sys.stderr)
                return 2
            no_buffer = True
            continue
        if c.startswith(("sustained_clock=", "sustained_fleet=")):
            key, _, raw = c.partition("=")
            try:
                changed["device"] = _device_at(opts, raw, tmp, key)
            except (InputError, ValueError) as exc:
                print(f"{key}: {exc}", file=sys.stderr)
                return 2
            continue
        if c.endswith("=") and c.count("=") == 1:  # KEY=: the option unset (its default)
            changed.pop(c[:-1], None)
            continue
        if not c.startswith("routing="):
            changed.update([_typed(opts, c)])
            continue
        cl = opts["cluster"]  # the cluster's inter-node routing
        try:
            changed["cluster"] = cl.replace(inter_node=dataclasses.replace(
                cl.inter_node, routing=c.partition("=")[2]))
        except InputError as exc:
            print(f"routing: {exc}", file=sys.stderr)
            return 2
    metric = "tokens/s" if fmt in TOKEN_FORMATS else "TFLOP/s"
    print(label)
    print("  options:", {key: v for key, v in opts.items() if isinstance(v, (int, float, str))})
    for name, o in (("as published", opts), ("changed", changed)):
        try:
            with _without_grad_buffer(no_buffer and name == "changed"):
                t, _ = steady_iteration_s(o, Path(p), f"row {k + 2}")
        except InputError as exc:  # e.g. vpp changed but the row's stage_layers kept
            print(f"  {name:13s} not replayed: {exc}")
            # a row the replay cannot run as published is skipped, as validate published does
            return 0 if name == "as published" else 2
        value = predicted_metric(fmt, row, o, t)
        err = value / published_value(row, metric_of(fmt), Path(p), k) - 1.0
        errs[name].append(err)
        print(f"  {name:13s} iteration {t:.4f} s, {value:,.1f} {metric} per GPU ({err:+.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
