#!/usr/bin/env python3
"""Calibrate the tensor-core GEMM plateau (e_max) on Megatron-LM SC'21 Table 1, row 1 only.

Row 1 (GPT 1.7B, 32 A100, TP 1, PP 1, DP 32, global batch 512, 137 TFLOP/s per GPU) is the
row that isolates compute: no tensor or pipeline parallelism, and its data-parallel
all-reduce is about 1% of the iteration. Bisection finds the e_max at which tracesim's
prediction of that row matches; benchmarks.kernels.datasheet.GEMM_E_MAX_FROM_MEGATRON holds
the result and rows 2-10 are the held-out test (tests/test_megatron_sc21.py).

Usage: .venv/bin/python benchmarks/kernels/calibrate_a100_gemm.py
"""

from __future__ import annotations

import csv
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import test_megatron_sc21 as meg  # noqa: E402

from benchmarks.kernels import datasheet  # noqa: E402
from tracesim.api import replay  # noqa: E402


def row_error(e_max: float, row: dict, tmp: Path) -> float:
    datasheet.EFFICIENCY["gemm"]["e_max"]["default"] = e_max
    prof = datasheet.profile("a100")
    prof["name"] = "a100-calibrating"
    (tmp / "a100.yaml").write_text(yaml.safe_dump(prof, sort_keys=False))
    cluster = yaml.safe_load((ROOT / "topologies" / "a100-selene.yaml").read_text())
    cluster["device"] = str(tmp / "a100.yaml")
    (tmp / "selene.yaml").write_text(yaml.safe_dump(cluster, sort_keys=False))
    res = replay(None, **meg.row_options(row, str(tmp / "selene.yaml"))).to_dict()
    tflops = meg.paper_flops(row) / (res["iteration_time_s"] * int(row["gpus"])) / 1e12
    return (tflops - float(row["tflops_per_gpu"])) / float(row["tflops_per_gpu"])


def main() -> int:
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    row = next(csv.DictReader(meg.TABLE.open()))
    lo, hi = 0.4, 0.95
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for _ in range(14):
            mid = (lo + hi) / 2
            if row_error(mid, row, tmp) > 0:
                hi = mid
            else:
                lo = mid
        e = round((lo + hi) / 2, 3)
        print(f"calibrated GEMM e_max = {e} (row 1 error at it: {row_error(e, row, tmp) * 100:+.2f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
