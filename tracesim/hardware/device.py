"""Device profiles: peak throughput, memory bandwidth, launch overhead, efficiency curves.

A profile is a YAML mapping (shipped ones live in ``tracesim/hardware/devices/``)::

    name: a100                         # required, also with base: (never inherited)
    aliases: [A100-SXM4-80GB]          # exact names (normalised) that select this profile
    patterns: ['a100']                 # regexes on the normalised name of a device string
                                       # recorded in a trace; longest match wins
    kind: gpu                          # gpu | cpu
    source: NVIDIA A100 datasheet
    base: a100                         # optional: a shipped profile (its name or alias) whose
                                       # top-level keys fill the ones left out
    peak_tflops: {fp32: 19.5, tf32: 156, bf16: 312, fp16: 312}   # dense, per device
    hbm_GBps: 2039                     # memory bandwidth, GB/s (1e9 bytes/s)
    hbm_GiB: 80
    launch_overhead_us: 2.0            # fixed time added to every op (kernel) on this device
    sustained_clock: 1.0               # optional: compute rate at the power limit / burst rate
                                       # (or per dtype: {default: 0.95, fp8: 0.93})
    sustained_fleet: {concurrent: 0.98, chip_sigma: 0.03, run_sigma: 0.01}   # optional: how the GPUs of a job
                                       # differ under that load (tracesim.hardware.fleet)
    quantize: {mxfp8: 0.87, nvfp4: 0.74}   # optional: block-scaled quantization kernels' rate
                                       # over the memory-bound (per-tensor cast) rate
    efficiency:                        # per op class; 'default' covers unlisted classes
      default: {compute: [[1.0e6, 0.05], [1.0e9, 0.5]], memory: [[1.0e4, 0.05], [1.0e8, 0.85]], spread: 0.3}
      gemm:
        compute: {default: [[flops, eff], ...], tf32: [[flops, eff], ...]}   # per dtype
        memory: [[bytes, eff], ...]
        spread: 0.2                    # relative half-width of the efficiency band
      attention:
        compute_size: unit             # optional: total (default) | unit, see below
        ...

Curves are ``[size, efficiency]`` points (FLOPs for compute, bytes for memory), interpolated
linearly in log10(size) and held constant beyond the ends. A dtype missing from
``peak_tflops`` falls back along :data:`PEAK_FALLBACK` (V100 has no bf16: bf16 runs at fp32
peak); one whose chain finds no peak is an InputError naming the profile file and
``peak_tflops.<dtype>`` when an op needs it (the classes outside gemm / attention / scan run
at the fp32 peak). ``hbm_GiB`` left out: 0, the replay's memory check is skipped, with a
warning. Names: :mod:`tracesim.hardware.devicenames`. The format for users: docs/devices.md,
"Writing a device profile".

``shape_model`` (optional; :mod:`tracesim.hardware.shapemodel`) gives GEMM and attention
efficiencies from an op's shape ``(batch, m, n, k)``, the attention per cuDNN version where fitted
on several; ``calibration`` (free-form) records where each number came from.

``compute_size``: the compute curve is read at the op's FLOPs (``total``, default) or at one
independent work unit's (``unit``; attention: one (batch, head) pair, on a CPU whose cores run
the units one after another; :func:`tracesim.ops.rules.work_units`, docs/devices.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from tracesim.errors import InputError
from tracesim.fileio import read_yaml
from tracesim.hardware.devicenames import (
    DEVICES_DIR,
    builtin_raw,
    device_from_properties,
    known_devices,
    lookup_name,
    normalize_name,
    recorded_name,
)
from tracesim.hardware.fleet import Fleet, parse_fleet
from tracesim.hardware.shapemodel import AttentionShapeModel, ShapeModel, parse_shape_model
from tracesim.strict import check_keys, get_number, get_str

__all__ = ["DEVICES_DIR", "PEAK_FALLBACK", "PEAK_KEYS", "ClassEfficiency", "DeviceProfile",
           "EfficiencyCurve", "device_from_properties", "get_device", "known_devices",
           "normalize_name", "parse_profile"]

PEAK_KEYS = ("fp32", "tf32", "bf16", "fp16", "fp8", "mxfp8", "nvfp4")

#: dtype -> the peak_tflops keys tried in order
PEAK_FALLBACK: dict[str, tuple[str, ...]] = {
    "fp32": ("fp32",),
    "tf32": ("tf32", "fp32"),
    "bf16": ("bf16", "fp32"),
    "fp16": ("fp16", "bf16", "fp32"),
    "fp8": ("fp8", "fp16", "bf16", "fp32"),
    "mxfp8": ("mxfp8", "fp8", "fp16", "bf16", "fp32"),  # block-scaled FP8 (Blackwell MX formats)
    # NVFP4: E2M1 with an E4M3 scale per 16 elements, at the FP4 tensor-core rate (Blackwell)
    "nvfp4": ("nvfp4", "mxfp8", "fp8", "fp16", "bf16", "fp32"),
}

_KEYS_REQUIRED = ("name", "peak_tflops", "hbm_GBps", "launch_overhead_us", "efficiency")
_KEYS_OPTIONAL = ("aliases", "patterns", "kind", "source", "description", "base", "hbm_GiB",
                  "calibration", "threads", "notes", "sm_count", "l2_GBps", "shape_model",
                  "sustained_clock", "sustained_fleet", "quantize")


@dataclass(frozen=True)
class EfficiencyCurve:
    """Efficiency (0..1] as a function of op size (FLOPs or bytes), log-linear."""

    log_sizes: tuple[float, ...]
    effs: tuple[float, ...]

    def at(self, size: Any) -> Any:
        """Efficiency at ``size`` (scalar or numpy array); sizes <= 1 use the first point."""
        x = np.log10(np.maximum(np.asarray(size, dtype=float), 1.0))
        out = np.interp(x, self.log_sizes, self.effs)
        return float(out) if np.ndim(out) == 0 else out

    def points(self) -> list[list[float]]:
        return [[float(10.0 ** s), float(e)] for s, e in zip(self.log_sizes, self.effs, strict=True)]


@dataclass(frozen=True)
class ClassEfficiency:
    """Efficiency curves of one op class: compute (per dtype), memory, and their spread."""

    compute: Mapping[str, EfficiencyCurve]
    memory: EfficiencyCurve
    spread: float
    per_unit: bool = False  # compute curve read at FLOPs per work unit (compute_size: unit)

    def compute_curve(self, dtype: str) -> EfficiencyCurve:
        return self.compute.get(dtype) or self.compute["default"]


@dataclass(frozen=True)
class DeviceProfile:
    """One accelerator (or host CPU) as the cost model sees it.

    Attributes:
        name: profile name (``a100``, ``h100``, ``host-cpu``, ...).
        peak_tflops: dense peak TFLOP/s per dtype (keys from :data:`PEAK_KEYS`).
        hbm_GBps: memory bandwidth in GB/s (1e9 bytes/s).
        hbm_GiB: memory capacity in GiB (0 if unknown).
        launch_overhead_us: fixed time per op (kernel launch / dispatch), microseconds.
        efficiency: op class -> :class:`ClassEfficiency`; always has ``default``.
        kind: ``gpu`` or ``cpu``.
        sm_count: streaming multiprocessors (AMD: compute units), 0 if unknown.
        l2_GBps: L2 read bandwidth in GB/s, 0 if unknown.
        shape_model: shape-aware GEMM / attention efficiency (:mod:`tracesim.hardware.shapemodel`),
            used for ops whose shape is known; None: the size curves only.
        sustained_clock: compute rate under a training step's sustained load over the rate of
            the short kernel benchmarks the curves are calibrated on (0 < r <= 1): a GPU at
            its power limit lowers its SM clock, and every compute term runs that much slower
            (memory bandwidth does not follow the SM clock). :meth:`burst` gives the profile at 1.
            The ratio of BF16 and every dtype without one of its own in ``sustained_dtype``.
        sustained_dtype: dtype -> its own ``sustained_clock`` (FP8 GEMMs draw another power
            per FLOP, so the GPU settles at another clock under them); ``mxfp8`` and ``nvfp4``
            take ``fp8``'s where they have none. :meth:`sustained` looks a dtype up.
        fleet: how the sustained rate differs between the GPUs of a job
            (:mod:`tracesim.hardware.fleet`); None: not known (every GPU at the profile's rate).
            :meth:`for_job` applies it.
        job_gpus: the job size :meth:`for_job` applied (0: not applied); ``one_gpu`` the
            profile before it (:meth:`alone`).
        file, where: the file the profile was read from (a profile YAML, or the cluster spec
            holding it inline) and its key there, for error messages.
    """

    name: str
    peak_tflops: Mapping[str, float]
    hbm_GBps: float
    hbm_GiB: float
    launch_overhead_us: float
    efficiency: Mapping[str, ClassEfficiency]
    kind: str = "gpu"
    aliases: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    source: str = ""
    sm_count: int = 0
    l2_GBps: float = 0.0
    shape_model: ShapeModel | None = None
    sustained_clock: float = 1.0
    sustained_dtype: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    fleet: Fleet | None = None
    job_gpus: int = 0
    one_gpu: DeviceProfile | None = field(default=None, repr=False, compare=False)
    raw: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), compare=False)
    file: str | None = field(default=None, compare=False)
    where: str = field(default="device", compare=False)

    def peak_flops(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype``, following :data:`PEAK_FALLBACK` (ints/fp64: fp32);
        InputError naming the profile and ``peak_tflops.<dtype>`` where the chain finds none."""
        chain = PEAK_FALLBACK.get(dtype, ("fp32",))
        for key in chain:
            v = self.peak_tflops.get(key)
            if v:
                return float(v) * 1e12
        raise InputError(f"the profile {self.name!r} has no peak for {dtype} (tried "
                         f"{', '.join(chain)}; every dtype falls back to fp32, the peak of the "
                         "op classes outside gemm / attention / scan; docs/devices.md)",
                         self.file, f"{self.where}.peak_tflops.{dtype}")

    def quantize_rate(self, recipe: str) -> float:
        """The rate of ``recipe``'s quantization kernels (``mxfp8``, ``nvfp4``) over the
        memory-bound rate a per-tensor FP8 cast gets (the profile's ``quantize``; 1 if none)."""
        return float((self.raw.get("quantize") or {}).get(recipe, 1.0))

    def class_efficiency(self, op_class: str) -> ClassEfficiency:
        return self.efficiency.get(op_class) or self.efficiency["default"]

    @property
    def throttles(self) -> bool:
        """Whether the profile says how its GPU throttles under sustained load (a ratio below
        1 for some dtype); 1 everywhere means not known."""
        return self.sustained_clock < 1.0 or bool(self.sustained_dtype)

    def sustained(self, dtype: str) -> float:
        """The ``sustained_clock`` of work in ``dtype`` (module docstring)."""
        by = self.sustained_dtype
        if by:
            for key in (dtype, "fp8") if dtype.endswith("fp8") or dtype == "nvfp4" else (dtype,):
                if key in by:
                    return by[key]
        return self.sustained_clock

    def burst(self) -> DeviceProfile:
        """This profile as a short kernel benchmark sees the GPU: ``sustained_clock`` 1."""
        if not self.throttles:
            return self
        return replace(self, sustained_clock=1.0, sustained_dtype=MappingProxyType({}),
                       fleet=None, job_gpus=0, one_gpu=None)

    def fleet_factor(self, gpus: int) -> float:
        """The compute rate of the slowest of ``gpus`` GPUs over the profile's (1 without
        ``sustained_fleet`` or sustained-load data)."""
        if self.fleet is None or not self.throttles:
            return 1.0
        return self.fleet.factor(gpus)

    def for_job(self, gpus: int) -> DeviceProfile:
        """This profile as a synchronous job of ``gpus`` GPUs runs it: every sustained clock
        times :meth:`fleet_factor` (the job waits for its slowest GPU). Applied once."""
        if self.job_gpus == max(1, gpus):
            return self
        if self.job_gpus:
            raise ValueError(f"profile {self.name} is already for a job of {self.job_gpus} GPUs")
        f = self.fleet_factor(gpus)
        return replace(self, sustained_clock=self.sustained_clock * f, job_gpus=max(1, gpus),
                       one_gpu=self, sustained_dtype=MappingProxyType({k: v * f for k, v in
                                                         self.sustained_dtype.items()}))

    def alone(self) -> DeviceProfile:
        """One GPU of this profile at its own rate: :meth:`for_job` undone (a recording's GPU,
        whose kernels ran at its own clock whatever its job waited for)."""
        return self.one_gpu if self.one_gpu is not None else self

    def with_flash2(self) -> DeviceProfile | None:
        """With FlashAttention-2's parameters (``attention.flash2``), None where it has none."""
        return self.with_attention(lambda att: att.flash2)

    def with_cudnn(self, version: str) -> DeviceProfile | None:
        """As cuDNN ``version`` runs its attention (``at_cudnn``), None without cuDNN fits."""
        return self.with_attention(lambda att: att.at_cudnn(version))

    def with_attention(self, pick: Callable[[AttentionShapeModel], AttentionShapeModel | None]
                       ) -> DeviceProfile | None:
        """This profile with ``pick``'s attention parameters (None where it gives none)."""
        sm = self.shape_model
        if sm is None or sm.attention is None or (att := pick(sm.attention)) is None:
            return None
        one = self.one_gpu.with_attention(pick) if self.one_gpu is not None else None
        return replace(self, shape_model=replace(sm, attention=att), one_gpu=one)


# --------------------------------------------------------------------------- parsing


def _curve(data: Any, file: str | Path | None, where: str) -> EfficiencyCurve:
    if not isinstance(data, list) or not data:
        raise InputError("expected a non-empty list of [size, efficiency] points", file, where)
    pts = []
    for i, p in enumerate(data):
        if (not isinstance(p, (list, tuple)) or len(p) != 2
                or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in p)):
            raise InputError(f"expected [size, efficiency], got {p!r}", file, f"{where}[{i}]")
        size, eff = float(p[0]), float(p[1])
        if not (size > 0 and 0 < eff <= 1.0):
            raise InputError(f"need size > 0 and 0 < efficiency <= 1, got {p!r}", file, f"{where}[{i}]")
        pts.append((np.log10(size), eff))
    pts.sort()
    if any(a[0] == b[0] for a, b in zip(pts, pts[1:], strict=False)):
        raise InputError("duplicate size in curve", file, where)
    return EfficiencyCurve(tuple(p[0] for p in pts), tuple(p[1] for p in pts))


