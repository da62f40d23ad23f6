"""TraceLens Kineto traces, H100 vs MI300X: one device's trace replayed on the other.

Data: AMD-AGI/TraceLens ``tests/traces/{h100,mi300}/`` (MIT; a leaked HF token in the
metadata redacted): 5 HuggingFace models, bf16 inference, one GPU, the same harness, shapes
recorded; one profiled step (``ProfilerStep#6``) per trace. Software differs (torch 2.6 CUDA
12.4 on an EPYC 9654 host; torch 2.7 ROCm 6.4 on a Xeon 8480C VM, MI300X virtualised).

Each trace is replayed with the other device as the target through the public path,
``tracesim.replay(trace, device=...)``, and compared with the other device's own trace:

* **GPU time**: the sum of the replayed kernel (and copy) durations against the sum of the
  target trace's; per launching op: kernels are grouped by the aten op that launched them
  (the kernel's ``External id``) and its ``Input Dims``, which both traces share, so an op
  that launches two kernels on one device and one on the other is still one sample;
* **step**: the predicted iteration time against the target trace's ``ProfilerStep#6`` (the
  host-side step, as tracesim measures a recording), with ``host_speed`` 1 (the honest
  prediction: nothing says how fast the target's host is) and with the *oracle* host speed
  (the median over shared (op, dims) of the host op time ratio between the two traces: it
  uses the target's trace, so it only separates the GPU side's error from the host's).

Baselines: ``same`` (the recorded time) and ``peak`` (datasheet ratio per kernel: bf16 matrix
peak for GEMM and attention kernels, HBM bandwidth for the rest).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import tracesim
from benchmarks.traces.crossdev.common import (
    Skipped,
    ape,
    device,
    md_table,
    pct,
    peak_ratio,
    signed,
)
from tracesim.ops.classify import classify
from tracesim.trace.sources import load_source

SET = "tracelens-h100-vs-mi300x-hf-inference"
#: (recorded folder, target folder, target profile)
DIRECTIONS = (("h100", "mi300", "mi300x"), ("mi300", "h100", "h100"))
GPU_CATS = ("kernel", "memcpy", "memset")
STEP = "ProfilerStep#6"


def models(data: Path) -> list[str]:
    """File stems present for both devices."""
    base = data / SET
    a = {p.name.removesuffix(".json.gz") for p in (base / "h100").glob("*.json.gz")}
    b = {p.name.removesuffix(".json.gz") for p in (base / "mi300").glob("*.json.gz")}
    if not a & b:
        raise Skipped(f"no TraceLens trace pair under {base}")
    return sorted(a & b, key=lambda s: (base / "h100" / f"{s}.json.gz").stat().st_size)


def op_keys(ops: pd.DataFrame) -> pd.DataFrame:
    """GPU rows (kernels, copies, memsets) of an op table with their launching op's name and
    input dims (``key``: ``name dims``; empty where the trace links no op), the op's class
    and whether it has cost features (``op_cost``)."""
    cpu = ops[(ops.cat == "cpu_op") & (ops.external_id >= 0)]
    cpu = cpu.drop_duplicates("external_id", keep="last").set_index("external_id")
    g = ops[ops.cat.isin(GPU_CATS)]
    launcher = cpu.reindex(g.external_id.to_numpy())
    name = launcher.name.to_numpy()
    dims = launcher.shapes.to_numpy()
    cost = ((launcher.flops.fillna(0) > 0) | (launcher.bytes.fillna(0) > 0)).to_numpy()
    known = ~pd.isna(name)
    key = np.where(known, pd.Series(name).astype(str) + " " + pd.Series(dims).astype(str), "")
    cls = np.array([classify(str(n)) if k else "" for n, k in zip(name, known, strict=True)],
                   dtype=object)
    return pd.DataFrame({"event_id": g.event_id.to_numpy(), "dur_ns": g.dur_ns.to_numpy(float),
                         "key": key, "op": np.where(known, name, ""), "key_class": cls,
                         "op_cost": cost})


def step_ns(ops: pd.DataFrame) -> float:
    """The host-side ``ProfilerStep#6`` of an op table (ns)."""
    s = ops[(ops.cat == "annotation") & (ops.name == STEP)]
    if s.empty:
        raise Skipped(f"no {STEP} in the trace")
    return float(s.dur_ns.iloc[0])


def oracle_host_speed(src_ops: pd.DataFrame, dst_ops: pd.DataFrame) -> float:
    """Median over (op, dims) present in both traces of the mean host time ratio
    recorded / target (> 1: the target's host is faster). Uses the target trace."""
    def means(o: pd.DataFrame) -> pd.Series:
        c = o[(o.cat == "cpu_op") & (o.dur_ns > 0)]
        return c.groupby([c.name, c.shapes.astype(str)]).dur_ns.mean()

    a, b = means(src_ops), means(dst_ops)
    common = a.index.intersection(b.index)
    return float(np.median(a[common] / b[common])) if len(common) else 1.0


