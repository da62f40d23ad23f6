"""``tracesim validate published`` on malformed tables: each cell is checked before the first
replay (exit 2, one line naming the file, the row and the table's column), the layout must
split the row's GPUs, the table is read as Excel writes it, and the results are valid JSON
keyed by table. Real CSV files in ``tmp_path``; the few replays are of 8-GPU rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracesim.cli import cli as main
from tracesim.errors import InputError
from tracesim.pipeline.published import (
    predicted_metric,
    read_table,
    row_options,
    table_rows,
    validate_rows,
)
from tracesim.pipeline.published_cells import SYSTEMS
from tracesim.specs.model import ModelSpec

BRIDGE = "system,model,gpus,precision,gbs,mbs,seq_len,fsdp,tp,pp,cp,vp,ep,ga,tokens_per_s_per_gpu"
ROW = "DGX-H100,llama3-8b,8,bf16,128,1,8192,0,1,1,1,,1,16,11000"
MCORE = "system,params_billion,heads,hidden,layers,tp,pp,gpus,global_batch,seq_len,vocab,tflops_per_gpu"
MROW = "DGX-H100,7.1,32,4096,30,2,1,64,128,4096,131072,460"
SC21 = "params_billion,heads,hidden,layers,tp,pp,gpus,global_batch,tflops_per_gpu"
SROW = "1.7,24,2304,24,1,1,32,512,137"
TITAN = "system,model,gpus,precision,local_batch,seq_len,tp,ac,compile,attention,tokens_per_s_per_gpu"
TROW = "DGX-H100,llama3-8b,8,bf16,1,8192,1,op,true,flash2,6500"


def _table(tmp_path: Path, *lines: str, name: str = "t.csv") -> Path:
    t = tmp_path / name
    t.parent.mkdir(parents=True, exist_ok=True)
    t.write_text("\n".join(lines) + "\n")
    return t


def _cell(row: str, head: str, column: str, value: str) -> str:
    cells = row.split(",")
    cells[head.split(",").index(column)] = value
    return ",".join(cells)


def _one_line_error(t: Path, needle: str) -> None:
    res = CliRunner().invoke(main, ["validate", "published", str(t)])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert t.name in lines[0] and needle in lines[0], lines[0]


@pytest.mark.parametrize(("head", "row", "needle"), [
    (BRIDGE, _cell(_cell(ROW, BRIDGE, "gpus", "12"), BRIDGE, "tp", "8"),
     "row 3: gpus: 12 GPUs do not split into groups of tp x pp x cp = 8 x 1 x 1"),
    (MCORE, _cell(_cell(MROW, MCORE, "gpus", "67"), MCORE, "global_batch", "134"),
     "row 3: gpus: 67 GPUs do not split into groups of tp x pp = 2 x 1"),
    (SC21, _cell(_cell(SROW, SC21, "gpus", "33"), SC21, "tp", "2"), "row 3: gpus: 33 GPUs do not split"),
])
def test_a_layout_that_does_not_split_the_gpus_is_bad_input(tmp_path: Path, head: str, row: str,
                                                             needle: str) -> None:
    """Before: replayed on fewer GPUs and divided by the row's count (exit 0)."""
    first = {BRIDGE: ROW, MCORE: MROW, SC21: SROW}[head]
    _one_line_error(_table(tmp_path, head, first, row), needle)


def test_the_megatron_core_dp_column_must_agree(tmp_path: Path) -> None:
    head = MCORE.replace(",gpus,", ",dp,gpus,")
    good, bad = MROW.replace(",64,", ",32,64,"), MROW.replace(",64,", ",16,64,")
    assert read_table(_table(tmp_path, head, good))[0] == "mcore"
    assert len(list(table_rows([tmp_path / "t.csv"]))) == 1
    _one_line_error(_table(tmp_path, head, good, bad), "row 3: dp: dp 16, but the row's 64 GPUs")


def test_an_sc21_row_replays_the_gpt_of_its_columns(tmp_path: Path) -> None:
    """Before: the model came from params_billion alone while the FLOP formula read the row's
    hidden and layers (+355.8%). A row that is the shipped GPT keeps its name (the shipped
    table's options do not change); another is the GPT its columns give."""
    other = "1.7,32,4096,36,1,1,32,512,137"
    t = _table(tmp_path, SC21, SROW, other, "2.5,32,2560,32,2,1,16,256,130")
    got = list(table_rows([t]))
    assert got[0][4]["model"] == "gpt3-1.7b" and got[0][5].startswith("A100 gpt3-1.7b 32 GPUs")
    spec = got[1][4]["model"]
    assert isinstance(spec, ModelSpec)
    assert (spec.layers, spec.hidden, spec.heads, spec.vocab, spec.seq_len) == (36, 4096, 32, 51200, 2048)
    assert got[1][5].startswith("A100 gpt-1.7b 32 GPUs")
    assert isinstance(got[2][4]["model"], ModelSpec)  # no shipped 2.5B: its columns' GPT
    shipped = Path(__file__).resolve().parents[2] / "shared" / "reference" / "megatron_sc21_table1.csv"
    assert all(isinstance(r[4]["model"], str) for r in table_rows([shipped]))


