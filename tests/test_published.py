"""``tracesim validate published``: the row-to-layout rules, the table formats, bad input and
real replays of rows of both shipped reference tables.

The accuracy over whole tables is a benchmark (docs/accuracy.md, "Published end-to-end
tables"), not asserted here: nothing is fitted to those rows, and a bound written after
seeing them would prove nothing. What is asserted is that each row becomes the layout the
publication ran (stack, precision, sharding, pipeline split) and replays.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tracesim.catalog import cluster_with_nodes, load_model
from tracesim.cli import cli as main
from tracesim.errors import InputError
from tracesim.pipeline.published import (
    bridge_options,
    pipeline_split,
    read_table,
    sc21_flops,
    sc21_options,
    summary,
    table_rows,
    validate_rows,
)
from tracesim.pipeline.published_cells import segment_gpus
from tracesim.pipeline.recipes import (
    COMMITS,
    INACTIVE_RECOMPUTE,
    RECIPES,
    Recipe,
    find_recipe,
    layout_chunks,
    recipe_options,
    unmodelled,
)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "reference"
BRIDGE = SHARED / "megatron_bridge_25_11.csv"
SC21 = SHARED / "megatron_sc21_table1.csv"


def test_pipeline_split_counts_embedding_and_loss_as_layers() -> None:
    assert pipeline_split(32, 4, 2) is None  # even: Megatron's default split
    s = pipeline_split(126, 8, 8)  # Llama 3.1 405B in the H100 / B200 recipes
    assert s is not None and len(s) == 64 and sum(s) == 126
    assert s[0] == s[-1] == 1 and set(s[1:-1]) == {2}
    s = pipeline_split(126, 8, 4)
    assert s is not None and (s[0], s[-1], sum(s), len(s)) == (3, 3, 126, 32)
    s = pipeline_split(61, 2, 4)  # 63 units over 8 chunks: the earlier ones take one more
    assert s is not None and sum(s) == 61 and max(s) - min(s) <= 2
    assert pipeline_split(3, 4, 2) is None  # fewer layers than chunks: the layout check says so


def test_both_tables_are_recognised() -> None:
    fmt, rows = read_table(BRIDGE)
    assert fmt == "bridge" and len(rows) >= 20
    fmt, rows = read_table(SC21)
    assert fmt == "sc21" and len(rows) == 10
    # the paper's formula for GPT-3 175B-like row 7 (145.6B): ~4.2e18 FLOP per iteration
    assert 1e18 < sc21_flops(rows[6]) < 1e19


def test_bridge_rows_become_the_recipes_layouts() -> None:
    _, rows = read_table(BRIDGE)
    seen = set()
    for k, row in enumerate(rows):
        o = bridge_options(row, BRIDGE, k)
        assert o["stack"] == "megatron-core" and o["template"] == "analytic"
        assert o["tp"] * o["pp"] * o["cp"] * o["dp"] == int(row["gpus"])
        prec = row["precision"]
        assert (o["dtype"] == "fp8") == prec.startswith("fp8")
        if prec == "fp8-mx":
            assert o["fp8_recipe"] == "mxfp8"
        layers = load_model(o["model"]).layers
        chunks = o["pp"] * o.get("vpp", 1)
        if layers % chunks:
            assert sum(o["stage_layers"]) == layers and len(o["stage_layers"]) == chunks
        else:
            assert "stage_layers" not in o
        assert o.get("fsdp", False) == (int(row["fsdp"] or 0) > 0)
        assert "zero" not in o or (o["zero"] == 1 and o["dp"] > 1)
        seen.add(row["system"])
    assert seen == {"DGX-H100", "DGX-B200", "DGX-GB200", "DGX-GB300"}


def test_sc21_rows_run_the_2021_stack() -> None:
    _, rows = read_table(SC21)
    o = sc21_options(rows[-1], SC21, 9)
    assert o["model"] == "gpt3-1t" and o["stack"] == "megatron-2021"
    assert (o["tp"], o["pp"], o["dp"]) == (8, 64, 6)
    assert o["attention"] == "unfused" and o["recompute"] == "full" and not o["dp_overlap"]


def test_sc21_rows_take_their_runs_settings() -> None:
    """Every row is in run_table_1.sh: its micro-batch size, interleaving and DDP."""
    from tracesim.pipeline.published_gpt import SC21_RUNS

    _, rows = read_table(SC21)
    assert {(int(r["layers"]), int(r["hidden"])) for r in rows} == set(SC21_RUNS)
    got = {r["params_billion"]: sc21_options(r, SC21, k) for k, r in enumerate(rows)}
    # 1.7B: MBS 16 with PyTorch DDP (gradients all-reduced during the backward pass)
    assert got["1.7"]["micro_batch"] == 16 and got["1.7"]["dp_overlap"] and "schedule" not in got["1.7"]
    # 39B and 1T: no virtual stages, so 1F1B; 145B: 5 of its 10 layers per virtual stage
    assert got["39.1"]["schedule"] == "1f1b" and got["39.1"]["micro_batch"] == 4
    assert got["1008.0"]["schedule"] == "1f1b" and "vpp" not in got["1008.0"]
    assert (got["145.6"]["schedule"], got["145.6"]["vpp"], got["145.6"]["micro_batch"]) == ("interleaved", 2, 2)
    assert got["529.6"]["vpp"] == 3 and not got["529.6"]["dp_overlap"]
    # a row the script does not have: micro-batch 1, the interleaved schedule's default chunks
    other = sc21_options({**rows[6], "layers": "64"}, SC21, 6)
    assert other["micro_batch"] == 1 and other["schedule"] == "interleaved" and "vpp" not in other


def test_real_rows_replay() -> None:
    """The smallest SC'21 row and the 8-GPU Llama 3 8B rows of every system."""
    got = list(validate_rows([SC21], only=lambda s: "32 GPUs" in s))
    got += list(validate_rows([BRIDGE], only=lambda s: "llama3-8b" in s))
    assert len(got) == 5
    for r in got:
        assert r.predicted > 0 and r.iteration_time_s > 0 and r.wall_s > 0
        assert r.rel_error == pytest.approx(r.predicted / r.published - 1)
        # Llama 3 8B recipes: whole-iteration CUDA graphs on Blackwell (--cuda-graphs), 5
        # recomputed layers on H100 (--recompute-layers); SC'21 rows have no recipe
        assert not r.unmodelled
        if "DGX-GB" in r.label or "DGX-B200" in r.label:
            assert r.options["cuda_graphs"] == "full_iteration"
        elif r.table == BRIDGE.name:
            assert (r.options["recompute"], r.options["recompute_layers"]) == ("full", 5)
    s = summary(got)
    assert s["rows"] == 5 and s["within_10pct"] <= s["within_20pct"] <= 5
    # the signed mean keeps the direction: too fast (+) and too slow (-) rows offset
    assert s["mean_error"] == pytest.approx(sum(r.rel_error for r in got) / 5)
    assert abs(s["mean_error"]) <= s["mean_abs_error"]
    # a faster GPU of the same layout is predicted faster: GB300 > GB200 >= B200 > H100
    by = {r.label.split()[0]: r.predicted for r in got if "llama3-8b" in r.label}
    assert by["DGX-GB300"] > by["DGX-B200"] > by["DGX-H100"]


