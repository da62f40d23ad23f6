"""NVIDIA's DGX Cloud benchmarking recipes' expected step times on H100 and GB200
(benchmarks/published/dgxc_benchmarking.csv, transcribed from NVIDIA/dgxc-benchmarking):
the layouts agree with the GPU counts and batches, and the rows replay as the recipes ran."""

from __future__ import annotations

import csv
from pathlib import Path

from tracesim.catalog import load_model
from tracesim.pipeline.published import read_table, row_options

TABLE = Path(__file__).resolve().parents[1] / "benchmarks" / "published" / "dgxc_benchmarking.csv"
#: (system, model, precision) -> rows, as the recipes' tables give them
SERIES = {("DGX-H100", "nemotron4-15b", "bf16"): 9, ("DGX-H100", "nemotron4-15b", "fp8-ds"): 9,
          ("DGX-H100", "nemotron4-340b", "bf16"): 6, ("DGX-H100", "nemotron4-340b", "fp8-ds"): 6,
          ("DGX-H100", "llama3.1-8b", "bf16"): 5, ("DGX-H100", "llama3.1-8b", "fp8-ds"): 5,
          ("DGX-H100", "llama3.1-70b", "bf16"): 6, ("DGX-H100", "llama3.1-70b", "fp8-ds"): 6,
          ("DGX-H100", "llama3.1-405b", "bf16"): 3, ("DGX-H100", "llama3.1-405b", "fp8-ds"): 3,
          ("DGX-GB200", "nemotron4-340b", "bf16"): 6, ("DGX-GB200", "nemotron4-340b", "fp8-ds"): 6}


def test_the_tables_layouts_add_up() -> None:
    rows = list(csv.DictReader(TABLE.open()))
    counts: dict[tuple[str, str, str], int] = {}
    for r in rows:
        key = (r["system"], r["model"], r["precision"])
        counts[key] = counts.get(key, 0) + 1
        gpus, gbs, mbs, ga = (int(r[k]) for k in ("gpus", "gbs", "mbs", "ga"))
        tp, pp, cp = (int(r[k]) for k in ("tp", "pp", "cp"))
        # the header's GA is the micro-batches per step of every scale (weak scaling)
        assert gbs == gpus // (tp * pp * cp) * mbs * ga, r
        assert 0.5 < float(r["step_time_s"]) < 60 and r["nemo"] in ("24.09", "24.11", "24.12", "25.04")
        assert "README" in r["note"]
        # the 24.11 Nemotron-4 340B recipe: selective recompute, flash-attn (NVTE_FUSED_ATTN=0)
        own_340b = r["model"] == "nemotron4-340b" and r["nemo"] == "24.11"
        assert (r["recompute"], r["attention"]) == (
            ("selective:core_attn", "flash2") if own_340b else ("", ""))
        # the 25.04 launch script's --cuda_graphs true on GB200: every layer captured whole
        assert r["cuda_graph"] == ("local:attn,mlp" if r["system"] == "DGX-GB200" else "")
        # the recipes' userbuffers configurations (benchmarks/published/README.md): the Llama
        # 3.1 YAML files' own, none named for Nemotron-4 on H100, NeMo's B200 ones on GB200
        ub = {"llama3.1-70b": "ub/dgxc_llama31_70b.yaml", "llama3.1-405b": "ub/dgxc_llama31_405b.yaml",
              "llama3.1-8b": "", "nemotron4-15b": "te-defaults", "nemotron4-340b": "te-defaults"}
        want = (f"ub/nemo_b200_h18432_tp8_{'fp8' if r['precision'] == 'fp8-ds' else 'bf16'}.yaml"
                if r["system"] == "DGX-GB200" else ub[r["model"]])
        assert r["ub_cfg"] == want and (tp > 1) == bool(want), r
    assert counts == SERIES


def test_rows_replay_with_their_own_settings() -> None:
    """No Megatron-Bridge 25.11 recipe or container cuDNN; the layouts split evenly (Llama 3.1
    405B: 126 layers on 9 x 7 chunks of 2; Nemotron-4 340B: 96 on 8 x 12 of 1)."""
    fmt, rows = read_table(TABLE)
    assert fmt == "bridge"
    for k, row in enumerate(rows):
        opts, _, _ = row_options(fmt, row, TABLE, k)
        assert "cudnn" not in opts and opts["stack"] == "megatron-core"
        assert opts["fp8_recipe" if row["precision"] == "fp8-ds" else "dtype"] == (
            "delayed" if row["precision"] == "fp8-ds" else "bf16")
        own_340b = row["model"] == "nemotron4-340b" and row["nemo"] == "24.11"
        assert (opts.get("recompute"), opts.get("recompute_modules"), opts.get("attention")) == (
            ("selective", "core_attn", "flash2") if own_340b else (None, None, None))
        assert opts.get("cuda_graphs") == ("attn,mlp" if row["system"] == "DGX-GB200" else None)
        layers = load_model(row["model"]).layers
        vpp = opts.get("vpp", 1)
        assert layers % (opts["pp"] * vpp) == 0 and "stage_layers" not in opts


def test_what_if_unsets_an_option() -> None:
    """``what_if.py ... cuda_graphs=`` replays a GB200 FP8 row without its CUDA graphs: its
    TP 8 overlap's GEMM chunks are then launched one by one from the Grace host, so the
    iteration is longer than with the layers captured."""
    import subprocess
    import sys

    script = TABLE.with_name("what_if.py")
    run = [sys.executable, str(script), str(TABLE), "--only", "GB200 nemotron4-340b fp8-ds 128",
           "--all", "cuda_graphs="]
    ok = subprocess.run(run, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    times = [float(line.split("iteration")[1].split()[0]) for line in ok.stdout.splitlines()
             if "iteration" in line]
    assert len(times) == 4 and times[1] > times[0] * 1.05 and times[3] > times[2] * 1.05
