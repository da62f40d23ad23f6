"""Hybrid models (Mamba-2 mixers between attention and MoE layers; Nemotron 3 Nano): the spec,
its strict checks, the template's per-kind layers, the scan's cost and real replays
(docs/moe.md, "Hybrid models")."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from benchmarks.kernels import kernel_fit as kf
from benchmarks.kernels.scan import calibration_device, flops_per_token, scan_fraction, tokens
from tracesim.catalog import load_model
from tracesim.cli import cli as main
from tracesim.errors import InputError
from tracesim.hardware.costmodel import op_time_ns
from tracesim.hardware.device import get_device
from tracesim.ops.classify import classify
from tracesim.specs.hybrid import mamba_params
from tracesim.specs.model import model_from_dict
from tracesim.specs.parallel import ParallelSpec, validate_layout
from tracesim.template.analytic import first_principles_template
from tracesim.template.resolve import resolve_template

NANO = "nemotron-3-nano"


def _flat(*_: object) -> int:
    return 1


def test_nano_matches_its_published_sizes() -> None:
    """Megatron-Bridge: "3.5B active parameters and 30B parameters in total" (the spec's
    source); 23 Mamba-2, 23 MoE and 6 attention layers."""
    m = load_model(NANO)
    assert m.is_hybrid and m.is_moe and len(m.hybrid_pattern) == m.layers == 52
    assert [m.hybrid_pattern.count(c) for c in "ME*"] == [23, 23, 6]
    assert m.params() == pytest.approx(31.58e9, rel=0.005)  # > 30B: the card rounds down
    assert m.active_params() == pytest.approx(3.58e9, rel=0.005)
    # one mixer: in_proj 2688 x 10304, conv 6144 x (4 + 1), dt_bias / A_log / D, norm, out_proj
    assert mamba_params(m) == 2688 * 10304 + 6144 * 5 + 3 * 64 + 4096 + 4096 * 2688
    assert m.moe_layer(1) and not m.moe_layer(0) and m.layer_kind(5) == "*"


def _spec(**changes: object) -> dict:
    base = {"name": "h", "family": "hybrid", "layers": 4, "hybrid_pattern": "M*ME", "hidden": 256,
            "heads": 4, "kv_heads": 2, "vocab": 1000, "seq_len": 512, "ffn_hidden": 128,
            "experts": 4, "top_k": 2, "mamba_heads": 8, "mamba_head_dim": 32, "mamba_state": 16,
            "mamba_groups": 2}
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


@pytest.mark.parametrize(("changes", "key"), [
    ({"hybrid_pattern": "M*MX"}, "hybrid_pattern"),
    ({"hybrid_pattern": "M*M"}, "hybrid_pattern"),
    ({"hybrid_pattern": None}, "hybrid_pattern"),
    ({"mamba_heads": None}, "mamba_heads"),
    ({"mamba_heads": 7}, "mamba_heads"),
    ({"experts": None, "top_k": None}, "experts"),
    ({"hybrid_pattern": "M*M-"}, "experts"),
    ({"family": "llama"}, "hybrid_pattern"),
    ({"moe_every": 2}, "moe_every"),
])
def test_bad_hybrid_specs_name_the_key(changes: dict, key: str) -> None:
    with pytest.raises(InputError) as exc:
        model_from_dict(_spec(**changes), "h.yaml")
    assert exc.value.where == key and "h.yaml" in exc.value.line()


def test_defaults_and_round_trip() -> None:
    m = model_from_dict(_spec())
    assert (m.mamba_conv, m.mamba_chunk, m.activation, m.norm) == (4, 256, "relu2", "rmsnorm")
    assert model_from_dict(m.to_dict()) == m
    assert "hybrid_pattern" not in load_model("llama3-8b").to_dict()


def test_each_layer_kind_resolves_to_its_own_part() -> None:
    m = load_model(NANO)
    par = ParallelSpec(tp=1, pp=1, dp=8, ep=8, micro_batch=2, global_batch=512, seq_len=8192)
    res = resolve_template(first_principles_template(m), m, par, _flat)
    names = {c: {o.name for o in res.layer(m, m.hybrid_pattern.index(c)).fwd} for c in "ME*"}
    assert any(n.startswith("mamba.") for n in names["M"])
    assert not any(n.startswith(("attn.", "moe.")) for n in names["M"])
    assert any(n.startswith("moe.") for n in names["E"]) and "attn.core" in names["*"]
    ssd = next(o for o in res.layer(m, 0).fwd if o.name == "mamba.ssd")
    t = 2 * 8192
    assert ssd.op_class == "scan"
    assert ssd.flops == pytest.approx(t * 64 * 64 * (4 * 128 + 128) + 2 * t * 128 * 128 * 8)
    bwd = next(o for o in res.layer(m, 0).bwd if o.name == "mamba.ssd")
    assert bwd.flops == pytest.approx(2.5 * ssd.flops)
    # the layer's parameters: the mixer and its norm
    assert res.layer(m, 0).params == pytest.approx(mamba_params(m) + m.hidden)


@pytest.mark.parametrize(("name", "spread"), [("h100", 0.12), ("b200", 0.20)])
def test_the_scan_reproduces_its_calibration_table(name: str, spread: float) -> None:
    """A consistency check (each calibration profile's ``scan`` efficiency is set from its
    table's rows): the calibrated rows' forward times at the burst clock scatter around the
    measured ones with a geometric mean of 1 and within the table's own spread (the H100
    table's seven lengths 12%, the B200 table's batches and lengths 20%: its 16 x 512-token
    row runs at 0.85 of the mean rate), and the efficiency is the table's."""
    e, _ = scan_fraction(name)
    dev = get_device(name)
    assert dev.efficiency["scan"].compute_curve("bf16").at(1e12) == e
    burst = dev.burst()
    logs = []
    for r in kf.rows("scan"):
        if r["role"] != "calibrated" or r["profile"] != name:
            continue
        n = tokens(r)
        measured_ns = n / float(r["tokens_per_s"]) * 1e9
        ns = op_time_ns(burst, "scan", n * flops_per_token(r), 0.0, "bf16")
        assert abs(ns / measured_ns - 1) < spread, r
        logs.append(math.log(ns / measured_ns))
    assert len(logs) >= 7
    assert abs(sum(logs) / len(logs)) < 0.01


