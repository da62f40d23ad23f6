"""Trace folders recorded elsewhere (tracesim.trace.folders): discovery, rank recovery,
execution-trace pairing, clock alignment, ``tracesim import`` and folders as sources."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tracesim.api import replay
from tracesim.cli import cli
from tracesim.errors import InputError
from tracesim.trace.bundle import load_bundle
from tracesim.trace.extract import extract_options
from tracesim.trace.folders import clock_shifts, import_folder, name_rank, read_folder
from tracesim.trace.sources import load_source, source_kind

ROOT = Path(__file__).resolve().parents[1]
MEGATRON = ROOT / "tests" / "data" / "traces" / "astra-megatron-gpt-tp8-a100"


def _trace(rank: int | None = None, world: int | None = None, *, pid: int = 100,
           t0_us: float = 1.0e6, steps: tuple[int, ...] = (1, 2, 3), device: str | None = None,
           extra: list[dict[str, Any]] | None = None, **top: Any) -> dict[str, Any]:
    """A tiny valid Kineto trace: one host thread, a ProfilerStep#N with one op each."""
    evs: list[dict[str, Any]] = []
    t = t0_us
    for n in steps:
        evs.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": pid,
                    "tid": pid, "ts": t, "dur": 1000.0, "args": {}})
        evs.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": pid,
                    "ts": t + 100.0, "dur": 500.0, "args": {"External id": n}})
        t += 1000.0
    data: dict[str, Any] = {"schemaVersion": 1, **top, "traceEvents": evs + (extra or [])}
    if rank is not None:
        data["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": world or rank + 1}
    if device:
        data["deviceProperties"] = [{"id": 0, "name": device}]
    return data


