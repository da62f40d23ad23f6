"""Device names a user types select a shipped profile only by its name or an alias (a
trace's recorded device string is also matched by the profiles' patterns); a profile YAML
named in a cluster spec is read from the cluster file's folder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tracesim.catalog import load_cluster
from tracesim.cli import cli
from tracesim.errors import InputError
from tracesim.hardware.device import get_device
from tracesim.hardware.devicenames import builtin_raw, device_from_properties
from tracesim.sweep.space import load_space

ROOT = Path(__file__).resolve().parents[1]

CLUSTER = {
    "name": "two", "nodes": 2, "gpus_per_node": 8, "device": "h100",
    "intra_node": {"kind": "nvswitch", "bandwidth_GBps": 450, "latency_us": 0.6, "nvls": True},
    "inter_node": {"nics_per_node": 8, "nic_Gbps": 400, "topology": "rail_optimized",
                   "latency_us": 2.7},
}
PCIE = {"base": "h100", "name": "h100-pcie", "peak_tflops": {"fp32": 51, "bf16": 756},
        "hbm_GBps": 2000, "sm_count": 114}

#: names that look like a shipped GPU but are not one of its names or aliases
NOT_SHIPPED = ["H100 PCIe", "h100-pcie", "H100 NVL", "h1000", "h100x", "b200x", "NVIDIA H100 PCIe",
               "Tesla V100-DGXS-32GB", "mi250x"]


def _write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("name", NOT_SHIPPED)
def test_a_typed_name_must_be_a_profile_name_or_alias(name: str) -> None:
    with pytest.raises(InputError) as e:
        get_device(name, file="c.yaml", where="device")
    assert e.value.line().startswith(f"c.yaml: device: unknown device {name!r} (known: a100, ")


@pytest.mark.parametrize("name, profile", [
    ("H100", "h100"), ("nvidia_h100", "h100"), ("H100-SXM5-80GB", "h100"), ("B200", "b200"),
    ("AMD Instinct MI300X", "mi300x"), ("Host-CPU", "host-cpu")])
def test_names_and_aliases_still_select_their_profile(name: str, profile: str) -> None:
    assert get_device(name).name == profile


@pytest.mark.parametrize("recorded, profile", [
    ("NVIDIA H100 PCIe", "h100"), ("Tesla V100-DGXS-32GB", "v100"), ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA GB200 NVL", "gb200")])
def test_recorded_device_strings_keep_the_pattern_search(recorded: str, profile: str) -> None:
    assert get_device(recorded, recorded=True).name == profile
    assert device_from_properties({"name": recorded}) == profile


def test_cluster_device_name_is_strict(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.yaml", {**CLUSTER, "device": "H100 PCIe"})
    with pytest.raises(InputError) as e:
        load_cluster(path)
    assert (e.value.file, e.value.where) == (str(path), "device")
    assert "unknown device 'H100 PCIe'" in e.value.message and "base: h100" in e.value.message
    spec = load_cluster("h100x8")
    with pytest.raises(InputError, match="ClusterSpec.replace: device: unknown device 'h1000'"):
        spec.replace(device="h1000")


def test_base_is_a_profile_name_or_alias(tmp_path: Path) -> None:
    path = _write(tmp_path / "mine.yaml", {"base": "h100x", "name": "d14"})
    with pytest.raises(InputError) as e:
        get_device(str(path))
    assert (e.value.file, e.value.where) == (str(path), "device.base")
    assert "unknown base profile 'h100x'" in e.value.message
    assert get_device({"base": "H100-SXM5-80GB", "name": "x"}).hbm_GBps == 3350


def test_sweep_gpu_name_is_strict(tmp_path: Path) -> None:
    path = _write(tmp_path / "space.yaml",
                  {"base": {"model": "gpt3-1.7b", "cluster": "h100x8", "device": "h100x"}})
    with pytest.raises(InputError) as e:
        load_space(path)
    assert (e.value.file, e.value.where) == (str(path), "base.device")
    assert "unknown device 'h100x'" in e.value.message


def test_cli_device_flag_is_strict() -> None:
    res = CliRunner().invoke(cli, ["replay", "--model", "gpt-tiny", "--cluster", "h100x8",
                                   "--tp", "1", "--device", "h1000"], obj={})
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert lines[0].startswith("tracesim: error: --device: unknown device 'h1000' (known: ")


def test_profile_path_is_relative_to_the_cluster_file(tmp_path: Path, monkeypatch) -> None:
    _write(tmp_path / "specs" / "h100pcie.yaml", PCIE)
    _write(tmp_path / "specs" / "devs" / "other.yaml", {**PCIE, "name": "other"})
    here = _write(tmp_path / "specs" / "two.yaml", {**CLUSTER, "device": "h100pcie.yaml"})
    sub = _write(tmp_path / "specs" / "sub.yaml", {**CLUSTER, "device": "devs/other.yaml"})
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    spec = load_cluster(here)
    assert spec.device == str(tmp_path / "specs" / "h100pcie.yaml")
    assert get_device(spec.device).name == "h100-pcie"
    assert get_device(load_cluster(sub).device).name == "other"
    assert get_device(spec.replace(nodes=4).device).name == "h100-pcie"  # absolute: kept
    res = CliRunner().invoke(cli, ["replay", "--model", "gpt-tiny", "--cluster", str(here),
                                   "--tp", "1", "--dp", "16"], obj={})
    assert res.exit_code == 0, res.output
    assert "h100-pcie" in res.output


def test_missing_profile_names_the_cluster_file_and_key(tmp_path: Path, monkeypatch) -> None:
    _write(tmp_path / "h100pcie.yaml", PCIE)  # in the current directory, not the cluster's
    path = _write(tmp_path / "specs" / "two.yaml", {**CLUSTER, "device": "h100pcie.yaml"})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as e:
        load_cluster(path)
    assert (e.value.file, e.value.where) == (str(path), "device")
    assert "device profile 'h100pcie.yaml' not found" in e.value.message
    assert str(tmp_path / "specs" / "h100pcie.yaml") in e.value.message


def test_bad_profile_named_by_a_cluster_names_the_profile_file(tmp_path: Path) -> None:
    prof = _write(tmp_path / "bad.yaml", {**PCIE, "hbm_GBps": 0})
    path = _write(tmp_path / "c.yaml", {**CLUSTER, "device": "bad.yaml"})
    with pytest.raises(InputError) as e:
        load_cluster(path)
    assert (e.value.file, e.value.where) == (str(prof), "device.hbm_GBps")


def test_documented_aliases_are_the_shipped_ones() -> None:
    """docs/devices.md's table of names and aliases lists every shipped profile's."""
    text = (ROOT / "docs" / "devices.md").read_text()
    rows = dict(re.findall(r"^\| `([\w.-]+)` \| ((?:`[^`]+`(?:, )?)*) \|$", text, flags=re.M))
    for name, data in builtin_raw().items():
        assert name in rows, name
        assert re.findall(r"`([^`]+)`", rows[name]) == list(data.get("aliases") or []), name
