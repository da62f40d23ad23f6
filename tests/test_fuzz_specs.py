"""Fuzzing the YAML loaders (model, cluster, device, sweep space, bundle meta) and the interop
importers (AICB workload text, Chakra ET, ASTRA-sim system JSON and network YAML).

Each starts from a file shipped in the repository (workloads/, topologies/, the device
profiles, tests/data/interop) or one written by tracesim itself, damaged as text (truncated,
byte edits) or as a tree (a value of the wrong type anywhere, keys deleted or added). The
loader succeeds or raises InputError naming the file; never another exception, never a hang.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from functools import cache
from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.test_fuzz_mutators import (
    ACTIONS,
    BYTE_EDITS,
    JSON_VALUES,
    TREE_EDITS,
    edit_tree,
    expect_clean,
    fuzz_report,  # noqa: F401  (module fixture: case counts for docs/reliability.md)
    fuzz_settings,
    mutate_bytes,
)

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("gpt3-1.7b", "llama3-8b", "mixtral-8x7b", "deepseek-moe-16b", "gpt-tiny")
CLUSTERS = ("h100x8", "h100x1024", "a100-selene")
DEVICES = ("h100", "a100", "mi250")
AICB = ("moe_ep2.txt", "recompute.txt")

SPACE = {
    "name": "fuzz",
    "base": {"model": "gpt-tiny", "cluster": "h100x8", "global_batch": 16},
    "axes": {"tp": [1, 2], "pp": [1, 2],
             "layout": [{"schedule": "1f1b"}, {"schedule": "interleaved", "vpp": 2}]},
    "points": [{"tp": 8, "pp": 1, "schedule": "gpipe"}],
    "constraints": ["tp * pp * dp == gpus", "pp <= layers"],
    "filters": {"fits_memory": True, "max_memory_gib": 70},
    "prices": {"h100": 2.49},
}
ASTRA_NETWORK = {"topology": ["Switch", "Switch", "Switch"], "npus_count": [8, 4, 2],
                 "bandwidth": [450.0, 50.0, 25.0], "latency": [500.0, 1000.0, 2000.0]}

# ----------------------------------------------------------------------------- loaders


def _load_model(p: Path) -> None:
    from tracesim.catalog import load_model

    m = load_model(p)
    m.params()


def _load_cluster(p: Path) -> None:
    from tracesim.catalog import load_cluster

    c = load_cluster(p)
    c.key()
    c.gpus  # noqa: B018


def _load_device(p: Path) -> None:
    from tracesim.hardware.device import get_device

    d = get_device(str(p))
    for dtype in ("bf16", "fp32"):
        d.peak_flops(dtype)
    d.class_efficiency("gemm").compute_curve("bf16").at(1e9)


def _load_space(p: Path) -> None:
    from tracesim.sweep.space import expand_space, load_space

    expand_space(load_space(p), p.parent / "sweep")


def _load_bundle(p: Path) -> None:
    from tracesim.trace.bundle import load_bundle

    load_bundle(p.parent)


def _load_astra_network(p: Path) -> None:
    from tracesim.interop.astrasim_network import cluster_from_astrasim

    cluster_from_astrasim(p)


def _load_astra_system(p: Path) -> None:
    from tracesim.catalog import load_cluster
    from tracesim.interop.astrasim_system import apply_system, load_astrasim_system

    apply_system(load_cluster("h100x8"), load_astrasim_system(p))


def _load_aicb(p: Path) -> None:
    from tracesim.engine.replay import replay
    from tracesim.interop.aicb import read_aicb
    from tracesim.interop.aicb_graph import aicb_to_graph

    w = read_aicb(p)
    if w.all_gpus <= 64:  # the graph has every rank
        replay(aicb_to_graph(w, p))


def _load_template(p: Path) -> None:
    """A workload directory's template.yaml, then a retarget that uses it."""
    from tests.helpers import retarget
    from tracesim.template.layer import load_template

    load_template(p)
    retarget({"model": "gpt-tiny", "cluster": "h100x8", "dp": 2}, str(p.parent))