def _et(pid: int) -> dict[str, Any]:
    return {"schema": "1.0.1", "pid": pid, "time": "2024-01-01 00:00:00", "start_ts": 1,
            "nodes": [{"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "ctrl_deps": 0}],
            "finish_ts": 2}


def _write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


def _cli(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), obj={})


def _one_line_error(r: Any, *needles: str) -> None:
    assert r.exit_code == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("tracesim: error: "), r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


# --- rank recovery from names ------------------------------------------------------------

@pytest.mark.parametrize(("path", "rank"), [
    ("rank3.json", 3), ("rank_3.json.gz", 3), ("rank-3.json", 3), ("worker3.json", 3),
    ("profile_3.json", 3), ("kineto_trace_3.json", 3), ("device_3.json", 3), ("3.json", 3),
    ("megatron_kineto_3.json.gz", 3), ("rank3_trace.json.gz", 3), ("dlrm_eg_3.json.gz", 3),
    ("worker3_step_12.1694128201545.pt.trace.json.gz", 3),
    ("rank-3.Sep_07_16_09_59.4242.pt.trace.json.gz", 3), ("rank3.12.pt.trace.json", 3),
    ("graph_capture_rank_3.1700000000000000000.pt.trace.json.gz", 3),
    ("rank3/trace.json.gz", 3), ("rank3/x/trace.json", None),
    # tensorboard_trace_handler's default worker name is host_pid: no rank in it
    ("node1_12345.1700000000000.pt.trace.json", None),
    ("fit-model-0-training_step.1700000000000000000.pt.trace.json", None),
    ("trace.json", None),
])
def test_rank_from_the_name(path: str, rank: int | None) -> None:
    assert name_rank(Path("/data") / path) == rank


# --- discovery on synthetic folders --------------------------------------------------------

def test_ranks_from_names_and_ets_paired_by_pid_then_name(tmp_path: Path) -> None:
    for r in range(3):
        _write(tmp_path / f"profile_{r}.json", _trace(pid=500 + r))
    _write(tmp_path / "et" / "a.json", _et(502))          # by pid: rank 2
    _write(tmp_path / "et" / "pytorch_et_0.json", _et(9))  # by name: rank 0
    _write(tmp_path / "et" / "host_7.json", _et(8))        # neither: a warning
    (tmp_path / "README.txt").write_text("not a trace, not looked at")
    f = read_folder(tmp_path)
    assert [(r.rank, r.trace.name, r.rank_from) for r in f.ranks] == [
        (0, "profile_0.json", "file name"), (1, "profile_1.json", "file name"),
        (2, "profile_2.json", "file name")]
    assert [r.et.name if r.et else None for r in f.ranks] == ["pytorch_et_0.json", None, "a.json"]
    assert len(f.warnings) == 1 and "host_7.json" in f.warnings[0]
    meta = f.meta()
    assert meta["ranks"] == 3 and "world_size" not in meta and meta["device"] == "unknown"
    assert meta["imported_from"]["files"][2] == {"rank": 2, "trace": "profile_2.json",
                                                 "rank_from": "file name", "et": "et/a.json"}


def test_distributed_info_wins_over_the_name(tmp_path: Path) -> None:
    _write(tmp_path / "rank5.json", _trace(2, 4))
    _write(tmp_path / "rank2.json", _trace(0, 4))
    f = read_folder(tmp_path)
    assert [(r.rank, r.trace.name, r.rank_from) for r in f.ranks] == [
        (0, "rank2.json", "distributedInfo"), (2, "rank5.json", "distributedInfo")]
    meta = f.meta()
    assert meta["ranks"] == [0, 2] and meta["world_size"] == 4 and meta["backend"] == "gloo"


def test_one_trace_without_a_rank_is_rank_0(tmp_path: Path) -> None:
    _write(tmp_path / "trace.json", _trace(device="NVIDIA H100 80GB HBM3", torch_version="2.5.1"))
    f = read_folder(tmp_path)
    assert [(r.rank, r.rank_from) for r in f.ranks] == [(0, "only trace")]
    assert f.meta()["device"] == "NVIDIA H100 80GB HBM3"
    assert f.meta()["torch_version"] == "2.5.1"


def test_an_only_traces_trailing_number_is_no_rank(tmp_path: Path) -> None:
    """TraceLens names its traces ``{model}__{job id}.json.gz``: alone in its folder, the
    trace is rank 0 (a job of one GPU), not rank 1016002 of a million-rank job; a named rank
    (``rank3``) still counts, and beside other traces a trailing number does."""
    _write(tmp_path / "a" / "timesformer__1016002.json.gz", _trace())
    assert [(r.rank, r.rank_from) for r in read_folder(tmp_path / "a").ranks] == [(0, "only trace")]
    _write(tmp_path / "b" / "job_rank3.json", _trace())
    assert [(r.rank, r.rank_from) for r in read_folder(tmp_path / "b").ranks] == [(3, "file name")]
    _write(tmp_path / "c" / "job_0.json", _trace())
    _write(tmp_path / "c" / "job_1.json", _trace(pid=101))
    assert [r.rank for r in read_folder(tmp_path / "c").ranks] == [0, 1]


def test_a_trace_without_host_events_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    _write(tmp_path / "in" / "rank0.json", {"traceEvents": []})
    with pytest.raises(InputError, match="no host .CPU. events") as exc:
        import_folder(tmp_path / "in", tmp_path / "out")
    assert "rank0.json" in str(exc.value)
    assert not (tmp_path / "out").exists()


def test_tensorboard_cycles_take_the_latest_unless_told(tmp_path: Path) -> None:
    for w, rank in (("host_11", 0), ("host_12", 1)):
        for ts in (1700000000001, 1700000000900, 1700000000050):
            _write(tmp_path / f"{w}.{ts}.pt.trace.json.gz", _trace(rank, 2, pid=ts % 1000))
    f = read_folder(tmp_path)
    assert [r.trace.name for r in f.ranks] == ["host_11.1700000000900.pt.trace.json.gz",
                                               "host_12.1700000000900.pt.trace.json.gz"]
    assert len(f.skipped) == 4
    assert "skipped" in f.meta()["imported_from"]
    first = read_folder(tmp_path, cycle=0)
    assert [r.trace.name for r in first.ranks] == ["host_11.1700000000001.pt.trace.json.gz",
                                                   "host_12.1700000000001.pt.trace.json.gz"]
    with pytest.raises(InputError, match="no cycle 3"):
        read_folder(tmp_path, cycle=3)


def test_a_last_cycle_cut_short_falls_back_to_the_one_before(tmp_path: Path) -> None:
    # a job stopped inside a profiler cycle: its last file holds the step annotation alone
    for w, rank in (("host_11", 0), ("host_12", 1)):
        _write(tmp_path / f"{w}.1700000000001.pt.trace.json", _trace(rank, 2, pid=rank + 1))
        cut = _trace(rank, 2, pid=rank + 1, steps=(6,))
        cut["traceEvents"] = [e for e in cut["traceEvents"] if e["cat"] != "cpu_op"]
        _write(tmp_path / f"{w}.1700000000900.pt.trace.json", cut)
    f = read_folder(tmp_path)
    assert [r.trace.name for r in f.ranks] == ["host_11.1700000000001.pt.trace.json",
                                               "host_12.1700000000001.pt.trace.json"]
    assert [p.name for p in f.skipped] == ["host_11.1700000000900.pt.trace.json",
                                           "host_12.1700000000900.pt.trace.json"]
    assert any("recorded no operators" in w for w in f.warnings)
    assert replay(tmp_path).iteration_time_s > 0
    # asked for by number, a cycle is taken as it is
    assert read_folder(tmp_path, cycle=1).ranks[0].trace.name == "host_11.1700000000900.pt.trace.json"


def test_torchtitan_takes_the_highest_iteration(tmp_path: Path) -> None:
    root = tmp_path / "profile_trace"
    _write(root / "iteration_10" / "rank0_trace.json", _trace(pid=1))
    for r in range(2):
        _write(root / "iteration_20" / f"rank{r}_trace.json.gz", _trace(pid=10 + r))
        _write(root / "iteration_100" / f"rank{r}_trace.json", _trace(pid=20 + r))
    f = read_folder(root)
    assert f.iteration == "iteration_100"
    assert [r.trace.relative_to(root).as_posix() for r in f.ranks] == [
        "iteration_100/rank0_trace.json", "iteration_100/rank1_trace.json"]
    assert f.meta()["imported_from"]["iteration"] == "iteration_100"
    assert source_kind(root) == "folder"


def test_process_groups_from_distributed_info_and_comms(tmp_path: Path) -> None:
    comm = {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 100, "tid": 100,
            "ts": 1.0e6 + 200, "dur": 10.0,
            "args": {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 4,
                     "Out msg nelems": 4, "Process Group Name": "1",
                     "Process Group Description": "mesh_tp", "Process Group Ranks": "[0, 1]"}}
    info = {"backend": "nccl", "rank": 0, "world_size": 2,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]},
                          {"pg_name": "2", "pg_desc": "big", "ranks": "[0, 1, ...]"}]}
    data = _trace(extra=[comm])
    data["distributedInfo"] = info
    _write(tmp_path / "rank0.json", data)
    assert read_folder(tmp_path).meta()["process_groups"] == [
        {"name": "0", "desc": "default_pg", "ranks": [0, 1]},
        {"name": "1", "desc": "mesh_tp", "ranks": [0, 1]}]


