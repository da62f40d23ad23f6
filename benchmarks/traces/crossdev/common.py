"""Shared pieces of the cross-device study: where the data is, error metrics, the naive
baselines, retiming a flat list of kernels through the replay's own transform, and what
calibrated each device profile.

Errors are relative: ``APE = |predicted / measured - 1|``; a summary gives the mean (MAPE),
the median APE and the median signed error (``bias``: > 0 predicts too slow).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracesim.errors import InputError
from tracesim.graph.taskgraph import TaskGraph, make_edges, make_lanes, make_tasks
from tracesim.hardware.costmodel import MATRIX_CLASSES
from tracesim.hardware.device import DeviceProfile, get_device
from tracesim.transform.retime import retime

ROOT = Path(__file__).resolve().parents[3]
#: the data sets in the repository (only what the study reads; LICENSE and SOURCE.txt per set)
REPO_DATA = ROOT / "benchmarks" / "traces" / "data" / "cross_device"
#: names that would show a test set among a profile's calibration sources
TEST_SET_NAMES = ("tracelens", "vidur", "neusight", "timesformer", "owlv2", "mi300x vf")


class Skipped(Exception):
    """A part of the study that cannot run here (a missing profile or data set)."""


def default_data() -> Path:
    """The repository's copy of the data sets (``--data`` points elsewhere)."""
    return REPO_DATA


def device(name: str) -> DeviceProfile:
    """A shipped profile, or :class:`Skipped` naming what is missing."""
    try:
        return get_device(name)
    except InputError as exc:
        raise Skipped(f"no device profile {name!r} yet ({exc.message}); rerun this part once "
                      "it is shipped") from None


# --------------------------------------------------------------------------- metrics


def ape(pred: Any, meas: Any) -> np.ndarray:
    """|pred / meas - 1| per element (NaN where the measurement is not positive)."""
    p = np.asarray(pred, dtype=float)
    m = np.asarray(meas, dtype=float)
    return np.abs(signed(p, m))