def test_cli_network_choice() -> None:
    """``--network estimate`` replays every row with uncongested collective times (the
    replay's option); a row whose communication shares no links reads nearly the same."""
    args = ["validate", "published", str(SC21), "--only", "1536 GPUs", "--json"]
    runs = {net: CliRunner().invoke(main, args + (["--network", net] if net else []))
            for net in (None, "estimate")}
    docs = {net: json.loads(r.output) for net, r in runs.items() if r.exit_code == 0}
    assert set(docs) == {None, "estimate"}
    assert docs["estimate"]["rows"][0]["options"]["network"] == "estimate"
    assert "network" not in docs[None]["rows"][0]["options"]
    flow, est = (docs[n]["rows"][0]["predicted"] for n in (None, "estimate"))
    assert est == pytest.approx(flow, rel=0.05)
    bad = CliRunner().invoke(main, args + ["--network", "analytic"])
    assert bad.exit_code == 2 and "--network" in bad.output


def test_cli_jobs_replay_rows_in_worker_processes() -> None:
    """``--jobs 2`` replays the rows in two worker processes: the same rows in the same
    order with the same predictions as one process; ``--jobs 0`` is bad input."""
    args = ["validate", "published", str(SC21), "--only", "pp1", "--json"]
    docs = {}
    for jobs in ("1", "2"):
        res = CliRunner().invoke(main, args + ["--jobs", jobs])
        assert res.exit_code == 0, res.output
        docs[jobs] = json.loads(res.output)
    rows = {j: [(r["row"], r["predicted"]) for r in d["rows"]] for j, d in docs.items()}
    assert len(rows["1"]) >= 3 and rows["2"] == rows["1"]
    same = {j: {k: v for k, v in d["summary"].items() if k != "max_wall_s"} for j, d in docs.items()}
    assert same["2"] == same["1"]
    bad = CliRunner().invoke(main, args + ["--jobs", "0"])
    assert bad.exit_code == 2 and "--jobs" in bad.output


