"""The terminal report (plain and rich) and progress output."""

from __future__ import annotations

import io

from tracesim.report.terminal import Progress, fmt_seconds, print_report, report_text

RES = {
    "mode": "retarget", "model": {"name": "llama3-70b"}, "cluster": "h100x1024", "gpus": 1024,
    "device": "h100", "parallel": {"tp": 8, "pp": 8, "dp": 16, "cp": 1, "ep": 1},
    "iteration_time_s": 7.5, "tokens_per_s": 559240.5, "tflops_per_gpu": 262.9, "mfu": 0.2658,
    "memory_gib_per_gpu": 61.25,
    "breakdown": {"compute_s": 4.5, "exposed_comm_s": {"tp": 1.5, "dp": 0.0, "pp": 0.0, "cp": 0.0, "ep": 0.0},
                  "bubble_s": 1.5, "idle_s": 0.0},
    "critical_path": [{"name": "all_reduce (tp)", "category": "tp", "time_s": 1.2, "share": 0.16, "count": 99}],
    "warnings": ["something to know"],
}


def test_report_text_has_every_metric():
    txt = report_text(RES)
    for s in ("llama3-70b", "h100x1024", "TP8 PP8 DP16", "7.5 s", "559,240", "262.9", "26.6%",
              "61.2 GiB", "exposed tp comm", "pipeline bubble", "20.0%", "all_reduce (tp)",
              "x99", "warning: something to know"):
        assert s in txt, s
    assert "exposed dp" not in txt  # zero parts are left out
    assert "CP1" not in txt


def test_report_names_a_sustained_clock_below_one():
    assert "GPU clock" not in report_text({**RES, "sustained_clock": 1.0})
    assert "GPU clock          0.866 of its kernel benchmarks' rate (sustained at the power" in report_text(
        {**RES, "device": "b200", "sustained_clock": 0.8659})
    # the job's slowest GPU (docs/devices.md): the clock given as the two factors
    text = report_text({**RES, "device": "b200", "sustained_clock": 0.8659 * 0.9, "slowest_gpu": 0.9})
    assert "0.779 of its kernel benchmarks' rate (0.866 sustained at the power limit x 0.900, " \
           "the slowest of 1024 GPUs" in text


def test_rich_report_renders():
    buf = io.StringIO()
    print_report(RES, buf, rich=True)
    out = buf.getvalue()
    for s in ("iteration time", "7.5 s", "where the iteration goes", "critical path", "20.0%"):
        assert s in out, s
    buf = io.StringIO()
    print_report(RES, buf)  # not a terminal: plain text
    assert buf.getvalue() == report_text(RES) + "\n"


def test_fmt_seconds():
    assert fmt_seconds(1.5) == "1.5 s"
    assert fmt_seconds(0.08552) == "85.52 ms"
    assert fmt_seconds(4.5e-5) == "45 us"
    assert fmt_seconds(None) == "n/a"


def test_progress_on_a_terminal_and_in_a_log():
    """A log (not a terminal) gets nothing for 10 s, then a plain line every 10 s; an
    in-memory stream (a test runner's capture of the command's output) gets nothing."""
    ticks = iter([0.0, 100.0])
    silent = io.StringIO()
    Progress(silent, clock=lambda: next(ticks))("replay", 5, 10)  # 100 s in: still nothing
    assert silent.getvalue() == ""
    now = [0.0]
    quiet = io.StringIO()
    p = Progress(quiet, clock=lambda: now[0], lines=True)
    p("replay", 5, 10)
    now[0] = 9.0
    p("replay", 6, 10)
    assert quiet.getvalue() == ""
    now[0] = 10.5
    p("replay", 7, 10)
    now[0] = 12.0
    p("replay", 8, 10)
    p("replay", 10, 10)
    p.close()
    lines = quiet.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracesim: replay") and "70.0%" in lines[0]
    assert "\r" not in quiet.getvalue()
    loud = io.StringIO()
    p = Progress(loud, force=True, hz=1e9)
    p("replay", 5, 10)
    p("replay", 10, 10)
    p.close()
    assert "50.0%" in loud.getvalue() and "10/10 tasks" in loud.getvalue()
    assert loud.getvalue().endswith("\r")


def test_the_report_says_the_batch_and_dtype_of_a_model_replay() -> None:
    from tests.helpers import retarget
    from tracesim.report.terminal import report_text

    res = retarget({"model": "gpt3-1.7b", "cluster": "h100x8", "tp": 2, "pp": 2, "dp": 2,
                    "micro_batch": 1, "global_batch": 8, "dtype": "fp8"}).to_dict()
    line = next(ln for ln in report_text(res).splitlines() if ln.strip().startswith("batch"))
    assert "8 sequences of 2,048 tokens per iteration in FP8; micro-batch 1, 4 per pipeline" in line


def test_a_straggler_replay_reports_its_reference_replay_too() -> None:
    """--straggler replays the layout unperturbed first (the reference): its progress shows
    as well, so a long run is not silent for half its time."""
    import io

    from tracesim.api import replay
    from tracesim.report.terminal import Progress

    out = io.StringIO()
    replay(None, model="gpt3-1.7b", cluster="h100x8", tp=2, pp=2, dp=2, micro_batch=1,
           global_batch=8, straggler="1:1.2", progress=Progress(out, lines=True, every=0.0))
    stages = {ln.split()[1] for ln in out.getvalue().splitlines()}
    assert {"reference", "replay"} <= stages, out.getvalue()