def test_blackwell_profiles_take_the_b200_scan_fraction() -> None:
    """GB200, B300 and GB300 run the same Triton kernels as the B200 table: the same fraction
    of their own BF16 peak (derived); H200 takes the H100's."""
    for name, cal in (("gb200", "b200"), ("b300", "b200"), ("gb300", "b200"), ("h200", "h100")):
        assert calibration_device(name) == cal
        assert get_device(name).efficiency["scan"].compute_curve("bf16").at(1e12) == scan_fraction(cal)[0]


def test_mamba_kernels_are_the_scan_class() -> None:
    for name in ("_chunk_scan_fwd_kernel", "_chunk_state_bwd_db_kernel", "_state_passing_fwd_kernel",
                 "_bmm_chunk_fwd_kernel"):
        assert classify(name, "kernel") == "scan", name
    for name in ("MambaChunkScanCombinedFn", "MambaSplitConv1dScanCombinedFnBackward",
                 "mamba_ssm::mamba_chunk_scan_combined"):
        assert classify(name) == "scan", name
    assert classify("aten::mm") == "gemm"


def test_nano_replays_with_its_layouts_and_refuses_what_is_not_modelled() -> None:
    args = ["replay", "--model", NANO, "--cluster", "dgx-b200", "--nodes", "2", "--ep", "8",
            "--micro-batch", "1", "--global-batch", "64", "--seq-len", "4096"]
    for extra in (["--tp", "1", "--pp", "2"], ["--tp", "2", "--sp", "--pp", "1"],
                  ["--tp", "1", "--pp", "1", "--cuda-graphs", "attn,mamba", "--dtype", "fp8",
                   "--fp8-recipe", "mxfp8"]):
        res = CliRunner().invoke(main, args + extra + ["--json"])
        assert res.exit_code == 0, res.output
    for extra, needle in ((["--tp", "16", "--nodes", "4"], "are not divisible by tp 16"),):
        res = CliRunner().invoke(main, args + extra)
        assert res.exit_code == 2 and needle in res.output and "Traceback" not in res.output


