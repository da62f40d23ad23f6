"""Megatron-LM SC'21 Table 1: predicted vs published TFLOP/s per GPU, no per-row tuning.

For every row of ``../shared/reference/megatron_sc21_table1.csv`` the GPT model of that size
is retargeted onto ``topologies/a100-selene.yaml`` with the row's TP, PP, DP and global batch,
the interleaved schedule and full recomputation. TFLOP/s per GPU is computed with the paper's
formula ``F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))`` over (iteration time x GPUs).

Assumptions, the same for every row (docs/retarget.md): micro-batch size 1; interleaving
depth = the smallest divisor > 1 of the layers per stage; the first-principles GPT template
with Megatron-2021's unfused attention (no FlashAttention in 2021); pipeline transfers
blocking, with the scatter/gather optimisation; gradients reduced after the backward pass
(Megatron-LM 2021 had no --overlap-grad-reduce).

What calibrated what: the A100 profile's tensor-core GEMM plateau
(benchmarks.kernels.datasheet.GEMM_E_MAX_FROM_MEGATRON) is the value at which row 1 (GPT
1.7B, pure data parallelism) is reproduced (benchmarks/kernels/calibrate_a100_gemm.py); rows
2-10 are not used by that bisection. They are not a clean held-out set either: the model's
other choices (unfused attention, blocking pipeline transfers, no gradient overlap) were made
with the whole table in view. The test therefore asserts what a fit to the level of the table
cannot give: every held-out row within 10%, and an error well below that of the constant
predictor that knows only row 1 (137 TFLOP/s for every row: mean 6.6%, largest 16%), i.e. the
model follows the trend across the rows. Row 1 is reported but not counted.

Run ``PYTHONPATH=. .venv/bin/python tests/test_megatron_sc21.py`` to print the table
(markdown) for the docs.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
TABLE = SHARED / "reference" / "megatron_sc21_table1.csv"
CLUSTER = Path(__file__).resolve().parents[1] / "topologies" / "a100-selene.yaml"

pytestmark = pytest.mark.skipif(not TABLE.exists(), reason=f"{TABLE} not found (needs ../shared)")


def model_name(params_billion: float) -> str:
    return f"gpt3-{params_billion:g}b" if params_billion < 1000 else "gpt3-1t"


def paper_flops(row: dict) -> float:
    B, s, V = int(row["global_batch"]), 2048, 51200
    h, n_layers = int(row["hidden"]), int(row["layers"])
    return 96 * B * s * n_layers * h * h * (1 + s / (6 * h) + V / (16 * n_layers * h))


def row_options(row: dict, cluster: str = str(CLUSTER)) -> dict:
    """The replay options for one table row (the same rules for every row)."""
    tp, pp, gpus = int(row["tp"]), int(row["pp"]), int(row["gpus"])
    return {
        "model": model_name(float(row["params_billion"])), "cluster": cluster,
        "tp": tp, "pp": pp, "dp": gpus // (tp * pp), "global_batch": int(row["global_batch"]),
        "schedule": "interleaved", "recompute": "full", "micro_batch": 1,
        "template": "analytic", "attention": "unfused", "dp_overlap": False,
    }


def predict_rows() -> list[dict]:
    from tests.helpers import retarget

    out = []
    for k, row in enumerate(csv.DictReader(TABLE.open())):
        res = retarget(row_options(row)).to_dict()
        tflops = paper_flops(row) / (res["iteration_time_s"] * int(row["gpus"])) / 1e12
        published = float(row["tflops_per_gpu"])
        out.append({"row": row, "res": res, "tflops": tflops, "published": published,
                    "rel_error": (tflops - published) / published, "calibration": k == 0})
    return out


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return predict_rows()


@pytest.mark.slow
def test_layouts_are_the_papers(rows: list[dict]) -> None:
    for r in rows:
        par = r["res"]["parallel"]
        assert (par["tp"], par["pp"], par["world"]) == (int(r["row"]["tp"]), int(r["row"]["pp"]),
                                                        int(r["row"]["gpus"]))
        assert r["res"]["memory"]["fits"], r["row"]


def constant_errors(rows: list[dict]) -> list[float]:
    """|error| of predicting the calibration row's published TFLOP/s for every held-out row."""
    level = rows[0]["published"]
    return [abs(level - r["published"]) / r["published"] for r in rows if not r["calibration"]]


@pytest.mark.slow
def test_every_held_out_row_within_10_percent_and_the_trend_followed(rows: list[dict]) -> None:
    held_out = [r for r in rows if not r["calibration"]]
    assert len(held_out) == 9
    errors = [abs(r["rel_error"]) for r in held_out]
    assert max(errors) < 0.10, [round(e, 3) for e in errors]
    baseline = constant_errors(rows)
    mae, base_mae = sum(errors) / len(errors), sum(baseline) / len(baseline)
    # the level alone (a constant) is 6.6% off on average and 16% on the largest models
    assert base_mae > 0.06 and max(baseline) > 0.15
    assert mae < 0.6 * base_mae and max(errors) < 0.6 * max(baseline), (mae, base_mae)


@pytest.mark.slow
def test_calibration_row_reproduced(rows: list[dict]) -> None:
    assert abs(rows[0]["rel_error"]) < 0.01


def markdown(rows: list[dict]) -> str:
    lines = ["| model | tp | pp | dp | vpp | micro-batches | GPUs | batch | iteration (s) | "
             "predicted TFLOP/s | published | error |", "|---" * 12 + "|"]
    for r in rows:
        p, row = r["res"]["parallel"], r["row"]
        lines.append(
            f"| {model_name(float(row['params_billion']))} | {p['tp']} | {p['pp']} | {p['dp']} | "
            f"{p['vpp']} | {p['num_micro']} | {row['gpus']} | {row['global_batch']} | "
            f"{r['res']['iteration_time_s']:.2f} | {r['tflops']:.1f} | {r['published']:.0f} | "
            f"{r['rel_error'] * 100:+.1f}% |")
    held = [abs(r["rel_error"]) for r in rows if not r["calibration"]]
    base = constant_errors(rows)
    lines.append(f"\nrows 2-10: mean absolute error {sum(held) / len(held) * 100:.1f}%, largest "
                 f"{max(held) * 100:.1f}% (the constant 137 TFLOP/s: {sum(base) / len(base) * 100:.1f}%, "
                 f"{max(base) * 100:.1f}%); row 1 calibrated the GEMM plateau")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(predict_rows()))
