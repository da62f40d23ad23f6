"""Transformer Engine userbuffers configurations: for each tensor-parallel linear, the method
that overlaps its communication with its GEMM, the SMs the communication takes and, for a
pipelined reduce-scatter, its GEMM splits and whether its buffer holds FP8.

The layer names are Transformer Engine's (the keys of ``ub_cfgs`` in
``transformer_engine/pytorch/module/base.py`` ``initialize_ub``): ``{qkv,proj,fc1,fc2}_fprop``
and the backward ``*_dgrad`` / ``*_wgrad`` overlaps. A configuration is a shipped name
(:data:`SHIPPED`) or a YAML file in the format Megatron-LM's ``--tp-comm-overlap-cfg`` and
NeMo's ``ub_tp_comm_overlap_cfg`` take (docs/stacks.md, "Your own userbuffers
configuration"): a layer missing from it runs Transformer Engine's default for that layer
(``get_default_config``); a value written as NeMo's ``${oc.decode:${oc.env:NAME,default}}``
is read as the environment tracesim runs in sets it (:mod:`tracesim.specs.omegaconf_env`). What the replay does with each key: :data:`MODELLED`; keys it reads
and does not model: :data:`NOT_MODELLED`; anything else is an error naming the key.

An entry is ``(layer, method, num_sm, num_splits, fp8_buf)`` with the method as the builder
names it (``ring`` ring exchange, ``pipe`` pipelined, ``bulk``); ``num_splits`` is 0 where
the method's own count applies (ring exchange: the TP size).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.specs.omegaconf_env import resolve

Entry = tuple[str, str, int, int, bool]

#: Transformer Engine's layer names, with the methods the replay models for each (first:
#: Transformer Engine's default). The all-gathers before qkv / fc1 and of the proj / fc2 output
#: gradient run as ring exchange; a reduce-scatter after proj / fc2 pipelined or in ring
#: exchange; the backward of qkv / fc1 in bulk (Transformer Engine refuses ``pipeline`` for an
#: all-gather; moving the qkv / fc1 data-gradient reduce-scatter off bulk is not modelled).
LAYERS: dict[str, tuple[str, ...]] = {
    "qkv_fprop": ("ring_exchange",), "fc1_fprop": ("ring_exchange",),
    "proj_dgrad": ("ring_exchange",), "fc2_dgrad": ("ring_exchange",),
    "proj_fprop": ("pipeline", "ring_exchange"), "fc2_fprop": ("pipeline", "ring_exchange"),
    "qkv_dgrad": ("bulk",), "qkv_wgrad": ("bulk",), "fc1_dgrad": ("bulk",), "fc1_wgrad": ("bulk",),
}
METHOD = {"ring_exchange": "ring", "pipeline": "pipe", "bulk": "bulk"}
#: keys the replay uses: ``method``; ``num_sm`` (the SMs taken from the overlapped GEMM);
#: ``num_splits`` (a pipelined reduce-scatter's GEMM chunks; ring exchange runs one chunk per
#: TP rank whatever it says); ``fp8_buf`` (a pipelined reduce-scatter of an FP8 run moves one
#: byte per element: Transformer Engine honours it for the ``pipeline`` layers only)
MODELLED = ("method", "num_sm", "num_splits", "fp8_buf")
#: keys Transformer Engine takes that the replay reads and does not model: the CTA size,
#: stream priorities, copy engines (ring exchange always moves its chunks with them here),
#: aggregation of two ring chunks, atomic GEMMs (the same chunks here), overlapping the
#: first pipelined GEMM, and ``set_sm_margin`` (the GEMM is charged its ``num_sm`` either way)
NOT_MODELLED = ("cga_size", "set_sm_margin", "aggregate", "atomic_gemm", "use_ce",
                "comm_priority", "gemm_priority", "pipeline_rs_overlap_first_gemm",
                "is_reduce_scatter")


def te_default(layer: str) -> Entry:
    """Transformer Engine's default for ``layer`` (``get_default_config``): ring exchange on
    1 SM, pipelined on 16 SMs in 4 splits, bulk on 16 SMs; BF16 reduce-scatter buffers."""
    method = METHOD[LAYERS[layer][0]]
    return (layer, method, 1 if method == "ring" else 16, 4 if method == "pipe" else 0, False)


def setting(table: tuple[Entry, ...], role: str, pass_: str) -> Entry:
    """Linear ``role``'s entry for ``pass_`` in ``table``; a layer the table leaves out at
    Transformer Engine's default (outside its names: a weight gradient in bulk on 16 SMs, else
    ring exchange on 1)."""
    key = f"{role}_{pass_}"
    got = next((e for e in table if e[0] == key), None)
    if got is not None:
        return got
    if key in LAYERS:
        return te_default(key)
    return (key, "bulk", 16, 0, False) if pass_ == "wgrad" else (key, "ring", 1, 0, False)


def pipe_splits(entries: tuple[Entry, ...]) -> set[int]:
    """The GEMM chunk counts of the pipelined reduce-scatters in ``entries``."""
    return {e[3] for e in entries if e[1] == "pipe" and e[3]}


def _table(**over: tuple[str, int]) -> tuple[Entry, ...]:
    """Every layer at Transformer Engine's default but those given as (method, num_sm)."""
    out = []
    for layer in LAYERS:
        if layer in over:
            method, sms = over[layer]
            out.append((layer, method, sms, 4 if method == "pipe" else 0, False))
        else:
            out.append(te_default(layer))
    return tuple(out)


