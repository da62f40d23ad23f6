"""Measure a device's efficiency curves with torch and write a device profile.

``tracesim calibrate --device cpu|cuda[:N] -o PROFILE.yaml`` runs :func:`calibrate`: GEMMs
over a grid of sizes (compute efficiency vs FLOPs), copies over a range of sizes (memory
bandwidth), pointwise / norm / softmax / reduction / embedding / optimizer / attention ops
(their efficiency vs size) and a one-element op (the launch / dispatch overhead). Each op's
FLOPs and bytes come from :func:`tracesim.ops.classify.op_cost`, the same function that
reads traces, so the profile and the op table agree on what an op costs.

Compute efficiencies are derived by inverting the cost model
(``eff_c = flops / (peak * (t - launch))``, median per half decade, made non-decreasing).
Memory-bound classes get a robust fit of ``t = t0 + bytes / rate`` per class
(:func:`fit_affine`), written as the efficiency curve that reproduces it
(:func:`affine_curve`): a fixed time plus a rate, so doubling an op's bytes never more than
doubles its time. (Binned medians of ``bytes / (bandwidth * (t - launch))`` put 100-1000x
cliffs into the curves wherever one size was slowed down by other processes during the run;
scaled predictions crossing such a cliff were off by as much.) Every op is timed in
interleaved passes, keeping its fastest. On a GPU the peaks are the datasheet profile's; on a
CPU (no datasheet) peak FLOP/s and bandwidth are the best measured GEMM rate and copy
bandwidth, so the curves top out at 1.0.

torch is imported only inside the measuring functions: the rest of tracesim (and the curve
helpers here) import without it.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from tracesim.errors import InputError
from tracesim.ops.classify import op_cost

# --------------------------------------------------------------------------- curve helpers


def saturating_curve(e_max: float, half_size: float, sizes: Sequence[float]) -> list[list[float]]:
    """Points of ``eff(s) = e_max * s / (s + half_size)`` at ``sizes`` (rounded to 4 digits).

    With ``half_size = peak * e_max * t_ramp`` this is the roofline plus a fixed ramp time
    ``t_ramp`` per kernel; the shipped datasheet profiles use it (docs/devices.md).
    """
    return [[float(s), round(max(e_max * s / (s + half_size), 1e-4), 4)] for s in sizes]


def fit_curve(sizes: Sequence[float], effs: Sequence[float], *, per_decade: int = 1,
              min_points: int = 1, monotone: bool = True) -> list[list[float]]:
    """An efficiency table from scattered samples.

    Samples are binned by log10(size) (``per_decade`` bins per decade); each bin gives its
    median size and median efficiency, clipped to (1e-4, 1]. With ``monotone`` the
    efficiencies are made non-decreasing with size (compute curves: a larger GEMM never runs
    less efficiently). :func:`calibrate` fits memory curves with :func:`fit_affine` instead.
    """
    s = np.asarray(sizes, dtype=float)
    e = np.asarray(effs, dtype=float)
    ok = np.isfinite(s) & np.isfinite(e) & (s > 0) & (e > 0)
    s, e = s[ok], np.minimum(e[ok], 1.0)
    if s.size == 0:
        raise ValueError("no valid samples to fit")
    bins = np.floor(np.log10(s) * per_decade).astype(int)
    pts = []
    for b in np.unique(bins):
        m = bins == b
        if m.sum() < min_points:
            continue
        pts.append([float(np.median(s[m])), float(np.median(e[m]))])
    pts.sort()
    best = 0.0
    for p in pts:
        best = max(best, p[1]) if monotone else p[1]
        p[1] = round(float(np.clip(best, 1e-4, 1.0)), 4)
        p[0] = float(f"{p[0]:.4g}")
    return pts


def spread_of(sizes: Sequence[float], effs: Sequence[float], curve: Sequence[Sequence[float]]) -> float:
    """Relative half-width of the band: 1.5 x the median |eff / curve - 1|, in [0.05, 0.5]."""
    s = np.log10(np.maximum(np.asarray(sizes, dtype=float), 1.0))
    e = np.asarray(effs, dtype=float)
    xs = np.log10([p[0] for p in curve])
    ys = np.array([p[1] for p in curve])
    pred = np.interp(s, xs, ys)
    dev = np.abs(e / np.maximum(pred, 1e-9) - 1.0)
    return round(float(np.clip(1.5 * np.median(dev) if dev.size else 0.25, 0.05, 0.5)), 3)


def fit_affine(sizes: Sequence[float], times_s: Sequence[float]) -> tuple[float, float]:
    """Robust fit of ``t = t0 + size / rate`` to (size, seconds) samples.

    Minimises the sum of ``|log(model / measured)|`` (a median-like fit: a few samples slowed
    down by other processes on a shared machine barely move it) over a log grid, refined
    once. Returns ``(t0_s, rate)``: the fixed per-op time in seconds (>= 0) and the rate in
    size units per second (bytes/s for a memory-bound op).
    """
    s = np.asarray(sizes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    ok = np.isfinite(s) & np.isfinite(t) & (s > 0) & (t > 0)
    s, t = s[ok], t[ok]
    if s.size == 0:
        raise ValueError("no valid samples to fit")
    lt = np.log(t)

    def best(t0s: np.ndarray, rates: np.ndarray) -> tuple[float, float]:
        model = t0s[:, None, None] + s[None, None, :] / rates[None, :, None]
        err = np.abs(np.log(model) - lt[None, None, :]).sum(axis=2)
        i, j = np.unravel_index(int(np.argmin(err)), err.shape)
        return float(t0s[i]), float(rates[j])

    rate_c = float(np.median(s / t))
    t0s = np.concatenate([[0.0], np.logspace(-8, np.log10(max(t.max(), 1e-7)), 97)])
    rates = rate_c * np.logspace(-1, 3, 161)
    t0, rate = best(t0s, rates)
    t0s = np.concatenate([[0.0], np.maximum(t0, 1e-9) * np.logspace(-0.1, 0.1, 21)])
    rates = rate * np.logspace(-0.05, 0.05, 21)
    return best(t0s, rates)


def affine_curve(t0_s: float, rate: float, launch_s: float, peak_rate: float,
                 sizes: Sequence[float]) -> list[list[float]]:
    """Efficiency points at ``sizes`` that make the roofline reproduce ``t = t0 + size / rate``.

    With the model ``t = size / (peak_rate * eff) + launch``, the affine time is the
    saturating curve ``eff = e_max * size / (size + half)`` with ``e_max = rate / peak_rate``
    and ``half = (t0 - launch) * rate`` (as :func:`saturating_curve`, kept to 4 significant
    digits): the fixed part of the op's time does not scale with size, the rest linearly.
    """
    e_max = min(rate / peak_rate, 1.0)
    half = max(t0_s - launch_s, 0.0) * e_max * peak_rate
    return [[float(x), float(f"{max(e_max * x / (x + half), 1e-6):.4g}")] for x in sizes]


#: sizes (bytes) at which the fitted memory curves are written: 4 points per decade, 1 KB-10 GB
MEMORY_CURVE_SIZES = [float(f"{10 ** (k / 4):.4g}") for k in range(12, 41)]

# --------------------------------------------------------------------------- timing


def _time_call(fn: Callable[[], Any], sync: Callable[[], None], min_s: float, max_reps: int) -> float:
    """Seconds per call of ``fn``: the fastest of up to 40 short batches (each lasting about
    min_s/20) after a warm-up; short batches and the minimum are the estimate least disturbed
    by other processes on a shared machine."""
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    one = max(time.perf_counter() - t0, 1e-7)
    per_batch = int(max(1, min(max_reps, (min_s / 20) / one)))
    samples: list[float] = []
    deadline = time.perf_counter() + min_s
    while len(samples) < 7 or (time.perf_counter() < deadline and len(samples) < 40):
        t0 = time.perf_counter()
        for _ in range(per_batch):
            fn()
        sync()
        samples.append((time.perf_counter() - t0) / per_batch)
        if one * per_batch > 2 * min_s and len(samples) >= 3:
            break
    return float(np.min(samples))


def _plan(quick: bool, cpu: bool = False) -> dict[str, Any]:
    """Sizes to measure. On a CPU the attention curve is read per (batch, head) unit
    (``compute_size: unit``), so its shapes cover head dims 32 and 64 at sequence lengths
    32-1024 with a fixed 8 units; on a GPU, total sizes up to a full device."""
    if quick:
        return dict(min_s=0.02, passes=1, gemm=[(32, 32, 32), (128, 128, 128), (256, 512, 256), (512, 512, 512)],
                    copy=[2**12, 2**16, 2**20, 2**23], pointwise=[2**10, 2**14, 2**18, 2**21],
                    rows=[(64, 128), (512, 256), (2048, 512)], attn=[(1, 2, 64, 32), (2, 4, 128, 64)],
                    opt_lists=[(8, 2**10), (16, 2**14)])
    gemm = [(n, n, n) for n in (16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536)]
    gemm += [(m, k, n) for m in (128, 512, 2048) for (k, n) in ((64, 64), (128, 384), (256, 1024),
                                                               (1024, 256), (512, 2048))]
    return dict(min_s=0.05, passes=3, gemm=gemm,
                copy=[2**k for k in range(10, 27, 2)],
                pointwise=[2**k for k in range(8, 24, 2)],
                rows=[(r, h) for r in (16, 128, 512, 2048, 8192) for h in (64, 256, 1024)],
                attn=[(2, 4, s, d) for d in (32, 64) for s in (32, 64, 128, 256, 512, 1024)] if cpu
                else [(1, 2, 32, 32), (2, 4, 64, 32), (2, 4, 128, 64), (4, 8, 256, 64), (2, 8, 512, 64)],
                opt_lists=[(4, 2**8), (8, 2**12), (16, 2**14), (32, 2**16), (16, 2**19)])


# --------------------------------------------------------------------------- measuring


def _torch_device(spec: str) -> Any:
    import torch

    s = spec.strip().lower()
    if s == "cpu":
        return torch.device("cpu")
    if s.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InputError("CUDA is not available on this machine", "--device")
        dev = torch.device(s)
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise InputError(f"no such GPU (have {torch.cuda.device_count()})", "--device")
        return dev
    raise InputError(f"expected cpu or cuda[:N], got {spec!r}", "--device")


def _type_name(dtype: Any) -> str:
    import torch

    return {torch.float32: "float", torch.bfloat16: "c10::BFloat16", torch.float16: "c10::Half",
            torch.int64: "long"}[dtype]


def calibrate(device: str = "cpu", *, quick: bool = False, threads: int | None = None,
              name: str | None = None, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Measure ``device`` with torch and return a device-profile mapping (see device.py).

    Args:
        device: ``cpu`` or ``cuda[:N]``.
        quick: a few sizes per op (a couple of seconds) instead of the full grid (< 60 s on
            a 2-core CPU).
        threads: torch intra-op threads for a CPU run (default: torch's default).
        name: profile name (default ``host-cpu`` / the GPU's datasheet name + ``-measured``).
        log: optional progress callback.
    """
    import torch

    from tracesim.hardware.device import get_device

    say = log or (lambda _m: None)
    dev = _torch_device(device)
    is_cuda = dev.type == "cuda"
    old_threads = torch.get_num_threads()
    if threads is not None:
        if threads < 1:
            raise InputError(f"must be >= 1, got {threads}", "--threads")
        torch.set_num_threads(threads)
    try:
        return _run(torch, dev, is_cuda, quick, name, say, get_device)
    finally:
        torch.set_num_threads(old_threads)


