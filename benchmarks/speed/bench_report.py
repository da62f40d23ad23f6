"""The tables and the plot of docs/performance.md from the results of ``bench.py``.

:func:`markdown` writes the generated part of docs/performance.md (between the
``bench:begin`` / ``bench:end`` markers), :func:`write_docs` puts it into the file and draws
``docs/performance_scaling.png``; :data:`TARGETS` are the speed targets each row is read
against.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[2] / "docs"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"

#: the speed targets (docs/performance.md): (wall s, peak RSS GiB)
TARGETS = {"S1": (10.0, 2.0), "S2": (5.0, 2.0), "S3": (30.0, 4.0), "S4": (300.0, 2.0),
           "S2 full": (300.0, 4.0)}
AGREEMENT_TOL = 0.005


def _fmt(x: Any, spec: str = ".2f") -> str:
    return "n/a" if x is None else format(x, spec)


def _target_of(row: str) -> tuple[float, float]:
    return TARGETS.get(row, TARGETS.get(row.split()[0], (math.inf, math.inf)))


def markdown(data: dict[str, Any]) -> str:
    """The generated part of docs/performance.md."""
    m = data["machine"]
    out = [f"Measured {m['date']} on {m['cpu']} ({m['cores']} cores, {m['memory_gib']} GiB), "
           f"Python {m['python']}, numpy {m['numpy']}, SimPy {m['simpy']}, commit `{m['commit']}`, "
           f"with `{data['command']}`. *load*: the 1-minute load average before the run (2 cores; "
           f"other jobs on the machine slow a run down).", ""]
    out += ["#### Scenarios", "",
            "| | mode | GPUs | tasks | events | wall (s) | target | peak RSS (GiB) | target | "
            "events/s | iteration (s) | load |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in data["scenarios"].items():
        t_wall, t_rss = _target_of(name)
        if "error" in r:
            out.append(f"| {name} | | | | | {r['error']} | < {t_wall:.0f} (**missed**) | | < {t_rss:.0f} | | | "
                       f"{r.get('load_before', '')} |")
            continue
        mode = ("reduced" if r["symmetric"] else "full") + f", {r['network']}"
        if r.get("merge_full"):  # results of commits before full replays merged by default
            mode += ", merged"
        if r.get("per_op"):
            mode += ", per op"
        ok_w = "met" if r["wall_s"] < t_wall else "**missed**"
        ok_r = "met" if r["peak_rss_gib"] < t_rss else "**missed**"
        tw, tr = f"< {t_wall:.0f} ({ok_w})", f"< {t_rss:.0f} ({ok_r})"
        if r.get("per_op"):  # what replay --full -o OUT builds: no target of its own
            tw = tr = "(no target)"
        out.append(f"| {name} | {mode} | {r['gpus']:,} | {r['tasks']:,} | {r['events']:,} | "
                   f"{r['wall_s']:.2f} | {tw} | {r['peak_rss_gib']:.2f} | {tr} | "
                   f"{r['events_per_s']:,} | {r['iteration_time_s']:.4f} | {r['load_before']} |")
    if data.get("agreement"):
        out += ["", "#### Reduced vs full", "",
                f"Iteration time of the symmetry-reduced replay (the default network, then `--network "
                f"flow`) against the full one (`--full`: every rank simulated, flow network); target: "
                f"within {AGREEMENT_TOL:.1%}.", "",
                "| run | reduced, default (s) | vs full | reduced, flow (s) | vs full | full (s) | full wall (s) |",
                "|---|---|---|---|---|---|---|"]
        for name, a in data["agreement"].items():
            full = a["full"]
            cells = []
            for key in ("reduced", "reduced_flow"):
                r = a.get(key) or {"error": "not run"}
                if "error" in r or "error" in full:
                    cells += [r.get("error", _fmt(r.get("iteration_time_s"), ".5f")), ""]
                    continue
                d = r["iteration_time_s"] / full["iteration_time_s"] - 1
                ok = "met" if abs(d) <= AGREEMENT_TOL else "**missed**"
                cells += [f"{r['iteration_time_s']:.5f}", f"{d:+.3%} ({ok})"]
            fcell = full.get("error") or f"{full['iteration_time_s']:.5f}"
            fwall = "" if "error" in full else f"{full['wall_s']:.1f}"
            out.append(f"| {name} | {' | '.join(cells)} | {fcell} | {fwall} |")
    for key, label, xkey in (("scaling_gpus", "Scaling with GPUs (S2 model and layout, 64 micro-batches "
                              "per pipeline, DP = GPUs / 64)", "gpus"),
                             ("scaling_layers", "Scaling with layers (S2 layout on 1024 GPUs, vpp 3)", "layers")):
        rows = data.get(key)
        if not rows:
            continue
        nets = sorted({r["net"] for r in rows})
        out += ["", f"#### {label}", "",
                f"| {xkey} | " + " | ".join(f"tasks ({n}) | events ({n}) | wall s ({n}) | RSS GiB ({n}) | "
                                           f"iteration s ({n})" for n in nets) + " |",
                "|---|" + "---|" * (5 * len(nets))]
        for x in sorted({r[xkey] for r in rows}):
            cells = []
            for n in nets:
                r = next((q for q in rows if q[xkey] == x and q["net"] == n), None)
                if r is None or "error" in r:
                    cells += [(r or {}).get("error", "not run"), "", "", "", ""]
                else:
                    cells += [f"{r['tasks']:,}", f"{r['events']:,}", f"{r['wall_s']:.2f}",
                              f"{r['peak_rss_gib']:.2f}", f"{r['iteration_time_s']:.4f}"]
            out.append(f"| {x:,} | " + " | ".join(cells) + " |")
        ex = data.get(f"exponents_{xkey}", {})
        rng = "1,024 to 16,384 GPUs" if xkey == "gpus" else "24 to 96 layers"
        out += ["", f"Measured exponent of wall time against {xkey} ({rng}; least-squares slope on "
                f"log-log axes, 1 = linear): " + "; ".join(
                    f"**{_fmt(ex.get(n, {}).get('wall'), '.3f')}** ({n}; events "
                    f"{_fmt(ex.get(n, {}).get('events'), '.3f')}, peak RSS {_fmt(ex.get(n, {}).get('rss'), '.3f')})"
                    for n in nets) + "."]
    if data.get("scaling_gpus") or data.get("scaling_layers"):
        out += ["", "![wall time and peak RSS against GPUs and layers](performance_scaling.png)"]
    return "\n".join(out) + "\n"


def plot(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, xkey, xlabel in ((axes[0], "scaling_gpus", "gpus", "GPUs (S2 model, TP8 PP8)"),
                                  (axes[1], "scaling_layers", "layers", "layers (S2 layout, 1024 GPUs)")):
        rows = [r for r in data.get(key) or [] if "error" not in r]
        ax2 = ax.twinx()
        for i, net in enumerate(sorted({r["net"] for r in rows})):
            sel = sorted((r for r in rows if r["net"] == net), key=lambda r: r[xkey])
            xs = [r[xkey] for r in sel]
            e = data.get(f"exponents_{xkey}", {}).get(net, {}).get("wall")
            ax.plot(xs, [r["wall_s"] for r in sel], "o-", color=f"C{i}",
                    label=f"wall, {net} (slope {_fmt(e, '.2f')})")
            ax2.plot(xs, [r["peak_rss_gib"] for r in sel], "s:", color=f"C{i}", alpha=0.6,
                     label=f"peak RSS, {net}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ticks = sorted({r[xkey] for r in rows})
        ax.set_xticks(ticks, [f"{x:,}" for x in ticks], rotation=45 if len(ticks) > 4 else 0)
        ax.minorticks_off()
        ax.set_xlabel(xlabel)
        ax.set_ylabel("wall time (s), solid")
        ax2.set_ylabel("peak RSS (GiB), dotted")
        ax2.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    m = data["machine"]
    fig.suptitle(f"tracesim replay cost: fresh process per point, {m['cores']} cores ({m['cpu'][:40]})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_docs(data: dict[str, Any]) -> None:
    """Replace the generated block of docs/performance.md (creating the file if needed)."""
    md_path = DOCS / "performance.md"
    block = f"{BEGIN}\n{markdown(data)}{END}"
    if md_path.exists():
        text = md_path.read_text()
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            text = head + block + rest.split(END, 1)[1]
        else:
            text = text.rstrip() + "\n\n## Results\n\n" + block + "\n"
    else:
        text = "# Performance\n\n## Results\n\n" + block + "\n"
    md_path.write_text(text)
    if data.get("scaling_gpus") or data.get("scaling_layers"):
        plot(data, DOCS / "performance_scaling.png")
