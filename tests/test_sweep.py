"""Sweep spaces, safe constraints, point keys, the results table and the outputs (no Dask)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.helpers import retarget
from tracesim.errors import InputError
from tracesim.sweep import expand_space, load_space, pareto_front, plot_pareto, ranked, run_point
from tracesim.sweep.expr import parse_expr
from tracesim.sweep.space import space_from_dict, write_spec_files
from tracesim.sweep.store import build_table, done_keys, read_results, write_results
from tracesim.sweep.task import flatten

ROOT = Path(__file__).resolve().parents[1]


def write_space(tmp_path: Path, data: dict, name: str = "space.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


# ----------------------------------------------------------------------------- expressions


@pytest.mark.parametrize("text, scope, expected", [
    ("tp * pp * dp == gpus", {"tp": 2, "pp": 2, "dp": 2, "gpus": 8}, True),
    ("tp * pp * dp == gpus", {"tp": 2, "pp": 2, "dp": 1, "gpus": 8}, False),
    ("layers % pp == 0 and pp <= layers // 4", {"layers": 32, "pp": 8}, True),
    ("layers % pp == 0 and pp <= layers // 4", {"layers": 32, "pp": 16}, False),
    ("schedule != 'interleaved' or pp > 1", {"schedule": "interleaved", "pp": 1}, False),
    ("tp in (1, 2, 4) and not sp", {"tp": 4, "sp": False}, True),
    ("1 <= tp < 8", {"tp": 8}, False),
    ("max(tp, pp) ** 2 == 16 and abs(-dp) == min(dp, 9)", {"tp": 4, "pp": 2, "dp": 3}, True),
    ("(dp if dp > 1 else 0) == 0", {"dp": 1}, True),
    ("gpus / tp == 2.5", {"gpus": 5, "tp": 2}, True),
    ("fsdp == true", {"fsdp": True}, True),
])
def test_expr_values(text, scope, expected):
    assert parse_expr(text, "s.yaml", "constraints[0]").test(scope) is expected


@pytest.mark.parametrize("text", [
    "__import__('os').system('true')",
    "tp.__class__",
    "open('x')",
    "[x for x in (1, 2)]",
    "lambda: 1",
    "tp[0]",
    "f'{tp}'",
    "max(tp, key=abs) == 1",
    "(*a,) == 1",
])
def test_expr_rejects_everything_but_arithmetic(text):
    with pytest.raises(InputError) as e:
        parse_expr(text, "s.yaml", "constraints[2]")
    assert e.value.file == "s.yaml" and e.value.where == "constraints[2]"


def test_expr_errors_name_the_problem():
    with pytest.raises(InputError, match="unknown name 'tq'"):
        parse_expr("tq == 1", "s.yaml", "c").test({"tp": 1})
    with pytest.raises(InputError, match="not true/false"):
        parse_expr("tp * 2", "s.yaml", "c").test({"tp": 1})
    with pytest.raises(InputError, match="cannot evaluate"):
        parse_expr("gpus // (tp - 1) == 1", "s.yaml", "c").test({"gpus": 8, "tp": 1})
    with pytest.raises(InputError, match="exponent"):
        parse_expr("2 ** 10 ** 10 > 0", "s.yaml", "c").test({})
    with pytest.raises(InputError, match="invalid expression"):
        parse_expr("tp ==", "s.yaml", "c")
    assert parse_expr("max(tp, pp) > 1").names == frozenset({"tp", "pp"})


# ----------------------------------------------------------------------------- spaces

TINY = {"model": "gpt-tiny", "cluster": "h100x8", "global_batch": 8}


def test_product_grouped_axes_points_and_constraints(tmp_path):
    space = space_from_dict({
        "base": TINY,
        "axes": {"pp": [1, 2], "dp": [1, 2, 4],
                 "layout": [{"micro_batch": 1}, {"micro_batch": 2, "recompute": "full"}]},
        "points": [{"tp": 5, "pp": 1, "dp": 1}],
        "constraints": ["tp * pp * dp <= gpus", "not (pp == 2 and dp == 4)", "num_micro >= 1"],
    }, tmp_path / "s.yaml")
    exp = expand_space(space, tmp_path / "out")
    # 2 x 3 x 2 = 12 product points, 2 excluded (pp 2, dp 4), plus the explicit one
    assert (len(exp.points), exp.excluded, exp.duplicates) == (11, 2, 0)
    first, last = exp.points[0], exp.points[-1]
    assert first.settings == {**TINY, "pp": 1, "dp": 1, "micro_batch": 1}
    assert exp.points[1].settings["recompute"] == "full"
    assert last.settings == {**TINY, "tp": 5, "pp": 1, "dp": 1}
    assert [p.index for p in exp.points] == list(range(11))
    assert len({p.key for p in exp.points}) == 11


def test_defaults_and_model_names_in_constraints(tmp_path):
    # dp defaults to gpus // (tp * pp * cp); layers come from the model spec (gpt-tiny: 2)
    space = space_from_dict({"base": {"model": "gpt-tiny", "cluster": "h100x8"},
                             "axes": {"pp": [1, 2, 4]},
                             "constraints": ["pp <= layers", "world == gpus", "dp * pp == 8"]},
                            tmp_path / "s.yaml")
    exp = expand_space(space, tmp_path / "o")
    assert [p.settings["pp"] for p in exp.points] == [1, 2]
    assert exp.excluded == 1


def test_keys_follow_content_and_version(tmp_path, monkeypatch):
    shipped = str(ROOT / "workloads" / "gpt-tiny.yaml")
    a = expand_space(space_from_dict({"base": TINY}, tmp_path / "a.yaml"), tmp_path / "o").points[0]
    b = expand_space(space_from_dict({"base": {**TINY, "model": shipped}}, tmp_path / "b.yaml"),
                     tmp_path / "o2").points[0]
    assert a.key == b.key  # same model content, spelt differently, same sweep dir or not
    c = expand_space(space_from_dict({"base": {**TINY, "nic_Gbps": 200}}, tmp_path / "c.yaml"),
                     tmp_path / "o").points[0]
    assert c.key != a.key and c.cluster_spec["inter_node"]["nic_Gbps"] == 200
    monkeypatch.setattr("tracesim.sweep.space.__version__", "9.9.9")
    d = expand_space(space_from_dict({"base": TINY}, tmp_path / "a.yaml"), tmp_path / "o").points[0]
    assert d.key != a.key


def test_keys_follow_the_template_source_content(tmp_path):
    import shutil

    bundle = tmp_path / "bundle"
    shutil.copytree(ROOT / "workloads" / "bundles" / "gpt-tiny", bundle)

    def key(data):
        return expand_space(space_from_dict(data, tmp_path / "s.yaml"), tmp_path / "o").points[0].key

    with_source = {"source": "bundle", "base": TINY}
    k1 = key(with_source)
    assert key(with_source) == k1
    with open(bundle / "meta.yaml", "a") as fh:
        fh.write("# re-recorded\n")
    assert key(with_source) != k1  # a new recording of the same bundle path is a new point
    analytic = {"base": {**TINY, "template": "analytic"}}
    assert key(analytic) != key({"base": TINY})


def test_duplicates_are_dropped(tmp_path):
    space = space_from_dict({"base": TINY, "axes": {"dp": [2, 2]}, "points": [{"dp": 2}]},
                            tmp_path / "s.yaml")
    exp = expand_space(space, tmp_path / "o")
    assert (len(exp.points), exp.duplicates) == (1, 2)


@pytest.mark.parametrize("data, where, needle", [
    ({"base": TINY, "axis": {"tp": [1]}}, "axis", "unknown key"),
    ({"base": {**TINY, "tpp": 2}}, "base.tpp", "unknown setting"),
    ({"base": TINY, "axes": {"tp": []}}, "axes.tp", "non-empty list"),
    ({"base": TINY, "axes": {"tp": [1, 0]}}, "axes.tp[1]", "must be >= 1"),
    ({"base": TINY, "axes": {"schedule": ["1f1b", "zigzag"]}}, "axes.schedule[1]", "not one of"),
    ({"base": TINY, "axes": {"layout": [1, 2]}}, "axes.layout", "grouped axis"),
    ({"base": TINY, "constraints": ["import os"]}, "constraints[0]", "invalid expression"),
    ({"base": TINY, "filters": {"fits_mem": True}}, "filters.fits_mem", "unknown key"),
    ({"base": TINY, "prices": {"h100": -1}}, "prices.h100", "> 0"),
    ({"base": {**TINY, "nic_Gbps": "fast"}}, "base.nic_Gbps", "bandwidth"),
])
def test_bad_spaces_name_file_and_key(tmp_path, data, where, needle):
    with pytest.raises(InputError) as e:
        space_from_dict(data, tmp_path / "bad.yaml")
    assert e.value.file == str(tmp_path / "bad.yaml") and e.value.where == where
    assert needle in e.value.message


def test_bad_points_at_expansion(tmp_path):
    with pytest.raises(InputError, match="needs a cluster"):
        expand_space(space_from_dict({"base": {"model": "gpt-tiny"}}, tmp_path / "s.yaml"), tmp_path)
    one_node = yaml.safe_load((ROOT / "topologies" / "h100x8.yaml").read_text())
    del one_node["inter_node"]
    (tmp_path / "one-node.yaml").write_text(yaml.safe_dump(one_node))
    for axis, needle in (({"nic_Gbps": [100]}, "no inter_node section to set"),
                         ({"nodes": [2]}, "cannot have 2 nodes")):
        space = space_from_dict({"base": {**TINY, "cluster": "one-node.yaml"}, "axes": axis},
                                tmp_path / "s.yaml")
        with pytest.raises(InputError, match=needle):
            expand_space(space, tmp_path / "o")
    with pytest.raises(InputError, match="gpu"):
        expand_space(space_from_dict({"base": {**TINY, "gpu": "tpu-v9"}}, tmp_path / "s.yaml"), tmp_path)


def test_relative_paths_are_taken_from_the_space_file(tmp_path):
    sub = tmp_path / "specs"
    sub.mkdir()
    (sub / "my-model.yaml").write_text((ROOT / "workloads" / "gpt-tiny.yaml").read_text())
    space = load_space(write_space(sub, {"base": {**TINY, "model": "my-model.yaml"}}))
    p = expand_space(space, tmp_path / "o").points[0]
    assert p.model_spec["name"] == "gpt-tiny"


# ----------------------------------------------------------------------------- one task


def test_run_point_equals_replay_alone_and_records_failure(tmp_path):
    space = space_from_dict({"base": TINY, "points": [{"pp": 2, "dp": 4}, {"tp": 2}]},
                            tmp_path / "s.yaml")
    exp = expand_space(space, tmp_path / "o")
    write_spec_files(exp.points)
    ok, bad = (run_point(p) for p in exp.points)
    alone = flatten(retarget({**TINY, "pp": 2, "dp": 4}).to_dict())
    assert ok["status"] == "ok" and ok["error"] == ""
    for k, v in alone.items():
        if k.endswith("wall_s"):
            continue
        col = "result.cluster" if k == "cluster" else k
        if isinstance(v, float):
            assert math.isclose(ok[col], v, rel_tol=1e-12), k
        else:
            assert ok[col] == v, k
    assert ok["tokens_per_s_per_gpu"] == pytest.approx(alone["tokens_per_s"] / 8, rel=1e-12)
    with pytest.raises(InputError) as e:
        retarget({**TINY, "tp": 2}).to_dict()
    assert bad["status"] == "failed" and bad["error"] == f"InputError: {e.value}"
    assert "heads 5 are not divisible by tp 2" in bad["error"]


def test_cluster_variants_change_the_replay(tmp_path):
    space = space_from_dict({"base": {**TINY, "nodes": 2, "global_batch": 16},
                             "axes": {"nic_Gbps": [25, 400], "gpu": ["h100", "h200"]}},
                            tmp_path / "s.yaml")
    exp = expand_space(space, tmp_path / "o")
    write_spec_files(exp.points)
    rows = {(p.settings["nic_Gbps"], p.settings["gpu"]): run_point(p) for p in exp.points}
    assert all(r["status"] == "ok" and r["gpus"] == 16 for r in rows.values())
    assert rows[(400, "h200")]["device"] == "h200"
    assert rows[(25, "h200")]["cluster_name"] == "h100x8-h200-2n-nic25G"
    # slower NICs expose more data-parallel communication and lengthen the iteration
    for gpu in ("h100", "h200"):
        assert rows[(25, gpu)]["breakdown.exposed_comm_s.dp"] > rows[(400, gpu)]["breakdown.exposed_comm_s.dp"]
        assert rows[(25, gpu)]["iteration_time_s"] > rows[(400, gpu)]["iteration_time_s"]


def test_memory_filter_skips_layouts_that_do_not_fit(tmp_path):
    space_dict = {"base": {"model": "gpt3-18.4b", "cluster": "h100x8", "global_batch": 8},
                  "points": [{"tp": 1, "dp": 8}, {"tp": 8, "dp": 1}]}
    space = space_from_dict({**space_dict, "filters": {"fits_memory": True, "max_memory_gib": 79}},
                            tmp_path / "s.yaml")
    exp = expand_space(space, tmp_path / "o")
    write_spec_files(exp.points)
    big, small = (run_point(p) for p in exp.points)
    assert big["status"] == "skipped" and "does not fit" in big["error"]
    assert big["memory_gib_per_gpu"] > 80  # 18.4B parameters with Adam on one GPU
    assert small["status"] == "ok" and 30 < small["memory_gib_per_gpu"] < 79
    tight = space_from_dict({**space_dict, "filters": {"max_memory_gib": 30}}, tmp_path / "s.yaml")
    row = run_point(expand_space(tight, tmp_path / "o").points[1])
    assert row["status"] == "skipped" and "over budget" in row["error"]
    assert row["iteration_time_s"] == small["iteration_time_s"]  # metrics are kept


# ----------------------------------------------------------------------------- table, outputs


def _row(key, status="ok", **kw):
    return {"key": key, "status": status, "error": "", **kw}


def test_table_order_types_costs_and_atomic_write(tmp_path):
    rows = {"b": _row("b", tp=2, gpus=4, tokens_per_s=400.0, device="h100", sp=True),
            "a": _row("a", status="failed", error="InputError: x")}
    prev = pd.DataFrame([_row("z", tp=1, gpus=1, tokens_per_s=50.0, device="h200"),
                         _row("a", status="ok", tp=8, gpus=8, tokens_per_s=1.0, device="h100")])
    t = build_table(rows, ["a", "b", "c"], prev, {"h100": 2.0})
    assert list(t["key"]) == ["a", "b", "z"]  # space order, then earlier rows of other keys
    assert t.loc[0, "status"] == "failed"  # the new row replaces the stored one
    assert str(t["tp"].dtype) == "Int64" and str(t["sp"].dtype) == "boolean"
    assert t.loc[1, "cost_per_hour_usd"] == pytest.approx(8.0)
    assert t.loc[1, "tokens_per_usd"] == pytest.approx(400 * 3600 / 8.0)
    assert pd.isna(t.loc[2, "price_per_gpu_hour_usd"])  # no price for h200
    mixed = build_table({"m": _row("m", model="gpt-tiny"), "n": _row("n", model=3)}, ["m", "n"], None, {})
    write_results(mixed, tmp_path)
    back = read_results(tmp_path)
    assert list(back["model"]) == ["gpt-tiny", "3"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.parquet"]  # no temp file left
    assert done_keys(t) == {"a", "b", "z"} and done_keys(t, retry_failed=True) == {"b", "z"}
    (tmp_path / "results.parquet").write_bytes(b"not parquet")
    with pytest.raises(InputError, match="cannot read"):
        read_results(tmp_path)


def test_pareto_front_and_ranking():
    df = pd.DataFrame([
        _row("a", gpus=1, tokens_per_s=100.0, tp=1), _row("b", gpus=2, tokens_per_s=90.0, tp=2),
        _row("c", gpus=2, tokens_per_s=180.0, tp=1), _row("d", gpus=4, tokens_per_s=170.0, tp=4),
        _row("e", gpus=8, tokens_per_s=500.0, tp=8), _row("f", "failed", gpus=1, tokens_per_s=1e9),
    ])
    df["tokens_per_s_per_gpu"] = df["tokens_per_s"] / df["gpus"]
    assert list(pareto_front(df)["key"]) == ["a", "c", "e"]
    top = ranked(df, by="tokens_per_s", top=3)
    assert list(top["rank"]) == [1, 2, 3] and list(top["tokens_per_s"]) == [500.0, 180.0, 170.0]
    assert list(ranked(df, by="tokens_per_s_per_gpu", top=2)["tokens_per_s_per_gpu"]) == [100.0, 90.0]
    assert "tp" in top.columns  # the settings that vary are shown
    assert list(ranked(df, top=10, keys=["b", "d"])["tp"]) == [4, 2]
    df["iteration_time_s"] = [4.0, 1.0, 3.0, 2.0, 5.0, 0.1]
    assert list(ranked(df, by="iteration_time_s", top=2)["iteration_time_s"]) == [1.0, 2.0]


def test_pareto_png(tmp_path):
    df = pd.DataFrame([_row(k, gpus=g, tokens_per_s=t, tp=g) for k, g, t in
                       [("a", 1, 10.0), ("b", 2, 25.0), ("c", 4, 20.0)]])
    out = plot_pareto(df, tmp_path / "p.png")
    assert out is not None and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_pareto(df[df["status"] == "x"], tmp_path / "q.png") is None
    # ok points without a throughput (recordings that say no token count): nothing to plot
    assert plot_pareto(df.assign(tokens_per_s=None), tmp_path / "r.png") is None


# ----------------------------------------------------------------------------- CLI (no Dask)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracesim.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_cli_dry_run_and_bad_space(tmp_path):
    good = write_space(tmp_path, {"base": TINY, "axes": {"pp": [1, 2], "dp": [1, 2, 4, 8]},
                                  "constraints": ["pp * dp <= gpus"]})
    p = _cli("sweep", str(good), "-o", str(tmp_path / "o"), "--dry-run")
    assert p.returncode == 0, p.stderr
    assert "7 points (1 excluded by constraints, 0 duplicates)" in p.stdout
    bad = write_space(tmp_path, {"base": TINY, "constraints": ["tp.real == 1"]}, "bad.yaml")
    p = _cli("sweep", str(bad), "-o", str(tmp_path / "o"))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().count("\n") == 0 and "bad.yaml: constraints[0]" in p.stderr
    p = _cli("sweep", str(good), "-o", str(tmp_path / "o"), "--workers", "2", "--scheduler",
             "tcp://127.0.0.1:1")
    assert p.returncode == 2 and "--workers" in p.stderr


def test_worker_without_the_sweep_dir_writes_specs_locally(tmp_path, monkeypatch):
    # a worker on another machine does not see SWEEP_DIR: the task carries the specs
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "worker-tmp"))
    (tmp_path / "worker-tmp").mkdir()
    point = expand_space(space_from_dict({"base": {**TINY, "nic_Gbps": 200, "nodes": 2, "dp": 16,
                                                   "global_batch": 16}}, tmp_path / "s.yaml"),
                         tmp_path / "not-written").points[0]
    row = run_point(point)
    assert row["status"] == "ok", row["error"]
    assert not (tmp_path / "not-written").exists()
    local = tmp_path / "worker-tmp" / "tracesim-sweep"
    assert (local / "clusters" / Path(point.cluster_file).name).exists()
    assert (local / "models" / Path(point.model_file).name).exists()
    assert row["result.cluster"] == "h100x8-2n-nic200G" and row["gpus"] == 16


def test_device_profiles_are_taken_from_the_space_file_folder(tmp_path, monkeypatch):
    """A ``gpu`` axis or a ``device`` setting naming a profile YAML reads it beside the space
    file, wherever the sweep is started from."""
    sub = tmp_path / "specs"
    sub.mkdir()
    (sub / "slow-h100.yaml").write_text("name: slow-h100\nbase: h100\nhbm_GBps: 1000\n")
    space = load_space(write_space(sub, {"base": TINY, "axes": {"gpu": ["h100", "slow-h100.yaml"]}}))
    monkeypatch.chdir(tmp_path)
    pts = expand_space(space, tmp_path / "o").points
    assert [Path(str(p.cluster_spec["device"])).name for p in pts] == ["h100", "slow-h100.yaml"]
    dev = load_space(write_space(sub, {"base": {**TINY, "device": "slow-h100.yaml"}}, "d.yaml"))
    p = expand_space(dev, tmp_path / "o2").points[0]
    assert Path(p.opts["device"]) == sub / "slow-h100.yaml"
    r = run_point(p)
    assert r["status"] == "ok", r
