"""Benchmark: reading a large Kineto trace with the streaming parser vs ``json.load``.

Generates a synthetic but realistically shaped torch.profiler trace of about ``--mb``
megabytes (plain JSON, in a temporary directory that is deleted afterwards): ProfilerStep
annotations, nested ``aten::`` ops with shapes, ``cudaLaunchKernel`` runtime calls, kernels
with grid / block / stream, memcpys, ``ac2g`` flow events and metadata, in the proportions
of the public A100 / V100 traces. Then, each in a fresh process, it measures wall time and
peak RSS (``ru_maxrss``) of

* ``json.load``: ``tracesim.trace.kineto.load_json_file`` (the whole JSON tree);
* ``stream``: ``tracesim.trace.stream.load_trace_streaming`` keeping the events the op
  table reads (what ``load_trace_json`` does for files of ``STREAM_MIN_BYTES`` or more);
* ``read_kineto (json.load)`` / ``read_kineto (stream)``: the whole op-table read.

CPU time (user + system of the measuring process) is reported beside wall time: on a
shared machine it is the steadier of the two.

Usage::

    .venv/bin/python benchmarks/speed/bench_large_trace.py [--mb 500] [--modes json,stream,...] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_MEASURE = r"""
import resource, sys, time
mode, path = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
if mode == "json":
    from tracesim.trace.kineto import load_json_file
    n = len(load_json_file(path)["traceEvents"])
elif mode == "stream":
    from tracesim.trace.kineto import _op_event
    from tracesim.trace.stream import load_trace_streaming
    n = len(load_trace_streaming(path, keep=_op_event)["traceEvents"])
