"""benchmarks/published/megatron_bridge_releases.csv (Megatron-Bridge's throughput of one
configuration in several releases) agrees with the two single-release tables transcribed
separately, and release_spread.py summarises it."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

from benchmarks.published import release_spread as rs
from tests.conftest import REFERENCE

ROOT = Path(__file__).resolve().parents[1]
MODEL = {"LLAMA3_8B": "llama3-8b", "LLAMA3_70B": "llama3-70b", "LLAMA3.1_405B": "llama3.1-405b",
         "DeepSeekV3": "deepseek-v3", "GPT OSS 120B": "gpt-oss-120b",
         "Qwen3_30B_a3B": "qwen3-30b-a3b", "Qwen3_235B_a22B": "qwen3-235b-a22b"}
PREC = {"FP8": "fp8-cs", "MXFP8": "fp8-mx", "BF16": "bf16"}


def _table(path: Path) -> dict[tuple[str, ...], float]:
    with path.open(newline="") as f:
        return {(r["system"], r["model"], r["precision"], r["gpus"], r["gbs"], r["mbs"], r["tp"],
                 r["pp"], r["ep"]): float(r["tokens_per_s_per_gpu"]) for r in csv.DictReader(f)}


def test_every_configuration_is_in_two_releases_once_each() -> None:
    data = rs.configs()
    assert len(data) >= 50
    assert all(len(v) >= 2 and all(x > 0 for x in v.values()) for v in data.values())


def test_the_releases_agree_with_the_single_release_tables() -> None:
    tables = {"25.11": _table(REFERENCE / "megatron_bridge_25_11.csv"),
              "26.02": _table(ROOT / "benchmarks" / "published" / "megatron_bridge_26_02.csv")}
    checked = 0
    with rs.CSV.open(newline="") as f:
        for r in csv.DictReader(f):
            if r["release"] not in tables or r["model"] not in MODEL or r["precision"] not in PREC:
                continue
            key = (r["system"], MODEL[r["model"]], PREC[r["precision"]], r["gpus"], r["gbs"],
                   r["mbs"], r["tp"], r["pp"], r["ep"])
            if key in tables[r["release"]]:
                assert float(r["tokens_per_s_per_gpu"]) == tables[r["release"]][key], key
                checked += 1
    assert checked >= 20


def test_the_summary_counts_the_configurations() -> None:
    data = rs.configs()
    s = rs.summary(data)
    assert s["all"]["configs"] == len(data) == s["dense"]["configs"] + s["moe"]["configs"]
    ratios = [max(v.values()) / min(v.values()) for v in data.values()]
    assert s["all"]["largest"] == max(ratios)
    assert s["all"]["over_20pct"] == sum(r > 1.2 for r in ratios)
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "published" / "release_spread.py")],
                         capture_output=True, text=True, check=True).stdout
    assert f"all: {len(data)} configurations" in out