def test_cli_json_and_bad_tables(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["validate", "published", str(SC21), "--only", "32 GPUs",
                                    "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["summary"]["rows"] == 1 and doc["rows"][0]["metric"] == "tflops_per_gpu"
    bad = tmp_path / "t.csv"
    bad.write_text("a,b\n1,2\n")
    res = CliRunner().invoke(main, ["validate", "published", str(bad)])
    assert res.exit_code == 2 and "t.csv" in res.output and "Traceback" not in res.output
    text = BRIDGE.read_text().splitlines()
    bad.write_text("\n".join([text[0], text[1].replace("fp8-cs", "fp4")]) + "\n")
    res = CliRunner().invoke(main, ["validate", "published", str(bad)])
    assert res.exit_code == 2 and "row 2: precision: unknown precision 'fp4'" in res.output
    with pytest.raises(InputError, match="file not found"):
        read_table(tmp_path / "missing.csv")


def test_cli_bad_rows_print_one_line_and_nothing_else(tmp_path: Path) -> None:
    """A bad cell or an unknown model: exit 2, one line naming the file, row and column, and
    no table header before it; a header spelt with capitals and spaces is read."""
    head, row = BRIDGE.read_text().splitlines()[:2]
    fancy = ", ".join(c.capitalize() for c in head.split(","))
    t = tmp_path / "own.csv"
    t.write_text(f"{fancy}\n{row}\n")
    assert read_table(t)[0] == "bridge"
    for bad, needle in ((row.replace("llama3-8b", "llama9-8b"), "row 2: model: unknown model"),
                        (row.rsplit(",", 3)[0] + ",abc," + ",".join(row.rsplit(",", 2)[1:]),
                         "row 2: tokens_per_s_per_gpu")):
        t.write_text(f"{head}\n{bad}\n")
        res = CliRunner().invoke(main, ["validate", "published", str(t)])
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert res.exit_code == 2 and len(lines) == 1, res.output
        assert "own.csv" in lines[0] and needle in lines[0], lines[0]
    res = CliRunner().invoke(main, ["validate", "published", str(SC21), "--only", "no such row"])
    assert res.exit_code == 0 and res.output.strip() == "no row whose label contains 'no such row' to replay"


def test_nvidia_spellings_of_models_and_precisions_are_read(tmp_path: Path) -> None:
    """NVIDIA's performance summaries write LLAMA3_8B, Qwen3_30B_a3B, FP8-CS, MXFP8: a row so
    spelt is the shipped model's row (its recipe included); a name that matches no shipped
    model, or an ambiguous precision, is still a one-line error."""
    lines = BRIDGE.read_text().splitlines()
    head = lines[0]
    rows = [r for r in lines[1:] if r.startswith(("DGX-GB300,llama3-8b,", "DGX-GB300,qwen3-30b-a3b,"))]
    nv = [r.replace("llama3-8b", "LLAMA3_8B").replace("fp8-cs", "FP8-CS")
          .replace("qwen3-30b-a3b", "Qwen3_30B_a3B").replace("fp8-mx", "MXFP8") for r in rows]
    ours, theirs = tmp_path / "ours.csv", tmp_path / "theirs.csv"
    ours.write_text("\n".join([head, *rows]) + "\n")
    theirs.write_text("\n".join([head, *nv]) + "\n")
    a, b = list(table_rows([ours])), list(table_rows([theirs]))
    assert len(a) == len(b) == 2
    for x, y in zip(a, b, strict=True):
        assert x[4] == y[4] and x[5] == y[5] and x[6] == y[6]  # options, label, unmodelled
    assert load_model("DeepSeekV3") == load_model("deepseek-v3")
    with pytest.raises(InputError, match="unknown model 'Llama3_71B'"):
        load_model("Llama3_71B")
    # the tables after 25.11 write FP8-CS as FP8; an unknown precision is still one line
    theirs.write_text(f"{head}\n{nv[0].replace('FP8-CS', 'FP8')}\n")
    assert list(table_rows([theirs]))[0][4] == a[0][4]
    theirs.write_text(f"{head}\n{nv[0].replace('FP8-CS', 'FP6')}\n")
    res = CliRunner().invoke(main, ["validate", "published", str(theirs)])
    assert res.exit_code == 2 and "row 2: precision: unknown precision 'fp6'" in res.output


def test_cli_summarises_each_table_and_all(tmp_path: Path) -> None:
    """With several tables, a summary line per table and one for all (the numbers of
    docs/accuracy.md's per-table lines); the JSON has them under ``per_table``."""
    copy = tmp_path / "sc21_copy.csv"
    copy.write_text(SC21.read_text())
    args = ["validate", "published", str(SC21), str(copy), "--only", "32 GPUs"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert any(ln.startswith(f"{SC21.name}: 1 rows: mean absolute error") for ln in lines)
    assert any(ln.startswith("sc21_copy.csv: 1 rows: mean absolute error") for ln in lines)
    assert lines[-1].startswith("all tables: 2 rows: mean absolute error")
    doc = json.loads(CliRunner().invoke(main, [*args, "--json"]).output)
    assert doc["summary"]["rows"] == 2
    assert {k: v["rows"] for k, v in doc["per_table"].items()} == {SC21.name: 1, "sc21_copy.csv": 1}
    one = json.loads(CliRunner().invoke(main, [*args[:3], "--only", "32 GPUs", "--json"]).output)
    assert "per_table" not in one


def test_a_row_whose_layout_cannot_be_built_is_reported_not_fatal(tmp_path: Path) -> None:
    """A row whose expert layout does not fit a pipeline stage (the H100 Qwen3 235B row with
    ep 64 x etp 1 on tp 2 x dp 16 = 32 ranks) says so and the others still count."""
    text = BRIDGE.read_text().splitlines()
    keep = [ln.replace(",4,32,128,", ",4,64,128,") for ln in text[1:]
            if ln.startswith("DGX-H100,qwen3-235b-a22b,256,")]
    keep += [ln for ln in text[1:] if ln.startswith("DGX-B200,llama3-8b,")]
    assert len(keep) == 2
    t = tmp_path / "rows.csv"
    t.write_text("\n".join([text[0], *keep]) + "\n")
    got = list(validate_rows([t]))
    assert [bool(r.error) for r in got] == [True, False]
    assert "--ep 64 x --etp 1" in got[0].error and got[0].published == 1575.0
    s = summary(got)
    assert s["rows"] == 1 and s["not_replayed"] == 1
    res = CliRunner().invoke(main, ["validate", "published", str(t)])
    assert res.exit_code == 0 and "not replayed: " in res.output and "1 not replayed" in res.output


def test_rows_naming_what_tracesim_does_not_model_are_reported_not_fatal(tmp_path: Path) -> None:
    """A newer table's rows with a model, system or precision tracesim has no model for
    (Nemotron 3 Ultra in the releases after 26.04, MXFP4, a Vera Rubin system) are listed as not replayed,
    each with the cell that stops it, and the other rows are replayed; malformed cells and a
    model spec path that is missing stay fatal (exit 2, one line), and so does a table none
    of whose rows can be replayed."""
    text = BRIDGE.read_text().splitlines()
    ok = next(ln for ln in text[1:] if ln.startswith("DGX-B200,llama3-8b,"))
    rows = [ok.replace("llama3-8b", "Nemotron_3_Ultra"), ok.replace("DGX-B200", "DGX-VR200"),
            ok.replace("fp8-cs", "MXFP4"), ok]
    t = tmp_path / "newer.csv"
    t.write_text("\n".join([text[0], *rows]) + "\n")
    with pytest.raises(InputError, match="row 2: model: unknown model 'Nemotron_3_Ultra'"):
        list(table_rows([t]))  # scripts that need every row's options still stop
    got = list(validate_rows([t]))
    assert [r.error.split(": ")[1:3] for r in got[:3]] == [
        ["row 2", "model"], ["row 3", "system"], ["row 4", "precision"]]
    assert got[0].label.startswith("DGX-B200 Nemotron_3_Ultra fp8-cs 8 GPUs")
    assert not got[3].error and np.isfinite(got[3].predicted) and got[0].published == got[3].published
    assert summary(got)["rows"] == 1 and summary(got)["not_replayed"] == 3
    res = CliRunner().invoke(main, ["validate", "published", str(t), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert [bool(r["error"]) for r in doc["rows"]] == [True, True, True, False]
    assert doc["summary"]["not_replayed"] == 3
    res = CliRunner().invoke(main, ["validate", "published", str(t), "--only", "VR200"])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "unknown system 'DGX-VR200'" in res.output
    assert "(known: DGX-H100" in res.output  # the one-line error keeps the list of known names
    assert "(known:" not in got[1].error  # a listed row does not repeat it
    for bad, needle in ((ok.replace("llama3-8b", str(tmp_path / "no_such.yaml")), "file not found"),
                        (ok.replace(",8,fp8-cs,", ",eight,fp8-cs,"), "row 2: gpus")):
        t.write_text(f"{text[0]}\n{bad}\n{ok}\n")
        res = CliRunner().invoke(main, ["validate", "published", str(t)])
        assert res.exit_code == 2 and needle in res.output and res.output.count("\n") == 1, res.output


def test_pipeline_layout_strings_become_chunks() -> None:
    """Megatron pipeline_model_parallel_layout: the DeepSeek-V3 GB200 / GB300 layout and the
    B200 one (with MTP) of the recipes, 61 decoder layers each."""
    got = layout_chunks("Et*3|(t*4|)*14ttL")
    assert got == (3,) + (4,) * 14 + (2,) and sum(got) == 61
    got = layout_chunks("Et*4|(t*4|)*14tmL")
    assert got == (4,) * 15 + (1,) and sum(got) == 61
    assert layout_chunks("Et|(tt|)*30mL") == (1,) + (2,) * 30 + (0,)
    with pytest.raises(InputError, match="pipeline layout"):
        layout_chunks("Ex*3|tL")


def test_nvl72_jobs_use_slurm_segments_of_16_trays() -> None:
    """executors.py: segment = the largest divisor of the node count up to 18 trays, only
    past 18 trays; 256 GPUs = 64 trays -> 16-tray segments = 64 GPUs per rack."""
    assert segment_gpus(256) == 64
    assert segment_gpus(8) is None and segment_gpus(64) is None and segment_gpus(72) is None
    assert segment_gpus(4 * 19) == 4  # 19 trays: prime, one tray per segment
    assert segment_gpus(4 * 36) == 72
    full = cluster_with_nodes("gb200-nvl72", 256)
    used = cluster_with_nodes("gb200-nvl72", 256, 64)
    assert (full.nodes, full.gpus_per_node) == (4, 72)
    assert (used.nodes, used.gpus_per_node, used.gpus) == (4, 64, 256)
    assert used.inter_node is not None and used.inter_node.nics_per_node == 64
    assert used.intra_node.bandwidth_GBps == full.intra_node.bandwidth_GBps
    # rank 64 starts the second rack (the first 64 ranks share one NVLink domain)
    assert (used.node_of(63), used.node_of(64)) == (0, 1) and full.node_of(64) == 0
    with pytest.raises(InputError, match="GPUs used per node"):
        cluster_with_nodes("dgx-b200", 16, 9)


def test_every_bridge_row_has_its_recipe() -> None:
    _, rows = read_table(BRIDGE)
    for row in rows:
        run = find_recipe(row["system"], row["model"], row["precision"])
        assert run is not None, row
        assert run.source.split(":")[0] in COMMITS and run.config
    assert len(RECIPES) == len(rows)


def _recipe(system: str, model: str, precision: str) -> Recipe:
    run = find_recipe(system, model, precision)
    assert run is not None
    return run


def test_recipe_settings_reach_the_replay_options() -> None:
    _, rows = read_table(BRIDGE)
    opts = {(r["system"], r["model"], r["precision"]): bridge_options(r, BRIDGE, k)
            for k, r in enumerate(rows)}
    ds = opts["DGX-GB300", "deepseek-v3", "fp8-mx"]
    # the layout's 16 chunks on pp 2: 8 per rank, 3 + 4 x 14 + 2 layers
    assert ds["vpp"] == 8 and ds["stage_layers"] == layout_chunks("Et*3|(t*4|)*14ttL")
    assert ds["overlap_param_gather"] is False  # "keeping this enabled causes NaN grad norm"
    assert ds["cluster"].gpus_per_node == 64 and ds["cluster"].nodes == 4
    # every run: NCCL_NVLS_ENABLE=0 (executors.py PERF_ENV_VARS)
    assert not any(o["cluster"].intra_node.nvls for o in opts.values())
    assert opts["DGX-GB200", "deepseek-v3", "bf16"]["vpp"] == 4
    assert "overlap_param_gather" not in opts["DGX-GB200", "deepseek-v3", "bf16"]
    assert opts["DGX-H100", "qwen3-235b-a22b", "fp8-cs"]["tp_comm_overlap"] is False
    assert "tp_comm_overlap" not in opts["DGX-H100", "llama3-70b", "fp8-cs"]  # the stack's
    assert opts["DGX-GB300", "llama3-70b", "fp8-cs"]["cluster"].gpus_per_node == 72
    assert opts["DGX-B200", "deepseek-v3", "fp8-mx"]["stage_layers"][-1] == 1  # + MTP + loss
    h8 = opts["DGX-H100", "llama3-8b", "fp8-cs"]
    assert (h8["recompute"], h8["recompute_layers"]) == ("full", 5)  # 5 of 32 layers, block
    assert unmodelled(_recipe("DGX-H100", "llama3-8b", "fp8-cs")) == ()
    ds = opts["DGX-GB300", "deepseek-v3", "bf16"]
    assert (ds["recompute"], ds["recompute_modules"]) == ("selective", "mlp,moe_act")
    # GPT-OSS configs list recompute_modules without recompute_granularity: none ran in
    # 25.11; from Megatron-Bridge v0.2.1 on (the 26.02 table's rows) the modules recompute
    for system, model in INACTIVE_RECOMPUTE:
        assert "recompute" not in opts[system, model, "bf16"]
        later = bridge_options({**dict(next(r for r in rows if (r["system"], r["model"]) == (system, model))),
                                "release": "26.02"}, BRIDGE, 0)
        assert (later["recompute"], later["recompute_modules"]) == ("selective", "layernorm,moe_act")
    assert unmodelled(_recipe("DGX-H100", "llama3-70b", "fp8-cs")) == ()
    q = unmodelled(_recipe("DGX-GB300", "qwen3-30b-a3b", "fp8-mx"))
    assert q == ()  # the HybridEP dispatcher and the graphed router are options now
    assert "moe_a2a_overlap" not in opts["DGX-H100", "qwen3-235b-a22b", "fp8-cs"]  # unmodelled
    assert unmodelled(_recipe("DGX-GB200", "llama3-70b", "fp8-cs")) == (
        "Megatron FSDP settings (optim_grads_params, fsdp_double_buffer, "
        "suggested_communication_unit_size 8e8)",)
    q30 = opts["DGX-GB300", "qwen3-30b-a3b", "fp8-mx"]
    assert q30["cuda_graphs"] == "moe_router,moe_preprocess" and q30["moe_dispatcher"] == "hybridep"
    assert "moe_dispatcher" not in opts["DGX-H100", "qwen3-235b-a22b", "fp8-cs"]  # alltoall


MCORE = Path(__file__).resolve().parents[1] / "benchmarks" / "published" / "megatron_core_h100_weak_scaling.csv"


def test_the_megatron_core_table_reads_as_gpt_rows_on_h100() -> None:
    from tracesim.pipeline.published import read_table
    from tracesim.pipeline.published_gpt import mcore_flops, mcore_options

    fmt, rows = read_table(MCORE)
    assert fmt == "mcore" and len(rows) == 9
    for k, row in enumerate(rows):
        o = mcore_options(row, MCORE, k)
        m = o["model"]
        # the model size column: 12 l h^2 + 2 V h (MLP 4h, untied embeddings)
        assert m.params() / 1e9 == pytest.approx(float(row["params_billion"]), rel=0.035)
        assert o["cluster"].gpus >= int(row["gpus"]) and o["dp"] == int(row["dp"])
        assert o.get("schedule") == ("interleaved" if int(row["pp"]) > 1 else None)
    # Megatron-LM's formula: the 32B row's 459.6 TFLOP/s on 384 GPUs is 0.892 s
    r32 = rows[3]
    assert mcore_flops(r32) / (459.6e12 * 384) == pytest.approx(0.8917, abs=1e-3)


def test_a_megatron_core_row_replays() -> None:
    from tracesim.pipeline.published import summary, validate_rows

    rows = list(validate_rows([MCORE], only=lambda label: "gpt-1.7b" in label))
    assert len(rows) == 1 and not rows[0].error and rows[0].metric == "tflops_per_gpu"
    assert rows[0].predicted > 0 and summary(rows)["rows"] == 1


def test_the_26_02_nvl72_qwen3_235b_rows_run_their_v0_3_0_recipes() -> None:
    """25.11 published Qwen3 235B on GB200 / GB300 in BF16 only; the 26.02 table's MXFP8 rows
    take Megatron-Bridge v0.3.0's ``QWEN3_235B_A22B_PRETRAIN_CONFIG_{GB200,GB300}_FP8_MX_V2``:
    HybridEP, Transformer Engine graphs over attention, router and preprocessing, expert TP 1."""
    table = Path(__file__).resolve().parents[1] / "benchmarks" / "published" / "megatron_bridge_26_02.csv"
    _, rows = read_table(table)
    for system in ("DGX-GB200", "DGX-GB300"):
        k, row = next((k, r) for k, r in enumerate(rows)
                      if (r["system"], r["model"], r["precision"]) == (system, "qwen3-235b-a22b", "fp8-mx"))
        opts = bridge_options({**row, "precision": "fp8-mx"}, table, k)
        assert opts["moe_dispatcher"] == "hybridep" and opts["etp"] == 1
        assert opts["cuda_graphs"] == "attn,moe_router,moe_preprocess"
    assert find_recipe("DGX-GB200", "qwen3-235b-a22b", "fp8-mx") is None  # no 25.11 row


def test_later_releases_of_the_nvl72_qwen3_rows_take_their_recipes() -> None:
    """v0.3.1 and v0.4.x keep HybridEP and the TE graphs for the NVL72 Qwen3 235B MXFP8 runs;
    GB300's config is then its BF16 one (graphs over router and preprocessing only); 26.06
    (v0.5.0) graphs the whole iteration with FP8 attention, and its fused CuTe DSL MLP and
    EP overlap are named as settings without a mechanism."""
    for rel in ("26.02.01", "26.04", "26.04.01"):
        gb200 = find_recipe("DGX-GB200", "qwen3-235b-a22b", "fp8-mx", rel)
        gb300 = find_recipe("DGX-GB300", "qwen3-235b-a22b", "fp8-mx", rel)
        assert gb200 is not None and gb200.cuda_graph == "te:attn,moe_router,moe_preprocess"
        assert gb300 is not None and gb300.cuda_graph == "te:moe_router,moe_preprocess"
        assert gb200.dispatcher == gb300.dispatcher == "hybridep"
    assert find_recipe("DGX-GB300", "qwen3-235b-a22b", "fp8-mx", "26.02").cuda_graph == \
        "te:attn,moe_router,moe_preprocess"
    for rel in ("26.06", "26.06.01"):
        for model in ("qwen3-30b-a3b", "qwen3-235b-a22b"):
            run = find_recipe("DGX-GB200", model, "fp8-mx", rel)
            assert run is not None and run.cuda_graph == "local:full_iteration"
            opts = recipe_options(run, {"tp": 1, "pp": 1, "dp": 8}, 48)
            assert opts["fp8_attention"] is True and opts["cuda_graphs"] == "full_iteration"
            assert any("CuTe DSL" in u for u in unmodelled(run))
            assert any("all-to-all overlapped" in u for u in unmodelled(run))
        gb300, gb200 = (find_recipe(f"DGX-{g}", "deepseek-v3", "fp8-mx", rel) for g in ("GB300", "GB200"))
        assert gb300 is not None and gb200 is not None and gb300.mtp_layers == gb200.mtp_layers == 1
        assert gb300.recompute == "" and gb200.recompute == "selective:mla_up_proj"
        assert ("fp8_attention", True) in gb300.options and not gb200.options