def test_super_and_its_latent_moe() -> None:
    """Nemotron 3 Super: "120B total, 12B active" (Megatron-Bridge), and with its MTP module
    (one attention and one MoE layer, the embedding projection, three norms) the checkpoint's
    123,611,033,088 elements (the verification card) to 2e-7. The latent MoE dispatches
    tokens at moe_latent wide: a quarter of the all-to-all bytes at h 4096."""
    m = load_model("nemotron-3-super")
    assert m.params() == pytest.approx(120.67e9, rel=0.001)
    assert m.active_params() == pytest.approx(12.77e9, rel=0.001)
    h = m.hidden
    mtp = m.attention_params() + m.mlp_params(1) + 2 * h * h + 5 * h
    assert m.params() + mtp == pytest.approx(123_611_033_088, rel=2e-7)
    par = ParallelSpec(tp=1, pp=1, dp=64, ep=64, micro_batch=1, global_batch=512, seq_len=8192)
    res = resolve_template(first_principles_template(m), m, par, _flat)
    moe = res.layer(m, 1)
    names = [o.name for o in moe.fwd]
    assert names.index("moe.latent_down") < names.index("moe.dispatch") < names.index("moe.latent_up")
    a2a = next(o for o in moe.fwd if o.name == "moe.dispatch")
    assert a2a.msg_bytes == pytest.approx(2 * 8192 * 22 * 1024, rel=1e-9)  # bf16, at 1024 wide
    fc1 = next(o for o in moe.fwd if o.name == "moe.fc1")
    assert fc1.flops == pytest.approx(2 * 8192 * 22 * 1024 * 2688)  # squared ReLU: not gated
    # a rank's MoE layer: its 8 experts at 1024 wide, the router, the shared expert, the two
    # latent projections (whole on every rank) and the norm
    local = 8 * 2 * 1024 * 2688 + h * 512 + 2 * h * 5376 + 2 * h * 1024 + h
    assert moe.params == pytest.approx(local)
    # the MTP module of a hybrid model is attention and MoE
    mtp_sec = res.layer(m, m.layers)
    assert {"attn.core", "moe.dispatch"} <= {o.name for o in mtp_sec.fwd}
    nano = resolve_template(first_principles_template(load_model(NANO)), load_model(NANO), par, _flat)
    assert "moe.latent_down" not in {o.name for o in nano.layer(load_model(NANO), 1).fwd}


