"""The cuDNN version a job runs (``--cudnn``): the Blackwell profiles' attention fitted on cuDNN
9.17 (their default) and on 9.13 (``shape_model.attention.cudnn_versions``), which fit a
given version picks, where tables give the version, and the errors on bad versions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.kernels import kernel_accuracy as acc
from benchmarks.kernels import kernel_fit as kf
from tracesim.api import replay
from tracesim.errors import InputError
from tracesim.hardware.device import get_device
from tracesim.hardware.shapemodel import parse_shape_model
from tracesim.pipeline.published import table_rows

from .conftest import REFERENCE

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, "-m", "tracesim.cli", *args], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    return p.returncode, p.stdout, p.stderr

B200_8B = dict(model="llama3-8b", cluster="dgx-b200", tp=1, dp=8, micro_batch=1, global_batch=8,
               seq_len=8192, dtype="fp8", fp8_recipe="current")


def test_a_version_takes_the_newest_fit_not_newer_than_it() -> None:
    att = get_device("gb300").shape_model.attention
    assert att.cudnn == "9.17" and set(att.cudnn_versions) == {"9.13"}
    picks = {v: att.at_cudnn(v).cudnn for v in ("9.13", "9.13.1.26", "9.16.0", "9.17", "9.18.0",
                                               "9.22", "10.1", "9.9.0", "8.9")}
    assert picks == {"9.13": "9.13", "9.13.1.26": "9.13", "9.16.0": "9.13", "9.17": "9.17",
                     "9.18.0": "9.17", "9.22": "9.17", "10.1": "9.17",
                     "9.9.0": "9.13", "8.9": "9.13"}  # older than every fit: the oldest
    assert att.at_cudnn("9.18") is att
    # B200 and GB200 have cuDNN 9.10's fit too (B200's own rows)
    b200 = get_device("gb200").shape_model.attention
    assert set(b200.cudnn_versions) == {"9.10", "9.13"}
    assert {v: b200.at_cudnn(v).cudnn for v in ("9.9.0", "9.11.0", "9.12", "9.13.1", "9.17")} == {
        "9.9.0": "9.10", "9.11.0": "9.10", "9.12": "9.10", "9.13.1": "9.13", "9.17": "9.17"}
    # a profile with one unnamed fit has none to choose from
    assert get_device("h100").with_cudnn("9.13") is None


def test_the_older_fits_are_those_cudnns_own_kernels() -> None:
    # the stored fits are kernel_fit's, on the frontend benchmark's cuDNN 9.13.1 and 9.10.2
    # rows, 1k-32k
    fits = kf.attention_fits()
    for key in ("cudnn913_b200", "cudnn913_b200_fp8", "cudnn913_gb300", "cudnn913_gb300_fp8",
                "cudnn910_b200", "cudnn910_b200_fp8"):
        assert fits[key] == kf.FITTED["attention"][key], key
    got: dict[str, list[float]] = {}
    cases = [c for c in acc.attention_cases() if c.attention in ("cudnn 9.13", "cudnn 9.10")]
    for c, r in zip(cases, acc.ratios(cases), strict=True):
        got.setdefault(c.group, []).append(float(r))
    mape = {k: float(np.abs(np.array(v) - 1).mean()) for k, v in got.items()}
    # B200 9.13 within 4%; GB300 9.13 and B200 9.10 ramp more steeply than the curve's form
    for ver, dev, tol in (("9.13", "B200", 0.05), ("9.13", "GB300", 0.13), ("9.10", "B200", 0.09)):
        for dt in ("BF16", "FP8"):
            for pas in ("fwd", "bwd"):
                assert mape[f"cuDNN {ver} FP8 benchmark, {dev}, {dt}, at --cudnn {ver}, 1k-32k, {pas}"] < tol
    # held out: the same rows through PyTorch SDPA run slower still (per-call cost at short
    # lengths), but nearer the 9.13 fit than the default (9.17) profile
    for dev in ("B200", "GB300"):
        at913 = np.median(got[f"cuDNN 9.13 through PyTorch SDPA, {dev}, at --cudnn 9.13"])
        assert 0.8 < at913 < 1.0


def test_an_older_cudnn_runs_attention_slower_on_blackwell() -> None:
    new = replay(**B200_8B)
    old = replay(**B200_8B, cudnn="9.13.1")
    assert old.iteration_time_s > new.iteration_time_s * 1.005
    assert old.details["stack"]["cudnn"] == {"given": "9.13.1", "fit": "9.13"}
    assert old.details["stack"]["kernels"]["attention"].startswith("cuDNN 9.13 fused attention")
    assert new.details["stack"]["kernels"]["attention"].startswith("cuDNN 9.17 fused attention")
    assert "cudnn" not in new.details["stack"]
    # 9.18 runs the 9.17 fit: the same times
    assert replay(**B200_8B, cudnn="9.18.0").iteration_time_s == new.iteration_time_s


def test_a_profile_without_versions_warns_and_keeps_its_fit() -> None:
    opts = dict(B200_8B, cluster="h100x8", fp8_recipe="delayed")
    plain = replay(**opts)
    res = replay(**opts, cudnn="9.13")
    assert res.iteration_time_s == plain.iteration_time_s
    assert any("--cudnn 9.13 not applied" in w for w in res.warnings)


def test_the_cli_reports_the_version_and_refuses_a_bad_one() -> None:
    args = ["replay", "--model", "llama3-8b", "--cluster", "dgx-b200", "--dp", "8", "--micro-batch",
            "1", "--global-batch", "8", "--seq-len", "4096"]
    code, out, _ = run_cli(*args, "--cudnn", "9.13.1")
    assert code == 0 and "cuDNN 9.13.1 (9.13 fit)" in out
    code, out, _ = run_cli("list", "devices")
    b200 = next(ln for ln in out.splitlines() if ln.startswith("b200 "))
    assert code == 0 and "attention cuDNN 9.17 (--cudnn 9.10, 9.13)" in b200
    code, out, err = run_cli(*args, "--cudnn", "nine")
    assert code == 2 and "--cudnn" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_profile_versions_are_checked() -> None:
    base = {"plateau": {"default": [[128.0, 0.7]]}, "kv_half": {"default": 256.0}}
    ok = parse_shape_model({"attention": {**base, "cudnn": "9.17",
                                          "cudnn_versions": {"9.13": base}}})
    assert ok.attention is not None and ok.attention.at_cudnn("9.13").cudnn == "9.13"
    for bad, match in (({"cudnn": 9.17}, "cudnn"), ({"cudnn_versions": {"9.13": base}}, "needs cudnn"),
                       ({"cudnn": "9.17", "cudnn_versions": {9.13: base}}, "quoted version"),
                       ({"cudnn": "9.17", "cudnn_versions": {"9.13": {"plateau": {}}}}, "kv_half")):
        with pytest.raises(InputError, match=match):
            parse_shape_model({"attention": {**base, **bad}}, "dev.yaml")


def test_tables_give_the_runs_cudnn(tmp_path) -> None:
    # the 25.11 table ran NeMo 25.11 (cuDNN 9.13.1); the MLPerf tables carry their logs' version
    if not REFERENCE.is_dir():
        pytest.skip(f"../shared/reference not found at {REFERENCE}")
    rows = {label: opts for _, _, _, _, opts, label, _ in table_rows(
        [REFERENCE / "megatron_bridge_25_11.csv",
         ROOT / "benchmarks/published/mlperf_training_llama31_405b.csv"])}
    assert rows["DGX-B200 llama3-8b fp8-cs 8 GPUs tp1 pp1 cp1 ep1"]["cudnn"] == "9.13.1"
    assert rows["DGX-GB200 llama3.1-405b fp8-ds 256 GPUs tp4 pp8 cp2 ep1"]["cudnn"] == "9.9.0.52"
    # a table of one's own runs (its own settings' columns) gets no NeMo container's version
    own = [opts for _, _, _, _, opts, _, _ in table_rows([ROOT / "benchmarks/published/megatron_moe_recipes.csv"])]
    assert all("cudnn" not in o for o in own)
    bad = tmp_path / "t.csv"
    bad.write_text("system,model,gpus,precision,gbs,mbs,seq_len,fsdp,tp,pp,cp,vp,ep,ga,"
                   "tokens_per_s_per_gpu,cudnn\nDGX-B200,llama3-8b,8,bf16,8,1,8192,0,1,1,1,,1,1,"
                   "30000,latest\n")
    code, _, err = run_cli("validate", "published", str(bad))
    assert code == 2 and "t.csv" in err and "row 2: cudnn" in err and "Traceback" not in err


def test_the_mlperf_tables_carry_each_runs_cudnn() -> None:
    # read by benchmarks/published/mlperf_training.py from each run's log, Dockerfile or base
    # container: the v5.1 runs installed cuDNN 9.13 (9.13.1.26; Lambda's base image 9.13.0)
    import csv

    for name in ("mlperf_training_llama31_405b.csv", "mlperf_training_llama31_8b.csv"):
        with open(ROOT / "benchmarks/published" / name, newline="") as fh:
            for row in csv.DictReader(fh):
                ver = row["cudnn"]
                assert ver and all(p.isdigit() for p in ver.split(".")), (name, row["note"])
                if row["release"] == "mlperf-v5.1" and row["system"] not in ("DGX-H100", "DGX-H200"):
                    assert ver.startswith("9.13."), (name, row["note"])
