"""A userbuffers configuration given to the replay (``--tp-comm-overlap-cfg``,
tracesim/specs/ub_config.py): the shipped ones are the stack's defaults, a Megatron-LM / NeMo
YAML sets each linear's method, SMs, splits and FP8 buffer, and bad files exit 2 naming the
file and the key."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tracesim.api import replay
from tracesim.errors import InputError
from tracesim.specs import ub_config
from tracesim.specs.ub_config import SHIPPED, load_ub_config, te_default

ROOT = Path(__file__).resolve().parents[1]

#: Llama 3.1 70B on 32 H100 (TP 4, PP 2, CP 2), a layout the userbuffers overlap runs on
LAYOUT = {"model": "llama3.1-70b", "cluster": "h100x1024", "nodes": 4, "tp": 4, "pp": 2, "cp": 2,
          "vpp": 2, "micro_batch": 1, "global_batch": 16, "seq_len": 8192}
FP8 = {"dtype": "fp8", "fp8_recipe": "delayed"}

#: NVIDIA/dgxc-benchmarking llama3.1/llama3.1_70b.yaml @ 143b90d (NeMo 24.09), its
#: model.ub_tp_comm_overlap_cfg (benchmarks/published/ub/dgxc_llama31_70b.yaml)
DGXC_70B = {
    "fc1_dgrad": {"cga_size": 2, "method": "bulk", "num_sm": 2, "set_sm_margin": 0},
    "fc1_fprop": {"aggregate": 0, "method": "ring_exchange", "num_sm": 1, "set_sm_margin": 0},
    "fc1_wgrad": {"cga_size": 2, "method": "bulk", "num_sm": 4, "set_sm_margin": 0},
    "fc2_dgrad": {"aggregate": 0, "method": "ring_exchange", "num_sm": 1, "set_sm_margin": 0},
    "fc2_fprop": {"cga_size": 2, "method": "pipeline", "num_sm": 16, "num_splits": 4,
                  "set_sm_margin": 1},
    "proj_dgrad": {"aggregate": 0, "method": "ring_exchange", "num_sm": 1, "set_sm_margin": 0},
    "proj_fprop": {"cga_size": 2, "method": "pipeline", "num_sm": 24, "num_splits": 4,
                   "set_sm_margin": 1},
    "qkv_dgrad": {"cga_size": 2, "method": "bulk", "num_sm": 4, "set_sm_margin": 0},
    "qkv_fprop": {"aggregate": 0, "method": "ring_exchange", "num_sm": 1, "set_sm_margin": 0},
    "qkv_wgrad": {"cga_size": 2, "method": "bulk", "num_sm": 24, "set_sm_margin": 0},
}


def it(**opts: object) -> float:
    return float(replay(**{**LAYOUT, **opts}).iteration_time_s)


def write(tmp_path: Path, data: object, name: str = "ub.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def test_the_shipped_configurations_are_the_stacks_defaults() -> None:
    assert it() == it(tp_comm_overlap_cfg="bridge-bf16")
    assert it(**FP8) == it(**FP8, tp_comm_overlap_cfg="bridge-fp8")
    assert it(**FP8) != it(**FP8, tp_comm_overlap_cfg="bridge-bf16")  # pipelined on 24 / 16 SMs


def test_megatron_and_nemo_files_read_alike(tmp_path: Path) -> None:
    flat = load_ub_config(str(write(tmp_path, DGXC_70B)))
    nested = load_ub_config(str(write(tmp_path, {"model": {"ub_tp_comm_overlap_cfg": DGXC_70B},
                                                 "trainer": {"devices": 8}}, "nemo.yaml")))
    assert flat == nested
    d = {e[0]: e[1:] for e in flat}
    assert d["proj_fprop"] == ("pipe", 24, 4, False) and d["qkv_wgrad"] == ("bulk", 24, 0, False)
    # the 70B runs' configuration is Megatron-Bridge's BF16 one, and the shipped file is it
    assert flat == SHIPPED["bridge-bf16"]
    assert load_ub_config(str(ROOT / "benchmarks/published/ub/dgxc_llama31_70b.yaml")) == flat
    # a layer left out runs Transformer Engine's default; NeMo's null is all defaults
    one = load_ub_config(str(write(tmp_path, {"proj_fprop": {"method": "ring_exchange"}}, "one.yaml")))
    assert one == tuple(("proj_fprop", "ring", 1, 0, False) if e[0] == "proj_fprop" else e
                        for e in SHIPPED["te-defaults"])
    assert te_default("fc2_fprop") == ("fc2_fprop", "pipe", 16, 4, False)
    null = write(tmp_path, {"model": {"ub_tp_comm_overlap_cfg": None}}, "null.yaml")
    assert load_ub_config(str(null)) == SHIPPED["te-defaults"]


def test_each_setting_moves_the_replay(tmp_path: Path) -> None:
    base = {"proj_fprop": {"method": "pipeline", "num_sm": 24},
            "fc2_fprop": {"method": "pipeline", "num_sm": 16}}
    ref = it(**FP8, tp_comm_overlap_cfg=str(write(tmp_path, base)))
    more_sms = {**base, "proj_fprop": {"method": "pipeline", "num_sm": 64}}
    assert it(**FP8, tp_comm_overlap_cfg=str(write(tmp_path, more_sms, "sms.yaml"))) > ref
    splits = {k: {**v, "num_splits": 8} for k, v in base.items()}
    assert it(**FP8, tp_comm_overlap_cfg=str(write(tmp_path, splits, "splits.yaml"))) != ref
    # FP8 buffers halve the reduce-scatters' bytes (delayed scaling; BF16 runs ignore them)
    fp8_buf = {k: {**v, "fp8_buf": True} for k, v in base.items()}
    p = str(write(tmp_path, fp8_buf, "fp8buf.yaml"))
    assert it(**FP8, tp_comm_overlap_cfg=p) < ref
    assert it(tp_comm_overlap_cfg=p) == it(tp_comm_overlap_cfg=str(write(tmp_path, base, "b.yaml")))


def test_the_report_names_the_configuration(tmp_path: Path) -> None:
    from tracesim.report.terminal import metric_rows

    p = write(tmp_path, DGXC_70B)
    res = replay(**LAYOUT, **FP8, tp_comm_overlap_cfg=str(p)).to_dict()
    st = res["stack"]
    assert st["userbuffers"]["config"] == str(p) and st["userbuffers"]["given"]
    assert f"tp comm ({p})" in dict(metric_rows(res))["stack"]
    assert st["userbuffers"]["layers"]["proj_fprop"] == {"method": "pipeline", "num_sm": 24,
                                                        "num_splits": 4}
    plain = replay(**LAYOUT).to_dict()
    assert plain["stack"]["userbuffers"]["config"] == "bridge-bf16"
    assert not plain["stack"]["userbuffers"]["given"]
    assert "tp comm (" not in dict(metric_rows(plain))["stack"]
    off = replay(**{**LAYOUT, "tp": 1, "cp": 8, "vpp": 2}, tp_comm_overlap_cfg="te-defaults")
    assert "userbuffers" not in off.to_dict()["stack"]
    assert any("--tp-comm-overlap-cfg ignored" in w for w in off.warnings)


@pytest.mark.parametrize(("data", "field", "needle"), [
    ({"proj_prop": {"method": "pipeline"}}, "proj_prop", "unknown or unmodelled layer"),
    ({"qkv_fprop": {"method": "pipeline"}}, "qkv_fprop.method", "not modelled for qkv_fprop"),
    ({"qkv_dgrad": {"method": "ring_exchange"}}, "qkv_dgrad.method", "not modelled"),
    ({"proj_fprop": {"num_sm": 0}}, "proj_fprop.num_sm", ">= 1"),
    ({"proj_fprop": {"num_splits": "four"}}, "proj_fprop.num_splits", ">= 1"),
    ({"proj_fprop": {"fp8_buf": "yes"}}, "proj_fprop.fp8_buf", "true or false"),
    ({"proj_fprop": {"methd": "pipeline"}}, "proj_fprop.methd", "unknown key"),
    ({"proj_fprop": "pipeline"}, "proj_fprop", "expected a mapping"),
    ([1, 2], "ub_cfgs", "expected a mapping"),
])
def test_bad_files_name_the_key(tmp_path: Path, data: object, field: str, needle: str) -> None:
    p = write(tmp_path, data)
    with pytest.raises(InputError, match=needle) as err:
        load_ub_config(str(p))
    assert f"{p}: {field}:" in str(err.value)


def test_the_cli_exits_2_with_one_line(tmp_path: Path) -> None:
    p = write(tmp_path, {"fc2_fprop": {"method": "bulk"}})
    args = ["replay", "--model", "llama3-8b", "--cluster", "h100x8", "--tp", "2", "--dp", "4",
            "--tp-comm-overlap-cfg"]
    for value, needles in ((str(p), (str(p), "fc2_fprop.method")),
                           ("bridge-fp16", ("--tp-comm-overlap-cfg", "unknown userbuffers"))):
        r = subprocess.run([sys.executable, "-m", "tracesim.cli", *args, value], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and all(n in lines[0] for n in needles), r.stderr


def test_a_table_row_names_its_runs_configuration(tmp_path: Path) -> None:
    from tracesim.pipeline.published import table_rows

    rows = {lb: o for _, _, _, _, o, lb, _ in table_rows(
        [ROOT / "benchmarks/published/dgxc_benchmarking.csv"])}
    cfg = {lb.split(" GPUs")[0]: o.get("tp_comm_overlap_cfg") for lb, o in rows.items()}
    assert cfg["DGX-H100 llama3.1-8b bf16 8"] is None  # TP 1: no userbuffers
    assert cfg["DGX-H100 nemotron4-340b fp8-ds 128"] == "te-defaults"
    assert str(cfg["DGX-GB200 nemotron4-340b fp8-ds 128"]).endswith("ub/nemo_b200_h18432_tp8_fp8.yaml")
    bad = tmp_path / "t.csv"
    head = "system,model,gpus,precision,gbs,mbs,seq_len,tp,pp,tokens_per_s_per_gpu,ub_cfg\n"
    bad.write_text(head + "DGX-H100,llama3-8b,8,bf16,8,1,8192,2,1,9000,missing.yaml\n")
    with pytest.raises(InputError, match="row 2: ub_cfg: no userbuffers configuration"):
        list(table_rows([bad]))


def test_the_builder_reads_the_table() -> None:
    from tracesim.build.overlap import Overlaps

    table = ub_config.parse_ub_config(
        {"proj_fprop": {"method": "pipeline", "num_sm": 8, "num_splits": 6, "fp8_buf": True}}, None)
    ov = Overlaps(tp=4, ub=True, ub_table=table, fp8_rs=True)
    assert ov.ub_method("proj", "fprop") == ("pipe", 8) and ov.ub_splits("proj") == 6
    assert ov.ub_rs_bytes("proj") == 0.5 and ov.ub_rs_bytes("fc2") == 1.0
    assert ov.ub_method("qkv", "wgrad") == ("bulk", 16)  # Transformer Engine's default
    assert Overlaps(tp=4, ub=True).ub_method("proj", "fprop") == ("pipe", 24)
    assert ub_config.setting((), "proj", "wgrad") == ("proj_wgrad", "bulk", 16, 0, False)


def test_bridge_rows_run_their_recipes_configuration() -> None:
    """Megatron-Bridge recipes: Llama 3.1 405B its h16384 configurations, Llama 3 70B the
    stack's, a recipe with the overlap off none (docs/published_configs.md)."""
    from tracesim.pipeline.published import table_rows

    got = {lb.split(" GPUs")[0]: o.get("tp_comm_overlap_cfg") for _, _, _, _, o, lb, _ in
           table_rows([ROOT.parent / "shared/reference/megatron_bridge_25_11.csv"])}
    assert got["DGX-H100 llama3.1-405b fp8-cs 1024"] == "bridge-fp8-h100-h16384"
    assert got["DGX-GB200 llama3.1-405b fp8-cs 256"] == "bridge-fp8-b200-h16384"
    assert got["DGX-H100 llama3-70b fp8-cs 64"] is None  # the stack's own, h8192
    assert got["DGX-H100 qwen3-235b-a22b fp8-cs 256"] is None  # TP overlap off in its recipe
    d = {e[0]: e[1:3] for e in SHIPPED["bridge-bf16-h100-h16384"]}
    assert d["fc2_fprop"] == ("pipe", 8) and d["fc1_wgrad"] == ("bulk", 2)


