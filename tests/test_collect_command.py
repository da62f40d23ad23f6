"""``tracesim collect -o BUNDLE -- CMD`` and ``tracesim.record``: recording the user's own job.

The job is ``tests/data/train_script/train.py``, a plain PyTorch script (its own model
module, AdamW, a DataLoader, DDP over gloo under torchrun) that knows nothing about tracesim.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from tracesim.collectors import recorder as rec_mod
from tracesim.collectors.recorder import Plan
from tracesim.collectors.wrap import _check, injected_env, write_injection

from tracesim.cli import cli
from tracesim.errors import InputError
from tracesim.trace.bundle import load_bundle

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT_DIR = ROOT / "tests" / "data" / "train_script"
SCRIPT = SCRIPT_DIR / "train.py"
#: K, W, M of the recordings here (the job runs 20 steps; the recording needs 1 + 3 + 1 + 2)
FAST = ["--steps", "2", "--warmup", "1", "--measure", "3"]
PLAN = Plan(steps=2, warmup=1, measure=3)


def _tracesim(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracesim.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def _torchrun() -> list[str]:
    found = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    return [found] if found else [sys.executable, "-m", "torch.distributed.run"]


def _markers(path: Path) -> list[str]:
    with gzip.open(path, "rt") as fh:
        trace = json.load(fh)
    return [e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"
            and e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]


def _check_bundle(out: Path, ranks: int) -> dict:
    b = load_bundle(out)
    meta = b.meta
    assert b.ranks == list(range(ranks))
    assert (meta["format"], meta["version"], meta["source"]) == ("tracesim-bundle", 2, "collect")
    assert meta["device"] == "cpu" and meta["torch_version"].startswith("2.13.0")
    assert meta["world_size"] == ranks and meta["threads"] == 1
    assert (meta["warmup_steps"], meta["measured_steps"], meta["profiled_steps"]) == (1, 3, 2)
    st = meta["measured_step_time_s"]
    assert st["n"] == 3 and 0 < st["min"] <= st["median"] <= st["max"] < 5
    po = meta["profiler_overhead"]
    assert po["per_event_ns"] >= 0 and po["method"] == "profiled vs unprofiled steps of the job"
    assert [e["rank"] for e in meta["per_rank"]] == list(range(ranks))
    for r in b.ranks:
        entry = b.rank_meta(r)
        assert entry is not None and entry["optimizer"] == "AdamW"
        assert len(entry["step_times_s"]) == 3 and len(entry["profiled_step_times_s"]) == 2
        assert [e["step"] for e in entry["profiled_step_events"]] == ["ProfilerStep#1", "ProfilerStep#2"]
        assert all(e["cpu_ops"] > 100 and e["events"] >= e["cpu_ops"]
                   for e in entry["profiled_step_events"])
        assert _markers(b.trace_path(r)) == ["ProfilerStep#1", "ProfilerStep#2"]
        et = b.et_path(r)
        assert et is not None and et.name == "et.json.gz"
        with gzip.open(et, "rt") as fh:
            names = [n["name"] for n in json.load(fh)["nodes"]]
        assert [n for n in names if n.startswith("ProfilerStep#")] == ["ProfilerStep#1", "ProfilerStep#2"]
        assert any(n.startswith("aten::") for n in names)
    leftovers = [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
    assert not leftovers and not (out / ".status").exists()
    return meta


def _replays(out: Path, ranks: int) -> None:
    runner = CliRunner()
    r = runner.invoke(cli, ["validate", "self-replay", str(out), "--json"], obj={})
    assert r.exit_code == 0, r.output
    results = json.loads(r.stdout)["results"]
    assert {(x["rank"], x["step"]) for x in results} == {
        (rk, f"ProfilerStep#{s}") for rk in range(ranks) for s in (1, 2)}
    assert all(x["predicted_s"] > 0 for x in results)
    r = runner.invoke(cli, ["replay", str(out), "--json"], obj={})
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["gpus"] == ranks and res["iteration_time_s"] > 0


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("own") / "one"
    # a spawned DataLoader worker: a process of the job that must not record
    p = _tracesim("collect", *FAST, "-o", str(out), "--", sys.executable, str(SCRIPT),
                  "--steps", "20", "--workers", "1")
    assert p.returncode == 0, p.stderr
    return out, p


@pytest.mark.slow
def test_one_rank_python_script(one_rank: tuple[Path, subprocess.CompletedProcess]) -> None:
    out, p = one_rank
    meta = _check_bundle(out, 1)
    assert meta["command"] == [sys.executable, str(SCRIPT), "--steps", "20", "--workers", "1"]
    assert meta["backend"] is None and meta["process_groups"] == []
    assert "trained 20 steps" in p.stdout  # the job ran to its end after the recording
    assert p.stdout.strip().splitlines()[-1].startswith(f"{out}: 1 rank(s) of 1 on cpu, 2 profiled")
    _replays(out, 1)


@pytest.mark.slow
def test_two_ranks_under_torchrun(tmp_path: Path) -> None:
    out = tmp_path / "two"
    p = _tracesim("collect", *FAST, "-o", str(out), "--", *_torchrun(), "--standalone",
                  "--nproc-per-node", "2", str(SCRIPT), "--steps", "20")
    assert p.returncode == 0, p.stderr
    meta = _check_bundle(out, 2)
    assert meta["backend"] == "gloo"
    assert [g["ranks"] for g in meta["process_groups"]] == [[0, 1]]
    assert p.stdout.count("trained 20 steps") == 2
    _replays(out, 2)


@pytest.mark.slow
@pytest.mark.parametrize(("args", "needles"), [
    (["--crash-after", "2"], ["the command exited with code 1",
                              "rank 0 had stepped its optimizer 2 of 7 times",
                              "RuntimeError: boom at step 2"]),
    (["--steps", "3"], ["rank 0 stepped its optimizer 3 times; the recording needs 7 "
                        "(1 warm-up + 3 timed + 1 profiler warm-up + 2 profiled)"]),
    (["--no-optim"], ["rank 0 never stepped an optimizer (torch.optim)"]),
], ids=["fails", "too-few-steps", "no-optimizer"])
def test_a_job_that_cannot_be_recorded_exits_2(tmp_path: Path, args: list[str],
                                               needles: list[str]) -> None:
    out = tmp_path / "b"
    p = _tracesim("collect", *FAST, "-o", str(out), "--", sys.executable, str(SCRIPT), *args)
    assert p.returncode == 2, p.stderr
    ours = [ln for ln in p.stderr.splitlines() if ln.startswith("tracesim")]
    assert len(ours) == 1 and ours[0] == p.stderr.strip().splitlines()[-1], p.stderr
    assert ours[0].startswith("tracesim: error: ")
    for n in needles:
        assert n in ours[0], ours[0]
    if "--crash-after" not in args:  # the job printed nothing to stderr: one line in all
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("args", "needle"), [
    (["--", "no-such-command-tracesim"], "no-such-command-tracesim: command not found"),
    (["--", sys.executable, "-c", "pass"], "no rank wrote anything"),
    (["--workload", "gpt-tiny", "--", sys.executable, "-c", "pass"],
     "--workload: give either --workload or a command after --, not both"),
    (["--ranks", "2", "--", sys.executable, "-c", "pass"], "--ranks: applies to --workload"),
    (["--warmup", "0", "--", sys.executable, "-c", "pass"], "--warmup: must be >= 1"),
    ([], "give --workload NAME|MODEL.yaml, or your own training command after --"),
], ids=["not-found", "no-torch", "workload", "ranks", "warmup", "nothing"])
def test_bad_command_lines_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    p = _tracesim("collect", "-o", str(tmp_path / "b"), *args)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith("tracesim: error: ") and needle in lines[0], lines[0]
    assert list(tmp_path.iterdir()) == []


def test_an_existing_directory_that_is_not_a_bundle_is_refused(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("mine")
    p = _tracesim("collect", "-o", str(tmp_path / "b"), "--", sys.executable, str(SCRIPT))
    assert p.returncode == 2 and "exists and is not a bundle" in p.stderr, p.stderr
    assert [f.name for f in (tmp_path / "b").iterdir()] == ["notes.txt"]


def test_injection_chains_to_the_hidden_sitecustomize_and_imports_nothing(tmp_path: Path) -> None:
    """A process that never imports torch gets neither torch nor the recorder; a
    sitecustomize already on the path still runs."""
    inject, other = tmp_path / "inject", tmp_path / "other"
    inject.mkdir()
    other.mkdir()
    write_injection(inject)
    (other / "sitecustomize.py").write_text(
        "import os\nopen(os.environ['MARK'], 'w').write('ran')\n")
    env = injected_env({**os.environ, "PYTHONPATH": str(other), "MARK": str(tmp_path / "mark")},
                       inject, tmp_path / "work", PLAN)
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [str(inject), str(other)]
    code = "import sys; print(sorted(m for m in sys.modules if m.startswith(('torch', '_tracesim'))))"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "[]", (p.stdout, p.stderr)
    assert (tmp_path / "mark").read_text() == "ran"
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize(("orig_argv", "argv", "launcher"), [
    (["python", "/v/bin/torchrun", "--nproc-per-node", "2", "t.py"], ["/v/bin/torchrun"], True),
    (["python", "-m", "torch.distributed.run", "t.py"], ["-m"], True),
    (["python", "-u", "-m", "torch.distributed.launch", "t.py"], ["-m"], True),
    (["python", "t.py", "-m", "torch.distributed.run"], ["t.py"], False),
    (["python", "-c", "pass"], ["-c"], False),
    (["python", "-m", "mypkg.train"], ["/x/mypkg/train.py"], False),
])
def test_launchers_are_not_ranks(monkeypatch: pytest.MonkeyPatch, orig_argv: list[str],
                                 argv: list[str], launcher: bool) -> None:
    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    monkeypatch.setattr(sys, "argv", argv)
    assert rec_mod.is_launcher() is launcher


def _status(pid: int, rank: int, steps: int, state: str, parent: int | None = None) -> dict:
    return {"pid": pid, "parent": None if parent is None else str(parent), "rank": rank,
            "state": state, "steps": steps, "needed": PLAN.needed, "error": None}


def test_the_status_files_explain_a_failed_recording() -> None:
    ok = [_status(10, 0, 9, "done"), _status(11, 1, 9, "done")]
    _check(0, None, ok, PLAN, "cmd")
    # a launcher (or data preparation) that stepped nothing beside recorded ranks is fine
    _check(0, None, [_status(9, 0, 0, "incomplete"), *[{**s, "parent": "9"} for s in ok]],
           PLAN, "cmd")
    # a restarted worker: the rank finished in its second process
    _check(0, None, [_status(12, 1, 3, "incomplete"), *ok], PLAN, "cmd")
    cases = [
        (0, [ok[0], _status(11, 1, 4, "incomplete")], "rank 1 stepped its optimizer 4 times"),
        (0, [_status(10, 0, 0, "incomplete")], "rank 0 never stepped an optimizer"),
        (0, [ok[0], _status(11, 0, 9, "done")], "two processes recorded rank 0"),
        (0, [{**_status(10, 0, 5, "error"), "error": "OSError: disk full"}],
         "rank 0: the recording failed: OSError: disk full"),
        (3, [_status(10, 0, 2, "incomplete")],
         "the command exited with code 3 (rank 0 had stepped its optimizer 2 of 7 times): last"),
        (-9, [], "the command was killed by SIGKILL: last"),
    ]
    for rc, statuses, needle in cases:
        with pytest.raises(InputError) as err:
            _check(rc, "last", statuses, PLAN, "cmd")
        assert needle in str(err.value), (needle, str(err.value))


def test_import_tracesim_and_its_record_name_do_not_import_torch() -> None:
    code = ("import sys, tracesim; f = tracesim.record; "
            "print(f.__module__, 'torch' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=ROOT)
    assert p.returncode == 0 and p.stdout.split() == ["tracesim.collectors.record", "False"], p


def test_record_api_in_process(tmp_path: Path) -> None:
    import torch

    import tracesim

    sys.path.insert(0, str(SCRIPT_DIR))
    try:
        from mymodel import NoisyTokens, TinyTagger
    finally:
        sys.path.remove(str(SCRIPT_DIR))
    torch.manual_seed(0)
    model = TinyTagger()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    other = torch.optim.SGD(model.parameters(), lr=0.0)  # a second optimizer: not counted
    tokens, labels = NoisyTokens()[0]

    def loss() -> torch.Tensor:
        logits = model(tokens[None])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels)

    out = tmp_path / "api"
    for _ in range(2):  # the second recording replaces the first bundle
        with tracesim.record(out, steps=2, warmup=1, measure=2) as rec:
            for _ in range(10):
                loss().backward()
                opt.step()
                other.step()
                opt.zero_grad()
        assert rec.done
    b = load_bundle(out)
    assert b.meta["source"] == "record" and b.meta["version"] == 2 and b.ranks == [0]
    entry = b.rank_meta(0)
    assert entry is not None and entry["optimizer"] == "AdamW"
    assert len(entry["step_times_s"]) == 2 and len(entry["profiled_step_times_s"]) == 2
    assert _markers(b.trace_path(0)) == ["ProfilerStep#1", "ProfilerStep#2"]

    manual = tmp_path / "manual"
    with tracesim.record(manual, steps=1, warmup=0, measure=1) as rec:
        for _ in range(3):
            loss().backward()
            rec.step()
    assert _markers(load_bundle(manual).trace_path(0)) == ["ProfilerStep#1"]

    short = tmp_path / "short"
    with pytest.raises(InputError, match=r"rank 0 ran 2 steps \(\.step\(\)\); the recording needs 3"):
        with tracesim.record(short, steps=1, warmup=0, measure=1) as rec:
            for _ in range(2):
                rec.step()
    with pytest.raises(RuntimeError, match="counts optimizer steps"):
        with tracesim.record(short, steps=1, warmup=0, measure=1) as rec:
            opt.step()
            rec.step()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["api", "manual"]
    with pytest.raises(InputError, match="steps: must be an integer >= 1"):
        tracesim.record(short, steps=0)


def test_exit_handler_hands_the_gil_to_process_group_threads(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A recorded rank's exit handler sleeps (releasing the GIL) once torch.distributed is
    loaded, so that a ProcessGroupGloo worker can release the last finished work's Python
    object before the interpreter finalizes (test_two_ranks_under_torchrun aborted about one
    run in ten without it); a process without torch.distributed does not wait."""
    slept: list[float] = []
    monkeypatch.setattr(rec_mod.time, "sleep", slept.append)
    rec = rec_mod.Recorder(tmp_path, Plan(steps=1, warmup=0, measure=1))
    rec.done = True
    import torch.distributed  # noqa: F401 - what the handler looks for

    rec.at_exit()
    assert slept == [rec_mod.EXIT_GRACE_S]
    monkeypatch.delitem(sys.modules, "torch.distributed")
    rec.at_exit()
    assert slept == [rec_mod.EXIT_GRACE_S]


def test_compiled_cpu_kernels_are_profiled_unless_the_user_says_otherwise(tmp_path: Path) -> None:
    """The job runs with inductor's C++ kernel profiling on (their time is otherwise untraced
    host time); a value the user set is kept."""
    env = injected_env({"PATH": os.environ.get("PATH", "")}, tmp_path, tmp_path, PLAN)
    assert env["TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE"] == "1"
    env = injected_env({"TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE": "0"}, tmp_path, tmp_path, PLAN)
    assert env["TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE"] == "0"
