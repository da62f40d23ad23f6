"""Measure the device at hand with torch (``tracesim calibrate``): kernel timings over sizes.

:func:`calibrate` times GEMMs, copies, pointwise / norm / softmax / reduction / embedding /
optimizer / attention ops and a one-element op, and hands the samples to
:func:`tracesim.hardware.calibrate.assemble_profile`, which fits the profile's curves.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from tracesim.errors import InputError
from tracesim.hardware.calibrate import assemble_profile
from tracesim.ops.classify import op_cost


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
    machine = _cpu_model() if not is_cuda else host
    return assemble_profile(samples, launch, peaks, bw, mem_gib, is_cuda, name, ref_name, machine, quick,
                     str(torch.__version__), torch.get_num_threads(), attn_units=attn_units)


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
