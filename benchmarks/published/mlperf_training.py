"""MLPerf Training LLM pre-training submissions as `tracesim validate published` tables.

Reads the result logs and run configurations of closed-division GPT-3 175B (v3.1, v4.0, v4.1)
and Llama 3.1 405B and 8B (v5.0, v5.1) pre-training submissions in
mlcommons/training_results_v3.1 .. v5.1 (git directories as `fetch github:mlcommons/training_results_v5.0` leaves
them) and writes one row per submission in the Megatron-Bridge column format
(docs/accuracy.md, "MLPerf Training"), one table per benchmark
(``mlperf_training_llama31_405b.csv``, ``mlperf_training_llama31_8b.csv``, and with
``--v3-1`` / ``--v4-0`` / ``--v4-1`` ``mlperf_training_gpt3_175b.csv``):

    .venv/bin/python benchmarks/published/mlperf_training.py V5_0_GIT_DIR V5_1_GIT_DIR \\
        --v3-1 V3_1_GIT_DIR --v4-0 V4_0_GIT_DIR --v4-1 V4_1_GIT_DIR -o benchmarks/published

The measurement is the logs' own per-step time (``tracked_stats`` ``train_step_time``; v4.1:
``train_step_timing in s``, v3.1 ``train_step_timing``; v4.0, which logs none: the training
blocks' spans over their steps; one value per optimizer step of ``global_batch_size`` sequences):
per submission, the median over every run's steps after its first two. tokens/s per GPU =
global batch x sequence (8,192; GPT-3: 2,048) / (GPUs x that median). The layout (TP, PP,
CP, virtual stages (``INTERLEAVED_PIPELINE``, else its ``conf/custom.yaml`` default), micro-batch, sequences per data-parallel rank ``MINIBS``, nodes x GPUs
per node) and the settings tracesim expresses (the FP8 recipe: ``FP8_RECIPE`` where a config
sets it, else NeMo's ``delayed`` default of the submissions' ``conf/custom.yaml``; a
full-iteration CUDA graph where a config sources ``config_common_cg.sh`` with
``FULL_CUDA_GRAPH``, per-layer graphs where it sets ``LAYER_CUDA_GRAPH``; the NCCL CTA cap
per communicator, ``max_ctas`` of the file ``NCCL_CFG_PATH`` names, Megatron-Core's
``nccl_communicator_config_path``; the userbuffers TP overlap, :func:`_ub_overlap`) come from the
``config_*.sh`` the submission's README names for the run, and the ``source``d common files
beside it; Megatron-Core's gradient NaN check from the logs or ``pretrain.py`` and the
``Dockerfile``, and its gradient bucket size (``mlperf_ddp.py``). The global batch in the logs is checked against ``dp x MINIBS``.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.published.mlperf_ddp import bucket_cell, nan_cells  # noqa: E402
from benchmarks.published.mlperf_repo import files, git, show, tree  # noqa: E402
from tracesim.specs.omegaconf_env import resolve  # noqa: E402

#: (release, results folder, implementation folder, config file name pattern, system); the
#: benchmark (llama31_405b, llama31_8b) is the implementation folder's
SUBMISSIONS = [
    ("v5.0", "NVIDIA/results/eos-dfw_n64_ngc25.01_nemo", "NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n64_ngc25.01_nemo", "config_DGXH100_64x8x", "DGX-H100"),
    ("v5.0", "NVIDIA/results/eos-dfw_n256_ngc25.01_nemo", "NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n256_ngc25.01_nemo", "config_DGXH100_256x8x", "DGX-H100"),
    ("v5.0", "NVIDIA/results/eos-dfw_n304_ngc25.01_nemo", "NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n304_ngc25.01_nemo", "config_DGXH100_304x8x", "DGX-H100"),
    ("v5.0", "NVIDIA/results/eos-dfw_n320_ngc25.01_nemo", "NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n320_ngc25.01_nemo", "config_DGXH100_320x8x", "DGX-H100"),
    ("v5.0", "NVIDIA/results/eos-dfw_n1024_ngc25.01_nemo", "NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n1024_ngc25.01_nemo", "config_DGXH100_1024x8x", "DGX-H100"),
    ("v5.0", "NVIDIA/results/tyche_ngpu256_ngc25.04_nemo", "NVIDIA/benchmarks/llama31_405b/implementations/tyche_ngpu256_ngc25.04_nemo", "config_GB200_64x4x", "DGX-GB200"),
    ("v5.0", "NVIDIA/results/tyche_ngpu512_ngc25.04_nemo", "NVIDIA/benchmarks/llama31_405b/implementations/tyche_ngpu512_ngc25.04_nemo", "config_GB200_128x4x", "DGX-GB200"),
    ("v5.0", "IBM+CoreWeave+NVIDIA/results/carina_ngpu512_ngc25.04_nemo", "IBM+CoreWeave+NVIDIA/benchmarks/llama31_405b/implementations/carina_ngpu512_ngc25.04_nemo", "config_GB200_128x4x", "DGX-GB200"),
    ("v5.0", "IBM+CoreWeave+NVIDIA/results/carina_ngpu1024_ngc25.04_nemo", "IBM+CoreWeave+NVIDIA/benchmarks/llama31_405b/implementations/carina_ngpu1024_ngc25.04_nemo", "config_GB200_256x4x", "DGX-GB200"),
    ("v5.0", "IBM+CoreWeave+NVIDIA/results/carina_ngpu1536_ngc25.04_nemo", "IBM+CoreWeave+NVIDIA/benchmarks/llama31_405b/implementations/carina_ngpu1536_ngc25.04_nemo", "config_GB200_384x4x", "DGX-GB200"),
    ("v5.0", "IBM+CoreWeave+NVIDIA/results/carina_ngpu2048_ngc25.04_nemo", "IBM+CoreWeave+NVIDIA/benchmarks/llama31_405b/implementations/carina_ngpu2048_ngc25.04_nemo", "config_GB200_512x4x", "DGX-GB200"),
    ("v5.0", "IBM+CoreWeave+NVIDIA/results/carina_ngpu2496_ngc25.04_nemo", "IBM+CoreWeave+NVIDIA/benchmarks/llama31_405b/implementations/carina_ngpu2496_ngc25.04_nemo", "config_GB200_624x4x", "DGX-GB200"),
    ("v5.1", "University-of-Florida/results/hpg.dgxb200x8.n32", "University-of-Florida/benchmarks/llama31_405b/implementations/hpg.dgxb200x8", "config_DGXB200_32x8x", "DGX-B200"),
    ("v5.1", "University-of-Florida/results/hpg.dgxb200x8.n56", "University-of-Florida/benchmarks/llama31_405b/implementations/hpg.dgxb200x8", "config_DGXB200_56x8x", "DGX-B200"),
] + [
    ("v5.1", f"University-of-Florida/results/hpg.dgxb200x8.n{n}",
     "University-of-Florida/benchmarks/llama31_8b/implementations/hpg.dgxb200x8",
     f"config_DGXB200_{n}x8x", "DGX-B200") for n in (1, 2, 4, 8, 16, 32)
] + [
    ("v5.1", f"Cisco/results/hpf_n{n}", "Cisco/benchmarks/llama31_8b/implementations/nemo",
     f"config_DGXH100_{n}x8x", "DGX-H100") for n in (8, 16)
] + [
    ("v5.1", f"NVIDIA/results/{site}_ngpu{n}_ngc25.09_nemo", "NVIDIA/benchmarks/llama31_8b/implementations/nemo",
     "", system) for site, system in (("tyche", "DGX-GB200"), ("theia", "DGX-GB300")) for n in (8, 72, 512)
] + [
    ("v5.1", f"NVIDIA/results/{site}_ngpu{n}_ngc25.09_nemo",
     f"NVIDIA/benchmarks/llama31_405b/implementations/{site}_ngpu{n}_ngc25.09_nemo", "", system)
    for site, n, system in (("tyche", 512, "DGX-GB200"), ("theia", 512, "DGX-GB300"),
                            ("hsg", 2560, "DGX-GB200"), ("hsg", 5120, "DGX-GB200"))
] + [
    ("v5.1", f"Nebius/results/nebius_h200_n{n}", f"Nebius/benchmarks/llama31_405b/implementations/nebius_h200_n{n}",
     "", "DGX-H200") for n in (64, 128)
] + [
    ("v4.1", f"NVIDIA/results/eos_n{n}_ngc24.09_nemo", f"NVIDIA/benchmarks/gpt3/implementations/eos_n{n}_ngc24.09_nemo",
     f"config_DGXH100_{n}x8x", "DGX-H100") for n in (32, 64)
] + [
    ("v4.1", f"Oracle/results/{g}xBM.GPU.H100.8", "Oracle/benchmarks/gpt3/DGXH100_128x8x64x4x8_mbs2",
     f"config_DGXH100_{g // 8}x8x", "DGX-H100") for g in (1536, 3072)
] + [
    ("v4.1", "NVIDIA/results/b200_n8_preview_nemo", "NVIDIA/benchmarks/gpt3/implementations/b200_n8_preview_nemo",
     "config_DGXB200_8x8x", "DGX-B200"),
] + [
    ("v4.0", f"NVIDIA/results/eos-dfw_n{n}_ngc24.04_nemo", "NVIDIA/benchmarks/gpt3/implementations/nemo",
     f"config_DGXH100_{n}x8x", "DGX-H100") for n in (1344, 1452)
] + [
    ("v3.1", f"NVIDIA/results/eos_n{n}_ngc23.09_nemo", "NVIDIA/benchmarks/gpt3/implementations/pytorch",
     f"config_DGXH100_{n}x8x", "DGX-H100") for n in (96,)
] + [
    ("v3.1", f"NVIDIA/results/eos-dfw_n{n}_ngc23.09_nemo", "NVIDIA/benchmarks/gpt3/implementations/pytorch",
     f"config_DGXH100_{n}x8x", "DGX-H100") for n in (512, 768, 1024, 1280, 1344)
] + [
    ("v3.1", "Azure+NVIDIA/results/ND_H100_v5_n1344_pytorch", "Azure+NVIDIA/benchmarks/gpt3/implementations/pytorch",
     "config_DGXH100_1344x8x", "DGX-H100"),
]
#: MLPerf benchmark -> (tracesim model, output table, sequence length)
BENCHMARKS = {"llama31_405b": ("llama3.1-405b", "mlperf_training_llama31_405b.csv", 8192),
              "llama31_8b": ("llama3-8b", "mlperf_training_llama31_8b.csv", 8192),
              "gpt3": ("gpt3-175b", "mlperf_training_gpt3_175b.csv", 2048)}
#: the logs' per-step time (v5.x, v4.1, v3.1)
STEP_KEYS = ("train_step_time", "train_step_timing in s", "train_step_timing")
#: where a submission's config sources common files its own folder lacks, the folder that has them
#: (the same submitter's same container; ``config_common_blackwell.sh``, which the GB200
#: configs also source, is in no submission: its settings are unknown)
COMMON_FALLBACK = {"University-of-Florida/benchmarks/llama31_405b/implementations/hpg.dgxb200x8":
                   "University-of-Florida/benchmarks/llama31_405b/implementations/b200_nemo",
                   "University-of-Florida/benchmarks/llama31_8b/implementations/hpg.dgxb200x8":
                   "University-of-Florida/benchmarks/llama31_8b/implementations/b200_nemo",
                   "NVIDIA/benchmarks/llama31_405b/implementations/tyche_ngpu256_ngc25.04_nemo":
                   "NVIDIA/benchmarks/llama31_405b/implementations/tyche_ngpu512_ngc25.04_nemo"}
PRECISION = {"delayed": "fp8-ds", "tensorwise": "fp8-cs", "nvfp4": "nvfp4"}
COLUMNS = ["system", "model", "gpus", "precision", "gbs", "mbs", "seq_len", "fsdp", "tp", "pp", "cp",
           "vp", "ep", "ga", "tokens_per_s_per_gpu", "cuda_graph", "max_ctas", "fp8_attention", "attention",
           "fp8_param_gather", "tp_comm_overlap", "segment", "step_s", "cudnn", "grad_nan_check",
           "grad_nan_syncs", "bucket_params", "release", "note"]
#: where the submissions' containers hold their implementation folder (``NCCL_CFG_PATH``)
CONTAINER_ROOT = "/workspace/llm/"


def _exports(repo: Path, folder: str, name: str, seen: set[str] | None = None) -> dict[str, str]:
    """The variables a config exports, the files it sources first (later ones win)."""
    seen = set() if seen is None else seen
    path = f"{folder}/{name}"
    if path not in files(repo, folder):
        alt = COMMON_FALLBACK.get(folder)
        if alt is None or f"{alt}/{name}" not in files(repo, alt):
            return {}
        folder, path = alt, f"{alt}/{name}"
    if path in seen:
        return {}
    seen.add(path)
    out: dict[str, str] = {}
    for line in git(repo, "show", f"HEAD:{path}").splitlines():
        src = re.match(r"\s*source\s+.*?/(config_[\w.]+\.sh)", line)
        if src:
            out.update(_exports(repo, folder, src.group(1), seen))
            continue
        m = (re.match(r"\s*export\s+(\w+)=(\$\(\(.*\)\))\s*$", line)
             or re.match(r"\s*export\s+(\w+)=\"?([^\"#\s]*)\"?", line))
        if m:
            dflt = re.fullmatch(r"\$\{\w+:=([^}]*)\}", m.group(2))  # "${MINIBS:=128}"
            out[m.group(1)] = dflt.group(1) if dflt else m.group(2)
    return out


def _ub_overlap(repo: Path, impl: str, env: dict[str, str], tp: int) -> str:
    """Whether the run had Transformer Engine's userbuffers TP overlap (the table's
    ``tp_comm_overlap``; "" with TP 1): ``model.ub_tp_comm_overlap`` of the submission's
    ``conf/custom.yaml`` (or its fallback folder's) resolved with the config's exports as
    OmegaConf would (``${oc.decode:${oc.env:TP_COMM_OVERLAP,False}}``: off unless exported;
    University of Florida's 405B configs comment the export out); else the export."""
    if tp < 2:
        return ""
    for folder in (impl, COMMON_FALLBACK.get(impl)):
        m = re.search(r"^\s*ub_tp_comm_overlap:\s*(\S+)", _custom_yaml(repo, folder), re.M)
        if m:
            return _truth(resolve(m.group(1), None, "model.ub_tp_comm_overlap", env))
    return _truth(on) if (on := env.get("TP_COMM_OVERLAP", "")) else ""  # no custom.yaml: the export


def _truth(value: object) -> str:
    """A config flag as the tables write it: ``true`` for True / true / 1, else ``false``."""
    return "true" if str(value).lower() in ("true", "1") else "false"


def _conf_default(repo: Path, impl: str, var: str, fallback: str) -> str:
    """The default ``conf/custom.yaml`` gives ``var`` where no config exports it
    (``${oc.env:INTERLEAVED_PIPELINE,12}``: 12; v3.1's GPT-3 configs leave it to that)."""
    m = re.search(rf"oc\.env:{var},([^}}]+)\}}", _custom_yaml(repo, impl))
    return m.group(1).strip() if m else fallback


def _custom_yaml(repo: Path, folder: str | None) -> str:
    """The text of ``folder``'s ``conf/custom.yaml`` ("" where it ships none)."""
    path = f"{folder}/conf/custom.yaml"
    return git(repo, "show", f"HEAD:{path}") if folder and path in files(repo, f"{folder}/conf") else ""


def _readme_config(repo: Path, results: str, bench: str) -> str:
    """The config file the submission's own README (``README-<results folder>.md`` in one of
    its benchmark's implementation folders) names for the run; "" without such a README."""
    org, name = results.split("/", 1)[0], results.rsplit("/", 1)[1]
    impls = f"{org}/benchmarks/{bench}/implementations"
    for folder in files(repo, impls):
        readme = f"{folder}/README-{name}.md"
        if readme in files(repo, folder):
            named = set(re.findall(r"config_[\w.-]+?\.sh", git(repo, "show", f"HEAD:{readme}")))
            if len(named) != 1:
                raise SystemExit(f"{readme}: expected one config, found {sorted(named)}")
            return named.pop()
    return ""


def _arith(text: str, env: dict[str, str]) -> str:
    """A config's ``$(( ... ))`` value with the variables it names (``SEGMENT``); the
    text as it is otherwise."""
    m = re.fullmatch(r"\$\(\((.*)\)\)", text.strip())
    if not m:
        return text
    expr = re.sub(r"[A-Za-z_]\w*", lambda v: env.get(v.group(0), "x"), m.group(1))
    if not re.fullmatch(r"[\d\s()+*/-]+", expr):
        raise SystemExit(f"cannot evaluate {text!r}")
    return str(int(eval(expr.replace("/", "//"))))  # digits and operators only


def _caps(text: str) -> str:
    """The ``max_ctas`` of each communicator of an NCCL communicator file, ``name=count ...``."""
    data = yaml.safe_load(text) or {}
    return " ".join(f"{k}={v['max_ctas']}" for k, v in data.items() if "max_ctas" in v)


def _max_ctas(repo: Path, impl: str, env: dict[str, str]) -> str:
    """The ``max_ctas`` of each communicator in the NCCL config the run exports
    (``NCCL_CFG_PATH``), as ``name=count ...``; "" without one, or when the submission does
    not ship the file it names (said on stderr: the caps it ran with are unknown)."""
    cfg = env.get("NCCL_CFG_PATH", "")
    if not cfg.startswith(CONTAINER_ROOT):
        return ""
    rel = cfg[len(CONTAINER_ROOT):]
    for folder in (impl, COMMON_FALLBACK.get(impl, "")):
        path = f"{folder}/{rel}"
        if folder and path in files(repo, path.rsplit("/", 1)[0]):
            return _caps(git(repo, "show", f"HEAD:{path}"))
    print(f"{impl}: NCCL_CFG_PATH {cfg} is not in the submission: no caps", file=sys.stderr)
    return ""


def _sysjson_cudnn(text: str) -> str:
    """The cuDNN version a run's log records (``:::SYSJSON``'s ``cudnn_version``), or ""."""
    m = re.search(r'"cudnn_version"\s*:\s*"([\d.]+)"', text)
    return m.group(1) if m else ""


@functools.cache
def _release_cudnn(repo: Path) -> dict[str, str]:
    """NGC PyTorch container release (``25.04``) -> the cuDNN version the round's result logs
    record for it (``:::SYSJSON`` ``framework`` "PyTorch NVIDIA Release 25.04" with its
    ``cudnn_version``), where every log that names the release agrees."""
    found: dict[str, set[str]] = {}
    text = subprocess.run(["git", "--git-dir", str(repo), "grep", "-h", "-o", "-E",
                           r'"framework":"PyTorch NVIDIA Release [0-9.]+".*"cudnn_version":"[0-9.]+"',
                           "HEAD", "--", "*/results/*"], capture_output=True, text=True).stdout
    for line in text.splitlines():
        rel = re.search(r"Release ([\d.]+)", line)
        ver = _sysjson_cudnn(line)
        if rel and ver:
            found.setdefault(rel.group(1), set()).add(ver)
    return {rel: vers.pop() for rel, vers in found.items() if len(vers) == 1}


def _cudnn(repo: Path, impl: str, log: str) -> str:
    """The cuDNN version a submission ran: its log's record, else the version its Dockerfile
    installs (``ENV CUDNN_VERSION``), else the one the round's logs record for the NGC PyTorch
    container its Dockerfile starts from; "" where none of these says."""
    logged = _sysjson_cudnn(git(repo, "show", f"HEAD:{log}"))
    if logged:
        return logged
    for folder in (impl, COMMON_FALLBACK.get(impl, "")):
        if not folder or f"{folder}/Dockerfile" not in files(repo, folder):
            continue
        docker = git(repo, "show", f"HEAD:{folder}/Dockerfile")
        pinned = re.search(r"^ENV CUDNN_VERSION=([\d.]+)", docker, re.M)
        base = re.search(r"^ARG FROM_IMAGE_NAME=nvcr\.io/nvidia/pytorch:([\d.]+)-py3", docker, re.M)
        ver = pinned.group(1) if pinned else _release_cudnn(repo).get(base.group(1), "") if base else ""
        if ver:
            return ver
    return ""


def _steps(text: str, seq: int) -> tuple[int, list[float], str]:
    """The global batch and the step times of one run's log after its first two steps. Logs
    without per-step times (v4.0) give one value per training block but the first: the block's
    span (``block_start`` to ``block_stop``, evaluation outside it) over its steps
    (``epoch_count`` tokens / (global batch x ``seq``))."""
    gbs, times, blocks = 0, [], []
    start = 0
    for line in text.splitlines():
        if ":::MLLOG" not in line:
            continue
        rec = json.loads(line.split(":::MLLOG", 1)[1])
        key = rec.get("key")
        if key == "global_batch_size":
            gbs = int(rec["value"])
        elif key == "tracked_stats":
            times += [float(rec["value"][k]) for k in STEP_KEYS if k in (rec.get("value") or {})]
        elif key == "block_start":
            start = int(rec["time_ms"])
        elif key == "block_stop" and gbs and "epoch_count" in rec.get("metadata", {}):
            steps = int(rec["metadata"]["epoch_count"]) / (gbs * seq)
            blocks.append((int(rec["time_ms"]) - start) / 1e3 / steps)
    return (gbs, times[2:], "steps") if times else (gbs, blocks[1:], "training blocks")


def _run_logs(repo: Path, results: str, bench: str, seq: int) -> tuple[list[str], set[int], list[float], str]:
    """A submission's run logs, the global batches they log, the step times of all its runs
    (:func:`_steps`) and what one time spans."""
    logs = [f for f in files(repo, f"{results}/{bench}") if re.search(r"result_\d+\.txt$", f)]
    gbs_all, steps, unit = set(), [], "steps"
    for f in logs:
        gbs, times, unit = _steps(git(repo, "show", f"HEAD:{f}"), seq)
        gbs_all.add(gbs)
        steps += times
    return logs, gbs_all, steps, unit


def row(repo: Path, release: str, results: str, impl: str, prefix: str, system: str) -> dict:
    bench = impl.split("/benchmarks/", 1)[1].split("/", 1)[0]
    named = _readme_config(repo, results, bench)
    if named:  # the README's config, from the implementation folder that holds the configs
        configs = [named] if f"{impl}/{named}" in files(repo, impl) else []
    else:
        configs = [f.rsplit("/", 1)[1] for f in files(repo, impl)
                   if f.rsplit("/", 1)[1].startswith(prefix) and "fp4" not in f]
    if len(configs) != 1:
        raise SystemExit(f"{impl}: expected one {named or prefix + '*'} config, found {configs}")
    env = _exports(repo, impl, configs[0])
    m = re.match(r"config_\w+?_(\d+)x(\d+)x(\d+)x", configs[0])
    assert m is not None
    nodes, per_node, minibs = (int(x) for x in m.groups())
    tp, pp = (int(env[k]) for k in ("TENSOR_MODEL_PARALLEL", "PIPELINE_MODEL_PARALLEL"))
    cp = int(env.get("CONTEXT_PARALLEL", "1"))  # the GPT-3 configs have no context parallelism
    vp_text = env.get("INTERLEAVED_PIPELINE") or _conf_default(repo, impl, "INTERLEAVED_PIPELINE", "1")
    vp = int(vp_text) if vp_text.isdigit() else 1
    mbs = int(env["MICRO_BATCH_SIZE"])
    gpus = nodes * per_node
    dp = gpus // (tp * pp * cp)
    model, _, seq = BENCHMARKS[bench]
    logs, gbs_all, steps, unit = _run_logs(repo, results, bench, seq)
    if gbs_all != {dp * minibs} or minibs % mbs:  # MINIBS: sequences per data-parallel rank
        raise SystemExit(f"{results}: global batch {gbs_all} is not dp {dp} x MINIBS {minibs}")
    gbs = dp * minibs
    step = statistics.median(steps)
    on = {k for k, v in env.items() if v.lower() in ("1", "true")}
    # Megatron-Core's CUDA graphs (MCORE_CUDA_GRAPH): the whole iteration with FULL_CUDA_GRAPH,
    # else each transformer layer (``cuda_graph_scope`` "full"); TE's per-layer ones
    graph = ("local:full_iteration" if "FULL_CUDA_GRAPH" in on else
             "te:attn,mlp" if "LAYER_CUDA_GRAPH" in on else
             "local:attn,mlp" if "MCORE_CUDA_GRAPH" in on else "")
    recipe = (env.get("FP4_RECIPE", "nvfp4") if "FP4" in on else
              env.get("FP8_RECIPE", "delayed") if "FP8" in on else "")
    code = impl if show(repo, f"{impl}/pretrain.py") else COMMON_FALLBACK.get(impl, impl)
    text = git(repo, "show", f"HEAD:{logs[0]}")
    nan, syncs = nan_cells(functools.partial(show, repo), code, text, graph == "local:full_iteration")
    bucket = bucket_cell(text, [_custom_yaml(repo, f) for f in (impl, COMMON_FALLBACK.get(impl))], env) if nan else ""
    return {"system": system, "model": model, "gpus": gpus,
            "precision": PRECISION.get(recipe, "bf16"), "gbs": gbs, "mbs": mbs, "seq_len": seq,
            "fsdp": 0, "tp": tp, "pp": pp, "cp": cp, "vp": vp if vp > 1 else "", "ep": 1,
            "ga": minibs // mbs, "tokens_per_s_per_gpu": round(gbs * seq / (gpus * step), 2),
            "cuda_graph": graph, "max_ctas": _max_ctas(repo, impl, env),
            "fp8_attention": "true" if "FP8_DPA" in on else "",
            # the v3.1 container (NGC 23.09) predates Transformer Engine v1.2 (Dec 2023), whose
            # DotProductAttention first preferred cuDNN's fused attention on sm90; before it
            # (v1.0 attention.py) FlashAttention ran wherever flash-attn could: FlashAttention-2
            "attention": "flash2" if release == "v3.1" else "",
            # FP8 parameters (FP8_PARAMS, FP8_PARAM_GATHER; NeMo's default off; the v3.1
            # container has neither: BF16 parameters gathered)
            "fp8_param_gather": ("" if recipe in ("", "nvfp4") else
                                 "true" if on & {"FP8_PARAMS", "FP8_PARAM_GATHER"} else "false"),
            "tp_comm_overlap": _ub_overlap(repo, impl, env, tp),
            "segment": _arith(env.get("SEGMENT", ""), env), "step_s": round(step, 6),
            "cudnn": _cudnn(repo, impl, logs[0]), "grad_nan_check": nan, "grad_nan_syncs": syncs,
            "bucket_params": bucket,
            "release": f"mlperf-{release}",
            "note": f"{results.split('/')[0]} {results.rsplit('/', 1)[1]} {configs[0]}: "
                    f"median of {len(steps)} {unit} over {len(logs)} runs"}


#: (release, results folder) of submissions read from the configuration their logs print (the
#: resolved NeMo config, one ``key: value`` per line): the other submitters of v5.1's 8B
LOGGED = [("v5.1", r) for r in (
    "Verda/results/b200_8x8_ngc25.09", "Dell/results/2xXE9680Lx8B200-SXM-180GB",
    "Dell/results/2xXE9685Lx8B200-SXM-180GB", "Dell/results/1xXE9780x8B300-SXM-270GB",
    "Oracle/results/1xBM.GPU.B200.8", "Oracle/results/8xBM.GPU.B200.8",
    "Lambda/results/gb300_n18_ngc25.04_nemo", "Nebius/results/nebius_b200_n1",
    "Nebius/results/nebius_b200_n2", "Nebius/results/nebius_b200_n4", "Nebius/results/nebius_b300_n1",
    "HPE/results/HPE-Cray-XD670-H200-SXM5-141GB_n8_25.09", "Supermicro/results/AS-4126GS-NBR-LCC",
    "Supermicro/results/AS-8126GS-NB3RT", "Supermicro/results/SYS-422GS-NBRT-LCC")]
#: the systems' accelerator (``systems/<results folder>.json``) -> table system; first match
ACCELERATORS = (("GB300", "DGX-GB300"), ("GB200", "DGX-GB200"), ("B300-SXM", "DGX-B300"),
                ("B200-SXM", "DGX-B200"), ("H200-SXM", "DGX-H200"), ("H100-SXM", "DGX-H100"))


def _logged_config(text: str) -> dict[str, str]:
    """The first value of each key of the resolved config a log prints (``0:   key: value``)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"\s*\d*:?\s{2,}([a-z_0-9]+):\s*(\S.*?)\s*$", line)
        if m and ":::MLLOG" not in line:
            out.setdefault(m.group(1), m.group(2))
    return out


def _nccl_caps(repo: Path, org: str, bench: str, cfg_path: str) -> str:
    """``max_ctas`` of the communicator file the run names, found among the submitter's files
    for the benchmark; "" when it ships none."""
    name = cfg_path.rsplit("/conf/", 1)[-1] if "/conf/" in cfg_path else ""
    hits = [f for f in tree(repo, f"{org}/benchmarks/{bench}") if name and f.endswith("/conf/" + name)]
    if not hits:
        return ""
    return _caps(git(repo, "show", f"HEAD:{hits[0]}"))


def logged_row(repo: Path, release: str, results: str, bench: str = "llama31_8b") -> dict:
    """A row from the logs alone: the layout and settings of the config they print, the
    system of the submission's system description, the step time as :func:`row` reads it."""
    org, name = results.split("/", 1)[0], results.rsplit("/", 1)[1]
    desc = git(repo, "show", f"HEAD:{org}/systems/{name}.json")
    acc = re.search(r'"accelerator_model_name"\s*:\s*"([^"]*)"', desc)
    system = next((s for key, s in ACCELERATORS if acc and key in acc.group(1)), None)
    if system is None:
        raise SystemExit(f"{results}: accelerator {acc.group(1) if acc else '?'} has no system")
    model, _, seq = BENCHMARKS[bench]
    logs, gbs_all, steps, _ = _run_logs(repo, results, bench, seq)
    cfg = _logged_config(git(repo, "show", f"HEAD:{logs[0]}"))
    num = {k: int(cfg[k]) if cfg.get(k, "null").isdigit() else 1 for k in (
        "num_nodes", "devices", "tensor_model_parallel_size", "pipeline_model_parallel_size",
        "context_parallel_size", "virtual_pipeline_model_parallel_size", "micro_batch_size",
        "global_batch_size")}
    gpus, gbs = num["num_nodes"] * num["devices"], num["global_batch_size"]
    tp, pp, cp, mbs = (num[k] for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                        "context_parallel_size", "micro_batch_size"))
    dp = gpus // (tp * pp * cp)
    if gbs_all != {gbs} or gbs % (dp * mbs):
        raise SystemExit(f"{results}: global batch {gbs_all} against the config's {gbs} (dp {dp})")
    on = {k for k in ("fp8", "fp4", "fp8_dot_product_attention", "external_cuda_graph",
                      "enable_cuda_graph", "fp8_params", "fp8_param_gather")
          if cfg.get(k, "").lower() in ("true", "1")}
    precision = ("nvfp4" if "fp4" in on else PRECISION[cfg.get("fp8_recipe", "delayed")] if "fp8" in on
                 else "bf16")
    scope = cfg.get("cuda_graph_scope", "")
    graph = ("local:full_iteration" if "enable_cuda_graph" in on and scope == "full_iteration" else
             "local:attn,mlp" if "enable_cuda_graph" in on else
             "te:attn,mlp" if "external_cuda_graph" in on else "")
    step = statistics.median(steps)
    vp = num["virtual_pipeline_model_parallel_size"]
    text = git(repo, "show", f"HEAD:{logs[0]}")
    nan, syncs = nan_cells(functools.partial(show, repo), None, text, graph == "local:full_iteration")
    return {"system": system, "model": model, "gpus": gpus, "precision": precision, "gbs": gbs,
            "mbs": mbs, "seq_len": seq, "fsdp": 0, "tp": tp, "pp": pp, "cp": cp,
            "vp": vp if vp > 1 else "", "ep": 1, "ga": gbs // (dp * mbs),
            "tokens_per_s_per_gpu": round(gbs * seq / (gpus * step), 2), "cuda_graph": graph,
            "max_ctas": _nccl_caps(repo, org, bench, cfg.get("nccl_communicator_config_path", "")),
            "fp8_attention": "true" if "fp8_dot_product_attention" in on else "", "attention": "",
            "fp8_param_gather": ("" if precision in ("bf16", "nvfp4") else
                                 "true" if on & {"fp8_params", "fp8_param_gather"} else "false"),
            "tp_comm_overlap": "" if tp < 2 else _truth(cfg.get("ub_tp_comm_overlap", "")),
            "segment": "", "step_s": round(step, 6),
            "cudnn": _sysjson_cudnn(text), "grad_nan_check": nan, "grad_nan_syncs": syncs,
            "bucket_params": bucket_cell(text, [], {}),
            "release": f"mlperf-{release}",
            "note": f"{org} {name}: its logs' printed config; median of {len(steps)} steps over "
                    f"{len(logs)} runs"}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("v5_0", type=Path, help="git directory of mlcommons/training_results_v5.0")
    ap.add_argument("v5_1", type=Path, help="git directory of mlcommons/training_results_v5.1")
    ap.add_argument("--v3-1", type=Path, help="git directory of mlcommons/training_results_v3.1 "
                    "(GPT-3 175B rows)")
    ap.add_argument("--v4-0", type=Path, help="git directory of mlcommons/training_results_v4.0 "
                    "(GPT-3 175B rows)")
    ap.add_argument("--v4-1", type=Path, help="git directory of mlcommons/training_results_v4.1 "
                    "(GPT-3 175B rows)")
    ap.add_argument("-o", "--output", type=Path, required=True, help="folder for the tables")
    args = ap.parse_args(argv)
    repos = {"v5.0": args.v5_0, "v5.1": args.v5_1, "v3.1": args.v3_1, "v4.0": args.v4_0,
             "v4.1": args.v4_1}
    rows = [row(repos[rel], rel, *rest) for rel, *rest in SUBMISSIONS if repos[rel] is not None]
    rows += [logged_row(repos[rel], rel, results) for rel, results in LOGGED if repos[rel] is not None]
    for model, name, _ in BENCHMARKS.values():
        if not any(r["model"] == model for r in rows):
            continue
        with (args.output / name).open("w", newline="") as f:
            w = csv.DictWriter(f, COLUMNS)
            w.writeheader()
            w.writerows(r for r in rows if r["model"] == model)
    for r in rows:
        print(f"{r['model']:14s} {r['system']:10s} {r['gpus']:5d} GPUs tp{r['tp']} pp{r['pp']} cp{r['cp']} "
              f"gbs {r['gbs']:5d} {r['precision']} step {r['step_s']:8.3f} s "
              f"{r['tokens_per_s_per_gpu']:8.1f} tokens/s/GPU")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