@cache
def _text(kind: str, name: str) -> bytes:
    if kind == "layer template":
        from tracesim.catalog import load_model
        from tracesim.template.analytic import first_principles_template

        with tempfile.TemporaryDirectory() as d:
            first_principles_template(load_model(name), "flash").save(Path(d) / "t.yaml")
            return (Path(d) / "t.yaml").read_bytes()
    if kind == "model":
        return (ROOT / "workloads" / f"{name}.yaml").read_bytes()
    if kind == "cluster":
        return (ROOT / "topologies" / f"{name}.yaml").read_bytes()
    if kind == "device":
        return (ROOT / "tracesim" / "hardware" / "devices" / f"{name}.yaml").read_bytes()
    if kind == "bundle meta":
        return (ROOT / "workloads" / "bundles" / name / "meta.yaml").read_bytes()
    if kind == "sweep space":
        return yaml.safe_dump(SPACE, sort_keys=False).encode()
    if kind == "astra-sim network":
        return yaml.safe_dump(ASTRA_NETWORK).encode()
    if kind == "astra-sim system":
        return (ROOT / "tests" / "data" / "interop" / "astrasim_system.json").read_bytes()
    return (ROOT / "tests" / "data" / "interop" / name).read_bytes()


#: input class -> (file names to start from, file name to write, loader, parse, dump)
KINDS = {
    "model": (MODELS, "m.yaml", _load_model),
    "cluster": (CLUSTERS, "c.yaml", _load_cluster),
    "device": (DEVICES, "d.yaml", _load_device),
    "sweep space": (("space",), "space.yaml", _load_space),
    "bundle meta": (("gpt-tiny", "moe-tiny"), "meta.yaml", _load_bundle),
    "astra-sim network": (("net",), "net.yaml", _load_astra_network),
    "astra-sim system": (("sys",), "sys.json", _load_astra_system),
    "aicb": (AICB, "w.txt", _load_aicb),
    "layer template": (("gpt-tiny", "llama-tiny"), "template.yaml", _load_template),
}
YAML_KINDS = [k for k in KINDS if KINDS[k][1].endswith(".yaml")]


def _check(cls: str, kind: str, data: bytes) -> str:
    _names, fname, load = KINDS[kind]
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / fname
        p.write_bytes(data)
        if kind == "bundle meta":  # the traces beside meta.yaml are not what is fuzzed here
            src = ROOT / "workloads" / "bundles" / "gpt-tiny" / "rank0"
            shutil.copytree(src, Path(d) / "rank0")
        return expect_clean(f"{kind}: {cls}", lambda: load(p))


def _dump(kind: str, tree) -> bytes:
    if KINDS[kind][1].endswith(".json"):
        return json.dumps(tree).encode()
    return yaml.safe_dump(tree, sort_keys=False).encode()


def _parse(kind: str, data: bytes):
    return json.loads(data) if KINDS[kind][1].endswith(".json") else yaml.safe_load(data)


KIND_AND_NAME = st.sampled_from([(k, n) for k in KINDS for n in KINDS[k][0] if k != "aicb"])


def test_the_unmodified_inputs_load():
    """The starting points are valid, so the mutations start from the accepting path."""
    for kind, (names, _f, _l) in KINDS.items():
        for name in names:
            assert _check("unmodified", kind, _text(kind, name)) == "ok", (kind, name)


@fuzz_settings(60)
@given(KIND_AND_NAME, st.integers(min_value=0, max_value=2**31))
def test_truncated(kind_name, at):
    kind, name = kind_name
    text = _text(kind, name)
    _check("truncated", kind, text[: at % (len(text) + 1)])


@fuzz_settings(120)
@given(KIND_AND_NAME, BYTE_EDITS)
def test_byte_edits(kind_name, edits):
    kind, name = kind_name
    _check("byte edits", kind, mutate_bytes(_text(kind, name), edits))


@fuzz_settings(250)
@given(KIND_AND_NAME, TREE_EDITS)
def test_type_confusion(kind_name, edits):
    kind, name = kind_name
    tree = edit_tree(_parse(kind, _text(kind, name)), edits)
    _check("type confusion", kind, _dump(kind, tree))


# ----------------------------------------------------------------------------- AICB text

_AICB_TOKENS = st.one_of(
    st.sampled_from(["-1", "0", "1", "2", "4096", "99999999999999999999", "1e3", "nan", "", "\t",
                     "ALLREDUCE", "ALLGATHER", "ALLTOALL_EP", "BROADCAST", "NONE", "pp_comm:",
                     "ep:", "all_gpus:", "all_gpus: 100000000", "mlp", "# x"]),
    st.text(max_size=6),
)


