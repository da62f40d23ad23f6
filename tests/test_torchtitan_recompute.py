"""torchtitan's own switches: ``--recompute op`` (op-level selective activation
checkpointing: every second matmul of a dense block and its other ops but flash attention
rerun at the start of the block's backward) and ``--compile`` (Inductor fuses the eager
elementwise chains); the torchtitan table format of ``tracesim validate published``."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tests.helpers import retarget
from tracesim.build.recompute import op_shares
from tracesim.catalog import load_model
from tracesim.errors import InputError
from tracesim.pipeline.published import table_rows, validate_rows
from tracesim.report.resultdir import ops_table

TITAN = {"model": "llama3-8b", "cluster": "h200x8", "fsdp": True, "dp": 8, "micro_batch": 1,
         "global_batch": 8, "seq_len": 4096, "stack": "torchtitan"}


def test_every_second_unfused_matmul_is_rerun() -> None:
    llama = op_shares(load_model("llama3-8b"))  # wq, wk, wv, wo, w1, w3, w2: wk, wo, w3
    assert llama["attn.qkv"] == pytest.approx(1024 / (4096 + 2 * 1024))
    assert llama["attn.proj"] == 1.0 and llama["mlp.fc1"] == 0.5 and llama["mlp.fc2"] == 0.0
    gpt = op_shares(load_model("gpt3-1.7b"))  # wq, wk, wv, wo, fc1, fc2: wk, wo, fc2
    assert gpt["attn.qkv"] == pytest.approx(1 / 3)
    assert gpt["mlp.fc1"] == 0.0 and gpt["mlp.fc2"] == 1.0


def _layer_ops(res, layer: int) -> pd.DataFrame:
    d = pd.DataFrame(ops_table(res.graph, res.start_ns, res.end_ns))
    return d[(d["rank"] == 0) & (d["lane"] == "compute") & (d["layer"] == layer)]


def test_op_recompute_reruns_the_shares_before_the_blocks_backward() -> None:
    res = retarget({**TITAN, "recompute": "op", "full": True, "per_op": True,
                    "comm_interference": False}, detail=True)
    ops = _layer_ops(res, 3)
    dur = {(n, p): int(t) for n, p, t in zip(ops["name"], ops["phase"], ops["dur_ns"], strict=True)}
    again = ops[ops["name"].str.startswith("recompute:")]
    names = set(again["name"].str.removeprefix("recompute:"))
    assert {"ln1", "attn.qkv", "attn.rope", "attn.proj", "ln2", "mlp.fc1", "mlp.act"} <= names
    assert not names & {"attn.core", "mlp.fc2"}  # flash attention and w2 are saved
    assert abs(dur[("recompute:attn.qkv", "bwd")] - dur[("attn.qkv", "fwd")] / 6) <= 1
    assert abs(dur[("recompute:mlp.fc1", "bwd")] - dur[("mlp.fc1", "fwd")] / 2) <= 1
    assert dur[("recompute:attn.proj", "bwd")] == dur[("attn.proj", "fwd")]
    bwd = ops[ops["phase"] == "bwd"].sort_values("start_ns")
    first_grad = bwd[~bwd["name"].str.startswith("recompute:")]["start_ns"].min()
    assert again["end_ns"].max() <= first_grad  # the whole rerun comes first


def test_op_recompute_costs_between_none_and_full() -> None:
    t = {r: retarget({**TITAN, "recompute": r}).iteration_time_s for r in ("none", "op", "full")}
    assert t["none"] < t["op"] < t["full"]


def test_op_recompute_is_defined_for_dense_blocks_only() -> None:
    with pytest.raises(InputError, match="dense"):
        retarget({**TITAN, "model": "qwen3-30b-a3b", "recompute": "op"})
    r = subprocess.run([sys.executable, "-m", "tracesim.cli", "replay", "--model", "qwen3-30b-a3b",
                        "--cluster", "h100x8", "--ep", "8", "--recompute", "op"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "--recompute" in r.stderr


def test_compile_fuses_the_eager_kernels_of_torchtitan_only() -> None:
    base = {**TITAN, "full": True, "per_op": True, "comm_interference": False}
    eager = retarget(base, detail=True)
    comp = retarget({**base, "compile": True}, detail=True)
    fused = retarget({**base, "stack": "megatron-core"}, detail=True)

    def fwd(res, name: str) -> int:
        ops = _layer_ops(res, 1)
        return int(ops[(ops["name"] == name) & (ops["phase"] == "fwd")]["dur_ns"].iloc[0])

    for name in ("ln1", "mlp.act", "attn.rope"):
        assert fwd(comp, name) < fwd(eager, name)
        assert fwd(comp, name) == fwd(fused, name)  # one fused kernel, as TE's
    assert fwd(comp, "mlp.fc1") == fwd(eager, "mlp.fc1")
    assert comp.iteration_time_s < eager.iteration_time_s
    assert comp.to_dict()["stack"]["kernels"]["norm"].startswith("torch.compile")
    same = [retarget({**TITAN, "stack": "megatron-core", "compile": c}).iteration_time_s
            for c in (False, True)]
    assert same[0] == same[1]


def test_compile_with_a_recorded_template_warns() -> None:
    res = retarget({**TITAN, "stack": "eager", "compile": True, "cluster": "h100x8"})
    assert any("--compile is not used" in w for w in res.warnings)


def test_the_torchtitan_table_format(tmp_path) -> None:
    table = "benchmarks/published/torchtitan_h200.csv"
    rows = list(table_rows([table]))
    assert [r[2] for r in rows] == ["titan", "titan"]
    opts = rows[0][4]
    assert (opts["stack"], opts["recompute"], opts["compile"], opts["attention"]) == (
        "torchtitan", "op", True, "flash2")
    assert opts["dp"] == 32 and opts["fsdp"] and opts["global_batch"] == 64
    assert (opts["fp8_recipe"], opts["fp8_param_gather"]) == ("current", True)
    got = list(validate_rows([table]))
    assert all(np.isfinite(r.predicted) and r.metric == "tokens_per_s_per_gpu" for r in got)
    bad = tmp_path / "bad.csv"
    bad.write_text(open(table).read().replace(",op,", ",sometimes,", 1))
    with pytest.raises(InputError, match="row 2: ac"):
        list(table_rows([bad]))
    bad.write_text(open(table).read().replace(",true,flash2", ",yes,flash2", 1))
    with pytest.raises(InputError, match="row 2: compile"):
        list(table_rows([bad]))
    r = subprocess.run([sys.executable, "-m", "tracesim.cli", "validate", "published", str(bad)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "compile" in r.stderr
