"""Device names: the shipped profiles, the names a user types and the names traces record.

Two lookups, kept apart on purpose:

* :func:`lookup_name`: a name a user types (a cluster spec's ``device:``, ``--device``,
  ``--source-device``, a profile's ``base:``, a sweep's ``gpu`` / ``device``) is the name of a
  shipped profile or one of its ``aliases``, compared after :func:`normalize_name`. Nothing
  else matches: ``H100 PCIe`` is not the ``h100`` profile (an SXM5 board).
* :func:`recorded_name`: a device string a trace recorded (``NVIDIA H100 80GB HBM3``,
  ``Tesla V100-DGXS-32GB``) is tried the same way, then against each profile's ``patterns``
  (regexes on the normalised name; the longest matching pattern wins: ``gb200`` before
  ``b200``). :func:`device_from_properties` also reads memory size and CU count.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.fileio import read_yaml

#: the shipped profiles (package data), one ``NAME.yaml`` per profile
DEVICES_DIR = Path(str(resources.files("tracesim.hardware") / "devices"))

_PREFIXES = ("nvidia-", "tesla-", "amd-", "instinct-", "radeon-")


def normalize_name(name: str) -> str:
    """Lower case, ``-`` for spaces/underscores, vendor prefixes removed."""
    s = re.sub(r"[\s_]+", "-", name.strip().lower())
    changed = True
    while changed:
        changed = False
        for p in _PREFIXES:
            if s.startswith(p):
                s = s[len(p):]
                changed = True
    return s


@lru_cache(maxsize=1)
def builtin_raw() -> dict[str, Mapping[str, Any]]:
    """The shipped profiles as read from their YAML files, by name."""
    out: dict[str, Mapping[str, Any]] = {}
    for path in sorted(DEVICES_DIR.glob("*.yaml")):
        data = read_yaml(path)
        if not isinstance(data, Mapping) or "name" not in data:
            raise InputError("device profile without a name", path)
        out[str(data["name"])] = data
    return out


def known_devices() -> list[str]:
    """Names of the shipped profiles."""
    return sorted(builtin_raw())


def lookup_name(spec: str) -> str | None:
    """The shipped profile a user-typed name selects: its name or one of its ``aliases``
    after :func:`normalize_name` (``H100``, ``nvidia_h200``, ``A100-SXM4-80GB``), else None."""
    norm = normalize_name(spec)
    for name, data in builtin_raw().items():
        if norm == normalize_name(name):
            return name
        if any(norm == normalize_name(a) for a in data.get("aliases", []) or []):
            return name
    return None


def recorded_name(spec: str) -> str | None:
    """The shipped profile a device string recorded in a trace reads as: :func:`lookup_name`,
    else the profile with the longest ``patterns`` regex found in the normalised string."""
    hit = lookup_name(spec)
    if hit is not None:
        return hit
    norm = normalize_name(spec)
    best, best_len = None, -1
    for name, data in builtin_raw().items():
        for pat in data.get("patterns", []) or []:
            if re.search(pat, norm) and len(pat) > best_len:
                best, best_len = name, len(pat)
    return best


def device_from_properties(props: Mapping[str, Any]) -> str | None:
    """Profile name for a Kineto ``deviceProperties`` entry (name, memory, SM count), or None.

    Reads the name as a recorded one (:func:`recorded_name`); AMD devices that report a
    generic name ("AMD Radeon Graphics") are told apart by compute capability and CU count
    (104 CUs per MI250 GCD, 304 per MI300X and MI325X, the latter with 256 GB).
    """
    name = str(props.get("name", ""))
    hit = recorded_name(name) if name else None
    if hit is not None:
        mem = props.get("totalGlobalMem")
        if hit == "a100" and isinstance(mem, (int, float)) and mem < 60 * 2**30:
            return "a100-40gb"
        return hit
    if "amd" in name.lower() or "radeon" in name.lower():
        if props.get("computeMajor") == 9 and props.get("numSms") == 104:
            return "mi250"
        if props.get("computeMajor") == 9 and props.get("numSms") == 304:  # MI325X: 256 GB
            return "mi325x" if float(props.get("totalGlobalMem") or 0) > 230e9 else "mi300x"
    return None
