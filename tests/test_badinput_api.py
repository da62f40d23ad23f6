"""Bad input through the Python API and the readers: an InputError naming the file (or the
argument) and the field, never a ZeroDivisionError, KeyError, ValueError or AttributeError.

Each test is a real file or call that raised an internal error before its fix."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

import tracesim
from tracesim import ReplayOptions
from tracesim.catalog import default_bundle, load_cluster, load_model
from tracesim.errors import InputError
from tracesim.fileio import atomic_path
from tracesim.interop.aicb import parse_aicb, read_aicb
from tracesim.interop.aicb_graph import aicb_to_graph
from tracesim.interop.chakra_import import import_chakra
from tracesim.interop.formats import load_workload
from tracesim.pipeline.published import table_rows
from tracesim.report.result import MODES
from tracesim.specs.textopts import parse_ints, parse_stragglers
from tracesim.sweep import load_space

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "interop"
ZERO_ROWS = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 1 "
             "ga: 1 all_gpus: 2 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0\n0\n")


# ------------------------------------------------------------------------- AICB, no rows


def test_aicb_file_with_no_rows_is_an_input_error(tmp_path: Path) -> None:
    f = tmp_path / "zero.txt"
    f.write_text(ZERO_ROWS)
    with pytest.raises(InputError) as e:
        read_aicb(f)
    assert e.value.file == str(f) and e.value.where == "line 2" and "no rows" in e.value.message
    with pytest.raises(InputError, match="no rows"):
        load_workload(f)
    # a workload built in Python without rows: the graph builder says so too
    w = dataclasses.replace(parse_aicb((DATA / "moe_ep2.txt").read_text()), rows=())
    with pytest.raises(InputError, match="no rows") as e:
        aicb_to_graph(w, "w.txt")
    assert e.value.file == "w.txt"


# ------------------------------------------------------------------------- published tables

BRIDGE_HEAD = "system,model,gpus,precision,gbs,mbs,seq_len,fsdp,tp,pp,cp,vp,ep,ga,tokens_per_s_per_gpu"
BRIDGE_ROW = {"system": "DGX-GB300", "model": "llama3-8b", "gpus": "8", "precision": "fp8-cs",
              "gbs": "128", "mbs": "2", "seq_len": "8192", "fsdp": "0", "tp": "1", "pp": "1",
              "cp": "1", "vp": "", "ep": "1", "ga": "8", "tokens_per_s_per_gpu": "37556"}
MCORE_HEAD = "system,params_billion,heads,hidden,layers,tp,pp,gpus,global_batch,seq_len,vocab,tflops_per_gpu"
MCORE_ROW = {"system": "DGX-H100", "params_billion": "1.7", "heads": "16", "hidden": "2048",
             "layers": "24", "tp": "1", "pp": "1", "gpus": "48", "global_batch": "192",
             "seq_len": "4096", "vocab": "131072", "tflops_per_gpu": "408.8"}
SC21_HEAD = "params_billion,heads,hidden,layers,tp,pp,gpus,global_batch,tflops_per_gpu"
SC21_ROW = {"params_billion": "1.7", "heads": "24", "hidden": "2304", "layers": "24", "tp": "1",
            "pp": "1", "gpus": "32", "global_batch": "512", "tflops_per_gpu": "137"}


def _table(tmp_path: Path, head: str, row: dict[str, str]) -> Path:
    t = tmp_path / "t.csv"
    t.write_text(f"{head}\n{','.join(row[c] for c in head.split(','))}\n")
    return t


@pytest.mark.parametrize("head, row, cell", [
    (BRIDGE_HEAD, BRIDGE_ROW, "tp"), (BRIDGE_HEAD, BRIDGE_ROW, "pp"), (BRIDGE_HEAD, BRIDGE_ROW, "cp"),
    (MCORE_HEAD, MCORE_ROW, "tp"), (MCORE_HEAD, MCORE_ROW, "pp"), (MCORE_HEAD, MCORE_ROW, "heads"),
    (MCORE_HEAD, MCORE_ROW, "hidden"), (SC21_HEAD, SC21_ROW, "tp"), (SC21_HEAD, SC21_ROW, "pp"),
    (SC21_HEAD, SC21_ROW, "hidden"), (SC21_HEAD, SC21_ROW, "layers"),
])
def test_a_zero_layout_or_size_cell_names_the_row_and_column(tmp_path: Path, head: str,
                                                              row: dict[str, str], cell: str) -> None:
    good = _table(tmp_path, head, row)
    assert len(list(table_rows([good]))) == 1
    bad = _table(tmp_path, head, {**row, cell: "0"})
    with pytest.raises(InputError) as e:
        list(table_rows([bad]))
    assert e.value.line() == f"{bad}: row 2: {cell}: must be >= 1, got 0"


@pytest.mark.parametrize("field", ["heads", "hidden", "layers", "vocab", "seq_len"])
def test_a_model_spec_built_in_python_checks_its_sizes(field: str) -> None:
    m = load_model("gpt3-1.7b")
    with pytest.raises(InputError) as e:
        m.replace(**{field: 0})
    assert e.value.where == field and "gpt3-1.7b" in str(e.value.file)


# ------------------------------------------------------------------------- Chakra, a missing rank


def test_a_chakra_set_without_one_ranks_file_names_the_file(tmp_path: Path) -> None:
    et = tmp_path / "et"
    tracesim.convert(DATA / "moe_ep2.txt", et / "w", "chakra")
    (et / "w.3.et").unlink()
    for plain in (False, True):
        with pytest.raises(InputError) as e:
            import_chakra(et / "w", plain=plain)
        assert e.value.file == str(et / "w.3.et") and "file not found" in e.value.message
        assert "communicator group" in e.value.message


# ------------------------------------------------------------------------- output paths


def test_atomic_path_under_a_regular_file_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError, match="cannot create the directory") as e:
        with atomic_path(tmp_path / "afile" / "x.txt"):
            pass
    assert e.value.file == str(tmp_path / "afile")
    with pytest.raises(InputError, match="-o: exists and is not a directory"):
        tracesim.convert(DATA / "moe_ep2.txt", tmp_path / "afile" / "x.txt", "aicb")
    assert (tmp_path / "afile").read_text() == "x"


# ------------------------------------------------------------------------- sweep space settings


def _space(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "space.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


@pytest.mark.parametrize("data, where, needle", [
    ({"base": {"model": "gpt3-1.7b", "cluster": "h100x8"}, "axes": {"stage_layers": ["7,x"]}},
     "axes.stage_layers[0]", "N or NxK"),
    ({"base": {"model": "gpt3-1.7b", "cluster": "h100x8", "straggler": "1:x"}},
     "base.straggler", "RANK:FACTOR"),
    ({"base": {"model": "nomodel", "cluster": "h100x8"}, "axes": {"tp": [1]}},
     "base.model", "unknown model 'nomodel'"),
    ({"base": {"model": "gpt3-1.7b"}, "axes": {"cluster": ["h100x8", "h100x99"]}},
     "axes.cluster[1]", "unknown cluster 'h100x99'"),
    ({"base": {"model": "gpt3-1.7b", "cluster": "h100x8", "device": "h999"}},
     "base.device", "unknown device 'h999'"),
    ({"base": {"cluster": "h100x8"}, "points": [{"model": "./missing.yaml"}]},
     "points[0].model", "./missing.yaml: file not found"),
    ({"base": {"model": "gpt3-1.7b", "cluster": "h100x8"},
      "axes": {"layout": [{"tp": 1}, {"tp": 2, "cluster": "h100x99"}]}},
     "axes.layout[1].cluster", "unknown cluster"),
])
def test_bad_space_settings_name_the_space_file_and_key(tmp_path: Path, data: dict, where: str,
                                                        needle: str) -> None:
    p = _space(tmp_path, data)
    with pytest.raises(InputError) as e:
        load_space(p)
    assert e.value.file == str(p) and e.value.where == where, e.value.line()
    assert needle in e.value.message


def test_text_options_name_their_flag_by_default() -> None:
    with pytest.raises(InputError) as e:
        parse_ints("7,x")
    assert e.value.line().startswith("--stage-layers: ")
    with pytest.raises(InputError) as e:
        parse_stragglers("1:x")
    assert e.value.line().startswith("--straggler: ")
    with pytest.raises(InputError) as e:
        ReplayOptions(stage_layers="7,x")
    assert e.value.line().startswith("--stage-layers: ")


# ------------------------------------------------------------------------- API arguments


def test_netbench_unknown_collective() -> None:
    with pytest.raises(InputError, match="unknown collective 'all_sum'") as e:
        tracesim.netbench("h100x8", "all_sum")
    assert e.value.file == "--collective"


def test_nic_bandwidth_variant() -> None:
    with pytest.raises(InputError) as e:
        load_cluster("h100x128").with_nic_Gbps(0)
    assert e.value.where == "nic_Gbps"
    with pytest.raises(InputError, match="no inter_node section"):
        load_cluster("host-cpu").with_nic_Gbps(400)
    assert load_cluster("h100x128").with_nic_Gbps(800).inter_node.nic_Gbps == 800


def test_replay_options_unknown_keyword() -> None:
    with pytest.raises(InputError, match="did you mean tp"):
        ReplayOptions(tpp=2)  # type: ignore[call-arg]
    assert ReplayOptions(tp=2).replace(pp=2) == ReplayOptions(tp=2, pp=2)


def test_write_result_takes_a_prediction(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="takes a Prediction"):
        tracesim.write_result({"a": 1}, tmp_path / "out")  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------- modes


def test_every_mode_a_replay_gives_is_listed_and_documented() -> None:
    p = tracesim.replay(default_bundle("gpt"), cluster="h100x8", retarget="trace")
    assert p.mode == "replay-trace" and p.mode in MODES
    row = next(ln for ln in (ROOT / "docs" / "api.md").read_text().splitlines()
               if ln.startswith("| `mode` |"))
    assert all(f"`{m}`" in row for m in MODES)
