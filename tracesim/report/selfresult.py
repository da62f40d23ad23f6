"""The replay result object for self-replay (recorded device and layout)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracesim.engine.replay import ReplayResult
from tracesim.errors import InputError
from tracesim.graph.taskgraph import TaskGraph
from tracesim.report.breakdown import mean_breakdown, rank_breakdowns
from tracesim.report.steps import steady_windows, step_times
from tracesim.trace.sources import Source


def _flops_by_dtype(source: Source, rank: int, step: str) -> dict[str, float]:
    """FLOPs of the outermost host ops with FLOPs in one step (nested ops counted once), by
    the dtype of each op's inputs ("" where the trace does not say)."""
    ops = source.op_table
    sel = ops[(ops["rank"] == rank) & (ops["step"] == step)]
    if sel.empty:
        return {}
    has = sel["flops"].to_numpy() > 0
    host = sel["cat"].isin(["cpu_op", "annotation"]).to_numpy()
    flop_ids = set(sel["event_id"].to_numpy()[has & host].tolist())
    parent = dict(zip(sel["event_id"].tolist(), sel["parent_id"].tolist(), strict=True))
    dtypes = sel["dtype"].fillna("").astype(str).to_numpy()
    out: dict[str, float] = {}
    pick = has & host
    for eid, fl, dt in zip(sel["event_id"].to_numpy()[pick], sel["flops"].to_numpy()[pick],
                           dtypes[pick], strict=True):
        p = parent.get(int(eid), -1)
        nested = False
        hops = 0
        while p >= 0 and hops < 256:
            if p in flop_ids:
                nested = True
                break
            p = parent.get(int(p), -1)
            hops += 1
        if not nested:
            out[str(dt)] = out.get(str(dt), 0.0) + float(fl)
    return out


def model_flops_per_step(source: Source, rank: int, step: str) -> float:
    """FLOPs of the outermost host ops with FLOPs in one step (nested ops counted once)."""
    return sum(_flops_by_dtype(source, rank, step).values())


def flops_dtype(source: Source, rank: int, step: str, default: str) -> str:
    """The dtype that carries most of a step's counted FLOPs (the peak MFU is taken against),
    ``default`` when the trace names none of ``fp32 / tf32 / bf16 / fp16 / fp8``: a recorded
    model's dtype (bundles say it) is the better default."""
    by = {k: v for k, v in _flops_by_dtype(source, rank, step).items()
          if k in ("fp32", "tf32", "bf16", "fp16", "fp8")}
    return max(by, key=lambda k: by[k]) if by else default


def cpu_mfu_note(dev: Any, dtype: str) -> str:
    """Why a replay on ``dev`` gives no MFU for FLOPs in ``dtype``: a CPU profile without a
    peak for it (its one peak is its calibration's fp32 GEMM rate, which BF16 GEMMs on a CPU
    with BF16 units exceed); "" otherwise."""
    if dev.kind == "cpu" and not dev.peak_tflops.get(dtype):
        return (f"MFU not given: the {dev.name} profile has no {dtype} peak (a CPU profile's "
                "is its fp32 GEMM rate, tracesim calibrate)")
    return ""


