"""The terminal report of a replay, and progress output on stderr.

:func:`report_text` is the plain-text report (used when stdout is not a terminal, in logs
and in tests); :func:`print_report` prints a rich table when stdout is a terminal (and rich
is installed), the plain text otherwise. Both show: iteration time, tokens/s, TFLOP/s per
GPU, MFU, memory per GPU, the batch (sequences, tokens, dtype, micro-batches of a
model-built replay), the breakdown (compute, exposed communication per group kind,
pipeline bubble, idle) with shares of the iteration, and the critical path's top
contributors when the result has them (``critical_path``).

:class:`Progress` writes a one-line progress indicator to stderr, only when stderr is a
terminal; it is a ``(stage, done, total)`` callback.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

KIND_ORDER = ("tp", "cp", "ep", "pp", "dp")


def fmt_seconds(x: float | None) -> str:
    """Seconds with a unit that keeps 4 significant digits (s, ms or us)."""
    if x is None:
        return "n/a"
    ax = abs(x)
    if ax >= 1 or ax == 0:
        return f"{x:.4g} s"
    if ax >= 1e-3:
        return f"{x * 1e3:.4g} ms"
    return f"{x * 1e6:.4g} us"


def _f(x: Any, fmt: str, suffix: str = "") -> str:
    return "n/a" if x is None else format(x, fmt) + suffix


def _on_cpu(res: Mapping[str, Any]) -> bool:
    """Whether the replay ran on a CPU (a CPU recording's self-replay, a CPU profile)."""
    dev = str(res.get("device", "") or "")
    return dev == "cpu" or dev.startswith("host-cpu")


def headline(res: Mapping[str, Any]) -> str:
    """One line: what ran where."""
    model = res.get("model")
    mname = model.get("name") if isinstance(model, Mapping) else model
    raw = res.get("parallel")
    par: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    lay = " ".join(f"{k.upper()}{par[k]}" for k in ("tp", "pp", "dp", "cp", "ep", "etp")
                   if k in par and (k in ("tp", "pp", "dp") or par[k] not in (None, 1, 0)
                                    or (k == "etp" and par[k] == 1)))
    if par.get("mtp_layers"):
        lay += f" MTP{par['mtp_layers']}" + (" (one shared layer)" if par.get("mtp_repeated") else "")
    if int(par.get("pp_rounds") or 1) > 1 and int(par.get("pp") or 1) > 1:
        lay += f", the pipeline schedule run {par['pp_rounds']} times"
    dev = str(res.get("device", "") or "?")
    unit = "rank(s)" if _on_cpu(res) else "GPU(s)"
    return (f"tracesim {res.get('mode', 'replay')}: {mname or 'unknown model'} on "
            f"{res.get('cluster')} ({res.get('gpus')} {unit}, {dev})"
            + (f", {lay}" if lay else ""))


#: how the stack line names the overlaps (tracesim.template.stacks.stack_info)
_OVERLAP_WORDS = {"tp_comm_overlap": "tp comm", "tp_bwd_overlap": "tp backward",
                  "overlap_grad_reduce": "grad reduce", "overlap_param_gather": "param gather",
                  "overlap_p2p": "p2p", "cp_overlap": "cp ring", "fsdp_prefetch": "fsdp prefetch",
                  "moe_a2a_overlap": "ep all-to-all (ideal)",
                  "moe_shared_expert_overlap": "shared experts"}


def metric_rows(res: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows of the headline metrics."""
    rows = [("iteration time", fmt_seconds(res.get("iteration_time_s")))]
    m = res.get("measured_step_time_s")
    if m is not None:
        err = (res["iteration_time_s"] - m) / m * 100 if m else 0.0
        rows.append(("measured", f"{fmt_seconds(m)} (error {err:+.2f}%)"))
    rec = res.get("recorded")
    if isinstance(rec, Mapping) and rec.get("measured_step_time_s"):
        m = float(rec["measured_step_time_s"])
        it = float(res.get("iteration_time_s") or 0.0)
        rows.append(("recorded", f"{fmt_seconds(m)} on {rec.get('device', '?')}"
                     + (f" ({m / it:.2f}x faster here)" if it > 0 else "")))
    pt = res.get("perturbation")
    if isinstance(pt, Mapping) and pt.get("unperturbed_iteration_time_s"):
        rows += _perturbation_rows(pt)
    sc = res.get("scaling")
    if isinstance(sc, Mapping) and sc.get("gpu_time_shares"):
        rows.append(("kernel times", ", ".join(f"{v:.0%} {k}" for k, v in
                                              sc["gpu_time_shares"].items())))
    st = res.get("stack")
    if isinstance(st, Mapping) and st.get("name"):
        short = [_OVERLAP_WORDS.get(str(o), str(o)) for o in st.get("overlaps") or []]
        ub = st.get("userbuffers")
        if isinstance(ub, Mapping) and ub.get("given") and "tp comm" in short:
            short[short.index("tp comm")] = f"tp comm ({ub.get('config')})"
        fp8 = st.get("fp8")
        rows.append(("stack", str(st["name"]) + (", compiled" if st.get("compiled") else "")
                     + (f", fp8 {fp8.get('recipe')}" if isinstance(fp8, Mapping) else "")
                     + _fp8_exceptions(fp8)
                     + (", fp32 gradient reduction" if st.get("grad_reduce") == "fp32" else "")
                     + _cudnn(st.get("cudnn"))
                     + (f"; overlapped: {', '.join(short)}" if short else "; no overlaps")))
        par = res.get("parallel")
        rc = par.get("recompute") if isinstance(par, Mapping) else None
        if isinstance(par, Mapping) and rc and rc != "none":
            detail = (f" ({', '.join(par.get('recompute_modules') or [])})" if rc == "selective"
                      else f" (the first {par['recompute_layers']} layers of each chunk)"
                      if rc == "full" and par.get("recompute_layers") else "")
            rows.append(("recompute", str(rc) + detail))
        disp = par.get("moe_dispatcher") if isinstance(par, Mapping) else None
        if isinstance(par, Mapping) and disp not in (None, "alltoall") and int(par.get("ep") or 1) > 1:
            rows.append(("MoE dispatcher", f"{disp} (a token sent once per rank and per node)"))
        host = st.get("host")
        if isinstance(host, Mapping):
            graphs = ", ".join(host.get("cuda_graphs") or []) or "none"
            lus = host.get("launch_us") or {}
            cpu = (f"; {host.get('cpu')}, {_f(lus.get('fwd'), '.0f')} / {_f(lus.get('bwd'), '.0f')} us "
                   "per launch" if host.get("cpu_speed", 1.0) != 1.0 else "")
            rows.append(("host launches", f"GPU waits {fmt_seconds(host.get('wait_s_per_microbatch'))} "
                         f"per micro-batch (slowest stage); CUDA graphs: {graphs}{cpu}"))
        off = st.get("offload")
        if isinstance(off, Mapping):
            rows.append(("cpu offload", f"{off.get('layers')} layers, "
                         f"{_f(off.get('gib_per_microbatch'), '.1f')} GiB per micro-batch at "
                         f"{_f(off.get('d2h_GBps'), '.0f')} / {_f(off.get('h2d_GBps'), '.0f')} GB/s; "
                         f"GPU waits {fmt_seconds(off.get('wait_s_per_microbatch'))} per micro-batch"))
    clock = res.get("sustained_clock")
    slow = res.get("slowest_gpu")
    if isinstance(clock, (int, float)) and clock < 1.0:
        why = "sustained at the power limit"
        if isinstance(slow, (int, float)) and slow < 1.0:
            why = (f"{clock / slow:.3f} sustained at the power limit x {slow:.3f}, the slowest of "
                   f"{res.get('gpus')} GPUs")
        rows.append(("GPU clock", f"{clock:.3f} of its kernel benchmarks' rate ({why}; "
                                  "docs/devices.md)"))
    unit = "rank" if _on_cpu(res) else "GPU"
    rows += [
        ("tokens/s", _f(res.get("tokens_per_s"), ",.0f")),
        (f"TFLOP/s per {unit}", _f(res.get("tflops_per_gpu"), ".1f" if (res.get("tflops_per_gpu") or 0) >= 10 else ".3f")),
        ("MFU", _f(res.get("mfu"), ".1%")),
        (f"memory per {unit}", _f(res.get("memory_gib_per_gpu"), ".1f", " GiB")),
    ]
    par = res.get("parallel")
    if isinstance(par, Mapping) and all(isinstance(par.get(k), int) for k in
                                        ("global_batch", "micro_batch", "seq_len", "num_micro")):
        rows.append(("batch", f"{par['global_batch']:,} sequences of {par['seq_len']:,} tokens per "
                              f"iteration in {str(par.get('dtype') or '?').upper()}; micro-batch "
                              f"{par['micro_batch']}, {par['num_micro']} per pipeline"))
    val = res.get("validation")
    if isinstance(val, Mapping):
        from tracesim.report.validated import validation_text

        rows.append(("validated", validation_text(val.get("group"), str(val.get("stack") or ""),
                                                  str(val.get("kind") or ""))))
    rep = res.get("replay")
    if isinstance(rep, Mapping) and rep.get("network"):
        net = {"flow": "flow-level (max-min link sharing)",
               "flow-relays": "flow-level (max-min link sharing), PXN relay hops in the flows",
               "flow-steps": "flow-level (max-min link sharing), every ring step on its own",
               "estimate": "estimate (uncongested, no contention)"}.get(str(rep["network"]),
                                                                       str(rep["network"]))
        caps = rep.get("nccl_max_ctas") or {}
        ctas = ("; NCCL CTAs " + ", ".join(f"{k} {v}" for k, v in caps.items())) if caps else ""
        rows.append(("network", net + (", symmetry-reduced" if rep.get("symmetric") else ", every rank")
                     + ctas))
    return rows


def breakdown_rows(res: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    """(part, seconds, share of the iteration) rows; zero parts are left out except compute."""
    bd = res.get("breakdown") or {}
    it = float(res.get("iteration_time_s") or 0.0)
    rows = [("compute", float(bd.get("compute_s") or 0.0))]
    ex = bd.get("exposed_comm_s") or {}
    for k in (*KIND_ORDER, *sorted(set(ex) - set(KIND_ORDER))):
        if ex.get(k):
            rows.append((f"exposed {k} comm", float(ex[k])))
    for k, label in (("host", "host-bound"), ("bubble", "pipeline bubble"), ("idle", "idle")):
        if bd.get(f"{k}_s"):
            rows.append((label, float(bd[f"{k}_s"])))
    return [(n, v, v / it if it else 0.0) for n, v in rows]


def critical_title(res: Mapping[str, Any]) -> str:
    """``critical path``, naming its span where it covers more than the iteration (a
    recorded run replays all its profiled steps: shares are of that span)."""
    span = float(res.get("critical_path_span_s") or 0.0)
    it = float(res.get("iteration_time_s") or 0.0)
    if not (it > 0 and span > 1.05 * it):
        return "critical path"
    steps = res.get("steps")
    if isinstance(steps, list) and steps and isinstance(steps[0], Mapping):
        rank = steps[0].get("rank")
        n = sum(1 for st in steps if isinstance(st, Mapping) and st.get("rank") == rank)
        return f"critical path over the {n} replayed steps ({fmt_seconds(span)})"
    return f"critical path over the whole replay ({fmt_seconds(span)}, {span / it:.1f} iterations)"


def fit_name(name: str, width: int = 44) -> str:
    """``name`` in ``width`` characters: longer ones keep their start and end (a forward
    and a backward op that share a long prefix stay apart)."""
    if len(name) <= width:
        return name
    tail = (width - 3) // 2 + 1
    return name[:width - 3 - tail] + "..." + name[-tail:]


def report_text(res: Mapping[str, Any], top: int = 8) -> str:
    """The plain-text report."""
    lines = [headline(res)]
    for label, value in metric_rows(res):
        lines.append(f"  {label:<18} {value}")
    if res.get("breakdown"):
        lines.append("  breakdown (mean over simulated ranks):")
        for name, v, share in breakdown_rows(res):
            lines.append(f"    {name:<20} {fmt_seconds(v):>11}  {share:6.1%}")
    cp = res.get("critical_path") or []
    if cp:
        lines.append(f"  {critical_title(res)}, top contributors:")
        for row in cp[:top]:
            lines.append(f"    {fit_name(str(row['name'])):<44} {row['category']:<11} "
                         f"{fmt_seconds(row['time_s']):>11}  {row['share']:6.1%}  x{row['count']}")
    files = res.get("files")
    if isinstance(files, Mapping) and files.get("dir"):
        lines.append(f"  written to {files['dir']}/ ({', '.join(k for k in files if k != 'dir')})")
    for w in res.get("warnings", []) or []:
        lines.append(f"  warning: {w}")
    return "\n".join(lines)


def print_report(res: Mapping[str, Any], file: TextIO | None = None, *, rich: bool | None = None) -> None:
    """Print the report: a rich table on a terminal, else :func:`report_text`."""
    out = file or sys.stdout
    use_rich = _isatty(out) if rich is None else rich
    if use_rich:
        try:
            _print_rich(res, out)
            return
        except ImportError:
            pass
    out.write(report_text(res) + "\n")


def _print_rich(res: Mapping[str, Any], out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(file=out, highlight=False)
    con.print(f"[bold]{headline(res)}[/bold]")
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="cyan")
    t.add_column(justify="right")
    for label, value in metric_rows(res):
        t.add_row(label, value)
    con.print(t)
    if res.get("breakdown"):
        b = Table(title="where the iteration goes (mean over simulated ranks)", title_justify="left")
        b.add_column("part")
        b.add_column("time", justify="right")
        b.add_column("share", justify="right")
        b.add_column("")
        for name, v, share in breakdown_rows(res):
            b.add_row(name, fmt_seconds(v), f"{share:.1%}", "#" * int(round(share * 30)))
        con.print(b)
    cp = res.get("critical_path") or []
    if cp:
        c = Table(title=f"{critical_title(res)}: top contributors", title_justify="left")
        for col, just in (("op", "left"), ("class", "left"), ("time", "right"),
                          ("share", "right"), ("count", "right")):
            c.add_column(col, justify=just)  # type: ignore[arg-type]
        for row in cp[:8]:
            c.add_row(row["name"], row["category"], fmt_seconds(row["time_s"]),
                      f"{row['share']:.1%}", str(row["count"]))
        con.print(c)
    files = res.get("files")
    if isinstance(files, Mapping) and files.get("dir"):
        con.print(f"written to [bold]{files['dir']}/[/bold]: {', '.join(k for k in files if k != 'dir')}")
    for w in res.get("warnings", []) or []:
        con.print(f"[yellow]warning:[/yellow] {w}")


def _isatty(f: Any) -> bool:
    try:
        return bool(f.isatty())
    except (AttributeError, ValueError):
        return False


def _has_fd(f: Any) -> bool:
    """Whether ``f`` writes to a file descriptor (a file, a pipe), not to memory."""
    try:
        f.fileno()
        return True
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return False


class Progress:
    """``(stage, done, total)`` callback reporting a long run on stderr: on a terminal one
    updating line (at most ``hz`` updates per second, erased by :meth:`close`); on a file or
    pipe (a log, CI, ``nohup``: a stream with a file descriptor, or ``lines``) nothing for the
    first ``every`` seconds, then one plain line every ``every`` seconds, so short runs print
    nothing and long ones show they are alive; on anything else (an in-memory stream, such as
    a test runner's capture) nothing."""

    #: what a stage counts (default: tasks)
    UNITS = {"write": "files"}

    def __init__(self, stream: TextIO | None = None, hz: float = 5.0, force: bool = False,
                 every: float = 10.0, clock: Callable[[], float] = time.perf_counter,
                 lines: bool | None = None):
        self.stream = stream or sys.stderr
        self.tty = force or _isatty(self.stream)
        self.enabled = self.tty or (_has_fd(self.stream) if lines is None else lines)
        self.min_dt = 1.0 / hz if self.tty else every
        self.clock = clock
        self._t0 = clock()
        self._last = 0.0 if self.tty else self._t0
        self._shown = False

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if (done < total or not self.tty) and now - self._last < self.min_dt:
            return
        self._last = now
        pct = 100.0 * done / total if total else 100.0
        unit = self.UNITS.get(stage, "tasks")
        line = f"{stage:<8} {pct:5.1f}%  {done:,}/{total:,} {unit}  {now - self._t0:6.1f} s"
        if self.tty:
            self.stream.write(f"\r{line} ")
            self._shown = True
        else:
            self.stream.write(f"tracesim: {line}\n")
        self.stream.flush()

    def close(self) -> None:
        """Erase the progress line (on a terminal)."""
        if self._shown:
            self.stream.write("\r" + " " * 60 + "\r")
            self.stream.flush()
            self._shown = False


def _perturbation_rows(pt: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Rows of a perturbed replay: the impact, who was waited for, the impaired fabric."""
    who = pt.get("waited_for") or []
    fabric = bool(pt.get("degraded_links") or pt.get("background"))
    slow = bool(pt.get("stragglers") or pt.get("jitter"))
    label = "slow ranks" if slow and not fabric else "impaired fabric" if fabric and not slow \
        else "perturbed"
    rows = [(label, f"{float(pt['impact']) * 100:+.1f}% against "
             f"{fmt_seconds(pt['unperturbed_iteration_time_s'])} "
             + ("on the healthy fabric" if fabric and not slow else "unperturbed")
             + (f"; the others waited most for rank {who[0][0]}" if who else ""))]
    links = [f"{d['link']} at {d['factor']:g}" + (f" (rank {','.join(map(str, d['ranks']))})"
                                                  if d.get("ranks") else "")
             for d in pt.get("degraded_links") or []]
    if links:
        rows.append(("degraded links", "; ".join(links)))
    for b in pt.get("background") or []:
        if b.get("instances") is not None:
            rows.append(("background", f"{b['spec']}: {b['instances']} run(s), "
                         f"{fmt_seconds(b['mean_time_s'])} each ({fmt_seconds(b['alone_time_s'])} "
                         "alone)"))
        else:
            rows.append(("background", str(b["spec"])))
    ops = pt.get("slowed_operations") or []
    if ops:
        o = ops[0]
        rows.append(("slowed most", f"{o['group_kind'] or 'comm'} {o['collective']} over ranks "
                     f"{o['ranks']}: {fmt_seconds(o['unperturbed_s'])} -> "
                     f"{fmt_seconds(o['perturbed_s'])} in {o['operations']} operation(s)"))
    return rows


def _cudnn(cu: Any) -> str:
    """``, cuDNN 9.13.1 (9.13 fit)``: the version given with ``--cudnn`` and the fit it runs."""
    if not isinstance(cu, Mapping) or not cu.get("fit"):
        return ""
    return f", cuDNN {cu['given']}" + (f" ({cu['fit']} fit)" if cu["fit"] != cu["given"] else "")


def _fp8_exceptions(fp8: Any) -> str:
    """The FP8 recipe's exceptions for the stack line: the per-module plan, the BF16 layers."""
    if not isinstance(fp8, Mapping):
        return ""
    out = ""
    if fp8.get("plan"):
        out += " (" + ", ".join(f"{g} {r}" for g, r in fp8["plan"].items()) + ")"
    first, last = fp8.get("bf16_layers") or (0, 0)
    if first or last:
        out += f", BF16 layers: first {first}, last {last}"
    if fp8.get("attention"):
        out += ", FP8 attention"
    return out
