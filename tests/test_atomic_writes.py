"""Atomic outputs: an interrupted run leaves each output file old or new, never partial.

Two checks: a static one over the source (every call that writes a file writes a temporary
name that is renamed into place: tracesim.fileio.atomic_path / atomic_open / write_json /
write_yaml, or a temporary directory renamed as a whole), and a dynamic one that sends
SIGINT and SIGTERM to ``tracesim replay ... -o OUT`` at several moments while it writes its
result directory over an older one, then checks every file.
"""

from __future__ import annotations

import ast
import gzip
import json
import signal
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]

#: methods / functions whose first argument (or receiver, for write_text / write_bytes) is
#: the file written
_WRITERS = {"to_parquet", "to_csv", "write_table", "savefig", "to_feather", "to_json"}
_RECEIVER_WRITERS = {"write_text", "write_bytes"}
#: writes that are atomic for another reason: (file, function) -> why
_ALLOWED = {
    ("collectors/worker.py", "_gzip"): "writes inside the bundle's temporary directory, "
                                       "renamed onto -o at the end (collectors/run.py)",
    ("collectors/worker.py", "_write_rank"): "writes inside the bundle's temporary directory, "
                                             "renamed onto -o at the end (collectors/run.py)",
}


def _is_temp(node: ast.AST) -> bool:
    """A temporary path: a name like ``tmp`` / ``tmp_path`` / ``buf``, or an expression on one."""
    names = [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]
    return bool(names) and any("tmp" in n or n in ("buf", "fh", "f") for n in names)


def _writes(path: Path) -> list[tuple[int, str, str]]:
    """(line, function, call) of every file write in ``path`` that does not target a temp."""
    tree = ast.parse(path.read_text())
    out = []
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        for call in [n for n in ast.walk(fn) if isinstance(n, ast.Call)]:
            f = call.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            target = None
            if name in _WRITERS and call.args and isinstance(f, ast.Attribute):
                if name == "to_json" and not call.args:
                    continue
                target = call.args[1] if name == "write_table" and len(call.args) > 1 else call.args[0]
            elif name in _RECEIVER_WRITERS and isinstance(f, ast.Attribute):
                target = f.value
            elif name == "open" and len(call.args) >= 2 and isinstance(call.args[1], ast.Constant) \
                    and any(c in str(call.args[1].value) for c in "wax"):
                target = call.args[0]
            if target is not None and not _is_temp(target):
                out.append((call.lineno, fn.name, ast.unparse(call)[:80]))
    return out