def signed(pred: Any, meas: Any) -> np.ndarray:
    """pred / meas - 1 per element (NaN where the measurement is not positive)."""
    p = np.asarray(pred, dtype=float)
    m = np.asarray(meas, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(m > 0, p / m - 1.0, np.nan)


def summary(pred: Any, meas: Any) -> dict[str, float]:
    """n, MAPE, median APE and median signed error (bias) of paired samples."""
    e = signed(pred, meas)
    e = e[np.isfinite(e)]
    if not len(e):
        return {"n": 0, "mape": float("nan"), "median_ape": float("nan"), "bias": float("nan")}
    return {"n": int(len(e)), "mape": float(np.mean(np.abs(e))),
            "median_ape": float(np.median(np.abs(e))), "bias": float(np.median(e))}


# --------------------------------------------------------------------------- baselines


def peak_ratio(src: DeviceProfile, dst: DeviceProfile, op_class: Any, dtype: str) -> np.ndarray:
    """The datasheet baseline's factor on a measured time (target / recorded): the matrix
    peak ratio at ``dtype`` for GEMM and attention, the HBM bandwidth ratio otherwise."""
    cls = np.asarray(op_class, dtype=object)
    matrix = np.isin(cls, MATRIX_CLASSES)
    compute = src.peak_flops(dtype) / dst.peak_flops(dtype)
    memory = src.hbm_GBps / dst.hbm_GBps
    return np.where(matrix, compute, memory).astype(float)


def retime_kernels(src: DeviceProfile, dst: DeviceProfile, op_class: Sequence[str],
                   dur_ns: Sequence[float], *, names: Sequence[str] | None = None,
                   dtype: str | Sequence[str] = "", flops: Sequence[float] | None = None,
                   nbytes: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Kernel times on ``dst`` through :func:`tracesim.transform.retime.retime`, the replay's
    own transform, for kernels given as columns (one GPU lane, no host).

    Without ``flops`` / ``nbytes`` every kernel takes the **inferred** path (work inverted
    from the measured time on ``src``'s model of its class); with them, **scaled**.
    ``dtype`` is the op's dtype (retime's fallback after the kernel name's hint).

    Returns:
        (target durations in ns, retime's method per kernel).
    """
    n = len(dur_ns)
    dts = [dtype] * n if isinstance(dtype, str) else list(dtype)
    tasks = make_tasks({
        "rank": np.zeros(n, dtype=np.int32), "lane": np.zeros(n, dtype=np.int32),
        "kind": ["gpu"] * n, "name": list(names) if names is not None else [""] * n,
        "dur_ns": np.rint(np.asarray(dur_ns, dtype=float)).astype(np.int64),
        "op_class": list(op_class),
        "flops": np.zeros(n) if flops is None else np.asarray(flops, dtype=float),
        "bytes": np.zeros(n) if nbytes is None else np.asarray(nbytes, dtype=float),
        "cat": ["kernel"] * n, "src_event": np.arange(n, dtype=np.int64),
    })
    graph = TaskGraph(tasks, make_edges([], [], "launch"),
                      make_lanes({"rank": [0], "name": ["stream:7"], "kind": ["gpu"]}))
    ops = pd.DataFrame({"rank": np.zeros(n, dtype=np.int64), "event_id": np.arange(n),
                        "dtype": dts})
    rt = retime(graph, src, dst, op_table=ops)
    return rt.graph.tasks["dur_ns"].to_numpy().astype(float), np.asarray(rt.methods)


# --------------------------------------------------------------------------- provenance

#: calibration keys worth quoting, in order, and how the tables label them
_CAL_KEYS = (
    ("datasheet", "datasheet"),
    ("shape_model.gemm.plateau", "GEMM plateau"),
    ("efficiency.gemm.compute (size path)", "GEMM size curve"),
    ("shape_model.attention, efficiency.attention", "attention"),
    ("efficiency memory curves", "memory"),
    ("launch_overhead_us", "launch"),
)


def provenance(prof: DeviceProfile) -> dict[str, Any]:
    """What calibrated a profile (its ``source`` and ``calibration`` record) and whether any
    test set of this study is named there (``test_sets_named``: must stay empty)."""
    cal = prof.raw.get("calibration") if isinstance(prof.raw, Mapping) else None
    text = f"{prof.source} {cal}".lower()
    out: dict[str, Any] = {"device": prof.name, "source": prof.source,
                           "test_sets_named": [k for k in TEST_SET_NAMES if k in text]}
    if not isinstance(cal, Mapping):
        out["calibration"] = {"record": "none (datasheet figures and plateaus from before the "
                                        "kernel-level rewrite)"}
        return out
    quoted: dict[str, str] = {}
    for key, label in _CAL_KEYS:
        v = cal.get(key)
        if isinstance(v, Mapping):
            parts = [f"{k}: {_short(str(x))}" for k, x in v.items()
                     if k in ("default", "fp32", "peak_tflops, hbm", "bf16, fp16, fp8, hbm")]
            quoted[label] = "; ".join(parts)
        elif v is not None:
            quoted[label] = _short(str(v))
    out["calibration"] = quoted
    out["calibrated_on"] = {label: ", ".join(_sources(str(cal.get(key))))
                            for key, label in _CAL_KEYS[1:] if cal.get(key) is not None}
    return out


#: phrases naming a calibration source in the profiles' records (besides ``source KEY``)
_PHRASES = ("DeepBench", "FA2 paper", "public A100 traces", "AlexNet A100 trace",
            "sampled_128rank_r0", "derived")


def _sources(text: str) -> list[str]:
    """The data set keys (``benchmarks/kernels/data/SOURCES.md``) a calibration entry cites."""
    keys = re.findall(r"source ([A-Z][A-Z0-9-]+)", text)
    if "same 41 shapes" in text:  # the size curve's ramp: fitted on the XLA100 table
        keys.append("XLA100")
    keys += [p for p in _PHRASES if p.lower() in text.lower()]
    return list(dict.fromkeys(keys))


def _short(s: str, n: int = 150) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 3] + "..."


# --------------------------------------------------------------------------- output


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def pct(x: Any, signed_: bool = False) -> str:
    """A fraction (a float or a 0-d array) as a percentage (``+12.3%`` with ``signed_``); ``-`` for NaN."""
    if x is None or not np.isfinite(x):
        return "-"
    return f"{x * 100:+.1f}%" if signed_ else f"{x * 100:.1f}%"