def self_result(source: Source, graph: TaskGraph, result: ReplayResult,
                unprofiled: bool = False, completion: bool = False,
                ) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """The replay --json object for a self-replay (DESIGN.md keys; unknowns are null), and
    each rank's breakdown over its steady step whose prediction is nearest their median.

    ``unprofiled``: the graph had the profiler's per-event cost taken out, so the prediction is
    of the unprofiled step and is compared with the bundle's unprofiled reference steps
    (``meta.yaml: measured_step_time_s``); otherwise with the recorded (profiled) steps.
    ``measured_profiled_step_s`` is always the median of the recorded steady steps: rank 0's
    steps within 20% of its median, the same steps whose predictions' median is
    ``iteration_time_s`` (a warm-up or a stalled step left out of both, so an even count of
    uneven steps does not compare one side's middle pair with the other's middle step).

    ``completion``: a step lasts as long as the busier of the host's step and the device
    work it launched (:func:`tracesim.report.steps.steady_windows`), for replays on another
    device or network, where the recorded synchronisation may no longer hold the host
    back."""
    steps = step_times(graph, result)
    if not steps:
        raise InputError("the trace has no ProfilerStep#N annotations, so it has no steps to "
                         "replay (record with torch.profiler and call prof.step())", source.path)
    win: dict[tuple[int, int], tuple[int, int]] = {}
    if completion:
        win = steady_windows(graph, result, steps)
        steps = [(rk, nm, ev, m, win[(rk, ev)][1] - win[(rk, ev)][0], b, e)
                 for rk, nm, ev, m, _p, b, e in steps]
    ranks = sorted({s[0] for s in steps})
    r0 = ranks[0]
    windows: dict[int, tuple[int, int]] = {}
    for rk in ranks:  # each rank's steady step whose prediction is closest to their median
        own = [s for s in steps if s[0] == rk]
        med_rk = float(np.median([s[3] for s in own]))
        steady_rk = [s for s in own if abs(s[3] - med_rk) <= 0.2 * med_rk] or own
        mid = float(np.median([s[4] for s in steady_rk]))
        pick = min(steady_rk, key=lambda s: (abs(s[4] - mid), -s[2]))
        b, e = pick[5:7]
        windows[rk] = (win[(rk, pick[2])] if completion
                       else (int(result.start_ns[b]), int(result.start_ns[e])))
    mine = [s for s in steps if s[0] == r0]
    meas = np.array([s[3] for s in mine], dtype=float)
    med = float(np.median(meas))
    steady = [s for s in mine if abs(s[3] - med) <= 0.2 * med] or mine
    it_ns = float(np.median([s[4] for s in steady]))
    last = steady[-1]
    per_rank = rank_breakdowns(graph, result.start_ns, result.end_ns, result.makespan_ns, windows)
    bd = mean_breakdown(per_rank, it_ns / 1e9)  # each rank's own step, as shares of this one
    meta = source.meta or {}
    reference = meta.get("measured_step_time_s")
    med_steady = float(np.median([s[3] for s in steady]))
    measured_s = med_steady / 1e9
    if unprofiled and isinstance(reference, dict) and isinstance(reference.get("median"), (int, float)):
        measured_s = float(reference["median"])
    model = meta.get("model")
    par = meta.get("parallel") or {"tp": 1, "pp": 1, "dp": len(ranks), "cp": 1, "ep": 1}
    tokens = None
    if "batch" in meta and "seq_len" in meta:
        tokens = float(meta["batch"]) * float(meta["seq_len"]) * float(par.get("dp", 1))
    flops = model_flops_per_step(source, r0, last[1])
    tflops = flops / (it_ns / 1e9) / 1e12 if flops and it_ns > 0 else None
    mfu = None
    mfu_note = ""
    device_name = source.device or str(meta.get("device", ""))
    recorded = (model or {}).get("dtype") if isinstance(model, dict) else None
    dtype = str(recorded) if recorded else flops_dtype(source, r0, last[1], "fp32")
    try:
        from tracesim.hardware.device import get_device

        dev = get_device("host-cpu" if device_name in ("cpu", "") else device_name, recorded=True)
        # no fp32 fallback on a CPU: cpu_mfu_note
        peak = dev.peak_tflops.get(dtype) or (dev.peak_tflops.get("fp32") if dev.kind != "cpu" else None)
        if tflops and peak:
            mfu = tflops / peak
        elif tflops:
            mfu_note = cpu_mfu_note(dev, dtype)
    except Exception:  # unknown device: MFU is not defined, report null
        mfu = None
    return {
        "mode": "self-replay",
        "source": str(source.path),
        "iteration_time_s": it_ns / 1e9,
        "prediction": "unprofiled" if unprofiled else "profiled",
        "measured_step_time_s": measured_s,
        "measured_profiled_step_s": med_steady / 1e9,
        "tokens_per_s": tokens / (it_ns / 1e9) if tokens else None,
        "tflops_per_gpu": tflops,
        "mfu": mfu,
        "mfu_dtype": dtype,
        "mfu_note": mfu_note,
        "gpus": len(ranks),
        "device": device_name,
        "model": model,
        "parallel": par,
        "cluster": "recorded",
        "breakdown": bd,
        "memory_gib_per_gpu": None,
        "steps": [
            {"rank": s[0], "step": s[1], "measured_s": s[3] / 1e9, "predicted_s": s[4] / 1e9}
            for s in steps
        ],
        "simulated_events": int(result.events),
        "tasks": int(graph.n_tasks),
    }, per_rank