def _class_eff(data: Any, file: str | Path | None, where: str) -> ClassEfficiency:
    check_keys(data, ("compute", "memory"), ("spread", "source", "compute_size"), file=file, where=where)
    comp = data["compute"]
    if isinstance(comp, Mapping):
        if "default" not in comp:
            raise InputError("missing required key", file, f"{where}.compute.default")
        curves = {}
        for k, v in comp.items():
            if k != "default" and k not in PEAK_KEYS:
                raise InputError(f"unknown dtype {k!r} (allowed: default, {', '.join(PEAK_KEYS)})",
                                 file, f"{where}.compute.{k}")
            curves[str(k)] = _curve(v, file, f"{where}.compute.{k}")
    else:
        curves = {"default": _curve(comp, file, f"{where}.compute")}
    spread = get_number(data, "spread", file=file, where=where, allow_zero=True, default=0.25)
    if spread >= 1.0:
        raise InputError(f"must be < 1, got {spread!r}", file, f"{where}.spread")
    size = data.get("compute_size", "total")
    if size not in ("total", "unit"):
        raise InputError(f"must be 'total' or 'unit', got {size!r}", file, f"{where}.compute_size")
    return ClassEfficiency(MappingProxyType(curves), _curve(data["memory"], file, f"{where}.memory"),
                           float(spread), size == "unit")


