"""Shape-aware compute time of GEMMs and attention (the ``shape_model`` of a device profile).

Where the cost model knows an op's shape (``shape = (batch, m, n, k)``), the efficiency of
its compute part comes from the shape instead of the size curve (docs/devices.md, "The GEMM
model"):

**GEMM** ``(batch, m, n, k)``, ``C[m, n] = A[m, k] B[k, n]`` per batch. For each candidate
output tile ``tm x tn`` (the kernel library picks the best one; the model takes the fastest)::

    tiles  = batch * ceil(m / tm) * ceil(n / tn)
    split  = max(1, min(floor(S / tiles), floor(k / split_k_min)))   # split-K for few tiles
    waves  = ceil(tiles * split / S)                                   # S = sm_count
    R_tile = peak[dtype] * plateau[dtype] * min(1, I(tm, tn) / I(tiles[0])) / S
    t      = fixed + waves * (2 tm tn (ceil(k / split) + k_overhead) / R_tile + wave_overhead)

and, when ``k >= split_k_min`` and there are at least ``S`` tiles, stream-K (the k loops of
all tiles spread evenly over the SMs, as cuBLAS does on Hopper and Blackwell) if faster::

    t_sk   = fixed + tiles / S * (2 tm tn (k + k_overhead) / R_tile + wave_overhead) + wave_overhead

and never faster than the library's best measured rate (``ceiling[dtype]``, a fraction of
peak, where the profile gives one)::

    t      = max(t, 2 b m n k / (peak[dtype] * ceiling[dtype]))

``I(tm, tn) = tm tn / (tm + tn)`` is a tile's arithmetic intensity (FLOPs per element loaded
per k step), so smaller tiles run slower per SM; the first listed tile is the full-rate one.
Partial waves (wave quantisation) and tile padding (tile quantisation) both show as
``waves * tm * tn`` work for ``m * n`` useful results. The efficiency is the shape's own
FLOPs over ``peak * t``; the op's time is its FLOPs at that efficiency.

**Attention** ``(batch * heads, seq_q, kv, head_dim)`` with ``kv`` the mean key length per
query (``seq_kv``; about half of it for causal attention, :mod:`tracesim.ops.shapes`)::

    eff = plateau[dtype](head_dim) * kv / (kv + kv_half[dtype]) * fill
    fill = q_tiles / (ceil(q_tiles / S) * S),  q_tiles = batch * heads * ceil(seq_q / tile_q)

``plateau`` is interpolated in log2(head_dim) between the listed head dims and held beyond.
A profile that measured unmasked attention apart (``unmasked``: its own ``plateau`` and
``kv_half``) times the rows with ``kv >= seq_q`` (no causal or sliding-window mask: every query
sees every key) with them; a masked kernel skips the masked tiles, but its mask handling and
its uneven work per query tile leave it slower per computed FLOP than the unmasked kernel.
A profile fitted on several cuDNN versions names its own (``cudnn``) and holds the others' whole
attention models (``cudnn_versions``); :meth:`AttentionShapeModel.at_cudnn` picks one.
A backward op runs at ``eff * backward_ratio(head_dim, kv, dtype)`` where the profile lists the
backward kernel's measured rate over the forward's (``backward``; ``backward_fp8`` for the FP8
kernels where they were measured apart, else ``backward`` serves every dtype; applied by
:func:`tracesim.template.durations.make_op_time`, which knows an op's pass).

This module holds the parsed parameters and the vectorised formulas only; it imports nothing
from the rest of ``tracesim.hardware`` (device.py parses profiles with it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from tracesim.errors import InputError
from tracesim.strict import check_keys, get_number, get_str

#: the dtype keys a plateau may list (besides ``default``)
PLATEAU_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "mxfp8", "nvfp4")


@dataclass(frozen=True)
class GemmShapeModel:
    """Parameters of the GEMM formula (module docstring); times in microseconds."""

    plateau: Mapping[str, float]
    tiles: tuple[tuple[int, int], ...]
    k_overhead: float
    wave_overhead_us: float
    split_k_min: float
    fixed_us: float
    #: best rate (fraction of peak) the library reached on this device in a brute-force
    #: sweep of shapes (MAMF), per dtype; a GEMM never runs faster. Empty: no cap.
    ceiling: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def efficiency(self, dtype: str) -> float:
        """Mainloop efficiency (fraction of peak) of a full-rate tile for ``dtype``."""
        return float(self.plateau.get(dtype, self.plateau["default"]))

    def max_efficiency(self, dtype: str) -> float | None:
        """The ceiling for ``dtype`` (``default``'s for a dtype it does not list), or None."""
        c = self.ceiling.get(dtype, self.ceiling.get("default"))
        return None if c is None else float(c)

    def time_s(self, peak_flops: float, dtype: str, sm_count: int, shape: np.ndarray) -> np.ndarray:
        """Seconds of the compute part (no launch overhead) of GEMMs of ``shape`` (n x 4)."""
        b, m, n, k = (np.asarray(shape[:, i], dtype=float) for i in range(4))
        s = float(max(sm_count, 1))
        e = self.efficiency(dtype)
        i_max = _intensity(*self.tiles[0])
        best = np.full(b.shape, np.inf)
        for tm, tn in self.tiles:
            rate = peak_flops * e * min(1.0, _intensity(tm, tn) / i_max) / s
            tiles = b * np.ceil(m / tm) * np.ceil(n / tn)
            split = np.maximum(1.0, np.minimum(np.floor(s / tiles), np.floor(k / self.split_k_min)))
            waves = np.ceil(tiles * split / s)
            per_wave = 2.0 * tm * tn * (np.ceil(k / split) + self.k_overhead) / rate
            t = waves * (per_wave + self.wave_overhead_us * 1e-6)
            # stream-K: with k long enough, the tiles' k loops are spread evenly over the SMs
            full = 2.0 * tm * tn * (k + self.k_overhead) / rate + self.wave_overhead_us * 1e-6
            t_sk = tiles / s * full + self.wave_overhead_us * 1e-6
            t = np.where((k >= self.split_k_min) & (tiles >= s), np.minimum(t, t_sk), t)
            best = np.minimum(best, t)
        best = best + self.fixed_us * 1e-6
        cap = self.max_efficiency(dtype)
        if cap is not None:
            best = np.maximum(best, 2.0 * b * m * n * k / (peak_flops * cap))
        return best


@dataclass(frozen=True)
class AttentionShapeModel:
    """Parameters of the attention formula (module docstring)."""

    plateau: Mapping[str, tuple[tuple[float, float], ...]]
    kv_half: Mapping[str, float]
    tile_q: int = 128
    #: backward rate over forward rate: ``((head_dim, ((kv, ratio), ...)), ...)``; empty:
    #: the backward runs at the forward's efficiency
    backward: tuple[tuple[float, tuple[tuple[float, float], ...]], ...] = ()
    #: the FP8 kernels' own backward / forward rate ratios (same form); empty: ``backward``
    backward_fp8: tuple[tuple[float, tuple[tuple[float, float], ...]], ...] = ()
    #: FlashAttention-2's parameters on this device (``--attention flash2``: the kernel
    #: PyTorch's SDPA and the flash-attn 2 package run), None where the profile has no data
    flash2: AttentionShapeModel | None = None
    #: ``plateau`` and ``kv_half`` of unmasked attention (every query sees at least as many
    #: keys as there are queries, ``kv >= seq_q``: no causal or sliding-window mask) where the
    #: profile measured the kernels apart on it; None: one curve serves every mask
    unmasked: AttentionShapeModel | None = None
    #: the cuDNN version these parameters were fitted on ("": not said), and other versions'
    #: own fits (``--cudnn``: :meth:`at_cudnn`)
    cudnn: str = ""
    cudnn_versions: Mapping[str, AttentionShapeModel] = field(
        default_factory=lambda: MappingProxyType({}))

    def at_cudnn(self, version: str) -> AttentionShapeModel | None:
        """The attention cuDNN ``version`` runs: the fit of the newest version the profile has
        (its own, ``cudnn``, among them) that is not newer than ``version``, else its oldest
        fit (a release older than every fit runs kernels at best as fast; not measured); its
        ``cudnn`` names the version fitted. None where the profile names no cuDNN version."""
        if not self.cudnn:
            return None
        fits = {**self.cudnn_versions, self.cudnn: self}
        order = sorted(fits, key=version_key)
        older = [v for v in order if version_key(v) <= version_key(version)]
        pick = older[-1] if older else order[0]
        if pick == self.cudnn:
            return self
        return replace(fits[pick], tile_q=self.tile_q, cudnn=pick, flash2=self.flash2)

    def backward_ratio(self, head_dim: float, kv: float, dtype: str = "default") -> float:
        """The backward kernel's rate over the forward's at ``head_dim`` and mean key length
        ``kv`` (``backward_fp8`` for an ``fp8`` op where the profile has it): interpolated in
        log2(kv) within each listed head dim and in log2(head_dim) between them, held beyond
        the ends; 1.0 without backward data."""
        table = self.backward_fp8 if dtype == "fp8" and self.backward_fp8 else self.backward
        if not table:
            return 1.0
        per_dim = [float(np.interp(np.log2(max(kv, 1.0)), np.log2([p[0] for p in pts]),
                                   [p[1] for p in pts])) for _, pts in table]
        dims = np.log2([d for d, _ in table])
        return float(np.interp(np.log2(max(head_dim, 1.0)), dims, per_dim))

    def efficiency(self, dtype: str, sm_count: int, shape: np.ndarray) -> np.ndarray:
        """Efficiency (fraction of peak, <= 1) of attention ops of ``shape`` (n x 4); the rows
        with ``kv >= seq_q`` (unmasked) at the ``unmasked`` curve where the profile has one."""
        e = self._curve(dtype, sm_count, shape)
        if self.unmasked is None:
            return e
        full = np.asarray(shape[:, 2], dtype=float) >= np.asarray(shape[:, 1], dtype=float)
        if not full.any():
            return e
        return np.where(full, self.unmasked._curve(dtype, sm_count, shape), e)

    def _curve(self, dtype: str, sm_count: int, shape: np.ndarray) -> np.ndarray:
        pts = self.plateau.get(dtype) or self.plateau["default"]
        half = float(self.kv_half.get(dtype, self.kv_half["default"]))
        u, q, kv, d = (np.asarray(shape[:, i], dtype=float) for i in range(4))
        x = np.log2([p[0] for p in pts])
        e = np.interp(np.log2(np.maximum(d, 1.0)), x, [p[1] for p in pts])
        s = float(max(sm_count, 1))
        q_tiles = u * np.ceil(q / self.tile_q)
        fill = q_tiles / (np.ceil(q_tiles / s) * s)
        return np.minimum(e * kv / (kv + half) * fill, 1.0)


@dataclass(frozen=True)
class ShapeModel:
    """The shape-aware parts of a device profile (either may be absent)."""

    gemm: GemmShapeModel | None = None
    attention: AttentionShapeModel | None = None

    def compute_time_s(self, op_class: str, dtype: str, peak_flops: float, sm_count: int,
                       shape: np.ndarray, flops: np.ndarray) -> np.ndarray | None:
        """Seconds of the compute part of ``op_class`` ops with ``shape`` and ``flops``, or
        None when this model has no part for the class. The shape sets the efficiency; the
        time is the op's FLOPs at that efficiency."""
        if op_class == "gemm" and self.gemm is not None:
            own = 2.0 * shape[:, 0] * shape[:, 1] * shape[:, 2] * shape[:, 3]
            t = self.gemm.time_s(peak_flops, dtype, sm_count, shape)
            return np.asarray(t * flops / np.maximum(own, 1.0))
        if op_class == "attention" and self.attention is not None:
            eff = self.attention.efficiency(dtype, sm_count, shape)
            return np.asarray(flops / (peak_flops * np.maximum(eff, 1e-9)))
        return None


def version_key(version: str) -> tuple[int, ...]:
    """``"9.13.1"`` -> ``(9, 13, 1)`` (a release is newer than its own prefix)."""
    return tuple(int(x) for x in version.split("."))


def _intensity(tm: int, tn: int) -> float:
    return tm * tn / (tm + tn)


# --------------------------------------------------------------------------- parsing


def _plateau_keys(data: Any, file: str | Path | None, where: str) -> Mapping[str, Any]:
    check_keys(data, ("default",), PLATEAU_DTYPES, file=file, where=where)
    return data


def _fraction(v: Any, file: str | Path | None, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise InputError(f"expected an efficiency in (0, 1], got {v!r}", file, where)
    return float(v)


def _gemm(data: Any, file: str | Path | None, where: str) -> GemmShapeModel:
    check_keys(data, ("plateau", "tiles", "k_overhead", "wave_overhead_us", "split_k_min",
                      "fixed_us"), ("ceiling", "source"), file=file, where=where)
    plat = _plateau_keys(data["plateau"], file, f"{where}.plateau")
    tiles = data["tiles"]
    if (not isinstance(tiles, list) or not tiles
            or not all(isinstance(t, list) and len(t) == 2 and all(isinstance(x, int)
                       and not isinstance(x, bool) and x > 0 for x in t) for t in tiles)):
        raise InputError(f"expected a list of [tm, tn] positive integers, got {tiles!r}", file,
                         f"{where}.tiles")
    num = {k: get_number(data, k, file=file, where=where, allow_zero=k != "split_k_min")
           for k in ("k_overhead", "wave_overhead_us", "split_k_min", "fixed_us")}
    ceiling: Mapping[str, float] = MappingProxyType({})
    if "ceiling" in data:
        cap = data["ceiling"]
        check_keys(cap, (), ("default",) + PLATEAU_DTYPES, file=file, where=f"{where}.ceiling")
        ceiling = MappingProxyType({str(k): _fraction(v, file, f"{where}.ceiling.{k}")
                                    for k, v in cap.items()})
    return GemmShapeModel(
        plateau=MappingProxyType({str(k): _fraction(v, file, f"{where}.plateau.{k}")
                                  for k, v in plat.items()}),
        tiles=tuple((int(t[0]), int(t[1])) for t in tiles), **num, ceiling=ceiling)


def _attention(data: Any, file: str | Path | None, where: str, nested: bool = True
               ) -> AttentionShapeModel:
    check_keys(data, ("plateau", "kv_half"),
               ("tile_q", "backward", "backward_fp8", "source")
               + (("flash2", "unmasked", "cudnn", "cudnn_versions") if nested else ()),
               file=file, where=where)
    plat = _plateau_keys(data["plateau"], file, f"{where}.plateau")
    out: dict[str, tuple[tuple[float, float], ...]] = {}
    for key, pts in plat.items():
        place = f"{where}.plateau.{key}"
        if not isinstance(pts, list) or not pts or not all(
                isinstance(p, list) and len(p) == 2 and all(isinstance(x, (int, float))
                                                            and not isinstance(x, bool) for x in p)
                for p in pts):
            raise InputError(f"expected a list of [head_dim, efficiency], got {pts!r}", file, place)
        dims = [float(p[0]) for p in pts]
        if any(d <= 0 for d in dims) or dims != sorted(set(dims)):
            raise InputError("head dims must be positive and increasing", file, place)
        out[str(key)] = tuple((float(p[0]), _fraction(p[1], file, place)) for p in pts)
    halves = _plateau_keys(data["kv_half"], file, f"{where}.kv_half")
    tile_q = get_number(data, "tile_q", file=file, where=where, kind=int, default=128)
    unmasked = None
    if nested and "unmasked" in data:
        check_keys(data["unmasked"], ("plateau", "kv_half"), ("source",), file=file,
                   where=f"{where}.unmasked")
        unmasked = replace(
            _attention(data["unmasked"], file, f"{where}.unmasked", nested=False), tile_q=tile_q)
    return AttentionShapeModel(
        plateau=MappingProxyType(out),
        kv_half=MappingProxyType({str(k): get_number(halves, k, file=file, where=f"{where}.kv_half",
                                                     allow_zero=True) for k in halves}),
        tile_q=tile_q, unmasked=unmasked,
        backward=_backward(data.get("backward", []), file, f"{where}.backward"),
        backward_fp8=_backward(data.get("backward_fp8", []), file, f"{where}.backward_fp8"),
        flash2=(_attention(data["flash2"], file, f"{where}.flash2", nested=False)
                if nested and "flash2" in data else None),
        **(_cudnn_fits(data, file, where) if nested else {}))


def _cudnn_fits(data: Any, file: str | Path | None, where: str) -> dict[str, Any]:
    """``cudnn`` (the version the attention was fitted on) and ``cudnn_versions`` (version ->
    that version's own plateau, kv_half and backward ratios)."""
    own = get_str(data, "cudnn", file=file, where=where, default="")
    versions = data.get("cudnn_versions") or {}
    if not isinstance(versions, dict):
        raise InputError(f"expected a mapping of version -> attention, got {versions!r}", file,
                         f"{where}.cudnn_versions")
    for v in (own, *versions):
        if v != "" and not (isinstance(v, str) and re.fullmatch(r"\d+(\.\d+)*", v)):
            raise InputError(f"expected a quoted version like '9.13', got {v!r}", file,
                             f"{where}.cudnn")
    if versions and not own:
        raise InputError("cudnn_versions needs cudnn (the version of the main fit)", file,
                         f"{where}.cudnn")
    return {"cudnn": own, "cudnn_versions": MappingProxyType({
        str(v): _attention(m, file, f"{where}.cudnn_versions.{v}", nested=False)
        for v, m in versions.items()})}


def _backward(data: Any, file: str | Path | None, where: str
              ) -> tuple[tuple[float, tuple[tuple[float, float], ...]], ...]:
    """``[[head_dim, [[kv, ratio], ...]], ...]`` (head dims and lengths increasing, ratios in
    (0, 1])."""
    def number(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0

    if not isinstance(data, list):
        raise InputError(f"expected a list of [head_dim, [[kv, ratio], ...]], got {data!r}", file, where)
    out = []
    for k, item in enumerate(data):
        place = f"{where}[{k}]"
        if not (isinstance(item, list) and len(item) == 2 and number(item[0])
                and isinstance(item[1], list) and item[1]
                and all(isinstance(p, list) and len(p) == 2 and number(p[0]) for p in item[1])):
            raise InputError(f"expected [head_dim, [[kv, ratio], ...]], got {item!r}", file, place)
        kvs = [float(p[0]) for p in item[1]]
        if kvs != sorted(set(kvs)):
            raise InputError("key lengths must be increasing", file, place)
        out.append((float(item[0]), tuple((float(p[0]), _fraction(p[1], file, place)) for p in item[1])))
    dims = [d for d, _ in out]
    if dims != sorted(set(dims)):
        raise InputError("head dims must be increasing", file, where)
    return tuple(out)


def parse_shape_model(data: Any, file: str | Path | None = None,
                      where: str = "device.shape_model") -> ShapeModel:
    """A :class:`ShapeModel` from a profile's ``shape_model`` mapping (strict keys)."""
    check_keys(data, (), ("gemm", "attention", "source"), file=file, where=where)
    return ShapeModel(
        gemm=_gemm(data["gemm"], file, f"{where}.gemm") if "gemm" in data else None,
        attention=(_attention(data["attention"], file, f"{where}.attention")
                   if "attention" in data else None))