#: the forward reduce-scatters in ring exchange (Megatron-Bridge's FP8 configurations)
_RING_RS = {"proj_fprop": ("ring", 1), "fc2_fprop": ("ring", 1)}
#: the bulk overlaps of Megatron-Bridge's H100 h16384 (Llama 3.1 405B) configurations
_H100_H16384 = {"qkv_dgrad": ("bulk", 2), "qkv_wgrad": ("bulk", 24), "fc1_dgrad": ("bulk", 2),
                "fc1_wgrad": ("bulk", 2)}
#: Megatron-Bridge v0.2.1 ``training/comm_overlap.py``: ``userbuffers_bf16_h100_h8192_tp4_mbs1_
#: seqlen8192`` (``bridge-bf16``), ``userbuffers_bf16_b200_h8192_tp2_mbs1_seqlen8192``
#: (``bridge-bf16-blackwell``), ``userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192``
#: (``bridge-fp8``; the B200 FP8 one is equal); ``te-defaults``: no configuration given;
#: ``bridge-{bf16,fp8}-{h100,b200}-h16384``: ``userbuffers_{bf16,fp8}_h100_h16384_tp8_cp2_mbs1_
#: seqlen8192`` and ``..._b200_h16384_tp4_cp2_...`` (the same file, v0.2.0 and v0.3.0)
SHIPPED: dict[str, tuple[Entry, ...]] = {
    "bridge-bf16": _table(qkv_dgrad=("bulk", 4), qkv_wgrad=("bulk", 24), fc1_dgrad=("bulk", 2),
                          fc1_wgrad=("bulk", 4), proj_fprop=("pipe", 24), fc2_fprop=("pipe", 16)),
    "bridge-bf16-blackwell": _table(qkv_dgrad=("bulk", 16), qkv_wgrad=("bulk", 24),
                                    fc1_dgrad=("bulk", 2), fc1_wgrad=("bulk", 4),
                                    proj_fprop=("pipe", 32), fc2_fprop=("pipe", 16)),
    "bridge-fp8": _table(qkv_dgrad=("bulk", 4), qkv_wgrad=("bulk", 24), fc1_dgrad=("bulk", 2),
                         fc1_wgrad=("bulk", 4), **_RING_RS),
    "te-defaults": _table(),
    "bridge-bf16-h100-h16384": _table(**_H100_H16384, proj_fprop=("pipe", 24), fc2_fprop=("pipe", 8)),
    "bridge-fp8-h100-h16384": _table(**_H100_H16384, **_RING_RS),
    "bridge-bf16-b200-h16384": _table(qkv_dgrad=("bulk", 8), qkv_wgrad=("bulk", 24),
                                      fc1_dgrad=("bulk", 2), fc1_wgrad=("bulk", 2),
                                      proj_fprop=("pipe", 32), fc2_fprop=("pipe", 8)),
    "bridge-fp8-b200-h16384": _table(qkv_dgrad=("bulk", 8), qkv_wgrad=("bulk", 32),
                                     fc1_dgrad=("bulk", 2), fc1_wgrad=("bulk", 8), **_RING_RS),
}


def stack_default(fp8: bool, blackwell: bool) -> str:
    """The shipped configuration the megatron-core stack runs without one given."""
    return "bridge-fp8" if fp8 else ("bridge-bf16-blackwell" if blackwell else "bridge-bf16")


def running(given: tuple[Entry, ...], fp8: bool, blackwell: bool) -> tuple[Entry, ...]:
    """The entries a layout runs: those given, else the stack's default configuration's."""
    return given or SHIPPED[stack_default(fp8, blackwell)]


