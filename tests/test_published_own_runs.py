"""A Megatron-Bridge-format table whose rows give their own run settings (``recompute``,
``dispatcher``, ``a2a_overlap``, ``cuda_graph``, ``etp``): the user's measured runs, or a
publication other than the 25.11 table (Megatron-MoE-ModelZoo's H100 Qwen3 235B rows).

What is asserted: the columns reach the replay options and the list of settings without a
mechanism, they replace the 25.11 recipe of the same (system, model, precision), bad values
exit 2 naming the file and the field, and a shipped row replays. The accuracy over the table
is a benchmark (docs/accuracy.md), not asserted.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracesim.cli import cli as main
from tracesim.errors import InputError
from tracesim.pipeline.published import bridge_options, published_value, read_table, validate_rows
from tracesim.pipeline.recipes import RECIPES, row_recipe, row_run, row_unmodelled

ZOO = Path(__file__).resolve().parents[1] / "benchmarks" / "published" / "megatron_moe_modelzoo_h100.csv"
HEAD = ("system,model,gpus,precision,gbs,mbs,seq_len,fsdp,tp,pp,cp,vp,ep,etp,ga,"
        "tokens_per_s_per_gpu,recompute,dispatcher,a2a_overlap,cuda_graph")


def _table(tmp_path: Path, *rows: str) -> Path:
    p = tmp_path / "runs.csv"
    p.write_text("\n".join([HEAD, *rows]) + "\n")
    return p


def test_the_row_columns_become_replay_options(tmp_path: Path) -> None:
    p = _table(tmp_path,
               'DGX-H100,qwen3-30b-a3b,16,bf16,512,1,4096,0,1,2,1,12,8,1,32,5000,'
               '"selective:layernorm,moe_act",deepep,true,"te:moe_router,moe_preprocess"',
               "DGX-H100,qwen3-30b-a3b,16,bf16,512,1,4096,0,1,2,1,12,8,,32,5000,full,,,")
    fmt, rows = read_table(p)
    assert fmt == "bridge"
    first = bridge_options(rows[0], p, 0)
    assert (first["recompute"], first["recompute_modules"]) == ("selective", "layernorm,moe_act")
    assert first["etp"] == 1 and first["cuda_graphs"] == "moe_router,moe_preprocess"
    gaps = row_unmodelled(rows[0], p, 0)
    assert first["moe_dispatcher"] == "deepep" and "moe_a2a_overlap" not in first and gaps == (
        "EP all-to-all overlapped with the other micro-batch (delay_wgrad_compute)",)
    second = bridge_options(rows[1], p, 1)
    assert second["recompute"] == "full" and "recompute_layers" not in second
    assert "etp" not in second and not row_unmodelled(rows[1], p, 1)


def test_own_columns_replace_the_25_11_recipe(tmp_path: Path) -> None:
    """The 25.11 H100 Qwen3 30B row's recipe turns on the EP overlap; a table with its own
    columns says what its run did instead."""
    assert RECIPES[("DGX-H100", "qwen3-30b-a3b", "fp8-cs")].a2a_overlap
    p = _table(tmp_path, "DGX-H100,qwen3-30b-a3b,16,fp8-cs,512,2,4096,0,1,2,1,24,8,1,32,5275,,,,")
    _, rows = read_table(p)
    run = row_run(rows[0], p, 0)
    assert run is not None and not run.a2a_overlap and run.dispatcher == "alltoall"
    assert row_unmodelled(rows[0], p, 0) == ()
    # without the columns the 25.11 recipe applies
    bare = {k: v for k, v in rows[0].items() if k not in ("recompute", "dispatcher", "a2a_overlap",
                                                           "cuda_graph", "etp")}
    assert row_recipe(bare, p, "row 2") is None
    assert row_run(bare, p, 0) is RECIPES[("DGX-H100", "qwen3-30b-a3b", "fp8-cs")]


@pytest.mark.parametrize(("column", "value", "field"), [
    ("recompute", "some", "recompute"), ("dispatcher", "nccl", "dispatcher"),
    ("a2a_overlap", "yes", "a2a_overlap"), ("cuda_graph", "attn", "cuda_graph"), ("etp", "x", "etp")])
def test_bad_values_exit_2_naming_the_field(tmp_path: Path, column: str, value: str, field: str) -> None:
    cells = dict(zip(HEAD.split(","), "DGX-H100,qwen3-30b-a3b,16,bf16,512,1,4096,0,1,2,1,12,8,1,32,5000,,,,"
                                      .split(","), strict=True))
    cells[column] = value
    p = tmp_path / "runs.csv"
    with p.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=HEAD.split(","))
        w.writeheader()
        w.writerow(cells)
    with pytest.raises(InputError, match=field):
        bridge_options(read_table(p)[1][0], p, 0)
    res = CliRunner().invoke(main, ["validate", "published", str(p)])
    assert res.exit_code == 2 and "runs.csv" in res.output and f"row 2: {field}" in res.output
    assert "Traceback" not in res.output


def test_a_row_with_more_cells_than_the_header_is_bad_input(tmp_path: Path) -> None:
    """An unquoted comma inside a cell shifts the row: said, not read."""
    p = _table(tmp_path, "DGX-H100,qwen3-30b-a3b,16,bf16,512,1,4096,0,1,2,1,12,8,1,32,5000,"
                         "selective:layernorm,moe_act,,,")
    with pytest.raises(InputError, match="row 2.*more cells than the header"):
        read_table(p)


def test_the_modelzoo_table_reads_its_runs() -> None:
    """Each row's published step time gives its tokens/s per GPU (GBS x 4096 / step / GPUs);
    the layouts are the table's, with the embedding and the loss counted as layers."""
    fmt, rows = read_table(ZOO)
    assert fmt == "bridge" and len(rows) == 5 and "tokens_per_s_per_gpu" not in rows[0]
    for k, row in enumerate(rows):
        tok = 2048 * 4096 / float(row["step_time_s"]) / 256
        assert published_value(row, "tokens_per_s_per_gpu", ZOO, k) == pytest.approx(tok)
        opts = bridge_options(row, ZOO, k)
        assert opts["etp"] == 1 and opts["dtype"] == "bf16"
        if opts["pp"] == 32:  # 94 layers + embedding + loss on 96 chunks
            assert opts["stage_layers"][:2] == (0, 1) and opts["stage_layers"][-1] == 0
        if row["fsdp"] != "0":
            assert opts["fsdp"] and opts["recompute"] == "full"


