"""The state of a shared fabric: degraded or failed links, and traffic from outside the job.

Both are parts of a cluster spec (``degraded_links``, ``background``: lists of the strings
below) and of a replay's options (``--degrade-link``, ``--background``); the network model
(:mod:`tracesim.network.faults`, :mod:`tracesim.network.background`) gives them meaning.

Link names (``NAME``), both directions of the physical link:

* ``gpuN``: GPU N's NVLink port (to its node's NVSwitch or PCIe switch; on an NVLink mesh or
  ring, all of its NVLinks); ``gpuA-gpuB``: the direct NVLink between two GPUs (mesh, ring);
* ``nicN``: NIC N's port to its leaf switch (NIC N is NIC ``N % nics_per_node`` of node
  ``N // nics_per_node``);
* ``leafL.upJ``: uplink J of leaf L (to spine J of its pod), ``leafL.up``: all of them;
* ``spineS``: spine switch S (every link it has), ``spineS.upM``: uplink M of spine S to
  the core (three levels), ``spineS.up``: all of them.

``--degrade-link NAME:FACTOR``: the link runs at FACTOR of its capacity (0.5: half, 0:
failed). ``--background`` is one of:

* ``COLLECTIVE:size=SIZE:nodes=RANGE:every=PERIOD[:start=TIME]`` (or ``gpus=RANGE``): a
  second job's collective (all_reduce, all_gather, reduce_scatter, all_to_all) of SIZE
  bytes per rank over those nodes' GPUs, started at START and then every PERIOD (or as soon
  as the previous one ends, if it is still running; ``every=0s``: back to back);
* ``load:fraction=F:on=TARGET``: constant-rate traffic taking fraction F of the capacity of
  the links TARGET: a tier (``intra``, ``nic``, ``fabric``) or link names joined by ``+``.

RANGE: ``8-15``, ``3`` or ranges joined by ``+`` (``0-3+8-11``). SIZE: 8, 64K, 1M, 1G
(binary units). Times: a number and ns, us, ms or s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tracesim.errors import InputError
from tracesim.strict import size_bytes, time_ns

#: collectives a background job may run
BACKGROUND_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
#: link tiers a steady load may name
TIERS = ("intra", "nic", "fabric")
LINK_NAME = re.compile(r"^(gpu\d+(-gpu\d+)?|nic\d+|leaf\d+\.up\d*|spine\d+(\.up\d*)?)$")
LINK_FORMS = "gpuN, gpuA-gpuB, nicN, leafL.up, leafL.upJ, spineS, spineS.up, spineS.upM"

Where = str | Path | None


@dataclass(frozen=True)
class LinkFault:
    """A link (named as the module docstring says) at ``factor`` of its capacity (0: failed)."""

    link: str
    factor: float

    def text(self) -> str:
        return f"{self.link}:{self.factor:g}"


@dataclass(frozen=True)
class BackgroundJob:
    """Traffic from outside the job (module docstring). A collective: ``collective``,
    ``msg_bytes`` per rank, ``ranks`` (global GPU ids), ``every_ns``, ``start_ns``. A steady
    load (``collective == "load"``): ``fraction`` of the capacity of ``on`` (a tier or
    link names)."""

    collective: str
    msg_bytes: int = 0
    ranks: tuple[int, ...] = ()
    every_ns: int = 0
    start_ns: int = 0
    fraction: float = 0.0
    on: tuple[str, ...] = ()
    spec: str = ""  # the text it was read from

    @property
    def is_load(self) -> bool:
        return self.collective == "load"


def parse_link_faults(text: str, file: Where = "--degrade-link", where: str | None = None
                      ) -> tuple[LinkFault, ...]:
    """``'nic3:0.5,leaf0.up1:0'`` -> faults (names checked for form, not for the cluster)."""
    out = []
    for part in (p for p in text.replace(" ", "").split(",") if p):
        name, colon, f = part.rpartition(":")
        try:
            factor = float(f)
        except ValueError:
            factor = -1.0
        if not colon or not LINK_NAME.match(name) or not 0.0 <= factor <= 1.0:
            raise InputError(f"expected NAME:FACTOR with NAME one of {LINK_FORMS} and 0 <= FACTOR "
                             f"<= 1 (0: failed), got {part!r}", file, where)
        out.append(LinkFault(name, factor))
    if not out:
        raise InputError("expected NAME:FACTOR items", file, where)
    return tuple(out)


def parse_background(text: str, gpus_per_node: int, gpus: int, file: Where = "--background",
                     where: str | None = None) -> BackgroundJob:
    """One ``--background`` spec (module docstring) on a cluster of ``gpus`` GPUs."""
    kind, *parts = text.strip().split(":")
    keys: dict[str, str] = {}
    for p in parts:
        k, eq, v = p.partition("=")
        if not eq or not k or k in keys:
            raise InputError(f"expected KEY=VALUE after {kind!r}, got {p!r} in {text!r}", file, where)
        keys[k] = v
    if kind == "load":
        _check_keys(keys, ("fraction", "on"), (), text, file, where)
        try:
            frac = float(keys["fraction"])
        except ValueError:
            frac = -1.0
        if not 0.0 < frac < 1.0:
            raise InputError(f"fraction must be in (0, 1), got {keys['fraction']!r}", file, where)
        on = tuple(keys["on"].split("+"))
        if not (len(on) == 1 and on[0] in TIERS) and not all(LINK_NAME.match(n) for n in on):
            raise InputError(f"on= takes a tier ({', '.join(TIERS)}) or link names ({LINK_FORMS}) "
                             f"joined by +, got {keys['on']!r}", file, where)
        return BackgroundJob("load", fraction=frac, on=on, spec=text.strip())
    if kind not in BACKGROUND_COLLECTIVES:
        raise InputError(f"unknown background {kind!r} (known: load, "
                         f"{', '.join(BACKGROUND_COLLECTIVES)})", file, where)
    _check_keys(keys, ("size", "every"), ("nodes", "gpus", "start"), text, file, where)
    if ("nodes" in keys) == ("gpus" in keys):
        raise InputError(f"give one of nodes= or gpus= in {text!r}", file, where)
    unit = "nodes" if "nodes" in keys else "gpus"
    top = gpus // gpus_per_node if unit == "nodes" else gpus
    ids = _ranges(keys[unit], top, unit, file, where)
    ranks = tuple(sorted({n * gpus_per_node + a for n in ids for a in range(gpus_per_node)}
                         if unit == "nodes" else ids))
    if len(ranks) < 2:
        raise InputError(f"a background collective needs at least 2 GPUs, got {keys[unit]!r}",
                         file, where)
    size = size_bytes(keys["size"], file, where)
    if size <= 0:
        raise InputError(f"size must be > 0, got {keys['size']!r}", file, where)
    return BackgroundJob(kind, msg_bytes=size, ranks=ranks,
                         every_ns=time_ns(keys["every"], file, where),
                         start_ns=time_ns(keys.get("start", "0ns"), file, where), spec=text.strip())


def _check_keys(keys: dict[str, str], required: tuple[str, ...], optional: tuple[str, ...],
                text: str, file: Where, where: str | None) -> None:
    for k in keys:
        if k not in required + optional:
            raise InputError(f"unknown key {k!r} in {text!r} (allowed: "
                             f"{', '.join(required + optional)})", file, where)
    for k in required:
        if k not in keys:
            raise InputError(f"missing {k}= in {text!r}", file, where)


def _ranges(text: str, top: int, unit: str, file: Where, where: str | None) -> list[int]:
    """``'0-3+8-11'`` -> [0, 1, 2, 3, 8, 9, 10, 11], each < ``top``."""
    out: list[int] = []
    for part in text.split("+"):
        a, dash, b = part.partition("-")
        if not a.isdigit() or (dash and not b.isdigit()):
            raise InputError(f"expected {unit} as A-B ranges joined by +, got {text!r}", file, where)
        lo, hi = int(a), int(b) if dash else int(a)
        if hi < lo or hi >= top:
            raise InputError(f"{unit} {part!r} outside 0..{top - 1}", file, where)
        out += range(lo, hi + 1)
    return out
