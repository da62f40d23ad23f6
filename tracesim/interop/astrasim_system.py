"""ASTRA-sim system configuration (``--system-configuration`` JSON) -> tracesim settings.

ASTRA-sim's system layer reads keys such as::

    {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
     "preferred-dataset-splits": 4, "all-reduce-implementation": ["ring", "ring"],
     "all-gather-implementation": ["ring", "ring"], "reduce-scatter-implementation": ["ring"],
     "all-to-all-implementation": ["direct"], "collective-optimization": "localBWAware",
     "local-mem-bw": 1600, "boost-mode": 0, "roofline-enabled": 0, "peak-perf": 900}

What maps (to the cluster spec's ``collectives`` section, or its device):

* ``<collective>-implementation`` (a list, one algorithm per network dimension; the old
  ``"ring_doubleBinaryTree"`` string form is accepted): ``ring`` / ``oneRing`` -> ``ring``,
  ``doubleBinaryTree`` -> ``tree``, ``direct[N]`` / ``oneDirect[N]`` -> ``direct``. An
  all-reduce over two or more dimensions is ASTRA-sim's hierarchical scheme (reduce-scatter
  inside the first dimension, all-reduce across, all-gather back) -> ``hierarchical`` first,
  then the first dimension's algorithm (for groups inside one node). The choice becomes
  ``collectives.select.<collective>``.
* ``endpoint-delay`` (ns per message) -> ``step_latency_us`` of every algorithm.
* ``roofline-enabled`` with ``peak-perf`` (TFLOP/s) and ``local-mem-bw`` (GB/s) -> the
  device's bf16 / fp16 peak and ``hbm_GBps`` (a profile derived from the cluster's device).
* ``scheduling-policy: FIFO`` and ``collective-optimization: baseline`` are what tracesim
  does anyway.

Reported as unsupported (a warning each, never silently dropped): ``halvingDoubling``
algorithms, algorithms tracesim lacks for that collective, ``LIFO`` / ``EXPLICIT``
scheduling, ``localBWAware``, chunking (``active-chunks-per-dimension``,
``preferred-dataset-splits``), ``local-reduction-delay``, LogGP parameters (``L o g G``),
``model-shared-bus``, intra/inter-dimension scheduling. Keys without any effect on simulated
time (``boost-mode``, ``trace-enabled``, ``replay-only``, ``track-local-mem``,
``local-mem-trace-filename``) are listed as ignored. Any other key is an InputError.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.specs.cluster import ClusterSpec, cluster_from_dict
from tracesim.trace.kineto import load_json_file

_IMPL = {"all-reduce-implementation": "all_reduce", "all-gather-implementation": "all_gather",
         "reduce-scatter-implementation": "reduce_scatter",
         "all-to-all-implementation": "all_to_all"}
_UNSUPPORTED = {
    "active-chunks-per-dimension": "tracesim runs each collective as whole phases, without "
                                   "splitting it into chunks",
    "preferred-dataset-splits": "tracesim does not split collectives into datasets / chunks",
    "local-reduction-delay": "tracesim charges no local reduction time inside collectives",
    "L": "LogGP parameters have no tracesim equivalent (links have bandwidth and latency)",
    "o": "LogGP parameters have no tracesim equivalent",
    "g": "LogGP parameters have no tracesim equivalent",
    "G": "LogGP parameters have no tracesim equivalent",
    "intra-dimension-scheduling": "tracesim has no per-dimension chunk scheduler",
    "inter-dimension-scheduling": "tracesim has no per-dimension chunk scheduler",
}
_NO_EFFECT = ("boost-mode", "trace-enabled", "replay-only", "track-local-mem",
              "local-mem-trace-filename")
_OTHER = ("scheduling-policy", "collective-optimization", "endpoint-delay", "model-shared-bus",
          "peak-perf", "local-mem-bw", "roofline-enabled")
KNOWN_KEYS = tuple(_IMPL) + tuple(_UNSUPPORTED) + _NO_EFFECT + _OTHER
#: tracesim algorithms that step_latency_us (from endpoint-delay) is applied to
_LATENCY_ALGOS = ("ring", "tree", "direct", "hierarchical", "p2p")


@dataclass(frozen=True)
class SystemMapping:
    """What an ASTRA-sim system JSON means for tracesim.

    ``collectives``: a cluster spec ``collectives`` section; ``device``: overrides of the
    device profile (``peak_tflops`` per dtype in TFLOP/s, ``hbm_GBps``); ``mapped``: key ->
    what it became; ``warnings``: unsupported keys and values; ``ignored``: keys without
    effect on simulated time.
    """

    collectives: dict[str, Any] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    mapped: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()


def _algo(name: str, file: Any, where: str) -> str | None:
    if name in ("ring", "oneRing"):
        return "ring"
    if name == "doubleBinaryTree":
        return "tree"
    if re.fullmatch(r"(one)?[dD]irect\d*", name):
        return "direct"
    if name in ("halvingDoubling", "oneHalvingDoubling"):
        return None
    raise InputError(f"unknown ASTRA-sim collective implementation {name!r} (known: ring, oneRing, "
                     "doubleBinaryTree, direct[N], oneDirect[N], halvingDoubling, "
                     "oneHalvingDoubling)", file, where)


def system_from_astrasim_dict(data: Any, file: str | Path | None = None) -> SystemMapping:
    """Map a parsed ASTRA-sim system JSON (see the module docstring)."""
    from tracesim.network.collectives import ALGORITHMS

    if not isinstance(data, Mapping):
        raise InputError("expected a JSON object", file)
    for key in data:
        if key not in KNOWN_KEYS:
            raise InputError(f"unknown ASTRA-sim system key {key!r} (known: "
                             f"{', '.join(sorted(KNOWN_KEYS))})", file, str(key))
    warnings: list[str] = []
    mapped: dict[str, str] = {}
    select: dict[str, list[str]] = {}
    for key, coll in _IMPL.items():
        if key not in data:
            continue
        value = data[key]
        names = value.split("_") if isinstance(value, str) else value
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise InputError(f"expected a list of algorithm names, got {value!r}", file, key)
        algos: list[str] = []
        for i, n in enumerate(names):
            a = _algo(n, file, f"{key}[{i}]")
            if a is None:
                warnings.append(f"{key}[{i}] = {n!r}: tracesim has no halving-doubling "
                                "algorithm; left to automatic choice")
            elif coll not in ALGORITHMS[a].collectives:
                warnings.append(f"{key}[{i}] = {n!r}: tracesim's {a} does not implement {coll}; "
                                "left to automatic choice")
            elif a not in algos:
                algos.append(a)
        if coll == "all_reduce" and len(names) >= 2 and algos:
            algos = ["hierarchical"] + algos
        if algos:
            select[coll] = algos
            mapped[key] = f"collectives.select.{coll} = {algos}"
    coll_section: dict[str, Any] = {"select": select} if select else {}
    if "endpoint-delay" in data:
        v = data["endpoint-delay"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise InputError(f"expected a number of ns >= 0, got {v!r}", file, "endpoint-delay")
        coll_section["algorithms"] = {a: {"step_latency_us": float(v) / 1000.0}
                                      for a in _LATENCY_ALGOS}
        mapped["endpoint-delay"] = (f"collectives.algorithms.*.step_latency_us = {v / 1000.0} "
                                    f"({', '.join(_LATENCY_ALGOS)})")
    policy = data.get("scheduling-policy")
    if policy is not None:
        if policy == "FIFO":
            mapped["scheduling-policy"] = "FIFO: tracesim runs each lane's tasks in program order"
        elif policy in ("LIFO", "EXPLICIT"):
            warnings.append(f"scheduling-policy {policy}: tracesim runs each lane's tasks in "
                            "program order (FIFO)")
        else:
            raise InputError(f"expected LIFO, FIFO or EXPLICIT, got {policy!r}", file,
                             "scheduling-policy")
    opt = data.get("collective-optimization")
    if opt is not None:
        if opt == "baseline":
            mapped["collective-optimization"] = "baseline: tracesim's behaviour"
        elif opt == "localBWAware":
            warnings.append("collective-optimization localBWAware: tracesim has no "
                            "local-bandwidth-aware chunk scheduling")
        else:
            raise InputError(f"expected baseline or localBWAware, got {opt!r}", file,
                             "collective-optimization")
    for key, why in _UNSUPPORTED.items():
        if key in data:
            warnings.append(f"{key} = {data[key]!r}: {why}")
    if data.get("model-shared-bus") not in (None, 0, False):
        warnings.append("model-shared-bus: tracesim does not model a shared memory bus")
    device: dict[str, Any] = {}
    if data.get("roofline-enabled") not in (None, 0, False):
        for key, unit in (("peak-perf", "TFLOP/s"), ("local-mem-bw", "GB/s")):
            v = data.get(key)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise InputError(f"expected a positive number of {unit}, got {v!r}", file, key)
        if "peak-perf" in data:
            p = float(data["peak-perf"])
            device["peak_tflops"] = {"bf16": p, "fp16": p}
            mapped["peak-perf"] = f"device peak_tflops bf16 / fp16 = {p}"
        if "local-mem-bw" in data:
            device["hbm_GBps"] = float(data["local-mem-bw"])
            mapped["local-mem-bw"] = f"device hbm_GBps = {device['hbm_GBps']}"
        mapped["roofline-enabled"] = "the device profile's roofline (peak-perf, local-mem-bw)"
    else:
        for key in ("peak-perf", "local-mem-bw"):
            if key in data:
                mapped[key] = ("not used: roofline-enabled is off, so ASTRA-sim (like tracesim) "
                               "takes compute times from the trace")
    ignored = tuple(k for k in _NO_EFFECT if k in data)
    return SystemMapping(coll_section, device, mapped, tuple(warnings), ignored)


def load_astrasim_system(path: str | Path) -> SystemMapping:
    """Read and map an ASTRA-sim system JSON file."""
    p = Path(path)
    data = load_json_file(p, expected="a JSON file")
    return system_from_astrasim_dict(data, p)


def apply_system(cluster: ClusterSpec, mapping: SystemMapping) -> ClusterSpec:
    """``cluster`` with the mapping's collective choices and device overrides applied."""
    from tracesim.hardware.device import get_device

    d = cluster.to_dict()
    coll = dict(d.get("collectives") or {})
    for section in ("select", "algorithms"):
        if section in mapping.collectives:
            merged = dict(coll.get(section) or {})
            for k, v in mapping.collectives[section].items():
                merged[k] = {**merged.get(k, {}), **v} if isinstance(v, dict) else v
            coll[section] = merged
    if coll:
        d["collectives"] = coll
    if mapping.device:
        base = get_device(cluster.device)
        peak = {**dict(base.peak_tflops), **mapping.device.get("peak_tflops", {})}
        dev: dict[str, Any] = {"name": f"{base.name}-astrasim", "peak_tflops": peak}
        if isinstance(cluster.device, str):
            dev["base"] = cluster.device
        else:
            dev = {**dict(cluster.device), **dev}
        if "hbm_GBps" in mapping.device:
            dev["hbm_GBps"] = mapping.device["hbm_GBps"]
        d["device"] = dev
    return cluster_from_dict(d, "ASTRA-sim system configuration")