def compare(src_path: Path, dst_path: Path, target: str) -> dict[str, Any]:
    """Replay ``src_path`` on ``target`` and compare with ``dst_path`` (module docstring)."""
    dst_prof = device(target)
    src_src = load_source(src_path)
    dst_src = load_source(dst_path)
    pred = tracesim.replay(src_path, device=dst_prof.name)
    src_prof = device(pred.details["recorded"]["device"])
    t = pred.graph.tasks
    gt = t[(t.kind == "gpu") & (t.op_class != "comm")]
    sk = op_keys(src_src.op_table).set_index("event_id")
    rows = sk.reindex(gt.src_event.to_numpy())
    k = pd.DataFrame({"key": rows.key.fillna("").to_numpy(), "op": rows.op.fillna("").to_numpy(),
                      "key_class": rows.key_class.fillna("").to_numpy(),
                      "op_cost": rows.op_cost.fillna(False).to_numpy(bool),
                      "op_class": gt.op_class.to_numpy(), "src_ns": rows.dur_ns.to_numpy(float),
                      "pred_ns": gt.dur_ns.to_numpy(float), "method": np.asarray(pred.methods)[gt.index]})
    k["peak_ns"] = k.src_ns * peak_ratio(src_prof, dst_prof, k.op_class.to_numpy(), "bf16")
    dk = op_keys(dst_src.op_table)
    host_speed = oracle_host_speed(src_src.op_table, dst_src.op_table)
    pred_h = tracesim.replay(src_path, device=dst_prof.name, host_speed=host_speed)
    per_key = _per_key(k, dk)
    src_total, dst_total = float(k.src_ns.sum()), float(dk.dur_ns.sum())
    shares = {m: float(k.src_ns[k.method == m].sum() / src_total) for m in sorted(set(k.method))}
    # inferred although the launching op recorded shapes: the kernel's class (from its name)
    # differs from the op's, so the op's FLOPs and bytes were not taken (tracesim/trace/kineto.py)
    mismatch = (k.method == "inferred") & k.op_cost
    rec_step = float(pred.details["recorded"]["measured_step_time_s"]) * 1e9
    dst_step = step_ns(dst_src.op_table)
    return {
        "model": src_path.name.removesuffix(".json.gz"), "src": src_prof.name, "dst": dst_prof.name,
        "kernels": {"src": len(k), "dst": len(dk)},
        "gpu_ms": {"src": src_total / 1e6, "dst": dst_total / 1e6, "replay": k.pred_ns.sum() / 1e6,
                   "same": src_total / 1e6, "peak": k.peak_ns.sum() / 1e6},
        "method_shares": shares,
        "inferred_with_op_cost_share": float(k.src_ns[mismatch].sum() / src_total),
        "inferred_with_op_cost_classes": {f"{a} (op {b})": float(v / 1e6) for (a, b), v in
                                          k[mismatch].groupby(["op_class", "key_class"]).src_ns.sum()
                                          .sort_values(ascending=False).head(6).items()},
        "matched_share": {"src": float(k.src_ns[k.key.isin(per_key.index)].sum() / src_total),
                          "dst": float(dk.dur_ns[dk.key.isin(per_key.index)].sum() / dst_total)},
        "step_ms": {"src": rec_step / 1e6, "dst": dst_step / 1e6,
                    "replay": pred.iteration_time_s * 1e3, "replay_oracle_host": pred_h.iteration_time_s * 1e3,
                    "same": rec_step / 1e6},
        "oracle_host_speed": host_speed,
        "warnings": list(pred.warnings),
        "per_key": per_key.reset_index().to_dict("records"),
    }


def _per_key(k: pd.DataFrame, dk: pd.DataFrame) -> pd.DataFrame:
    """Per (op, dims) present on both sides: class, kernel counts and summed times (ms)."""
    a = k[k.key != ""].groupby("key").agg(op=("op", "first"), op_class=("key_class", "first"),
                                          n_src=("src_ns", "size"), src=("src_ns", "sum"),
                                          replay=("pred_ns", "sum"), peak=("peak_ns", "sum"))
    b = dk[dk.key != ""].groupby("key").agg(n_dst=("dur_ns", "size"), dst=("dur_ns", "sum"))
    m = a.join(b, how="inner")
    for c in ("src", "replay", "peak", "dst"):
        m[c] = m[c] / 1e6
    m["same"] = m["src"]
    return m


def run(data: Path, only: list[str] | None = None) -> dict[str, Any]:
    """Both directions for every model pair (JSON-ready); a missing profile skips its direction."""
    base = data / SET
    out: dict[str, Any] = {"pairs": [], "skipped": []}
    names = [m for m in models(data) if not only or any(s in m for s in only)]
    for src_dir, dst_dir, target in DIRECTIONS:
        try:
            device(target)
        except Skipped as exc:
            out["skipped"].append(f"{src_dir} -> {target}: {exc}")
            continue
        for m in names:
            out["pairs"].append(compare(base / src_dir / f"{m}.json.gz",
                                        base / dst_dir / f"{m}.json.gz", target))
    out["by_class"] = by_class(out["pairs"])
    return out


