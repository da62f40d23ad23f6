"""Bad input on the command line: exit 2, one line naming the file (or flag, or run spec)
and the field, no traceback, nothing written. Each case crashed with an internal error
(exit 1) or passed silently before its fix."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from tracesim.cli import cli

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "interop"
ZERO_ROWS = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 1 "
             "ga: 1 all_gpus: 2 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0\n0\n")


def one_line_error(args: list[str], *needles: str) -> str:
    """Run ``tracesim ARGS``; it must exit 2 with one line on stderr holding ``needles``."""
    res = CliRunner().invoke(cli, args, obj={})
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, (res.exit_code, res.output)
    assert "Traceback" not in res.output and "internal error" not in res.output, res.output
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_an_aicb_file_without_rows(tmp_path: Path) -> None:
    f = tmp_path / "zero.txt"
    f.write_text(ZERO_ROWS)
    out = tmp_path / "z"
    one_line_error(["convert", str(f), "--to", "tracesim", "-o", str(out)],
                   f"{f}: line 2: ", "no rows")
    assert not out.exists()
    one_line_error(["replay", str(f), "--cluster", "h100x8"], f"{f}: line 2: ", "no rows")


def test_a_chakra_set_missing_a_rank_is_not_converted(tmp_path: Path) -> None:
    et = tmp_path / "et"
    res = CliRunner().invoke(cli, ["convert", str(DATA / "moe_ep2.txt"), "--to", "chakra",
                                   "-o", str(et / "w")], obj={})
    assert res.exit_code == 0, res.output
    (et / "w.3.et").unlink()
    out = tmp_path / "o_miss"
    one_line_error(["convert", str(et / "w"), "--to", "tracesim", "-o", str(out)],
                   f"{et / 'w.3.et'}: file not found")
    assert not out.exists()


def test_an_output_under_a_regular_file(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    src = str(DATA / "moe_ep2.txt")
    one_line_error(["convert", src, "--to", "aicb", "-o", str(afile / "x.txt")],
                   str(afile), "-o: exists and is not a directory")
    one_line_error(["convert", src, "--to", "aicb", "-o", str(afile / "sub" / "x.txt")],
                   "-o: cannot create the directory")
    assert afile.read_text() == "x"


def test_compare_names_the_run_spec_that_fails() -> None:
    line = one_line_error(["compare", "replay --model 'gpt3-1.7b", "RUNDIR"], "No closing quotation")
    assert line.startswith("tracesim: error: replay --model 'gpt3-1.7b: ")
    one_line_error(["compare", "replay --tp 2", "replay --tp 4", "--common",
                    "--model 'gpt3-1.7b --cluster h100x8"], "--common: ")
    line = one_line_error(["compare", "replay --tp 3", "replay --tp 4", "--common",
                           "--model gpt3-1.7b --cluster h100x8"], "tp 3")
    assert line.startswith("tracesim: error: replay --tp 3: layout: dp: ")


def _space(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "space.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


TINY = {"model": "gpt-tiny", "cluster": "h100x8", "global_batch": 8, "template": "analytic"}


def test_sweep_rank_by_cost_needs_prices(tmp_path: Path) -> None:
    space = _space(tmp_path, {"base": TINY, "axes": {"micro_batch": [1, 2]}})
    out = tmp_path / "sweep"
    one_line_error(["sweep", str(space), "-o", str(out), "--rank-by", "tokens_per_usd"],
                   "--rank-by: ", "tokens_per_usd needs prices", str(space))
    assert not out.exists()  # checked before the space is expanded or run


def test_sweep_bad_settings_fail_before_any_point_runs(tmp_path: Path) -> None:
    space = _space(tmp_path, {"base": TINY, "axes": {"cluster": ["h100x8", "h100x99"]}})
    out = tmp_path / "sweep"
    one_line_error(["sweep", str(space), "-o", str(out)], f"{space}: axes.cluster[1]: ",
                   "unknown cluster 'h100x99'")
    assert not out.exists()


@pytest.mark.slow
def test_sweep_ranking_is_rewritten_when_every_point_is_reused(tmp_path: Path) -> None:
    pytest.importorskip("dask.distributed")
    # priced, but not the device the points run on: no point has tokens per USD
    space = _space(tmp_path, {"base": TINY, "prices": {"b200": 5.0}})
    out = tmp_path / "sweep"
    args = ["sweep", str(space), "-o", str(out), "--workers", "1", "--quiet", "--no-plot"]
    res = CliRunner().invoke(cli, args, obj={})
    assert res.exit_code == 0, res.output
    assert len(pd.read_csv(out / "ranking.csv")) == 1
    res = CliRunner().invoke(cli, [*args, "--rank-by", "tokens_per_usd"], obj={})
    assert res.exit_code == 0 and "(2 reused" not in res.output and "1 reused" in res.output, res.output
    assert (out / "ranking.csv").read_text().splitlines() == ["rank,tokens_per_usd"]
    res = CliRunner().invoke(cli, [*args, "--rank-by", "iteration_time_s"], obj={})
    assert res.exit_code == 0, res.output
    assert list(pd.read_csv(out / "ranking.csv")["rank"]) == [1]