def test_megatron_lm_rows_without_a_file_run_te_defaults() -> None:
    """Megatron-LM's --tp-comm-overlap without --tp-comm-overlap-cfg passes Transformer Engine
    no configuration (``ub_cfgs = {}``): the weak-scaling table's rows with TP run its defaults."""
    from tracesim.pipeline.published import table_rows

    rows = [(o["tp"], o.get("tp_comm_overlap_cfg")) for _, _, _, _, o, _, _ in
            table_rows([ROOT / "benchmarks/published/megatron_core_h100_weak_scaling.csv"])]
    assert rows and all(cfg == ("te-defaults" if tp > 1 else None) for tp, cfg in rows)


def test_a_row_may_turn_the_overlap_off(tmp_path: Path) -> None:
    """An own-settings row's ``tp_comm_overlap`` (the ModelZoo's MXFP8 runs add no
    --tp-comm-overlap); a value other than true / false exits 2 naming the cell."""
    from tracesim.pipeline.published import table_rows

    got = {lb.split(" GPUs")[0]: o.get("tp_comm_overlap") for _, _, _, _, o, lb, _ in table_rows(
        [ROOT / "benchmarks/published/megatron_moe_modelzoo_blackwell.csv"])}
    assert got["DGX-GB300 qwen3-235b-a22b fp8-mx 128"] is False
    bad = tmp_path / "t.csv"
    head = "system,model,gpus,precision,gbs,mbs,seq_len,tp,pp,tokens_per_s_per_gpu,tp_comm_overlap\n"
    bad.write_text(head + "DGX-H100,llama3-8b,8,bf16,8,1,8192,2,1,9000,maybe\n")
    with pytest.raises(InputError, match="row 2: tp_comm_overlap: expected true or false"):
        list(table_rows([bad]))