def test_the_alltoall_row_replays() -> None:
    """The table's one row with Megatron's alltoall dispatcher (no unmodelled settings)."""
    got = list(validate_rows([ZOO], only=lambda s: "pp32" in s))
    assert len(got) == 1 and not got[0].error and not got[0].unmodelled
    assert got[0].predicted > 0 and got[0].options["recompute_modules"] == "layernorm,moe_act"


def test_a_bad_published_value_stops_before_any_replay(tmp_path: Path) -> None:
    """Every row's published number is checked before the first replay: exit 2, one line
    naming the file and the field, no row printed."""
    good = "DGX-H100,qwen3-30b-a3b,16,bf16,512,1,4096,0,1,2,1,12,8,1,32,5000,,,,"
    p = _table(tmp_path, good, good.replace(",5000,", ",n/a,"))
    res = CliRunner().invoke(main, ["validate", "published", str(p)])
    assert res.exit_code == 2 and "row 3: tokens_per_s_per_gpu" in res.output
    assert "qwen3-30b-a3b" not in res.output and "Traceback" not in res.output
    steps = tmp_path / "steps.csv"
    steps.write_text(HEAD.replace("tokens_per_s_per_gpu", "step_time_s") + "\n"
                     + good.replace(",5000,", ",0,") + "\n")
    res = CliRunner().invoke(main, ["validate", "published", str(steps)])
    assert res.exit_code == 2 and "row 2: step_time_s" in res.output


BLACKWELL = ZOO.with_name("megatron_moe_modelzoo_blackwell.csv")


def test_tflops_only_rows_and_slurm_segments() -> None:
    """Megatron-MoE-ModelZoo's GB200 / GB300 rows print TFLOP/s alone: the published tokens/s
    is that over Megatron's FLOPs per token; ``segment`` (trays) sets the GPUs per NVLink
    domain (SEGMENT=2 -> 8, 16 -> 64)."""
    from tracesim.catalog import load_model
    from tracesim.pipeline.mflops import megatron_flops_per_token

    fmt, rows = read_table(BLACKWELL)
    assert fmt == "bridge" and len(rows) == 4
    m = load_model("qwen3-235b-a22b")
    for k, row in enumerate(rows):
        per_token = megatron_flops_per_token(m, int(row["seq_len"]))
        want = float(row["model_tflops_per_gpu"]) * 1e12 / per_token
        assert published_value(row, "tokens_per_s_per_gpu", BLACKWELL, k) == pytest.approx(want)
        opts = bridge_options(row, BLACKWELL, k)
        assert opts["cluster"].gpus_per_node == 4 * int(row["segment"])
    assert bridge_options(rows[0], BLACKWELL, 0)["cluster"].nodes == 32  # 256 GPUs, domains of 8
    got = list(validate_rows([BLACKWELL], only=lambda s: "bf16" in s))
    assert len(got) == 1 and got[0].predicted > 0 and not got[0].error
    assert got[0].options["moe_dispatcher"] == "hybridep" and not got[0].unmodelled