def test_a_recorded_template_without_mamba_ops_is_refused() -> None:
    """A bundle recorded from a MoE model has no Mamba-2 ops: retargeting it to a hybrid model
    is an input error naming the bundle and --template (the analytic template replays it)."""
    from tracesim.catalog import models_dir

    bundle = str(models_dir() / "bundles" / "moe-tiny")
    args = ["replay", bundle, "--model", NANO, "--cluster", "h100x8", "--tp", "1", "--dp", "8",
            "--ep", "8", "--micro-batch", "1", "--global-batch", "8", "--seq-len", "1024"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2 and "no Mamba-2 mixer ops" in res.output and bundle in res.output
    assert CliRunner().invoke(main, args + ["--template", "analytic"]).exit_code == 0


def test_mamba_context_parallel_exchanges() -> None:
    """CP 2 (Megatron-Core's ``MambaContextParallel``): five all-to-alls of the in-projection's
    pieces before the convolution, one of the scan's output after it, each of the rank's
    ``T = s / cp`` tokens at its TP share; the scan's FLOPs per rank as without CP; the same
    exchanges backward."""
    m = load_model(NANO)
    par = ParallelSpec(tp=2, sp=True, pp=1, dp=4, cp=2, ep=8, etp=1, micro_batch=1,
                       global_batch=64, seq_len=8192)
    res = resolve_template(first_principles_template(m), m, par, _flat)
    layer = res.layer(m, 0)
    comm = {o.name: o for o in layer.fwd if o.kind == "coll" and o.gkind == "cp"}
    t, eb = 8192 // 2, 2  # the rank's tokens, bf16
    inner, gn = 64 * 64 // 2, 8 * 128 // 2  # d_inner and G N at TP 2
    assert {n: o.msg_bytes for n, o in comm.items()} == pytest.approx({
        "mamba.cp_z": eb * t * inner, "mamba.cp_x": eb * t * inner, "mamba.cp_B": eb * t * gn,
        "mamba.cp_C": eb * t * gn, "mamba.cp_dt": eb * t * 32, "mamba.cp_y": eb * t * inner})
    assert all(o.collective == "all_to_all" for o in comm.values())
    assert sorted(o.name for o in layer.bwd if o.gkind == "cp") == sorted(comm)
    names = [o.name for o in layer.fwd]
    assert names.index("mamba.in_proj") < names.index("mamba.cp_z") < names.index("mamba.conv")
    assert names.index("mamba.ssd") < names.index("mamba.cp_y") < names.index("mamba.gated_norm")
    # no TP collective between the in-projection and the out-projection: the exchange keeps
    # the heads' TP split
    between = names[names.index("mamba.in_proj") + 1:names.index("mamba.out_proj")]
    assert not [n for n in between if ".tp" in n]
    flat = resolve_template(first_principles_template(m), m, par.replace(cp=1, dp=8), _flat)
    scan = [next(o for o in x.layer(m, 0).fwd if o.name == "mamba.ssd") for x in (res, flat)]
    assert scan[0].flops == pytest.approx(scan[1].flops / 2)  # half the tokens per rank


@pytest.mark.parametrize(("changes", "cp", "needle"), [
    ({}, 16, "cp 16 must divide the Mamba heads per TP rank (8 / tp 1 = 8)"),
    ({"mamba_heads": 12, "mamba_groups": 3}, 2, "cp 2 and the Mamba groups per TP rank (3 / tp 1 = 3)"),
])
def test_mamba_context_parallel_checks(changes: dict, cp: int, needle: str) -> None:
    m = model_from_dict(_spec(**changes))
    par = ParallelSpec(tp=1, pp=1, dp=2, cp=cp, ep=2, micro_batch=1, global_batch=4, seq_len=512)
    with pytest.raises(InputError) as exc:
        validate_layout(m, par)
    assert needle in str(exc.value) and exc.value.where == "cp"


def test_nemotron_h_56b_resolves_dense_mlp_layers_and_replays() -> None:
    """Nemotron-H 56B: its ``-`` layers are squared-ReLU MLPs (two GEMMs, not gated), its
    ``M`` layers mixers with 256 heads of state 256; it replays as Megatron-Bridge's 64-GPU
    H100 FP8 recipe lays it out (TP 8) and its model FLOPs per token follow Bridge's count."""
    m = load_model("nemotronh-56b")
    par = ParallelSpec(tp=8, pp=1, dp=8, micro_batch=1, global_batch=64, seq_len=8192, sp=True)
    res = resolve_template(first_principles_template(m), m, par, _flat)
    mlp = [o for o in res.layer(m, m.hybrid_pattern.index("-")).fwd if o.op_class == "gemm"]
    assert [o.name for o in mlp] == ["mlp.fc1", "mlp.fc2"]
    t = 8192
    assert mlp[0].flops == pytest.approx(2 * t * 8192 * 32768 / 8)  # fc1: ffn wide, not 2 x ffn
    assert res.layer(m, 0).params == pytest.approx(mamba_params(m) / 8 + m.hidden, rel=0.01)
    args = ["replay", "--model", "NemotronH_56B", "--cluster", "h100x1024", "--tp", "8",
            "--dp", "8", "--global-batch", "64", "--dtype", "fp8", "--json"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