#: a NeMo-style userbuffers file whose settings a launch script may change through the
#: environment (the form of the MLPerf Training submissions' conf/tp_overlap/*.yaml)
NEMO_ENV = """\
qkv_dgrad:
  method: bulk
  num_sm: ${oc.decode:${oc.env:TS_TEST_QKV_DGRAD_SM,8}}
  set_sm_margin: 0
fc2_fprop:
  method: ${oc.decode:${oc.env:TS_TEST_FC2_METHOD,ring_exchange}}
  num_sm: ${oc.decode:${oc.env:TS_TEST_FC2_SM,1}}
  fp8_buf: 1
  atomic_gemm: ${oc.decode:${oc.env:TS_TEST_ATOMIC,0}}
"""


def test_nemo_environment_interpolations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``${oc.decode:${oc.env:NAME,default}}`` reads the environment tracesim runs in, else the
    default; ``fp8_buf: 1`` is true (Transformer Engine takes its truth value)."""
    for name in ("TS_TEST_QKV_DGRAD_SM", "TS_TEST_FC2_METHOD", "TS_TEST_FC2_SM", "TS_TEST_ATOMIC"):
        monkeypatch.delenv(name, raising=False)
    p = tmp_path / "nemo.yaml"
    p.write_text(NEMO_ENV)
    got = {e[0]: e for e in load_ub_config(str(p))}
    assert got["qkv_dgrad"] == ("qkv_dgrad", "bulk", 8, 0, False)
    assert got["fc2_fprop"] == ("fc2_fprop", "ring", 1, 0, False)  # fp8_buf: pipelined only
    monkeypatch.setenv("TS_TEST_QKV_DGRAD_SM", "12")
    monkeypatch.setenv("TS_TEST_FC2_METHOD", "pipeline")
    monkeypatch.setenv("TS_TEST_FC2_SM", "16")
    got = {e[0]: e for e in load_ub_config(str(p))}
    assert got["qkv_dgrad"][2] == 12 and got["fc2_fprop"] == ("fc2_fprop", "pipe", 16, 4, True)


@pytest.mark.parametrize(("value", "needle"), [
    ("${oc.env:TS_TEST_SURELY_UNSET}", "TS_TEST_SURELY_UNSET is not set"),
    ("${model.num_sm}", "cannot resolve ${model.num_sm}"),
    ("${oc.env:TS_TEST_SURELY_UNSET,8}", ">= 1, got '8'"),  # text without oc.decode, as OmegaConf
])
def test_unresolvable_interpolations_name_the_key(tmp_path: Path, value: str, needle: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(f"proj_fprop:\n  method: pipeline\n  num_sm: {value}\n")
    with pytest.raises(InputError, match=re.escape(needle)) as err:
        load_ub_config(str(p))
    assert f"{p}: proj_fprop.num_sm:" in str(err.value)


def test_resolve_text_around_and_nesting() -> None:
    from tracesim.specs.omegaconf_env import resolve

    env = {"ARCH": "b", "TP": "4"}
    assert resolve("${oc.env:ARCH,h}100tp${oc.env:TP}mbs1", None, "k", env) == "b100tp4mbs1"
    assert resolve("${oc.decode:${oc.env:X,False}}", None, "k", env) is False
    assert resolve("${oc.decode:${oc.env:TP}}", None, "k", env) == 4
    assert resolve("${oc.env:X,null}", None, "k", env) is None
    assert resolve(7, None, "k", env) == 7 and resolve("ring_exchange", None, "k", env) == "ring_exchange"


def test_a_variable_that_names_itself_ends() -> None:
    from tracesim.specs.omegaconf_env import resolve

    with pytest.raises(InputError, match="more than 64 interpolations"):
        resolve("${oc.env:LOOP}", None, "k", {"LOOP": "${oc.env:LOOP}"})