def load_ub_config(value: str | None) -> tuple[Entry, ...]:
    """The entries of a configuration: ``""`` / None none given (the stack's), a shipped name
    or a YAML file (module docstring). InputError names the file and the key."""
    if not value:
        return ()
    text = str(value)
    if text in SHIPPED:
        return SHIPPED[text]
    path = Path(text)
    if path.suffix.lower() not in (".yaml", ".yml") and not path.exists():
        raise InputError(f"unknown userbuffers configuration {text!r} (shipped: "
                         f"{', '.join(SHIPPED)}; or a YAML file)", "layout",
                         "--tp-comm-overlap-cfg")
    from tracesim.fileio import read_yaml

    data = read_yaml(path)
    if isinstance(data, Mapping) and isinstance(data.get("model"), Mapping) \
            and "ub_tp_comm_overlap_cfg" in data["model"]:
        data = data["model"]  # a NeMo training configuration
    if isinstance(data, Mapping) and "ub_tp_comm_overlap_cfg" in data:
        data = data["ub_tp_comm_overlap_cfg"]
        if data is None:  # NeMo's null: Transformer Engine's defaults
            return SHIPPED["te-defaults"]
    return parse_ub_config(data, path)


def parse_ub_config(data: Any, file: Path | None) -> tuple[Entry, ...]:
    """Entries from a layer mapping (module docstring); layers it omits at Transformer
    Engine's defaults."""
    if not isinstance(data, Mapping) or not data:
        raise InputError("expected a mapping of Transformer Engine layer names (qkv_fprop, "
                         "proj_fprop, ...) to their overlap settings", file, "ub_cfgs")
    given: dict[str, Entry] = {}
    for layer, cfg in data.items():
        if layer not in LAYERS:
            raise InputError(f"unknown or unmodelled layer (known: {', '.join(LAYERS)})", file,
                             str(layer))
        if not isinstance(cfg, Mapping):
            raise InputError("expected a mapping of overlap settings (method, num_sm, ...)",
                             file, str(layer))
        given[layer] = _entry(layer, cfg, file)
    return tuple(given.get(layer) or te_default(layer) for layer in LAYERS)


def _entry(layer: str, given: Mapping[str, Any], file: Path | None) -> Entry:
    for key in given:
        if key not in MODELLED and key not in NOT_MODELLED:
            raise InputError(f"unknown key (known: {', '.join(MODELLED + NOT_MODELLED)})", file,
                             f"{layer}.{key}")
    # NeMo's ${oc.decode:${oc.env:NAME,default}} values, as the run's environment set them
    cfg = {key: resolve(v, file, f"{layer}.{key}") for key, v in given.items()}
    te_method = cfg.get("method", LAYERS[layer][0])
    if te_method not in LAYERS[layer]:
        raise InputError(f"{te_method!r} is not modelled for {layer} (modelled: "
                         f"{', '.join(LAYERS[layer])})", file, f"{layer}.method")
    method = METHOD[te_method]
    sms = _int(cfg, "num_sm", 1 if method == "ring" else 16, layer, file)
    splits = _int(cfg, "num_splits", 4, layer, file) if method == "pipe" else 0
    fp8_buf = cfg.get("fp8_buf", False)
    if fp8_buf not in (True, False):  # 1 / 0 as NeMo's files write it (Python truth, as TE reads it)
        raise InputError(f"expected true or false, got {fp8_buf!r}", file, f"{layer}.fp8_buf")
    return (layer, method, sms, splits, bool(fp8_buf) and method == "pipe")


def _int(cfg: Mapping[str, Any], key: str, default: int, layer: str, file: Path | None) -> int:
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise InputError(f"expected a whole number >= 1, got {v!r}", file, f"{layer}.{key}")
    return int(v)


def describe(entries: tuple[Entry, ...], name: str) -> dict[str, Any]:
    """The report's view of a configuration: its name and each layer's setting."""
    inv = {v: k for k, v in METHOD.items()}
    layers = {}
    for layer, method, sms, splits, fp8_buf in entries:
        d: dict[str, Any] = {"method": inv[method], "num_sm": sms}
        if splits:
            d["num_splits"] = splits
        if fp8_buf:
            d["fp8_buf"] = True
        layers[layer] = d
    return {"config": name, "layers": layers}


__all__ = ["LAYERS", "SHIPPED", "describe", "load_ub_config", "parse_ub_config", "pipe_splits", "running", "setting",
           "stack_default", "te_default"]
