"""Where results go: ``replay -o`` never overwrites what is not a result directory, a result
written again drops the files the new one does not have, and an ``-o`` under a file is bad
input for every writer (exit 2, one line, nothing written)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.test_cli_errors import check_error

ROOT = Path(__file__).resolve().parents[1]
TOUR = ["--model", "gpt3-1.7b", "--cluster", "h100x8", "--tp", "2", "--pp", "2", "--dp", "2",
        "--micro-batch", "1", "--global-batch", "8"]


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracesim.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def test_replay_refuses_a_directory_that_is_not_a_result(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    check_error(run("replay", *TOUR, "-o", str(mine)), "mine", "not a tracesim result directory",
                "notes.txt")
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def test_replay_rewrites_its_own_result_and_drops_stale_files(tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert run("replay", *TOUR, "-o", str(out)).returncode == 0
    assert (out / "links.png").exists()
    p = run("replay", *TOUR, "--network", "estimate", "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert not (out / "links.png").exists()  # no flows: no heat map, not the last run's
    assert (out / "result.json").exists() and (out / "gantt.png").exists()


def test_output_under_a_file_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    bad = tmp_path / "afile" / "sub"
    check_error(run("replay", *TOUR, "-o", str(bad)), "afile")
    check_error(run("collect", "-o", str(bad), "--", sys.executable, "-c", "print(1)"), "afile",
                "cannot create")
    check_error(run("collect", "--workload", "gpt-tiny", "--steps", "1", "--measure", "1",
                    "--warmup", "1", "-o", str(bad)), "afile", "cannot create")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_empty_values_are_bad_input(tmp_path: Path) -> None:
    """``--cluster "$CLUSTER"`` with the variable unset is not "no cluster", and an empty
    SOURCE is not the current directory."""
    check_error(run("replay", "--model", "gpt3-1.7b", "--cluster", ""), "--cluster", "empty")
    check_error(run("replay", "", "--cluster", "h100x8", cwd=tmp_path), "SOURCE", "empty")


def test_a_flag_value_click_refuses_is_one_line() -> None:
    check_error(run("replay", "--model", "gpt3-1.7b", "--cluster", "h100x8", "--jitter", "1.5"),
                "--jitter", "replay --help")
    check_error(run("replay", "--schedule", "foo"), "--schedule")
    check_error(run("nosuch"), "nosuch")


def test_a_folder_named_like_a_shipped_spec_does_not_hide_it(tmp_path: Path) -> None:
    """``collect --workload gpt-tiny -o gpt-tiny`` leaves a folder named like the model: the
    shipped names still mean the shipped specs, and listings never read the current
    directory."""
    for name in ("gpt-tiny", "llama3-8b", "h100x8"):
        (tmp_path / name).mkdir()
    assert run("list", "models", cwd=tmp_path).returncode == 0
    assert run("list", "clusters", cwd=tmp_path).returncode == 0
    p = run("replay", "--model", "llama3-8b", "--cluster", "h100x8", "--tp", "8", "--json",
            cwd=tmp_path)
    assert p.returncode == 0, p.stderr


def test_a_cpu_profile_as_device_for_a_cpu_recording_says_what_it_changes() -> None:
    from tracesim.api import replay

    bundle = ROOT / "workloads" / "bundles" / "gpt-tiny"
    same = replay(bundle)
    other = replay(bundle, device="host-cpu-1t")
    assert other.iteration_time_s == same.iteration_time_s
    assert any("--device host-cpu-1t is a CPU profile" in w for w in other.warnings)


def test_a_bad_variant_of_a_known_algorithm_says_its_form() -> None:
    check_error(run("netbench", "--cluster", "h100x8", "--collective", "all_to_all", "--algo",
                    "dedup:8:9"), "--algo", "bad arguments in 'dedup:8:9'", "1 <= K <= E")