# --- clocks ------------------------------------------------------------------------------

def test_clock_rule() -> None:
    same = {0: {"ProfilerStep#2": (0, 100), "ProfilerStep#3": (100, 200)},
            1: {"ProfilerStep#2": (50, 160), "ProfilerStep#3": (160, 260)}}
    assert clock_shifts(same) == ({}, "recorded times (ProfilerStep#2 overlaps on every rank)")
    near = {0: {"ProfilerStep#1": (0, 100)}, 1: {"ProfilerStep#1": (100 + 999_999, 2_000_000)}}
    assert clock_shifts(near)[0] == {}
    apart = {0: {"ProfilerStep#5": (10_000, 20_000), "ProfilerStep#4": (0, 10_000)},
             1: {"ProfilerStep#5": (7_000_000_000, 7_000_012_000)},
             3: {"ProfilerStep#5": (-4_000_000_000, -3_999_990_000), "ProfilerStep#9": (0, 1)}}
    shifts, what = clock_shifts(apart)
    assert shifts == {0: 0, 1: -6_999_990_000, 3: 4_000_010_000}
    assert what == "shifted so that ProfilerStep#5 begins together (rank 0's clock)"
    assert clock_shifts({0: {"ProfilerStep#1": (0, 1)}, 1: {"ProfilerStep#2": (9**9, 9**10)}})[0] == {}
    assert clock_shifts({0: {"ProfilerStep#1": (0, 1)}})[0] == {}


