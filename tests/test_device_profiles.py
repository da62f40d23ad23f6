"""Device profiles a user writes: peaks follow only the documented fallbacks, a profile with
a base names itself, a profile without hbm_GiB warns that memory was not checked, and the
example of docs/devices.md ("Writing a device profile") loads and replays."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tracesim.cli import cli
from tracesim.errors import InputError
from tracesim.hardware.device import PEAK_FALLBACK, get_device, known_devices

ROOT = Path(__file__).resolve().parents[1]
CURVES = {"default": {"compute": [[1.0, 0.7]], "memory": [[1.0, 0.8]]}}
ONLY_FP8 = {"name": "d16", "peak_tflops": {"fp8": 1000}, "hbm_GBps": 2000,
            "launch_overhead_us": 2.5, "efficiency": CURVES}


def _write(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _replay(*args: str) -> tuple[int, list[str], str]:
    res = CliRunner().invoke(cli, ["replay", "--model", "gpt-tiny", "--tp", "1", *args], obj={})
    return res.exit_code, [ln for ln in res.stderr.splitlines() if ln.strip()], res.output


def test_a_dtype_without_a_peak_or_fallback_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "only_fp8.yaml", ONLY_FP8)
    d = get_device(str(path))
    assert d.peak_flops("fp8") == 1000e12 and d.peak_flops("nvfp4") == 1000e12  # nvfp4 -> fp8
    for dtype in ("bf16", "fp32", "int64"):
        with pytest.raises(InputError) as e:
            d.peak_flops(dtype)
        want = f"device.peak_tflops.{dtype}"
        assert (e.value.file, e.value.where) == (str(path), want), e.value.line()
    code, lines, out = _replay("--cluster", "h100x8", "--device", str(path))
    assert code == 2 and len(lines) == 1, out
    assert lines[0].startswith(f"tracesim: error: {path}: device.peak_tflops.fp32: ")


def test_inline_profile_errors_name_the_cluster_file() -> None:
    d = get_device(ONLY_FP8, file="c.yaml", where="device")
    with pytest.raises(InputError, match=r"^c.yaml: device.peak_tflops.bf16: the profile 'd16' "):
        d.peak_flops("bf16")


def test_peaks_follow_the_documented_chain_only() -> None:
    d = get_device({**ONLY_FP8, "peak_tflops": {"fp32": 50, "fp8": 1000}})
    assert d.peak_flops("bf16") == 50e12  # bf16 -> fp32, never the faster fp8
    assert d.peak_flops("fp16") == 50e12
    assert d.peak_flops("mxfp8") == 1000e12


@pytest.mark.parametrize("name", known_devices())
def test_every_shipped_profile_has_a_peak_for_every_dtype(name: str) -> None:
    d = get_device(name)
    for dtype in (*PEAK_FALLBACK, "int64", "fp64"):
        assert d.peak_flops(dtype) > 0


def test_a_profile_with_a_base_names_itself(tmp_path: Path) -> None:
    path = _write(tmp_path / "nameless.yaml", {"base": "h100", "peak_tflops": {"bf16": 500}})
    with pytest.raises(InputError) as e:
        get_device(str(path))
    assert (e.value.file, e.value.where) == (str(path), "device.name")
    assert "missing required key" in e.value.message
    cluster = {"name": "c", "nodes": 1, "gpus_per_node": 8, "device": {"base": "h100"},
               "intra_node": {"kind": "nvswitch", "bandwidth_GBps": 450, "latency_us": 0.6}}
    cpath = _write(tmp_path / "c.yaml", cluster)
    code, lines, out = _replay("--cluster", str(cpath))
    assert code == 2 and lines == [f"tracesim: error: {cpath}: device.name: missing required key "
                                   "(a profile with base: names itself; the base's name is not "
                                   "inherited)"], out


def test_no_hbm_capacity_warns_that_memory_was_not_checked(tmp_path: Path) -> None:
    prof = {**ONLY_FP8, "peak_tflops": {"fp32": 50, "bf16": 400}}
    path = _write(tmp_path / "nohbm.yaml", prof)
    code, _, out = _replay("--cluster", "h100x8", "--device", str(path))
    assert code == 0, out
    assert "warning: memory per GPU not checked: the d16 device profile gives no hbm_GiB" in out
    path = _write(tmp_path / "hbm.yaml", {**prof, "hbm_GiB": 48})
    code, _, out = _replay("--cluster", "h100x8", "--device", str(path))
    assert code == 0 and "not checked" not in out, out


def _doc_section() -> str:
    text = (ROOT / "docs" / "devices.md").read_text()
    return text.split("### Writing a device profile", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]


def test_the_documented_example_profile_loads_and_replays(tmp_path: Path) -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", _doc_section(), flags=re.S)
    assert len(blocks) == 3
    example = tmp_path / "l40s.yaml"
    example.write_text(blocks[0])
    d = get_device(str(example))
    assert (d.name, d.hbm_GiB, d.peak_flops("bf16")) == ("l40s", 48, 362e12)
    assert d.class_efficiency("gemm").compute_curve("bf16").at(1e9) == pytest.approx(0.5)
    code, _, out = _replay("--cluster", "h100x8", "--device", str(example))
    assert code == 0 and "l40s" in out and "not checked" not in out, out
    # the cluster spec of the same section names the profile relative to its own folder
    cluster = tmp_path / "l40s-node.yaml"
    cluster.write_text(blocks[1])
    code, _, out = _replay("--cluster", str(cluster))
    assert code == 0 and "l40s" in out, out
    based = tmp_path / "h100-pcie.yaml"
    based.write_text(blocks[2])
    d = get_device(str(based))
    assert (d.name, d.sm_count, d.hbm_GiB, d.peak_flops("bf16")) == ("h100-pcie", 114, 80, 756e12)
    assert d.efficiency == get_device("h100").efficiency