MLM_RECIPES = ZOO.with_name("megatron_moe_recipes.csv")


def test_megatron_lm_moe_recipe_rows_take_their_recipes_settings() -> None:
    """Megatron-LM's MoE recipes (examples/moe_recipes, TFLOP/s per GPU of PR #5728): each
    row's recompute, dispatcher, EP overlap and CUDA-graph scope reach the replay options,
    and its published tokens/s is the TFLOP/s over Megatron's FLOPs per token."""
    from tracesim.catalog import load_model
    from tracesim.pipeline.mflops import megatron_flops_per_token

    fmt, rows = read_table(MLM_RECIPES)
    assert fmt == "bridge" and len(rows) == 9
    for k, row in enumerate(rows):
        per_token = megatron_flops_per_token(load_model(row["model"]), int(row["seq_len"]))
        assert published_value(row, "tokens_per_s_per_gpu", MLM_RECIPES, k) == pytest.approx(
            float(row["model_tflops_per_gpu"]) * 1e12 / per_token)
        opts = bridge_options(row, MLM_RECIPES, k)
        assert opts["moe_dispatcher"] == "hybridep"
        assert opts["dp"] * opts["tp"] * opts["pp"] == int(row["gpus"])
    k235 = next(k for k, r in enumerate(rows) if r["model"] == "qwen3-235b-a22b" and r["system"] == "DGX-H100")
    h235 = bridge_options(rows[k235], MLM_RECIPES, k235)
    assert h235["vpp"] == 4 and h235["recompute_modules"] == "moe_act,layernorm"
    got = list(validate_rows([MLM_RECIPES], only=lambda s: s.startswith("DGX-H100 qwen3-30b")))
    assert len(got) == 2 and all(r.predicted > 0 and not r.error for r in got)  # BF16, FP8 blockwise


def test_layout_and_mtp_columns(tmp_path: Path) -> None:
    """NVIDIA's DeepSeek-V3 GB200 roadmap rows give their pipeline layout (`Et|(tt|)*30L`:
    the embedding and one layer, 30 chunks of two, the loss alone) and no MTP layer; a bad
    layout is one line naming the file and the field."""
    roadmap = ZOO.with_name("megatron_dsv3_gb200_roadmap.csv")
    _, rows = read_table(roadmap)
    opts = bridge_options(rows[0], roadmap, 0)
    assert opts["stage_layers"] == (1, *[2] * 30, 0) and opts["vpp"] == 4
    assert "mtp_layers" not in opts and opts["recompute_modules"] == "mlp,mla_up_proj"
    row = dict(rows[0], pp_layout="Et|(tt|*30L")
    with pytest.raises(InputError, match="pp_layout"):
        bridge_options(row, roadmap, 0)
    row = dict(rows[0], mtp_layers="one")
    with pytest.raises(InputError, match="mtp_layers"):
        bridge_options(row, roadmap, 0)


def test_a_segment_outside_an_nvl72_rack_is_bad_input(tmp_path: Path) -> None:
    p = tmp_path / "seg.csv"
    p.write_text(HEAD + ",segment\n" + "DGX-H100,qwen3-30b-a3b,16,bf16,512,1,4096,0,1,2,1,12,8,1,32,"
                 "5000,,,,,2\n")
    with pytest.raises(InputError, match="row 2: segment"):
        bridge_options(read_table(p)[1][0], p, 0)


#: the tables in benchmarks/published that `validate published` replays (the releases table
#: is compared between releases by its own script, in the tables' own spelling)
REPLAYED = sorted(p for p in ZOO.parent.glob("*.csv") if p.name != "megatron_bridge_releases.csv")


@pytest.mark.parametrize("table", REPLAYED, ids=lambda p: p.name)
def test_every_shipped_table_reads_and_states_its_rows(table: Path) -> None:
    """Every replayed table in benchmarks/published is read, each row's options built and
    its published number taken, without a replay (the replays are the benchmark); the only
    rows left out name a model no spec is shipped for (NeMo AutoModel's Nemotron 3 Ultra)."""
    from tracesim.pipeline.published import row_options
    from tracesim.pipeline.published_cells import NotModelled

    fmt, rows = read_table(table)
    metric = "tokens_per_s_per_gpu" if fmt in ("bridge", "titan") else "tflops_per_gpu"
    assert rows
    built = 0
    for k, row in enumerate(rows):
        try:
            opts, label, _ = row_options(fmt, row, table, k)
        except NotModelled as exc:
            assert exc.where == f"row {k + 2}: model" and "unknown model" in exc.message
            continue
        built += 1
        assert opts["dp"] >= 1 and label
        assert published_value(row, metric, table, k) > 0
    assert built >= len(rows) - 1