@pytest.mark.parametrize(("head", "row", "column", "value", "needle"), [
    (BRIDGE, ROW, "gpus", "inf", "row 2: gpus: expected a whole number, got 'inf'"),
    (BRIDGE, ROW, "gpus", "8.5", "row 2: gpus: expected a whole number, got '8.5'"),
    (BRIDGE, ROW, "gbs", "1e400", "row 2: gbs: expected a whole number"),
    (MCORE, MROW, "params_billion", "7B", "row 2: params_billion: expected a positive number, got '7B'"),
    (SC21, SROW, "params_billion", "7.5B", "row 2: params_billion: expected a positive number"),
    (SC21, SROW, "global_batch", "nan", "row 2: global_batch: expected a whole number"),
    (TITAN, TROW, "seq_len", "-inf", "row 2: seq_len: expected a whole number"),
])
def test_malformed_numbers_are_one_line_errors_not_crashes(tmp_path: Path, head: str, row: str,
                                                           column: str, value: str, needle: str) -> None:
    """Before: OverflowError (inf), ValueError (7B) or a fraction silently truncated."""
    _one_line_error(_table(tmp_path, head, _cell(row, head, column, value)), needle)


@pytest.mark.parametrize(("head", "row", "column"), [
    (BRIDGE, ROW, "gpus"), (MCORE, MROW, "seq_len"), (SC21, SROW, "global_batch"), (TITAN, TROW, "gpus"),
])
def test_a_whole_number_written_as_a_decimal_is_read(tmp_path: Path, head: str, row: str,
                                                     column: str) -> None:
    """``8.0`` is 8 (before: int('8.0') crashed in the FLOP formulas and the metric)."""
    plain = row.split(",")[head.split(",").index(column)]
    a = list(table_rows([_table(tmp_path, head, row, name="a.csv")]))[0]
    b = list(table_rows([_table(tmp_path, head, _cell(row, head, column, plain + ".0"), name="b.csv")]))[0]
    assert a[4] == b[4] and a[5] == b[5]  # options and label
    assert predicted_metric(b[2], b[3], b[4], 1.0) == predicted_metric(a[2], a[3], a[4], 1.0)


@pytest.mark.parametrize(("head", "row", "column", "value", "needle"), [
    (BRIDGE, ROW, "mbs", "0", "row 2: mbs: must be >= 1, got 0"),
    (BRIDGE, ROW, "gpus", "-8", "row 2: gpus: must be >= 1, got -8"),
    (BRIDGE, ROW, "gbs", "127", "row 2: gbs: global batch 127 is not a multiple of micro-batch 1 x dp 8"),
    (TITAN, TROW, "attention", "flash3", "row 2: attention: 'flash3' is not one of"),
    (BRIDGE + ",grad_nan_check,grad_nan_syncs", ROW + ",true,7", "grad_nan_syncs", "7",
     "row 2: grad_nan_syncs: must be <= 2"),
])
def test_cells_a_replay_would_refuse_are_checked_up_front(tmp_path: Path, head: str, row: str,
                                                          column: str, value: str, needle: str) -> None:
    """Before: "not replayed" (exit 0) with the option's name ("row 2.micro_batch")."""
    _one_line_error(_table(tmp_path, head, _cell(row, head, column, value)), needle)


def test_unknown_recompute_modules_are_bad_input(tmp_path: Path) -> None:
    head = BRIDGE + ",recompute"
    t = _table(tmp_path, head, ROW + ",", ROW + ",selective:foo")
    _one_line_error(t, "row 3: recompute: unknown module 'foo'")


def test_a_table_none_of_whose_rows_replays_still_prints_a_summary(tmp_path: Path) -> None:
    """Rows tracesim cannot express (here: 8 KV heads over tp 16; a sequence whose replay
    times overflow) are listed, and the summary line says none was replayed."""
    bad_tp = _cell(_cell(ROW, BRIDGE, "gpus", "16"), BRIDGE, "tp", "16")
    huge = _cell(ROW, BRIDGE, "seq_len", "1000000000")
    t = _table(tmp_path, BRIDGE, bad_tp, huge)
    res = CliRunner().invoke(main, ["validate", "published", str(t)])
    assert res.exit_code == 0, res.output
    assert res.output.count("not replayed: ") == 2 and "overflow" in res.output
    assert res.output.splitlines()[-1] == "0 rows replayed; 2 not replayed"