def _run(torch: Any, dev: Any, is_cuda: bool, quick: bool, name: str | None,
         say: Callable[[str], None], get_device: Callable[..., Any]) -> dict[str, Any]:
    plan = _plan(quick, cpu=not is_cuda)
    sync = (lambda: torch.cuda.synchronize(dev)) if is_cuda else (lambda: None)
    min_s = plan["min_s"]
    gen = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape: int, dtype: Any = torch.float32) -> Any:
        return torch.randn(*shape, generator=gen, device=dev, dtype=dtype)

    def tm(fn: Callable[[], Any]) -> float:
        with torch.no_grad():
            return _time_call(fn, sync, min_s, 10_000)

    # launch / dispatch overhead: a one-element add
    a1, b1 = rnd(1), rnd(1)
    launch = tm(partial(torch.add, a1, b1))
    say(f"launch overhead {launch * 1e6:.2f} us")

    samples: dict[str, dict[str, list[tuple[float, float, float]]]] = {}
    attn_units: list[float] = []  # work units of each attention sample, in order

    def record(cls: str, opname: str, dims: list, types: list, t: float, key: str = "default") -> None:
        c = op_cost(opname, dims, types)
        samples.setdefault(cls, {}).setdefault(key, []).append((c.flops, c.bytes, t))
        if cls == "attention":
            attn_units.append(c.units)

    # GEMMs per dtype
    gemm_dtypes = {"default": torch.float32}
    if is_cuda:
        gemm_dtypes.update({"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32})
    for key, dt in gemm_dtypes.items():
        old_tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = key == "tf32"
        try:
            best: dict[tuple[int, int, int], float] = {}
            for _ in range(plan["passes"]):  # interleaved passes: keep each shape's fastest
                for m, k, n in plan["gemm"]:
                    a, b = rnd(m, k, dtype=dt), rnd(k, n, dtype=dt)
                    t = tm(partial(torch.mm, a, b))
                    best[(m, k, n)] = min(t, best.get((m, k, n), t))
            for (m, k, n), t in best.items():
                record("gemm", "aten::mm", [[m, k], [k, n]], [_type_name(dt)] * 2, t, key)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old_tf32
        say(f"gemm {key}: {len(plan['gemm'])} sizes")

    # everything else: built once, then timed in interleaved passes keeping each op's fastest
    # (a burst of load from other processes rarely hits the same op in every pass)
    jobs: list[tuple[str, str, list, list, Callable[[], Any]]] = []
    for n in plan["copy"]:  # memory: copies
        src, dst = rnd(n), rnd(n)
        jobs.append(("memcpy", "aten::copy_", [[n], [n], []], ["float", "float", "Scalar"],
                     partial(dst.copy_, src)))
    for n in plan["pointwise"]:  # pointwise: add (memory) and gelu (compute-heavy on CPUs)
        x, y = rnd(n), rnd(n)
        jobs.append(("elementwise", "aten::add", [[n], [n], []], ["float", "float", "Scalar"],
                     partial(torch.add, x, y)))
        jobs.append(("elementwise_compute", "aten::gelu", [[n], []], ["float", "String"],
                     partial(torch.nn.functional.gelu, x)))
    for r, h in plan["rows"]:  # row-wise ops
        x = rnd(r, h)
        w, bias = rnd(h), rnd(h)
        jobs.append(("norm", "aten::native_layer_norm", [[r, h], [h], [h], [h], []],
                     ["float", "ScalarList", "float", "float", "Scalar"],
                     partial(torch.nn.functional.layer_norm, x, (h,), w, bias)))
        jobs.append(("softmax", "aten::_softmax", [[r, h], [], []], ["float", "Scalar", "Scalar"],
                     partial(torch.softmax, x, -1)))
        jobs.append(("reduction", "aten::sum", [[r, h], [], [], []], ["float", "ScalarList", "Scalar", ""],
                     partial(torch.sum, x, -1)))
        idx = torch.randint(0, 4 * h, (r,), generator=gen, device=dev)
        table = rnd(4 * h, h)
        jobs.append(("embedding", "aten::embedding", [[4 * h, h], [r], [], [], []],
                     ["float", "long", "Scalar", "Scalar", "Scalar"],
                     partial(torch.nn.functional.embedding, idx, table)))
    for count, size in plan["opt_lists"]:  # optimizer: foreach ops over lists of tensors
        ps = [rnd(size) for _ in range(count)]
        gs = [rnd(size) for _ in range(count)]
        jobs.append(("optimizer", "aten::_foreach_add_", [[[size]] * count, [[size]] * count, []],
                     ["TensorList", "TensorList", "Scalar"],
                     partial(torch._foreach_add_, ps, gs, alpha=-1e-3)))
    for bsz, heads, seq, dim in plan["attn"]:  # attention
        q, k, v = rnd(bsz, heads, seq, dim), rnd(bsz, heads, seq, dim), rnd(bsz, heads, seq, dim)
        jobs.append(("attention", "aten::scaled_dot_product_attention", [list(q.shape)] * 3,
                     ["float"] * 3, partial(torch.nn.functional.scaled_dot_product_attention, q, k, v)))
    fastest = [float("inf")] * len(jobs)
    for _ in range(plan["passes"]):
        launch = min(launch, tm(partial(torch.add, a1, b1)))
        for i, job in enumerate(jobs):
            fastest[i] = min(fastest[i], tm(job[4]))
    for (cls, opname, dims, types, _), t in zip(jobs, fastest, strict=True):
        record(cls, opname, dims, types, t)
    say("pointwise, norm, softmax, reduction, embedding, optimizer, attention done")

    if is_cuda:
        props = torch.cuda.get_device_properties(dev)
        gpu_name = torch.cuda.get_device_name(dev)
        try:
            ref = get_device(gpu_name)
            peaks = dict(ref.peak_tflops)
            bw = ref.hbm_GBps
            ref_name = ref.name
        except InputError:
            peaks, bw, ref_name = {}, 0.0, ""
        mem_gib = props.total_memory / 2**30
        host = gpu_name
    else:
        peaks, bw, ref_name = {}, 0.0, ""
        mem_gib = _host_mem_gib()
        host = platform.processor() or platform.machine()
    return _assemble(samples, launch, peaks, bw, mem_gib, is_cuda, name, ref_name, host, quick,
                     str(torch.__version__), torch.get_num_threads(), attn_units=attn_units)


def _fresh(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _fresh(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_fresh(x) for x in v]
    return v


def _host_mem_gib() -> float:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return 0.0


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _assemble(samples: dict[str, dict[str, list[tuple[float, float, float]]]], launch: float,
              peaks: dict[str, float], bw: float, mem_gib: float, is_cuda: bool, name: str | None,
              ref_name: str, host: str, quick: bool, torch_version: str,
              threads: int, attn_units: list[float] | None = None) -> dict[str, Any]:
    """Turn (flops, bytes, seconds) samples into a profile mapping (see module docstring).
    ``attn_units``: work units of each attention sample (CPU: the curve is per unit)."""

    def busy(t: float) -> float:  # time left after the fixed overhead (never below 10% of t)
        return max(t - launch, 0.1 * t)

    gemm = samples["gemm"]
    flat_samples = {c: v["default"] for c, v in samples.items() if c != "gemm"}
    measured_peaks = {k: max(f / t for f, _, t in v) / 1e12 for k, v in gemm.items()}
    if not peaks:
        peaks = {("fp32" if k == "default" else k): round(v, 4) for k, v in measured_peaks.items()}
    if bw <= 0:
        bw = round(max(b / t for _, b, t in flat_samples["memcpy"]) / 1e9, 3)

    def peak_of(key: str) -> float:
        k = "fp32" if key == "default" else key
        return float(peaks.get(k) or peaks.get("fp32") or max(peaks.values())) * 1e12

    mem_fits: dict[str, dict[str, float]] = {}

    def mem_curve(rows: list[tuple[float, float, float]], cls: str) -> tuple[list[list[float]], list, list]:
        # a fixed time plus bytes / rate (robust fit): a 2x larger op costs at most 2x, and
        # one slowed-down size cannot put a cliff into the curve
        sizes = [b for _, b, _ in rows]
        effs = [b / (bw * 1e9 * busy(t)) for _, b, t in rows]
        t0, rate = fit_affine(sizes, [t for _, _, t in rows])
        mem_fits[cls] = {"fixed_us": round(t0 * 1e6, 3), "rate_GBps": round(rate / 1e9, 2)}
        return affine_curve(t0, rate, launch, bw * 1e9, MEMORY_CURVE_SIZES), sizes, effs

    def comp_curve(rows: list[tuple[float, float, float]], key: str,
                   units: list[float] | None = None) -> tuple[list[list[float]], list, list]:
        sizes = [f / u for (f, _, _), u in zip(rows, units, strict=True)] if units else [f for f, _, _ in rows]
        effs = [f / (peak_of(key) * busy(t)) for f, _, t in rows]
        return fit_curve(sizes, effs, per_decade=2), sizes, effs

    copy_curve, cs, ce = mem_curve(flat_samples["memcpy"], "memcpy")
    flat = [[1.0, 1.0]]
    eff: dict[str, Any] = {}
    g_curves = {}
    g_spreads = []
    for key, rows in gemm.items():
        curve, s, e = comp_curve(rows, key)
        g_curves[key] = curve
        g_spreads.append(spread_of(s, e, curve))
    eff["gemm"] = {"compute": g_curves if len(g_curves) > 1 else g_curves["default"],
                   "memory": copy_curve, "spread": max(g_spreads)}
    # CPU: one (batch, head) problem after another on the cores, so the curve is over FLOPs
    # per unit (sequence x sequence x head dim), not the total (docs/devices.md)
    per_unit = not is_cuda and bool(attn_units)
    att, s, e = comp_curve(flat_samples["attention"], "default", attn_units if per_unit else None)
    eff["attention"] = {"compute": att, "memory": copy_curve, "spread": spread_of(s, e, att)}
    if per_unit:
        eff["attention"]["compute_size"] = "unit"
    ew_mem, s, e = mem_curve(flat_samples["elementwise"], "elementwise")
    # transcendental pointwise ops (gelu) set one size-independent compute efficiency: the
    # size ramp is already in the memory curve, and a curve over FLOPs would wrongly slow
    # down cheap ops (add) of the same size
    _, s2, e2 = comp_curve(flat_samples["elementwise_compute"], "default")
    big = [x for x, sz in zip(e2, s2, strict=True) if sz >= np.median(s2)]
    ew_comp = [[1.0, round(float(np.clip(np.median(big), 1e-4, 1.0)), 4)]]
    eff["elementwise"] = {"compute": ew_comp, "memory": ew_mem, "spread": spread_of(s, e, ew_mem)}
    eff["memcpy"] = {"compute": flat, "memory": copy_curve, "spread": spread_of(cs, ce, copy_curve)}
    for cls in ("norm", "softmax", "reduction", "embedding", "optimizer"):
        curve, s, e = mem_curve(flat_samples[cls], cls)
        eff[cls] = {"compute": flat, "memory": curve, "spread": spread_of(s, e, curve)}
    eff["default"] = dict(eff["elementwise"])
    # fresh lists everywhere, so the YAML has no anchors / aliases
    eff = {c: {k: _fresh(v) for k, v in d.items()} for c, d in eff.items()}
    today = _dt.date.today().isoformat()
    machine = _cpu_model() if not is_cuda else host
    nm = name or ("host-cpu" if not is_cuda else f"{ref_name or 'gpu'}-measured")
    prof: dict[str, Any] = {
        "name": nm,
        "kind": "gpu" if is_cuda else "cpu",
        "source": (f"tracesim calibrate{' --quick' if quick else ''} on {machine}, {today}, "
                   f"torch {torch_version}" + ("" if is_cuda else f", {threads} threads")),
        "peak_tflops": {k: round(float(v), 4) for k, v in peaks.items()},
        "hbm_GBps": round(float(bw), 3),
        "hbm_GiB": round(float(mem_gib), 1),
        "launch_overhead_us": round(launch * 1e6, 3),
        "calibration": {
            "date": today, "machine": machine, "cpu_count": os.cpu_count(), "torch": torch_version,
            "quick": quick, "threads": threads,
            "measured_peak_tflops": {k: round(v, 4) for k, v in measured_peaks.items()},
            "datasheet": ref_name or None,
            "memory_fits": mem_fits,
        },
        "efficiency": eff,
    }
    if not is_cuda:
        prof["threads"] = threads
    return prof