def test_every_writer_writes_a_temporary_name():
    bad = []
    for path in sorted([*ROOT.glob("tracesim/**/*.py"), *ROOT.glob("collectors/**/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        for line, fn, call in _writes(path):
            if (rel, fn) not in _ALLOWED:
                bad.append(f"{rel}:{line} in {fn}(): {call}")
    assert not bad, "writes straight to the final name (use tracesim.fileio.atomic_path):\n" + \
        "\n".join(bad)


def test_the_static_check_sees_a_direct_write(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("def f(df, out):\n    df.to_parquet(out / 'x.parquet')\n"
                 "def g(df, out):\n    with atomic_path(out) as tmp:\n        df.to_parquet(tmp)\n"
                 "def h(out):\n    (out / 'r.json').write_text('{}')\n")
    assert [(fn) for _, fn, _ in _writes(p)] == ["f", "h"]


def test_outputs_get_the_usual_permissions(tmp_path):
    """An atomically written file is readable like any other (mkstemp makes 0600 files)."""
    from tracesim.fileio import write_json

    write_json(tmp_path / "a.json", {"x": 1})
    (tmp_path / "b.json").write_text("{}")
    mode = stat.S_IMODE((tmp_path / "a.json").stat().st_mode)
    assert mode == stat.S_IMODE((tmp_path / "b.json").stat().st_mode), oct(mode)


# ----------------------------------------------------------------------------- interrupts

_CMD = ["replay", "--model", "gpt3-1.7b", "--cluster", "h100x8", "--dp", "8"]


def _snapshot(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _complete(name: str, data: bytes) -> bool:
    """Whether ``data`` is a whole file of its kind (parses to the end)."""
    try:
        if name.endswith(".json.gz"):
            json.loads(gzip.decompress(data))
        elif name.endswith(".json"):
            json.loads(data)
        elif name.endswith(".parquet"):
            import io

            pq.read_table(io.BytesIO(data))
        elif name.endswith(".png"):
            return data.startswith(b"\x89PNG\r\n\x1a\n") and data.endswith(b"IEND\xaeB`\x82")
        else:
            return False
    except Exception:
        return False
    return True


def _writing(out: Path, old_mtimes: dict[str, float]) -> bool:
    """Whether the run has started writing into ``out`` (a temp file, or a file changed)."""
    for p in out.rglob("*"):
        name = p.relative_to(out).as_posix()
        if p.name.endswith(".tmp") or (p.is_file() and p.stat().st_mtime != old_mtimes.get(name)):
            return True
    return False


def _default_sigint() -> None:
    """In the child before exec: SIGINT back to its default, so the Python there installs its
    Ctrl-C handler even when this test runs with SIGINT ignored (a background job of a
    non-interactive shell inherits it ignored, and so would every process it starts)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupted(out: Path, sig: int, after_s: float) -> tuple[int, str]:
    """Start a replay onto ``out``; ``after_s`` seconds after it starts writing, signal it."""
    old_mtimes = {p.relative_to(out).as_posix(): p.stat().st_mtime for p in out.rglob("*")
                  if p.is_file()}
    p = subprocess.Popen([sys.executable, "-m", "tracesim.cli", *_CMD, "-o", str(out)],
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         preexec_fn=_default_sigint)
    t_end = time.monotonic() + 300
    while p.poll() is None and not _writing(out, old_mtimes) and time.monotonic() < t_end:
        time.sleep(0.002)
    time.sleep(after_s)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    return p.returncode, err


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_replay_leaves_old_or_new_files(tmp_path, sig):
    first = tmp_path / "first"
    r = subprocess.run([sys.executable, "-m", "tracesim.cli", *_CMD, "-o", str(first)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    old = _snapshot(first)
    assert {"result.json", "ops.parquet", "timeline.json.gz"} <= set(old)
    # interrupt copies of the old directory at moments after the run starts writing
    delays = [0.0, 0.01, 0.05, 0.2, 0.6, 1.2]
    outs = []
    for i in range(len(delays)):
        d = tmp_path / f"run{i}"
        d.mkdir()
        for name, data in old.items():
            (d / name).parent.mkdir(parents=True, exist_ok=True)
            (d / name).write_bytes(data)
        outs.append(d)
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda a: _interrupted(a[0], sig, a[1]), zip(outs, delays, strict=True)))
    changed = 0
    for d, (rc, err), delay in zip(outs, results, delays, strict=True):
        assert "Traceback" not in err, err
        # 0: finished first; 130: Ctrl-C; 143: SIGTERM (unwound, temp files removed);
        # -sig: the signal landed while the interpreter was shutting down, after the command
        # had returned (Python restores the default handlers there): its files are complete,
        # which the checks below verify
        assert rc in (0, 130, 128 + sig, -sig), (delay, rc, err)
        now = _snapshot(d)
        for name, data in now.items():
            assert data == old.get(name) or _complete(name, data), f"{d.name}/{name} is partial"
            changed += data != old.get(name)
        leftovers = [p.name for p in d.rglob(".*") if p.name.endswith(".tmp")]
        assert not leftovers, f"temporary files left after {sig!r}: {leftovers}"
        assert set(old) <= set(now), "an interrupted run removed an old file"
    assert changed, "no run got as far as writing: the interrupts came too early to test anything"
    assert any(rc != 0 for rc, _ in results), "every run finished before its signal"


@pytest.mark.parametrize("after_syscall", [True, False], ids=["after-create", "before-create"])
def test_interrupt_around_temp_file_creation_leaves_nothing(tmp_path, monkeypatch, after_syscall):
    """A Ctrl-C whose handler runs right after (or before) the system call that creates the
    temporary file -- a signal that was already pending -- leaves no temporary file."""
    import os

    from tracesim.fileio import write_json

    target = tmp_path / "result.json"
    target.write_text("{}\n")
    real_open = os.open

    def interrupted_open(file, flags, *args, **kwargs):
        if after_syscall:
            real_open(file, flags, *args, **kwargs)  # the file now exists; its fd is lost
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "open", interrupted_open)
    with pytest.raises(KeyboardInterrupt):
        write_json(target, {"new": 1})
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]
    assert target.read_text() == "{}\n"



_FINALISER_SCRIPT = """
import signal, sys, time
from tracesim import cli
signal.signal(signal.SIGTERM, cli._terminate)
sys.unraisablehook = cli._unraisable
class Dropped:
    def __del__(self):
        raise {exc}
try:
    obj = Dropped()
    del obj
    for _ in range(2000):
        time.sleep(0.001)
    print("swallowed")
except BaseException as e:
    print("unwound", type(e).__name__)
"""


@pytest.mark.parametrize("exc", ["KeyboardInterrupt", "SystemExit(143)"])
def test_a_signal_inside_a_finaliser_still_unwinds(exc):
    # Python cannot raise from a finaliser or weakref callback; the CLI re-posts the signal
    r = subprocess.run([sys.executable, "-c", _FINALISER_SCRIPT.format(exc=exc)], cwd=ROOT,
                       capture_output=True, text=True, timeout=60, preexec_fn=_default_sigint)
    assert r.stdout.startswith("unwound"), (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr


def test_a_signal_in_a_finaliser_during_shutdown_starts_no_thread(monkeypatch):
    # at interpreter shutdown the command has returned: a re-posting thread would run without
    # an interpreter ("Fatal Python error: PyThreadState_Get"), so the signal is dropped
    import _thread
    from types import SimpleNamespace

    from tracesim import cli

    def no_thread(*args):
        raise AssertionError("a thread was started during finalization")

    monkeypatch.setattr(_thread, "start_new_thread", no_thread)
    monkeypatch.setattr(sys, "is_finalizing", lambda: True)
    for exc in (KeyboardInterrupt(), SystemExit(143)):
        cli._unraisable(SimpleNamespace(exc_value=exc))  # type: ignore[arg-type]


_SWALLOWING_SCRIPT = """
import os, signal, sys, time
from tracesim import cli

@cli.cli.command("swallow")
def swallow():
    # as matplotlib's Agg converters do: the interrupt is caught in C and another error raised
    interrupted = False
    try:
        os.kill(os.getpid(), signal.{sig})
        time.sleep(5)
    except BaseException:
        interrupted = True
    if interrupted:
        raise ValueError("Invalid bounding box")

sys.argv = ["tracesim", "swallow"]
cli.main()
"""


@pytest.mark.parametrize("sig,rc", [("SIGINT", 130), ("SIGTERM", 143)])
def test_an_error_raised_in_place_of_a_swallowed_signal_exits_as_interrupted(sig, rc):
    r = subprocess.run([sys.executable, "-c", _SWALLOWING_SCRIPT.format(sig=sig)], cwd=ROOT,
                       capture_output=True, text=True, timeout=60, preexec_fn=_default_sigint)
    assert r.returncode == rc, (r.returncode, r.stderr)
    assert r.stderr.strip() == "tracesim: interrupted", r.stderr
