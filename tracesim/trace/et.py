"""Reading PyTorch ExecutionTraceObserver files and joining them to the op table.

Two schema generations are read: ``1.0.x`` (flat node fields: ``parent``, ``rf_id``,
``inputs`` as a list with ``input_shapes`` / ``input_types``) and ``1.1.x-chakra`` (``ctrl_deps``,
``inputs`` / ``outputs`` as ``{values, shapes, types, strides}``, ``attrs`` list). A tensor
value is ``[tensor_id, storage_id, offset, numel, elem_bytes, device]``.

Join: an ET node and a Kineto cpu_op are the same call when the node's ``rf_id`` equals the
op's ``Record function id`` (newer traces) or its ``External id`` (older traces, where the
two coincide); the names must agree.

Data dependencies: walking the operator nodes (those with no child operator) in execution
order, a node that reads a storage last written by another node depends on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracesim.errors import InputError
from tracesim.trace.kineto import load_json_file


def read_et(path: str | Path) -> pd.DataFrame:
    """Read an execution trace into a table: node_id, name, rf_id, parent, tid,
    inputs / outputs (lists of storage ids of tensor arguments)."""
    data = load_json_file(path)
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, list):
        raise InputError("not a PyTorch execution trace: no 'nodes' list", path, "nodes")
    rows = []
    for k, n in enumerate(nodes):
        if not isinstance(n, dict) or not isinstance(n.get("id"), int) or not isinstance(n.get("name"), str):
            raise InputError("node without an integer 'id' and a string 'name'", path, f"nodes[{k}]")
        attrs = {a.get("name"): a.get("value") for a in n.get("attrs", []) if isinstance(a, dict)}
        rf = n.get("rf_id", attrs.get("rf_id", -1))
        parent = n.get("ctrl_deps", n.get("parent", -1))
        tid = n.get("tid", attrs.get("tid", -1))
        rows.append({
            "node_id": int(n["id"]),
            "name": n["name"],
            "rf_id": int(rf) if isinstance(rf, int) else -1,
            "parent": int(parent) if isinstance(parent, int) else -1,
            "tid": int(tid) if isinstance(tid, int) else -1,
            "inputs": _storages(n.get("inputs")),
            "outputs": _storages(n.get("outputs")),
        })
    return pd.DataFrame(rows, columns=["node_id", "name", "rf_id", "parent", "tid", "inputs", "outputs"])


def _storages(value: Any) -> list[int]:
    """Storage ids of the tensor arguments in an ET ``inputs`` / ``outputs`` field."""
    if isinstance(value, dict):
        value = value.get("values", [])
    out: list[int] = []

    def walk(v: Any, depth: int = 0) -> None:
        if depth > 4 or not isinstance(v, list):
            return
        if len(v) == 6 and all(isinstance(x, int) for x in v[:5]) and isinstance(v[5], str):
            out.append(int(v[1]))
            return
        for x in v:
            walk(x, depth + 1)

    walk(value if isinstance(value, list) else [])
    return out


def data_dependencies(et: pd.DataFrame) -> list[tuple[int, int]]:
    """(producer rf_id, consumer rf_id) pairs between operator (leaf) nodes."""
    if et.empty:
        return []
    has_child = set(et["parent"].tolist())
    leaves = et[~et["node_id"].isin(has_child) & (et["rf_id"] >= 0)].sort_values("node_id")
    writer: dict[int, int] = {}
    deps: list[tuple[int, int]] = []
    for rf, ins, outs in zip(leaves["rf_id"], leaves["inputs"], leaves["outputs"], strict=True):
        seen = set()
        for s in ins:
            w = writer.get(s)
            if w is not None and w != rf and w not in seen:
                deps.append((w, int(rf)))
                seen.add(w)
        for s in outs:
            writer[s] = int(rf)
    return deps


def join_rate(et: pd.DataFrame, op_table: pd.DataFrame) -> float:
    """Fraction of ET operator nodes that found their Kineto op (same id and name)."""
    ops = op_table[op_table["cat"] == "cpu_op"]
    key = np.where(ops["rf_id"].to_numpy() >= 0, ops["rf_id"].to_numpy(), ops["external_id"].to_numpy())
    by_id = dict(zip(key.tolist(), ops["name"].tolist(), strict=True))
    nodes = et[et["name"].str.startswith("aten::")]
    if nodes.empty:
        return 0.0
    hits = sum(by_id.get(int(r)) == n for r, n in zip(nodes["rf_id"], nodes["name"], strict=True))
    return hits / len(nodes)


def event_key(op_table: pd.DataFrame) -> np.ndarray:
    """The id an ET node's rf_id is compared with, per op-table row (-1 for non cpu_ops)."""
    rf = op_table["rf_id"].to_numpy()
    ext = op_table["external_id"].to_numpy()
    key = np.where(rf >= 0, rf, ext)
    return np.where(op_table["cat"].to_numpy() == "cpu_op", key, -1)