def test_json_has_null_for_what_a_row_not_replayed_lacks(tmp_path: Path) -> None:
    """Before: bare NaN, which no JSON parser reads."""
    t = _table(tmp_path, BRIDGE, ROW.replace("DGX-H100", "DGX-H10"), ROW)
    res = CliRunner().invoke(main, ["validate", "published", str(t), "--json"])
    assert res.exit_code == 0, res.output

    def refuse(text: str) -> None:
        raise AssertionError(f"{text} in the JSON")

    doc = json.loads(res.output, parse_constant=refuse)
    first = doc["rows"][0]
    assert first["predicted"] is None and first["rel_error"] is None and first["error"]
    assert first["known"] == list(SYSTEMS) and doc["rows"][1]["predicted"] > 0


def test_an_excel_byte_order_mark_is_read(tmp_path: Path) -> None:
    t = tmp_path / "excel.csv"
    t.write_bytes(("\ufeff" + BRIDGE + "\r\n" + ROW + "\r\n").encode("utf-8"))
    fmt, rows = read_table(t)
    assert fmt == "bridge" and rows[0]["system"] == "DGX-H100"


def test_a_header_only_or_empty_table_says_so(tmp_path: Path) -> None:
    _one_line_error(_table(tmp_path, BRIDGE, name="head.csv"), "no rows")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(InputError, match="empty"):
        read_table(tmp_path / "empty.csv")


def test_a_missing_column_is_named_for_the_closest_format(tmp_path: Path) -> None:
    no_pp = BRIDGE.replace(",pp,", ",")
    row = ",".join(c for i, c in enumerate(ROW.split(",")) if BRIDGE.split(",")[i] != "pp")
    _one_line_error(_table(tmp_path, no_pp, row), "header: a Megatron-Bridge performance table without the column pp")
    # a Megatron-Core table without vocab is not read as SC'21 Table 1 (A100, sequence 2048)
    no_vocab = MCORE.replace(",vocab,", ",")
    mrow = MROW.replace(",131072,", ",")
    _one_line_error(_table(tmp_path, no_vocab, mrow), "a Megatron-Core GPT table without the column vocab")
    _one_line_error(_table(tmp_path, BRIDGE + ",gpus", ROW + ",9"), "header: column gpus twice")


def test_rows_are_numbered_as_a_spreadsheet_numbers_them(tmp_path: Path) -> None:
    """The header is row 1 and a blank line is a row: the bad cell below is on line 4 (before:
    reported as row 3); a row of empty cells is skipped."""
    bad = _cell(ROW, BRIDGE, "gbs", "12x8")
    _one_line_error(_table(tmp_path, BRIDGE, ROW, "", bad), "row 4: gbs: expected a whole number, got '12x8'")
    from tracesim.pipeline.published_cells import read_rows

    t = _table(tmp_path, BRIDGE, "", ROW, "," * 14)
    assert [k for k, _ in read_rows(t)[1]] == [1]  # row 3 (k + 2)


def test_systems_are_read_in_any_case_and_an_unknown_one_lists_the_known(tmp_path: Path) -> None:
    a = list(table_rows([_table(tmp_path, BRIDGE, ROW, name="a.csv")]))[0]
    b = list(table_rows([_table(tmp_path, BRIDGE, ROW.replace("DGX-H100", "dgx-h100"), name="b.csv")]))[0]
    assert a[4] == b[4] and a[5] == b[5]
    t = _table(tmp_path, BRIDGE, ROW.replace("DGX-H100", "H100"), ROW, name="c.csv")
    res = CliRunner().invoke(main, ["validate", "published", str(t)])
    line = next(ln for ln in res.output.splitlines() if "not replayed:" in ln)
    assert res.exit_code == 0 and "unknown system 'H100' (known: DGX-H100, DGX-B200" in line, res.output


def test_tables_of_the_same_name_are_kept_apart_and_one_given_twice_is_read_once(tmp_path: Path) -> None:
    """Before: both ``runs.csv`` were merged into one summary (keyed by file name)."""
    one = _table(tmp_path, BRIDGE, ROW, name="d1/runs.csv")
    two = _table(tmp_path, BRIDGE, ROW.replace(",11000", ",12000"), name="d2/runs.csv")
    got = list(validate_rows([one, two]))
    assert [r.table for r in got] == [str(one), str(two)]
    res = CliRunner().invoke(main, ["validate", "published", str(one), str(two), "--json"])
    assert set(json.loads(res.output)["per_table"]) == {str(one), str(two)}
    again = list(validate_rows([one, tmp_path / "d1" / ".." / "d1" / "runs.csv"]))
    assert len(again) == 1 and again[0].table == "runs.csv"
    assert row_options("bridge", read_table(one)[1][0], one, 0)[1] == got[0].label