else:
    from tracesim.trace import kineto
    if mode == "read_json":
        kineto.STREAM_MIN_BYTES = 1 << 62
    n = len(kineto.read_kineto(path))
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_SELF)
print(n, wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0)
"""

MODES = {"json": "json.load (load_json_file)", "stream": "stream (load_trace_streaming)",
         "read_json": "read_kineto via json.load", "read_stream": "read_kineto via stream"}


def write_trace(path: Path, target_bytes: int) -> dict[str, int]:
    """Write a synthetic Kineto trace of about ``target_bytes``; returns event counts."""
    counts = {"steps": 0, "cpu_op": 0, "runtime": 0, "kernel": 0, "memcpy": 0, "flow": 0}
    kernels = ["ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn",
               "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl"
               "(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() "
               "const::{lambda()#2}::operator()() const::{lambda(c10::BFloat16)#1}, "
               "at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl, "
               "at::detail::Array<char*, 2>)",
               "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>",
               "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>",
               "ncclKernel_AllReduce_RING_LL_Sum_bfloat16"]
    ops = [("aten::linear", "[[8, 2048, 4096], [16384, 4096], [16384]]", "['c10::BFloat16', 'c10::BFloat16', 'c10::BFloat16']"),
           ("aten::gelu", "[[8, 2048, 16384], []]", "['c10::BFloat16', 'c10::string_view']"),
           ("aten::layer_norm", "[[8, 2048, 4096], [], [4096], [4096], [], []]", "['c10::BFloat16', '', 'c10::BFloat16', 'c10::BFloat16', 'Scalar', 'Scalar']"),
           ("aten::mm", "[[16384, 4096], [4096, 4096]]", "['c10::BFloat16', 'c10::BFloat16']")]
    ts = 1_700_000_000_000.0
    corr = ext = rf = seq = 0
    written = 0
    with open(path, "w") as f:
        head = ('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", '
                '"totalGlobalMem": 85198045184, "computeMajor": 8, "computeMinor": 0, '
                '"numSms": 108}], "distributedInfo": {"backend": "nccl", "rank": 0, '
                '"world_size": 8}, "traceEvents": [\n')
        f.write(head)
        written += len(head)
        meta = ('{"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, '
                '"args": {"name": "python"}},\n')
        f.write(meta * 20)
        written += len(meta) * 20
        step = 0
        while written < target_bytes:
            counts["steps"] += 1
            buf = []
            step_start = ts
            n_ops = 2000
            for i in range(n_ops):
                name, dims, types = ops[i % len(ops)]
                corr += 1
                ext += 1
                rf += 1
                seq += 1
                dur = 40.0 + (i % 7)
                buf.append(
                    f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 1234, "tid": 1234, '
                    f'"ts": {ts:.3f}, "dur": {dur:.3f}, "args": {{"External id": {ext}, '
                    f'"Record function id": {rf}, "Sequence number": {seq}, "Fwd thread id": 0, '
                    f'"Ev Idx": {ext}, "Input Dims": {dims}, "Input type": {json.dumps(types)}, '
                    f'"Input Strides": [[8388608, 4096, 1], [4096, 1]]}}}},\n')
                buf.append(
                    f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1234, '
                    f'"tid": 1234, "ts": {ts + 5:.3f}, "dur": 6.125, "args": {{"External id": {ext}, '
                    f'"cbid": 211, "correlation": {corr}}}}},\n')
                k = kernels[i % len(kernels)]
                buf.append(
                    f'{{"ph": "X", "cat": "kernel", "name": "{k}", "pid": 0, "tid": 7, '
                    f'"ts": {ts + 20:.3f}, "dur": {dur * 2:.3f}, "args": {{"External id": {ext}, '
                    f'"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": {corr}, '
                    f'"registers per thread": 168, "shared memory": 98304, "blocks per SM": 1.185185, '
                    f'"warps per SM": 9.481482, "grid": [128, 1, 1], "block": [256, 1, 1], '
                    f'"est. achieved occupancy %": 13}}}},\n')
                buf.append(
                    f'{{"ph": "s", "id": {corr}, "pid": 1234, "tid": 1234, "ts": {ts + 5:.3f}, '
                    f'"cat": "ac2g", "name": "ac2g"}},\n')
                buf.append(
                    f'{{"ph": "f", "id": {corr}, "pid": 0, "tid": 7, "ts": {ts + 20:.3f}, '
                    f'"cat": "ac2g", "name": "ac2g", "bp": "e"}},\n')
                counts["cpu_op"] += 1
                counts["runtime"] += 1
                counts["kernel"] += 1
                counts["flow"] += 2
                if i % 50 == 0:
                    corr += 1
                    buf.append(
                        f'{{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", '
                        f'"pid": 0, "tid": 7, "ts": {ts + 30:.3f}, "dur": 3.5, "args": {{"device": 0, '
                        f'"context": 1, "stream": 7, "correlation": {corr}, "bytes": 1048576, '
                        f'"memory bandwidth (GB/s)": 23.9}}}},\n')
                    counts["memcpy"] += 1
                ts += dur + 2.0
            buf.append(
                f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": 1234, '
                f'"tid": 1234, "ts": {step_start - 1:.3f}, "dur": {ts - step_start + 2:.3f}, '
                f'"args": {{"External id": {ext + 1}}}}},\n')
            step += 1
            text = "".join(buf)
            f.write(text)
            written += len(text)
        tail = ('{"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", '
                f'"ts": {ts:.3f}}}\n], "traceName": "synthetic.json", "displayTimeUnit": "ms", '
                '"baseTimeNanoseconds": 1700000000000000000}\n')
        f.write(tail)
    return counts


def measure(mode: str, path: Path) -> dict[str, float]:
    p = subprocess.run([sys.executable, "-c", _MEASURE, mode, str(path)], cwd=ROOT,
                       capture_output=True, text=True, check=True)
    n, wall, cpu, rss = p.stdout.split()
    return {"rows": int(n), "wall_s": float(wall), "cpu_s": float(cpu), "peak_rss_MiB": float(rss)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=500.0, help="trace size in MB (10**6 bytes)")
    ap.add_argument("--modes", default="json,stream,read_json,read_stream")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tracesim-bench-") as d:
        path = Path(d) / "large.json"
        t0 = time.perf_counter()
        counts = write_trace(path, int(args.mb * 1e6))
        gen_s = time.perf_counter() - t0
        size = os.path.getsize(path)
        rows = {m: measure(m, path) for m in args.modes.split(",")}
    if args.json:
        print(json.dumps({"bytes": size, "events": counts, "generate_s": gen_s, "modes": rows},
                         indent=2))
        return 0
    print(f"synthetic trace: {size / 1e6:.0f} MB, {sum(counts.values())} events "
          f"({counts['steps']} steps), generated in {gen_s:.0f} s")
    print(f"{'mode':<30} {'wall s':>8} {'CPU s':>8} {'peak RSS MiB':>13} {'rows':>10}")
    for m, r in rows.items():
        print(f"{MODES[m]:<30} {r['wall_s']:>8.1f} {r['cpu_s']:>8.1f} {r['peak_rss_MiB']:>13.0f} "
              f"{r['rows']:>10}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