@fuzz_settings(40)
@given(st.sampled_from(AICB), st.one_of(
    st.tuples(st.just("truncated"), st.integers(min_value=0, max_value=2**31)),
    st.tuples(st.just("byte edits"), BYTE_EDITS),
    st.tuples(st.just("token edits"), st.lists(st.tuples(st.integers(0, 2**31), _AICB_TOKENS),
                                                min_size=1, max_size=4)),
))
def test_aicb_text(name, case):
    kind, arg = case
    text = _text("aicb", name)
    if kind == "truncated":
        data = text[: arg % (len(text) + 1)]
    elif kind == "byte edits":
        data = mutate_bytes(text, arg)
    else:
        lines = [ln.split() for ln in text.decode().splitlines()]
        cells = [(i, j) for i, ln in enumerate(lines) for j in range(len(ln))]
        for pos, tok in arg:
            i, j = cells[pos % len(cells)]
            lines[i][j] = tok
        data = "\n".join(" ".join(ln) if i == 0 else "\t".join(ln)
                         for i, ln in enumerate(lines)).encode()
    _check(kind, "aicb", data)


# ----------------------------------------------------------------------------- Chakra ET


@cache
def _chakra_files() -> dict[str, bytes]:
    """ET files of a small 8-rank AICB workload, exported by tracesim."""
    from tracesim.interop.aicb import read_aicb
    from tracesim.interop.aicb_graph import aicb_to_graph
    from tracesim.interop.chakra import export_chakra

    w = read_aicb(ROOT / "tests" / "data" / "interop" / "recompute.txt")
    with tempfile.TemporaryDirectory() as d:
        export_chakra(aicb_to_graph(w), Path(d) / "wl")
        return {p.name: p.read_bytes() for p in sorted(Path(d).iterdir())}


def _import_chakra(d: Path) -> None:
    from tracesim.engine.replay import replay
    from tracesim.interop.chakra_import import import_chakra

    replay(import_chakra(d / "wl"))


@fuzz_settings(60)
@given(st.integers(min_value=0, max_value=2**31), st.one_of(
    st.tuples(st.just("truncated"), st.integers(min_value=0, max_value=2**31)),
    st.tuples(st.just("byte edits"), BYTE_EDITS),
    st.tuples(st.just("comm groups"), TREE_EDITS),
))
def test_chakra_et(which, case):
    files = _chakra_files()
    ets = sorted(n for n in files if n.endswith(".et"))
    kind, arg = case
    with tempfile.TemporaryDirectory() as d:
        for n, data in files.items():
            (Path(d) / n).write_bytes(data)
        if kind == "comm groups":
            tree = edit_tree(json.loads(files["wl.json"]), arg)
            (Path(d) / "wl.json").write_text(json.dumps(tree))
        else:
            victim = ets[which % len(ets)]
            data = files[victim]
            data = data[: arg % (len(data) + 1)] if kind == "truncated" else mutate_bytes(data, arg)
            (Path(d) / victim).write_bytes(data)
        expect_clean(f"chakra ET: {kind}", lambda: _import_chakra(Path(d)), allow_replay=True)


# ----------------------------------------------------------------------------- hostile YAML