def _two_hosts(folder: Path) -> Path:
    """Two ranks whose clocks differ by 10 s; rank 1 also recorded an earlier step."""
    _write(folder / "rank0.json", _trace(0, 2, pid=1, t0_us=1.0e6, steps=(4, 5, 6)))
    _write(folder / "rank1.json", _trace(1, 2, pid=2, t0_us=11.0e6 - 1000.0, steps=(3, 4, 5, 6)))
    return folder


def test_ranks_on_different_clocks_are_aligned_on_the_first_common_step(tmp_path: Path) -> None:
    folder = _two_hosts(tmp_path / "f")
    src = load_source(folder)
    assert src.kind == "folder"
    assert src.meta["clock_shift_ns"] == {0: 0, 1: -10_000_000_000}
    ops = src.op_table
    begin = ops[ops["name"] == "ProfilerStep#4"].set_index("rank")["ts_ns"]
    assert begin[0] == begin[1] == 1_000_000_000
    assert extract_options(src).joint_ranks
    assert replay(folder).makespan_ns < 10_000_000  # the joint replay spans ~4 ms, not 10 s
    bundle = import_folder(folder, tmp_path / "b")
    meta = yaml.safe_load((bundle / "meta.yaml").read_text())
    assert meta["clock_shift_ns"] == {0: 0, 1: -10_000_000_000}
    back = load_source(bundle).op_table
    assert back["ts_ns"].tolist() == ops["ts_ns"].tolist()
    # without the shift the two clocks are 10 s apart in the joint replay
    meta.pop("clock_shift_ns")
    (bundle / "meta.yaml").write_text(yaml.safe_dump(meta))
    assert replay(bundle).makespan_ns > 10_000_000_000


