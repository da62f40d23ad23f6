"""The interleaved profiling run (collectors/cycles.py) and the error interval of the
unprofiled comparison (benchmarks/cpu/selfreplay_interval.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from tracesim.collectors.cycles import (
    CycleTimes,
    cycle_overhead,
    filter_et_nodes,
    merge_chrome_traces,
    plan_cycles,
)

HAS_TORCH = importlib.util.find_spec("torch") is not None


def test_recorded_cycles_are_spread_among_calibration_ones() -> None:
    plan = plan_cycles(recorded=3, measure=10, calibration=16)
    assert len(plan) == 19 and [c.index for c in plan] == list(range(19))
    rec = [c.index for c in plan if c.recorded]
    assert rec == [3, 9, 15]
    assert not plan[0].recorded and not plan[-1].recorded
    # the reference steps: all of --measure, spread over the recorded cycles
    assert [c.plain for c in plan if c.recorded] == [4, 3, 3]
    assert {c.plain for c in plan if not c.recorded} == {2}
    assert all(c.steps == c.plain + 3 for c in plan)
    # no calibration: recorded cycles only; at least one reference step each
    assert [c.plain for c in plan_cycles(recorded=4, measure=2, calibration=0)] == [1, 1, 1, 1]
    with pytest.raises(ValueError):
        plan_cycles(recorded=0, measure=3)


def test_overhead_is_the_difference_of_the_calibration_medians() -> None:
    times = [CycleTimes((100_000_000, 100_000_000), 150_000_000),
             CycleTimes((150_000_000, 150_000_000), 225_000_000),
             CycleTimes((200_000_000, 200_000_000), 300_000_000)]
    got = cycle_overhead(times, [1000, 1000, 1000])
    assert got["per_event_ns"] == 75_000 and got["cycles"] == 3
    assert got["per_event_ns_cycles"] == [50_000, 75_000, 100_000]
    assert got["plain_step_ns"] == 150_000_000 and got["profiled_step_ns"] == 225_000_000
    # medians, not means: a slow outlier on either side hardly moves them (a mean of a
    # cycle's unprofiled steps would carry the 400 ms step into that cycle's pairing)
    times.append(CycleTimes((400_000_000, 100_000_000), 900_000_000))
    got = cycle_overhead(times, [1000] * 4)
    assert got["per_event_ns"] == round((262_500_000 - 150_000_000) / 1000)
    assert got["per_event_ns_cycles"][-1] == 650_000
    with pytest.raises(ValueError):
        cycle_overhead(times, [1000])


def _trace(path: Path, step: int, t0: float) -> Path:
    events = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "ts": t0, "dur": 100,
         "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": t0 + 1, "dur": 5, "pid": 1, "tid": 1,
         "args": {"Record function id": step * 10 + 1}},
        {"ph": "s", "id": 1, "cat": "fwdbwd", "name": "fwdbwd", "ts": t0 + 1, "pid": 1, "tid": 1},
        {"ph": "f", "id": 1, "cat": "fwdbwd", "name": "fwdbwd", "ts": t0 + 50, "pid": 1, "tid": 1},
        {"ph": "s", "id": 2, "cat": "fwdbwd", "name": "fwdbwd", "ts": t0 + 2, "pid": 1, "tid": 1},
        {"ph": "f", "id": 2, "cat": "fwdbwd", "name": "fwdbwd", "ts": t0 + 60, "pid": 1, "tid": 1},
    ]
    path.write_text(json.dumps({"schemaVersion": 1, "traceName": str(path), "traceEvents": events}))
    return path


def test_merged_trace_keeps_every_event_and_unique_flow_ids(tmp_path: Path) -> None:
    files = [_trace(tmp_path / "a.json", 4, 1000.0), _trace(tmp_path / "b.json", 9, 5000.0)]
    merged = merge_chrome_traces([json.loads(f.read_text()) for f in files])
    assert merged["schemaVersion"] == 1 and merged["traceName"] == str(files[0])
    ev = merged["traceEvents"]
    assert len(ev) == 12
    assert [e["name"] for e in ev if e["name"].startswith("ProfilerStep")] == \
        ["ProfilerStep#4", "ProfilerStep#9"]
    flows = [(e["ph"], e["id"]) for e in ev if e["ph"] in ("s", "f")]
    assert flows == [("s", 1), ("f", 1), ("s", 2), ("f", 2), ("s", 3), ("f", 3), ("s", 4), ("f", 4)]
    # timestamps are the process clock's: unchanged
    assert [e["ts"] for e in ev if e["ph"] == "X"] == [1000.0, 1001.0, 5000.0, 5001.0]
    with pytest.raises(ValueError):
        merge_chrome_traces([])


def _node(nid: int, name: str, rf: int, parent: int) -> dict:
    return {"id": nid, "name": name, "ctrl_deps": parent,
            "attrs": [{"name": "rf_id", "type": "uint64", "value": rf}]}


def test_execution_trace_keeps_the_recorded_steps_only() -> None:
    nodes = [
        _node(1, "[pytorch|profiler|execution_trace|process]", 0, 0),
        _node(2, "[pytorch|profiler|execution_trace|thread]", 0, 1),
        _node(3, "ProfilerStep#4", 1, 2), _node(4, "aten::add", 2, 3), _node(5, "aten::mul", 3, 4),
        _node(6, "ProfilerStep#9", 10, 2), _node(7, "aten::add", 11, 6),
        # another thread's node (no step parent): placed by its record-function id
        _node(8, "[pytorch|profiler|execution_trace|thread]", 0, 1), _node(9, "aten::mm", 12, 8),
        _node(10, "ProfilerStep#14", 20, 2), _node(11, "aten::add", 21, 10),
    ]
    got = filter_et_nodes({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes},
                          {"ProfilerStep#4", "ProfilerStep#14"})
    assert got["schema"] == "1.1.1-chakra.0.0.4"
    assert [n["id"] for n in got["nodes"]] == [1, 2, 3, 4, 5, 8, 10, 11]


def _meta(cycles: list[dict], steps: list[dict], per_cycle: list[int], used: int) -> dict:
    """A bundle's meta with recorded ``cycles`` and calibration cycles whose profiled steps
    cost ``per_cycle`` ns per event more than their 100 ms unprofiled steps (1000 events)."""
    cal = [{"index": 100 + j, "recorded": False, "plain_ms": [100.0, 100.0],
            "profiled_ms": 100.0 + x / 1e3, "events": 1000} for j, x in enumerate(per_cycle)]
    entry = {"rank": 0, "cycles": cycles + cal, "profiled_step_events": steps,
             "profiler_overhead": {"per_event_ns": used, "floor_ns": 0}}
    return {"per_rank": [entry]}


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events:UserWarning")
def test_cycle_schedule_records_one_step_per_cycle(tmp_path: Path) -> None:
    """The real profiler under the cycle schedule: one exported trace per cycle with one
    ProfilerStep each, named by the session's step number; the execution trace holds every
    recorded step, and the filter keeps the chosen ones joined to their Kineto ops."""
    import torch
    from tracesim.collectors.cycles import cycle_schedule
    from tracesim.collectors.train import count_step_events, make_profiler

    plan = plan_cycles(recorded=2, measure=2, calibration=1)
    files: list[Path] = []

    def ready(p: object) -> None:
        f = tmp_path / f"c{len(files)}.json"
        p.export_chrome_trace(str(f))  # type: ignore[attr-defined]
        files.append(f)

    a = torch.ones(4, 4)
    prof = make_profiler(torch.device("cpu"), None, tmp_path / "et.json", on_trace_ready=ready,
                         step_schedule=cycle_schedule(plan))
    with prof:
        for _ in range(sum(c.steps for c in plan)):
            (a @ a).sum()
            prof.step()
    assert len(files) == len(plan)
    names = []
    for f in files:
        (st,) = count_step_events(json.loads(f.read_text()))
        names.append(st["step"])
        assert st["cpu_ops"] >= 2
    # cycle k's profiled step is the session's step sum(steps of earlier cycles) + steps - 1
    ends, total = [], 0
    for c in plan:
        total += c.steps
        ends.append(f"ProfilerStep#{total - 1}")
    assert names == ends
    et = json.loads((tmp_path / "et.json").read_text())
    keep = {names[k] for k, c in enumerate(plan) if c.recorded}
    kept = filter_et_nodes(et, keep)
    steps_in = {n["name"] for n in kept["nodes"] if n["name"].startswith("ProfilerStep#")}
    assert steps_in == keep and len(kept["nodes"]) < len(et["nodes"])
    merged = merge_chrome_traces([json.loads(files[k].read_text()) for k, c in enumerate(plan)
                                  if c.recorded])
    rf = {e["args"]["Record function id"] for e in merged["traceEvents"]
          if e.get("cat") == "cpu_op"}
    et_rf = {a["value"] for n in kept["nodes"] for a in n["attrs"] if a["name"] == "rf_id"}
    assert rf and rf <= et_rf
