"""How far Megatron-Bridge's published throughput moves between releases on the same system,
model, precision and layout (``megatron_bridge_releases.csv``; docs/accuracy.md, "The
published tables between releases").

    .venv/bin/python benchmarks/published/release_spread.py [--markdown]

Per configuration: its releases, lowest and highest tokens/s per GPU, the ratio; then the
distribution of the ratios, dense and MoE apart. A model that does not know the software
release (tracesim models one Megatron-Core / Transformer Engine stack per GPU) cannot match
two releases of one configuration closer than half this ratio apart.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections import defaultdict
from pathlib import Path

CSV = Path(__file__).with_name("megatron_bridge_releases.csv")
KEY = ("system", "model", "gpus", "precision", "gbs", "mbs", "seq_len", "fsdp", "tp", "pp", "cp",
       "vp", "ep")
#: the dense models of the tables; every other model is a mixture of experts
DENSE = ("LLAMA3_8B", "LLAMA3_70B", "LLAMA3.1_405B")


def configs(path: Path = CSV) -> dict[tuple[str, ...], dict[str, float]]:
    """``{config: {release: tokens/s per GPU}}`` (a config is the :data:`KEY` columns)."""
    out: dict[tuple[str, ...], dict[str, float]] = defaultdict(dict)
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            key = tuple(row[k] for k in KEY)
            if row["release"] in out[key]:
                raise ValueError(f"{path}: {key} appears twice in release {row['release']}")
            out[key][row["release"]] = float(row["tokens_per_s_per_gpu"])
    return dict(out)


def spread(values: dict[str, float]) -> float:
    """Highest over lowest of one configuration's published values."""
    return max(values.values()) / min(values.values())


def summary(data: dict[tuple[str, ...], dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per group (``all``, ``dense``, ``moe``): configurations, median and largest ratio, and
    how many move by more than 10% and 20%."""
    groups: dict[str, list[float]] = {"all": [], "dense": [], "moe": []}
    for key, vals in data.items():
        r = spread(vals)
        groups["all"].append(r)
        groups["dense" if key[1] in DENSE else "moe"].append(r)
    return {g: {"configs": len(rs), "median": statistics.median(rs), "largest": max(rs),
                "over_10pct": sum(r > 1.10 for r in rs), "over_20pct": sum(r > 1.20 for r in rs)}
            for g, rs in groups.items() if rs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="the per-configuration table as markdown")
    ap.add_argument("--csv", type=Path, default=CSV)
    args = ap.parse_args()
    data = configs(args.csv)
    rows = sorted(data.items(), key=lambda kv: -spread(kv[1]))
    if args.markdown:
        print("| system | model | precision | GPUs | layout (gbs mbs tp pp cp vp ep) | releases | "
              "low | high | high / low |")
        print("|---|---|---|---|---|---|---|---|---|")
    for key, vals in rows:
        system, model, gpus, prec, gbs, mbs, _, fsdp, tp, pp, cp, vp, ep = key
        layout = f"{gbs} {mbs} {tp} {pp} {cp} {vp} {ep}" + (f" fsdp {fsdp}" if fsdp != "0" else "")
        rel = ", ".join(f"{r}: {v:,.0f}" for r, v in vals.items())
        if args.markdown:
            print(f"| {system} | {model} | {prec} | {gpus} | {layout} | {rel} | "
                  f"{min(vals.values()):,.0f} | {max(vals.values()):,.0f} | {spread(vals):.3f} |")
        else:
            print(f"{spread(vals):6.3f}  {system:9s} {model:24s} {prec:6s} {gpus:>5s} GPUs  {layout:28s} {rel}")
    print()
    for g, s in summary(data).items():
        print(f"{g}: {s['configs']} configurations in two or more releases; highest / lowest: "
              f"median {s['median']:.3f}, largest {s['largest']:.3f}; more than 10% apart: "
              f"{s['over_10pct']}, more than 20%: {s['over_20pct']}")


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # piped into head
        pass