def by_class(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per direction and op class (of the launching aten op), over the matched (op, dims) of
    every model: summed times, the error of each sum and the median APE over the ops."""
    res: dict[str, Any] = {}
    frames = [pd.DataFrame(p["per_key"]).assign(direction=f"{p['src']} -> {p['dst']}")
              for p in pairs if p["per_key"]]
    if not frames:
        return res
    df = pd.concat(frames, ignore_index=True)
    groups = [((d, "all"), g) for d, g in df.groupby("direction", sort=True)]
    groups += list(df.groupby(["direction", "op_class"], sort=True))
    for (d, c), g in sorted(groups, key=lambda x: (x[0][0], x[0][1] != "all", x[0][1])):
        res[f"{d} {c}"] = {
            "direction": d, "op_class": c, "ops": len(g), "dst_ms": float(g.dst.sum()),
            **{f"{m}_ms": float(g[m].sum()) for m in ("replay", "same", "peak")},
            **{f"{m}_error": float(signed(g[m].sum(), g.dst.sum())) for m in ("replay", "same", "peak")},
            **{f"{m}_median_ape": float(np.median(ape(g[m], g.dst))) for m in ("replay", "same", "peak")},
        }
    return res


def render(res: dict[str, Any], top: int = 8) -> str:
    """Markdown tables of :func:`run`'s result."""
    out = []
    rows = []
    for p in res["pairs"]:
        g = p["gpu_ms"]
        sh = ", ".join(f"{k} {v:.0%}" for k, v in p["method_shares"].items())
        sh += f" ({p['inferred_with_op_cost_share']:.0%} inferred though the op has shapes)"
        rows.append([_short(p["model"]), f"{p['src']} -> {p['dst']}", f"{p['kernels']['src']} / {p['kernels']['dst']}",
                     f"{g['src']:.2f}", f"{g['dst']:.2f}", f"{g['replay']:.2f}",
                     pct(signed(g["replay"], g["dst"]), True), pct(signed(g["same"], g["dst"]), True),
                     pct(signed(g["peak"], g["dst"]), True), sh])
    out.append(md_table(["model", "recorded -> target", "kernels rec / target", "GPU ms recorded",
                         "GPU ms target (measured)", "GPU ms replay", "replay error", "same error",
                         "peak error", "replay methods (recorded time)"], rows))
    out += ["", f"Step ({STEP}, host side):", ""]
    rows = []
    for p in res["pairs"]:
        s = p["step_ms"]
        rows.append([_short(p["model"]), f"{p['src']} -> {p['dst']}", f"{s['src']:.2f}", f"{s['dst']:.2f}",
                     f"{s['replay']:.2f}", pct(signed(s["replay"], s["dst"]), True),
                     f"{p['oracle_host_speed']:.2f}", f"{s['replay_oracle_host']:.2f}",
                     pct(signed(s["replay_oracle_host"], s["dst"]), True),
                     pct(signed(s["same"], s["dst"]), True)])
    out.append(md_table(["model", "recorded -> target", "recorded ms", "target measured ms",
                         "replay, host-speed 1", "error", "oracle host speed",
                         "replay, oracle host", "error", "same error"], rows))
    out += ["", "Per op class of the launching aten op, (op, Input Dims) present on both sides, "
                "all models:", ""]
    rows = [[b["direction"], b["op_class"], b["ops"], f"{b['dst_ms']:.2f}", f"{b['replay_ms']:.2f}",
             pct(b["replay_error"], True), pct(b["same_error"], True), pct(b["peak_error"], True),
             " / ".join(pct(b[f"{m}_median_ape"]) for m in ("replay", "same", "peak"))]
            for b in res["by_class"].values()]
    out.append(md_table(["direction", "class", "ops", "target ms (measured)", "replay ms",
                         "replay error", "same error", "peak error",
                         "median APE per op: replay / same / peak"], rows))
    if top:
        out += ["", f"Largest {top} ops by target time per direction (all models):", ""]
        rows = []
        for d in sorted({f"{p['src']} -> {p['dst']}" for p in res["pairs"]}):
            ks = [dict(x, model=p["model"]) for p in res["pairs"]
                  if f"{p['src']} -> {p['dst']}" == d for x in p["per_key"]]
            for x in sorted(ks, key=lambda x: -x["dst"])[:top]:
                rows.append([d, _short(x["model"]), f"`{x['key'][:70]}`", x["op_class"],
                             f"{x['n_src']} / {x['n_dst']}", f"{x['src']:.2f}", f"{x['dst']:.2f}",
                             f"{x['replay']:.2f}", pct(signed(x["replay"], x["dst"]), True),
                             pct(signed(x["peak"], x["dst"]), True)])
        out.append(md_table(["direction", "model", "op dims", "class", "kernels rec / target",
                             "recorded ms", "target ms", "replay ms", "replay error", "peak error"],
                            rows))
    out += [f"skipped: {s}" for s in res["skipped"]]
    return "\n".join(out)


def _short(model: str) -> str:
    return model.split("__")[0].split("_", 1)[-1]
