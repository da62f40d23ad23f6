"""The YAML reader: numbers in exponent form are numbers (YAML 1.2), a key given twice in
one mapping is an InputError naming file, line and key, and libyaml still parses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tracesim.catalog import load_cluster, load_model
from tracesim.errors import InputError
from tracesim.fileio import YAML_MAX_NODES, _SafeLoader, read_yaml, write_yaml

CLUSTER = """name: two
nodes: 2
gpus_per_node: 8
device: h100
intra_node: {kind: nvswitch, bandwidth_GBps: 450, latency_us: 0.6, nvls: true}
inter_node:
  nics_per_node: 8
  nic_Gbps: NIC
  topology: rail_optimized
  latency_us: 2.7
"""


@pytest.mark.parametrize("text, value", [
    ("1e9", 1e9), ("4e2", 400.0), ("1.5e9", 1.5e9), ("-1e-3", -1e-3), ("+2E3", 2000.0),
    (".5e3", 500.0), ("1.0e+9", 1e9), ("400", 400), ("4.0", 4.0), ("1_000", 1000),
    ("e9", "e9"), ("1e", "1e"), ("4e2x", "4e2x"), ("'1e9'", "1e9"), (".inf", float("inf"))])
def test_exponent_numbers_are_floats(tmp_path: Path, text: str, value: object) -> None:
    p = tmp_path / "v.yaml"
    p.write_text(f"v: {text}\n")
    got = read_yaml(p)["v"]
    assert got == value and type(got) is type(value)


def test_nic_gbps_in_exponent_form(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(CLUSTER.replace("NIC", "4e2"))
    assert load_cluster(p).inter_node.nic_Gbps == 400.0  # type: ignore[union-attr]


def test_the_loader_keeps_libyaml_and_pyyaml_unchanged() -> None:
    if hasattr(yaml, "CSafeLoader"):
        assert issubclass(_SafeLoader, yaml.CSafeLoader)
    assert yaml.safe_load("v: 1e9") == {"v": "1e9"}  # PyYAML's own loader is not modified


def test_strings_that_read_as_numbers_are_quoted_on_write(tmp_path: Path) -> None:
    data = {"commit": "5067e12", "size": 1e9, "name": "4e2x"}
    write_yaml(tmp_path / "w.yaml", data)
    assert read_yaml(tmp_path / "w.yaml") == data


def test_a_duplicate_key_names_file_line_and_key(tmp_path: Path) -> None:
    p = tmp_path / "m.yaml"
    p.write_text("name: m\nfamily: gpt\nlayers: 2\nhidden: 64\nheads: 2\nvocab: 10\n"
                 "seq_len: 8\nlayers: 4\n")
    with pytest.raises(InputError) as e:
        load_model(p)
    assert (e.value.file, e.value.where) == (str(p), "line 8")
    assert e.value.message == "invalid YAML: duplicate key 'layers' (first on line 3)"
    p.write_text("a: {x: 1, y: 2, x: 3}\n")
    with pytest.raises(InputError, match=r"m.yaml: line 1: invalid YAML: duplicate key 'x'"):
        read_yaml(p)
    p.write_text("a:\n  b: 1\n  c: 2\nb: 1\nc:\n  b: 1\n")  # the same key in other mappings
    assert read_yaml(p) == {"a": {"b": 1, "c": 2}, "b": 1, "c": {"b": 1}}


def test_merge_keys_may_be_overridden(tmp_path: Path) -> None:
    p = tmp_path / "m.yaml"
    p.write_text("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  x: 5\n")
    assert read_yaml(p) == {"base": {"x": 1, "y": 2}, "d": {"x": 5, "y": 2}}


def test_alias_guards_still_hold(tmp_path: Path) -> None:
    p = tmp_path / "r.yaml"
    p.write_text("a: &r [1, *r]\n")
    with pytest.raises(InputError, match="recursive YAML alias"):
        read_yaml(p)
    bomb = "[" + ", ".join(
        ['&a ["x","x","x","x","x","x","x","x","x"]']
        + [f"&{n} [" + ",".join([f"*{q}"] * 9) + "]" for q, n in zip("abcdefg", "bcdefgh", strict=True)]
    ) + "]"  # 9**8 values
    assert 9**8 > YAML_MAX_NODES
    p.write_text(f"a: {bomb}\n")
    with pytest.raises(InputError, match="expand to more than"):
        read_yaml(p)
