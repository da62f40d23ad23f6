"""The MLPerf Training GPT-3 175B, Llama 3.1 405B and 8B tables
(benchmarks/published/mlperf_training_*.csv, written by benchmarks/published/mlperf_training.py
from the submissions' logs and configurations): their numbers agree with each other and their
layouts with the GPU counts."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tracesim.pipeline.published import read_table, row_options

TABLE = Path(__file__).resolve().parents[1] / "benchmarks" / "published" / "mlperf_training_llama31_405b.csv"
TABLE_8B = TABLE.with_name("mlperf_training_llama31_8b.csv")
TABLE_GPT3 = TABLE.with_name("mlperf_training_gpt3_175b.csv")


@pytest.mark.parametrize(("table", "n", "systems"), [
    (TABLE, 20, {"DGX-H100", "DGX-H200", "DGX-GB200", "DGX-GB300", "DGX-B200"}),
    (TABLE_8B, 29, {"DGX-B200", "DGX-B300", "DGX-H100", "DGX-H200", "DGX-GB200", "DGX-GB300"}),
    (TABLE_GPT3, 14, {"DGX-H100", "DGX-B200"})])
def test_tokens_per_gpu_are_the_logged_step_times(table: Path, n: int, systems: set) -> None:
    rows = list(csv.DictReader(table.open()))
    assert len(rows) == n and {r["system"] for r in rows} == systems
    for r in rows:
        gpus, gbs, step = int(r["gpus"]), int(r["gbs"]), float(r["step_s"])
        tp, pp, cp, mbs, ga = (int(r[k]) for k in ("tp", "pp", "cp", "mbs", "ga"))
        assert gbs == gpus // (tp * pp * cp) * ga * mbs  # dp x MINIBS, as the logs' global batch
        tokens = gbs * int(r["seq_len"]) / (gpus * step)
        assert tokens == pytest.approx(float(r["tokens_per_s_per_gpu"]), rel=1e-5, abs=0.006)
        assert r["precision"] in ("fp8-ds", "fp8-cs", "nvfp4") and r["release"].startswith("mlperf-")
        # FP8 attention (FP8_DPA) only where the linears are quantized
        assert r["fp8_attention"] in ("", "true")


def test_rows_replay_as_their_runs_ran() -> None:
    fmt, rows = read_table(TABLE)
    assert fmt == "bridge"
    for k, row in enumerate(rows):
        opts, _, _ = row_options(fmt, row, TABLE, k)
        # 126 layers on pp 8 x vp 8 with the embedding and the loss counted as layers
        # (the configs' ASYM_PP_EMBED / ASYM_PP_LOSS)
        assert sum(opts["stage_layers"]) == 126 and len(opts["stage_layers"]) == 64
        recipe = {"fp8-ds": "delayed", "fp8-cs": "current", "nvfp4": "nvfp4"}[row["precision"]]
        assert opts["fp8_recipe"] == recipe
        assert (opts.get("cuda_graphs") == "full_iteration") == bool(row["cuda_graph"])
        # NVIDIA's NVL72 configs set their slurm segment: 16 trays, 64 GPUs per rack
        if row["segment"]:
            assert opts["cluster"].gpus_per_node == 64
        # every submission's NCCL config: data-parallel 8 CTAs, context parallelism 1
        caps = dict(opts["cluster"].collectives.max_ctas)
        assert caps["dpcp"] == 8 and caps["cp"] == 1 and caps["pp"] == 2


def test_gpt3_rows_replay_as_their_runs_ran() -> None:
    fmt, rows = read_table(TABLE_GPT3)
    assert fmt == "bridge"
    for k, row in enumerate(rows):
        opts, _, _ = row_options(fmt, row, TABLE_GPT3, k)
        assert opts["model"] == "gpt3-175b" and opts["seq_len"] == 2048
        # 96 layers in pp x vp chunks of 1 to 3, the interleaved schedule
        assert 96 % (opts["pp"] * opts["vpp"]) == 0 and opts["vpp"] in (4, 6, 8, 12)
        assert opts["fp8_recipe"] == "delayed" and opts["tp"] == 4 and opts["zero"] == 1
        # per-layer CUDA graphs (LAYER_CUDA_GRAPH) where the run captured them
        assert (opts.get("cuda_graphs") == "attn,mlp") == bool(row["cuda_graph"])
        # FP8 parameters from v4.0 on (FP8_PARAMS); v3.1's container gathers BF16 ones
        assert opts["fp8_param_gather"] == (row["release"] != "mlperf-v3.1")
        # v3.1's Transformer Engine (before v1.2) ran FlashAttention-2, the later ones cuDNN
        assert opts.get("attention", "flash") == ("flash2" if row["release"] == "mlperf-v3.1" else "flash")


def test_a_bad_attention_cell_names_the_row(tmp_path: Path) -> None:
    from tracesim.errors import InputError

    text = TABLE_GPT3.read_text().replace(",flash2,", ",flash3,", 1)
    bad = tmp_path / "gpt3.csv"
    bad.write_text(text)
    fmt, rows = read_table(bad)
    k = next(i for i, r in enumerate(rows) if r["attention"] == "flash3")
    with pytest.raises(InputError, match="attention"):
        row_options(fmt, rows[k], bad, k)


def test_what_if_routing_changes_the_cluster_of_a_row() -> None:
    """``what_if.py ... routing=ecmp`` replays the row on its cluster with per-flow ECMP
    hashing on the leaf uplinks: never faster than adaptive routing; a routing that does not
    exist is bad input (exit 2)."""
    import subprocess
    import sys

    script = TABLE.with_name("what_if.py")
    run = [sys.executable, str(script), str(TABLE_GPT3), "--only", "256 GPUs"]
    ok = subprocess.run(run + ["routing=ecmp"], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    times = [float(line.split("iteration")[1].split()[0]) for line in ok.stdout.splitlines()
             if "iteration" in line]
    assert len(times) == 2 and times[1] >= times[0]
    bad = subprocess.run(run + ["routing=foo"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "routing" in bad.stderr


def test_what_if_all_rows_at_the_burst_rate() -> None:
    """``what_if.py ... --all sustained_clock=1`` replays every matching row with its GPU at
    the kernel benchmarks' burst rate: faster than at the H100's sustained clock on each row,
    the mean errors printed for both; a clock above 1 is bad input (exit 2)."""
    import subprocess
    import sys

    script = TABLE.with_name("what_if.py")
    weak = TABLE.with_name("megatron_core_h100_weak_scaling.csv")
    run = [sys.executable, str(script), str(weak), "--only", "tp1", "--all"]
    ok = subprocess.run(run + ["sustained_clock=1"], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    times = [float(line.split("iteration")[1].split()[0]) for line in ok.stdout.splitlines()
             if "iteration" in line]
    assert len(times) == 2 and times[1] < times[0]  # the one TP 1 row: burst is faster
    means = [line for line in ok.stdout.splitlines() if "rows: mean absolute error" in line]
    assert len(means) == 2 and all("1 rows" in line for line in means)
    bad = subprocess.run(run + ["sustained_clock=1.5"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "sustained_clock" in (bad.stdout + bad.stderr)


def test_what_if_every_gpu_at_the_profiles_rate() -> None:
    """``what_if.py ... sustained_fleet=none`` replays a row with every GPU of the job at the
    profile's rate (no slowest-GPU factor): a 128-GPU B200 row gets faster; a value other than
    ``none`` is bad input (exit 2)."""
    import subprocess
    import sys

    script = TABLE.with_name("what_if.py")
    run = [sys.executable, str(script), str(TABLE_8B), "--only", "DGX-B200 llama3-8b fp8-cs 128 GPUs"]
    ok = subprocess.run(run + ["sustained_fleet=none"], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    times = [float(line.split(" iteration ")[1].split()[0]) for line in ok.stdout.splitlines()
             if line.lstrip().startswith(("as published", "changed"))]
    assert len(times) == 2 and times[1] < times[0]
    bad = subprocess.run(run + ["sustained_fleet=0.9"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "sustained_fleet" in (bad.stdout + bad.stderr)


def test_nvidia_8b_rows_run_fp8_attention_where_their_configs_do() -> None:
    """NVIDIA's v5.1 Llama 3.1 8B runs: the one-tray-pair NVFP4 runs source
    config_common_fp8attn.sh (FP8_DPA=True) and capture each layer (MCORE_CUDA_GRAPH without
    FULL_CUDA_GRAPH); the FP8 runs keep BF16 attention and capture the whole iteration."""
    fmt, rows = read_table(TABLE_8B)
    seen = 0
    for k, row in enumerate(rows):
        if not row["note"].startswith("NVIDIA "):
            continue
        opts, _, _ = row_options(fmt, row, TABLE_8B, k)
        fp4 = row["precision"] == "nvfp4"
        assert opts.get("fp8_attention", False) == fp4 and (row["gpus"] == "8") == fp4
        assert opts["cuda_graphs"] == ("attn,mlp" if fp4 else "full_iteration")
        seen += 1
    assert seen == 6


def test_rows_read_from_the_logs_printed_config() -> None:
    """The other submitters' 8B rows come from the resolved config their logs print: the
    layout, NVFP4 with FP8 attention where the run set them, Megatron-Core's graphs by scope
    (``full``: each layer), no NCCL caps where the submission ships no communicator file."""
    fmt, rows = read_table(TABLE_8B)
    logged = [(k, r) for k, r in enumerate(rows) if "printed config" in r["note"]]
    assert len(logged) == 15
    for k, row in logged:
        opts, _, _ = row_options(fmt, row, TABLE_8B, k)
        assert opts.get("fp8_attention", False) == (row["precision"] == "nvfp4")
        assert row["cuda_graph"] in ("", "local:full_iteration", "local:attn,mlp")
    systems = {r["system"] for _, r in logged}
    assert systems == {"DGX-B200", "DGX-B300", "DGX-GB300", "DGX-H200"}


def test_each_run_has_its_own_tp_overlap() -> None:
    """``tp_comm_overlap`` is the run's ``model.ub_tp_comm_overlap``: on with TP > 1 but the
    University of Florida's B200 405B runs (their configs comment the export out) and the NVFP4
    runs; empty with TP 1 (no overlap to have). The replay turns the userbuffers off there."""
    for table in (TABLE, TABLE_8B, TABLE_GPT3):
        for r in csv.DictReader(table.open()):
            want = ("" if int(r["tp"]) == 1 else
                    "false" if r["system"] == "DGX-B200" and table == TABLE or r["precision"] == "nvfp4"
                    else "true")
            assert r["tp_comm_overlap"] == want, (table.name, r["note"])
    fmt, rows = read_table(TABLE)
    b200 = [row_options(fmt, r, TABLE, k)[0] for k, r in enumerate(rows) if r["system"] == "DGX-B200"]
    assert b200 and all(o.get("tp_comm_overlap") is False for o in b200)