_BOMB_LOADERS = {  # loader -> a file whose one value is the hostile YAML text {X}
    "tracesim.catalog:load_model":
        "name: {X}\nfamily: gpt\nlayers: 2\nhidden: 64\nheads: 2\nvocab: 10\nseq_len: 8\n",
    "tracesim.catalog:load_cluster":
        "name: x\nnodes: 1\ngpus_per_node: 8\ndevice: {X}\n"
        "intra_node: {{kind: nvswitch, bandwidth_GBps: 450, latency_us: 1}}\n",
    "tracesim.sweep.space:load_space": "base: {{model: gpt-tiny, cluster: h100x8}}\nname: {X}\n",
    "tracesim.template.layer:load_template":
        "format: tracesim-template\nversion: 1\nmeta: {X}\nops: {X}\n",
    "tracesim.interop.astrasim_network:cluster_from_astrasim":
        "topology: {X}\nnpus_count: [8]\nbandwidth: [1.0]\nlatency: [1.0]\n",
}
_BOMB = "[" + ", ".join(
    ['&a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"&{n} [" + ",".join([f"*{p}"] * 9) + "]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)]
) + "]"
_HOSTILE = {"alias bomb (9**9 values)": _BOMB, "recursive alias": "&r [1, *r]",
            "nesting 100000 deep": "[" * 100_000 + "]" * 100_000}
_SCRIPT = """
import importlib, sys
from tracesim.errors import InputError
for arg in sys.argv[1:]:
    mod, fn, path = arg.split(":")
    try:
        getattr(importlib.import_module(mod), fn)(path)
        print("ok", flush=True)
    except InputError as exc:
        print("InputError", exc, flush=True)
"""


def test_hostile_yaml_is_an_input_error_quickly(tmp_path):
    """Alias bombs, recursive aliases and deep nesting: InputError within seconds, never a
    hang in an error message that prints 9**9 values, never a RecursionError."""
    import subprocess
    import sys

    cases = []
    for i, ((loader, template), (what, x)) in enumerate(
            (lt, h) for lt in _BOMB_LOADERS.items() for h in _HOSTILE.items()):
        p = tmp_path / f"hostile{i}.yaml"
        p.write_text(template.format(X=x))
        cases.append((f"{loader}:{p}", what))
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, *(c for c, _ in cases)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == len(cases)
    for (case, what), line in zip(cases, lines, strict=True):
        assert line.startswith("InputError") and "hostile" in line, (case, what, line[:300])
        expect_clean(f"hostile YAML: {what}", lambda: None)


# ----------------------------------------------------------------------------- retargeting

#: values that keep the workload small (a spec asking for 2**31 layers is slow, not broken)
SMALL_VALUES = st.one_of(
    st.sampled_from([0, -1, 1, 2, 3, 7, 64, 0.5, -0.0, 1e-300, float("nan"), float("inf"), True,
                     None, "", "x", "bf16", "1f1b", [], {}, [1, 2], {"kind": "nvswitch"}]),
    st.integers(min_value=-8, max_value=256), st.floats(min_value=-10, max_value=1e4),
    st.text(max_size=8),
)


def _template_ops() -> tuple[str, ...]:
    from tracesim.template.layer import TemplateOp

    return tuple(f.name for f in __import__("dataclasses").fields(TemplateOp))


@fuzz_settings(80)
@given(st.sampled_from(("gpt-tiny", "llama-tiny")), st.lists(
    st.tuples(st.integers(min_value=0, max_value=2**31), st.sampled_from(_template_ops()),
              st.one_of(SMALL_VALUES, JSON_VALUES)), min_size=1, max_size=3))
def test_layer_template_fields(name, edits):
    """A value of the wrong type in any field of any op of template.yaml, then a retarget."""
    tree = _parse("layer template", _text("layer template", name))
    for i, field, value in edits:
        tree["ops"][i % len(tree["ops"])][field] = value
    _check("field types", "layer template", _dump("layer template", tree))


@fuzz_settings(120)
@given(st.sampled_from(("model", "cluster")), st.lists(
    st.tuples(st.integers(min_value=0, max_value=2**31), st.sampled_from(ACTIONS), SMALL_VALUES,
              st.text(max_size=6)), min_size=1, max_size=3))
def test_retarget_with_damaged_specs(which, edits):
    """A damaged model or cluster spec (small values only), through a full retarget."""
    from tests.helpers import retarget

    model = _parse("model", _text("model", "gpt-tiny"))
    cluster = _parse("cluster", _text("cluster", "h100x8"))
    if which == "model":
        model = edit_tree(model, edits)
    else:
        cluster = edit_tree(cluster, edits)
    with tempfile.TemporaryDirectory() as d:
        mp, cp = Path(d) / "m.yaml", Path(d) / "c.yaml"
        mp.write_bytes(_dump("model", model))
        cp.write_bytes(_dump("cluster", cluster))
        expect_clean(f"retarget: damaged {which}", lambda: retarget(
            {"model": str(mp), "cluster": str(cp), "dp": 2}), allow_replay=True)


def test_deeply_nested_json_specs_are_input_errors(tmp_path):
    """json.loads raises RecursionError (not ValueError) on deep nesting."""
    import pytest

    from tracesim.errors import InputError
    from tracesim.interop.astrasim_system import load_astrasim_system
    from tracesim.interop.chakra_import import load_comm_groups

    p = tmp_path / "deep.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    for load in (load_astrasim_system, load_comm_groups):
        with pytest.raises(InputError) as e:
            load(p)
        assert e.value.file == str(p)
        expect_clean("deeply nested JSON", lambda: None)