def parse_profile(data: Any, file: str | Path | None = None, where: str = "device") -> DeviceProfile:
    """Build a :class:`DeviceProfile` from a mapping; errors name ``file`` and the key."""
    if not isinstance(data, Mapping):
        raise InputError(f"expected a device profile mapping, got {type(data).__name__}", file, where)
    if "base" in data:
        base_name = get_str(data, "base", file=file, where=where)
        base = builtin_raw().get(lookup_name(base_name) or "")
        if base is None:
            raise InputError(f"unknown base profile {base_name!r} (known: "
                             f"{', '.join(known_devices())})", file, f"{where}.base")
        if "name" not in data:  # the base's name would pass this profile off as the base
            raise InputError("missing required key (a profile with base: names itself; the "
                             "base's name is not inherited)", file, f"{where}.name")
        merged = dict(base)
        merged.update({k: v for k, v in data.items() if k != "base"})
        for k in ("aliases", "patterns"):
            merged[k] = data.get(k, [])
        own, inherited = data.get("sustained_clock"), base.get("sustained_clock")
        if isinstance(own, Mapping) and inherited is not None:
            # a mapping sets the dtypes it names over the base's (a number: every dtype)
            merged["sustained_clock"] = {**(inherited if isinstance(inherited, Mapping)
                                            else {"default": inherited}), **own}
        data = merged
    check_keys(data, _KEYS_REQUIRED, _KEYS_OPTIONAL, file=file, where=where)
    name = get_str(data, "name", file=file, where=where)
    peaks = check_keys(data["peak_tflops"], (), PEAK_KEYS, file=file, where=f"{where}.peak_tflops")
    peak = {k: get_number(peaks, k, file=file, where=f"{where}.peak_tflops") for k in peaks
            if peaks[k] is not None}
    if not peak:
        raise InputError("needs at least one dtype", file, f"{where}.peak_tflops")
    eff_raw = data["efficiency"]
    if not isinstance(eff_raw, Mapping) or "default" not in eff_raw:
        raise InputError("missing required key", file, f"{where}.efficiency.default")
    from tracesim.ops.classify import OP_CLASSES

    eff = {}
    for cls, v in eff_raw.items():
        if cls != "default" and cls not in OP_CLASSES:
            raise InputError(f"unknown op class {cls!r} (allowed: default, {', '.join(OP_CLASSES)})",
                             file, f"{where}.efficiency.{cls}")
        eff[str(cls)] = _class_eff(v, file, f"{where}.efficiency.{cls}")
    kind = get_str(data, "kind", file=file, where=where, choices=("gpu", "cpu"), default="gpu")
    lists = {}
    for k in ("aliases", "patterns"):
        v = data.get(k, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise InputError("expected a list of strings", file, f"{where}.{k}")
        lists[k] = tuple(v)
    for p in lists["patterns"]:
        try:
            re.compile(p)
        except re.error as exc:
            raise InputError(f"bad regex {p!r}: {exc}", file, f"{where}.patterns") from None
    clock, by_dtype = _sustained(data, file, where)
    quant = data.get("quantize") or {}
    if not isinstance(quant, Mapping) or any(k not in ("mxfp8", "nvfp4") for k in quant):
        raise InputError("expected a mapping of mxfp8 / nvfp4 to rates", file, f"{where}.quantize")
    for k in quant:
        _ratio(quant, str(k), file, f"{where}.quantize")
    return DeviceProfile(
        name=name,
        peak_tflops=MappingProxyType(peak),
        hbm_GBps=get_number(data, "hbm_GBps", file=file, where=where),
        hbm_GiB=get_number(data, "hbm_GiB", file=file, where=where, allow_zero=True, default=0.0)
        if "hbm_GiB" in data else 0.0,
        launch_overhead_us=get_number(data, "launch_overhead_us", file=file, where=where,
                                      allow_zero=True),
        efficiency=MappingProxyType(eff),
        kind=kind,
        aliases=lists["aliases"],
        patterns=lists["patterns"],
        source=str(data.get("source", "")),
        sm_count=int(get_number(data, "sm_count", file=file, where=where, kind=int, allow_zero=True,
                                default=0)),
        l2_GBps=get_number(data, "l2_GBps", file=file, where=where, allow_zero=True, default=0.0),
        shape_model=(parse_shape_model(data["shape_model"], file, f"{where}.shape_model")
                     if data.get("shape_model") is not None else None),
        sustained_clock=clock,
        sustained_dtype=MappingProxyType(by_dtype),
        fleet=parse_fleet(data.get("sustained_fleet"), file, f"{where}.sustained_fleet"),
        raw=MappingProxyType(dict(data)),
        file=str(file) if file is not None else None,
        where=where,
    )


def _sustained(data: Mapping[str, Any], file: str | Path | None,
               where: str) -> tuple[float, dict[str, float]]:
    """``sustained_clock``: a ratio in (0, 1] (1 when absent), or a mapping of dtypes to
    ratios whose ``default`` (1 when absent) covers the others: (default, per dtype)."""
    raw = data.get("sustained_clock")
    if isinstance(raw, Mapping):
        ratios = {str(k): _ratio(raw, str(k), file, f"{where}.sustained_clock") for k in raw}
        for k in ratios:
            if k != "default" and k not in PEAK_FALLBACK:
                raise InputError(f"unknown dtype {k!r} (known: default, {', '.join(PEAK_FALLBACK)})",
                                 file, f"{where}.sustained_clock")
        default = ratios.pop("default", 1.0)
        return default, ratios
    return _ratio(data, "sustained_clock", file, where), {}


def _ratio(data: Mapping[str, Any], key: str, file: str | Path | None, where: str) -> float:
    r = get_number(data, key, file=file, where=where, default=1.0)
    if r > 1.0:
        raise InputError(f"must be in (0, 1], got {r!r}", file, f"{where}.{key}")
    return r


# --------------------------------------------------------------------------- registry


@cache
def _builtin(name: str) -> DeviceProfile:
    path = DEVICES_DIR / f"{name}.yaml"
    return parse_profile(builtin_raw()[name], path if path.exists() else None, "device")


def _is_profile_path(spec: str) -> bool:
    """Whether the device string ``spec`` names a profile YAML (``.yaml`` / ``.yml``, or a
    path with ``/`` to an existing file) rather than a profile by name."""
    return spec.endswith((".yaml", ".yml")) or ("/" in spec and Path(spec).is_file())


def get_device(spec: str | Mapping[str, Any] | DeviceProfile, *, file: str | Path | None = None,
               where: str = "device", recorded: bool = False) -> DeviceProfile:
    """Resolve a device: profile name, YAML path, inline mapping, or a trace's device string.

    Args:
        spec: a shipped profile's name or alias (``a100``, ``A100-SXM4-80GB``, ``NVIDIA H100
            80GB HBM3``, ``host-cpu``; case, spaces and vendor prefixes aside:
            :func:`~tracesim.hardware.devicenames.lookup_name`), a path to a profile YAML
            (relative paths from the current directory; e.g. one written by ``tracesim
            calibrate``), or an inline profile mapping (``base: h100`` fills the keys it
            leaves out).
        file, where: where ``spec`` came from, for error messages (an InputError for an
            unknown name, listing the known profiles, or a bad profile).
        recorded: ``spec`` is a device string a trace recorded (``Tesla V100-DGXS-32GB``):
            the profiles' ``patterns`` are tried too
            (:func:`~tracesim.hardware.devicenames.recorded_name`). A name a user typed is
            never matched by pattern: ``H100 PCIe`` is not the ``h100`` (SXM5) profile.
    """
    if isinstance(spec, DeviceProfile):
        return spec
    if isinstance(spec, Mapping):
        return parse_profile(spec, file, where)
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"expected a device name or profile, got {spec!r}", file, where)
    if _is_profile_path(spec):
        path = Path(spec)
        return parse_profile(read_yaml(path), path, "device")
    name = recorded_name(spec) if recorded else lookup_name(spec)
    if name is None:
        raise InputError(_unknown(spec), file, where)
    return _builtin(name)


def _unknown(spec: str) -> str:
    """The message for an unknown device name: the known profiles, and a profile to base
    one on where the name looks like a variant of one (``H100 PCIe``: ``base: h100``)."""
    like = recorded_name(spec)
    hint = f", e.g. one with base: {like} and its own numbers" if like else ""
    return (f"unknown device {spec!r} (known: {', '.join(known_devices())}; or a profile "
            f"YAML path{hint}; docs/devices.md)")