def test_folder_self_replay_on_the_command_line(tmp_path: Path) -> None:
    folder = _two_hosts(tmp_path / "f")
    r = _cli("validate", "self-replay", str(folder), "--json")
    assert r.exit_code == 0, r.stderr
    res = json.loads(r.stdout)["results"]
    assert [(x["rank"], x["step"]) for x in res] == [
        (0, "ProfilerStep#4"), (0, "ProfilerStep#5"), (0, "ProfilerStep#6"), (1, "ProfilerStep#3"),
        (1, "ProfilerStep#4"), (1, "ProfilerStep#5"), (1, "ProfilerStep#6")]
    assert all(abs(x["rel_error"]) < 0.01 for x in res)
    r = _cli("replay", str(folder), "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["gpus"] == 2 and out["iteration_time_s"] == pytest.approx(0.001, rel=0.01)


# --- import ------------------------------------------------------------------------------

def test_import_writes_a_bundle_and_replaces_only_bundles(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _write(src / "rank3.json", _trace(3, 8, device="NVIDIA A100-SXM4-80GB"))
    _write(src / "et" / "rank3_et.json", _et(100))
    r = _cli("import", str(src), "-o", str(tmp_path / "out"))
    assert r.exit_code == 0, r.stderr
    assert "rank 3" in r.stdout and "et/rank3_et.json" in r.stdout
    b = load_bundle(tmp_path / "out")
    assert b.ranks == [3] and b.meta["world_size"] == 8 and b.meta["source"] == "import"
    assert b.meta["device"] == "NVIDIA A100-SXM4-80GB" and b.meta["torch_version"] == "unknown"
    with gzip.open(b.trace_path(3), "rt") as fh:
        assert json.load(fh) == json.loads((src / "rank3.json").read_text())
    assert b.et_path(3) is not None and b.et_path(3).name == "et.json.gz"
    # again into the same bundle: replaced; into anything else: refused
    assert _cli("import", str(src), "-o", str(tmp_path / "out")).exit_code == 0
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("mine")
    _one_line_error(_cli("import", str(src), "-o", str(tmp_path / "other")), "refusing to overwrite")
    assert (tmp_path / "other" / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "out", "src"]


def test_an_unmatched_et_is_only_a_warning(tmp_path: Path) -> None:
    _write(tmp_path / "src" / "rank0.json", _trace(0, 1, pid=7))
    _write(tmp_path / "src" / "et" / "other_5.json", _et(8))
    r = _cli("import", str(tmp_path / "src"), "-o", str(tmp_path / "b"))
    assert r.exit_code == 0, r.stderr
    assert "warning:" in r.stderr and "other_5.json" in r.stderr
    b = load_bundle(tmp_path / "b")
    assert b.et_path(0) is None and "other_5.json" in b.meta["warnings"][0]


# --- bad input ---------------------------------------------------------------------------

def _bad(folder: Path, kind: str) -> str:
    """Fill ``folder`` with one kind of bad input; return what the message must name."""
    if kind == "empty":
        folder.mkdir(parents=True)
        (folder / "notes.txt").write_text("no traces here")
        return str(folder)
    if kind == "not a trace":
        _write(folder / "rank0.json", _trace(0, 2))
        _write(folder / "config.json", {"lr": 0.1})
        return "config.json"
    if kind == "same rank":
        _write(folder / "a.json", _trace(1, 2))
        _write(folder / "rank1.json", _trace(pid=5))
        return "claims rank 1"
    if kind == "no rank":
        _write(folder / "rank0.json", _trace(0, 2))
        _write(folder / "mystery.json", _trace())
        return "mystery.json"
    if kind == "truncated":
        _write(folder / "rank0.json", _trace(0, 2))
        raw = gzip.compress(json.dumps(_trace(1, 2)).encode())
        (folder / "rank1.json.gz").write_bytes(raw[: len(raw) // 2])
        return "rank1.json.gz"
    if kind == "two jobs":
        _write(folder / "rank0.json", _trace(0, 2))
        _write(folder / "rank1.json", _trace(1, 4))
        return "world_size"
    if kind == "two ets":
        _write(folder / "rank0.json", _trace(0, 1, pid=3))
        _write(folder / "et" / "x.json", _et(3))
        _write(folder / "et" / "y.json", _et(3))
        return "second execution trace for rank 0"
    raise AssertionError(kind)


BAD = ("empty", "not a trace", "same rank", "no rank", "truncated", "two jobs", "two ets")


@pytest.mark.parametrize("kind", BAD)
def test_bad_folders_are_input_errors(tmp_path: Path, kind: str) -> None:
    needle = _bad(tmp_path / "f", kind)
    with pytest.raises(InputError) as exc:
        load_source(tmp_path / "f")
    assert needle in str(exc.value)
    r = _cli("import", str(tmp_path / "f"), "-o", str(tmp_path / "b"))
    _one_line_error(r, needle)
    assert not (tmp_path / "b").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # no temporary left behind


def test_an_empty_directory_is_no_source(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no trace files"):
        source_kind(tmp_path)
    _one_line_error(_cli("validate", "self-replay", str(tmp_path)), "no trace files")


# --- the real folders ------------------------------------------------------------------------

_LOADED: dict[Path, Any] = {}


def _load(folder: Path) -> Any:
    """load_source(folder), once per test session (the real folders take seconds)."""
    if folder not in _LOADED:
        _LOADED[folder] = load_source(folder)
    return _LOADED[folder]


def _check_real(src: Any, device: str, et_names: list[str]) -> None:
    assert src.kind == "folder"
    meta = src.meta
    assert meta["ranks"] == 8 and meta["world_size"] == 8 and meta["backend"] == "nccl"
    assert meta["device"] == src.device == device
    assert "clock_shift_ns" not in meta and meta["clock"].startswith("recorded times")
    files = meta["imported_from"]["files"]
    assert [f["rank"] for f in files] == list(range(8))
    assert {f["rank_from"] for f in files} == {"distributedInfo"}
    assert [f["et"] for f in files] == et_names
    assert sorted(src.op_table["rank"].unique().tolist()) == list(range(8))
    assert sorted(src.et_tables) == list(range(8))
    assert all(len(t) > 100 for t in src.et_tables.values())
    assert extract_options(src).joint_ranks


#: the real folders: device, step, the collectives matched across the 8 ranks, and the joint
#: replay's largest step error
REAL = {
    "dlrm": ("Tesla V100-SXM2-32GB", "ProfilerStep#10", {"all_to_all": 40, "all_reduce": 24}, 0.005),
    "megatron": ("NVIDIA A100-SXM4-80GB", "ProfilerStep#3", {"all_reduce": 672}, 0.001),
}


def _folder(which: str, request: pytest.FixtureRequest) -> Path:
    if which == "megatron":
        return MEGATRON
    return request.getfixturevalue("public_traces") / "param-dlrm-8xv100"


@pytest.mark.parametrize("which", sorted(REAL))
def test_real_folder_loads_with_every_rank_and_et(which: str, request: pytest.FixtureRequest) -> None:
    ets = ([f"et/dlrm_eg_{r}.json.gz" for r in range(8)] if which == "dlrm"
           else [f"et/megatron_et_{r}.json.gz" for r in range(8)])
    _check_real(_load(_folder(which, request)), REAL[which][0], ets)


@pytest.mark.parametrize("which", sorted(REAL))
def test_real_folder_replays_jointly(which: str, request: pytest.FixtureRequest) -> None:
    """``validate self-replay FOLDER`` and ``replay FOLDER`` (the API the command calls; the
    command itself on a folder: test_folder_self_replay_on_the_command_line): one graph of
    the 8 ranks, every collective matched across them."""
    device, step, colls, tol = REAL[which]
    folder = _folder(which, request)
    r = _cli("validate", "self-replay", str(folder), "--json")
    assert r.exit_code == 0, r.stderr
    res = json.loads(r.stdout)["results"]
    assert [(x["rank"], x["step"]) for x in res] == [(rk, step) for rk in range(8)]
    assert max(abs(x["rel_error"]) for x in res) < tol, [x["rel_error"] for x in res]
    pred = replay(folder)
    assert pred.gpus == 8 and pred.device == device
    assert pred.iteration_time_s == pytest.approx(res[0]["predicted_s"])
    graph = pred.graph
    assert graph is not None and graph.groups == (tuple(range(8)),)
    coll = graph.tasks[graph.tasks["kind"] == "coll"]
    assert coll["collective"].value_counts().to_dict() == colls
    assert coll.groupby("rank").size().tolist() == [sum(colls.values()) // 8] * 8


def test_megatron_ets_pair_by_pid_before_names(tmp_path: Path) -> None:
    """ETs renamed so that their names point at the wrong ranks: the pid still pairs them."""
    for r in range(8):
        (tmp_path / f"megatron_kineto_{r}.json.gz").symlink_to(MEGATRON / f"megatron_kineto_{r}.json.gz")
        (tmp_path / "et").mkdir(exist_ok=True)
        (tmp_path / "et" / f"wrong_{7 - r}.json.gz").symlink_to(MEGATRON / "et" / f"megatron_et_{r}.json.gz")
    f = read_folder(tmp_path)
    assert [r.pid for r in f.ranks] == [2590092 + r for r in range(8)]
    assert [r.et.name if r.et else None for r in f.ranks] == [f"wrong_{7 - r}.json.gz" for r in range(8)]


def test_importing_the_real_folders(tmp_path: Path, public_traces: Path) -> None:
    for folder, name in ((public_traces / "param-dlrm-8xv100", "dlrm"), (MEGATRON, "megatron")):
        r = _cli("import", str(folder), "-o", str(tmp_path / name))
        assert r.exit_code == 0, r.stderr
        assert "imported 8 rank(s), world size 8" in r.stdout
        b = load_bundle(tmp_path / name)
        assert b.ranks == list(range(8)) and b.meta["source"] == "import"
        assert all(b.et_path(rk) is not None for rk in b.ranks)
        files = b.meta["imported_from"]["files"]
        for f in files:  # the bytes of gzipped traces are copied as they are
            assert b.trace_path(f["rank"]).read_bytes() == (folder / f["trace"]).read_bytes()
    back = load_source(tmp_path / "dlrm")
    assert back.kind == "bundle" and extract_options(back).joint_ranks
    cols = ["rank", "event_id", "name", "ts_ns", "dur_ns"]
    assert back.op_table[cols].equals(_load(public_traces / "param-dlrm-8xv100").op_table[cols])


def test_extract_refuses_a_folder_without_steps(tmp_path: Path) -> None:
    """A folder's traces are not read as one whole-window step (a single file is): extract
    refuses it as replay does, and writes nothing."""
    data = _trace(0, 1)
    data["traceEvents"] = [e for e in data["traceEvents"] if e["cat"] == "cpu_op"]
    _write(tmp_path / "in" / "rank0.json", data)
    for args in (("extract", str(tmp_path / "in"), "-o", str(tmp_path / "w")),
                 ("replay", str(tmp_path / "in"))):
        _one_line_error(_cli(*args), "no ProfilerStep#N")
    assert not (tmp_path / "w").exists()
