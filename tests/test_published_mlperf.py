"""The MLPerf Training Llama 3.1 405B table (benchmarks/published/mlperf_training_llama31_405b.csv,
written by benchmarks/published/mlperf_llama31_405b.py from the submissions' logs and
configurations): its numbers agree with each other and its layouts with the GPU counts."""

from __future__ import annotations

import csv
from pathlib import Path

from tracesim.pipeline.published import read_table, row_options

TABLE = Path(__file__).resolve().parents[1] / "benchmarks" / "published" / "mlperf_training_llama31_405b.csv"


def test_tokens_per_gpu_are_the_logged_step_times() -> None:
    rows = list(csv.DictReader(TABLE.open()))
    assert len(rows) == 14 and {r["system"] for r in rows} == {"DGX-H100", "DGX-GB200", "DGX-B200"}
    for r in rows:
        gpus, gbs, step = int(r["gpus"]), int(r["gbs"]), float(r["step_s"])
        tp, pp, cp, mbs, ga = (int(r[k]) for k in ("tp", "pp", "cp", "mbs", "ga"))
        assert gbs == gpus // (tp * pp * cp) * ga * mbs  # dp x MINIBS, as the logs' global batch
        tokens = gbs * int(r["seq_len"]) / (gpus * step)
        assert abs(tokens - float(r["tokens_per_s_per_gpu"])) < 0.01
        assert r["precision"] in ("fp8-ds", "fp8-cs") and r["release"].startswith("mlperf-")


def test_rows_replay_as_their_runs_ran() -> None:
    fmt, rows = read_table(TABLE)
    assert fmt == "bridge"
    for k, row in enumerate(rows):
        opts, _, _ = row_options(fmt, row, TABLE, k)
        # 126 layers on pp 8 x vp 8 with the embedding and the loss counted as layers
        # (the configs' ASYM_PP_EMBED / ASYM_PP_LOSS)
        assert sum(opts["stage_layers"]) == 126 and len(opts["stage_layers"]) == 64
        assert opts["fp8_recipe"] == ("delayed" if row["precision"] == "fp8-ds" else "current")
        assert (opts.get("cuda_graphs") == "full_iteration") == bool(row["cuda_graph"])
