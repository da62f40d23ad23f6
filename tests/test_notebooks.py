"""docs/notebooks/nic_bandwidth.ipynb and layout_llama70b.ipynb execute top to bottom, and
their key numbers hold (each notebook's last cell prints ``SUMMARY <json>``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "docs" / "notebooks"


def _run(name: str) -> tuple[dict, list]:
    path = NOTEBOOKS / name
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any failure
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    line = next(ln for ln in text.splitlines() if ln.startswith("SUMMARY "))
    return json.loads(line[len("SUMMARY "):]), outputs


@pytest.mark.slow
def test_nic_bandwidth_notebook():
    s, outputs = _run("nic_bandwidth.ipynb")
    assert any("image/png" in o.get("data", {}) for o in outputs)
    it = s["iteration_s"]
    for dev in ("H100", "H100/3"):
        # a faster NIC is never slower, and 100 -> 400 Gb/s gains something measurable
        assert it[f"{dev}@400"] <= it[f"{dev}@200"] <= it[f"{dev}@100"]
        assert s["gains"][dev]["100->400"] > 0.001
        print(f"{dev}: 200->400 Gb/s {s['gains'][dev]['200->400']:+.2%}, "
              f"100->400 Gb/s {s['gains'][dev]['100->400']:+.2%}")
    for nic in (100, 200, 400):  # a third of the compute is slower, but less than 3x
        assert it[f"H100@{nic}"] < it[f"H100/3@{nic}"] < 3 * it[f"H100@{nic}"]


@pytest.mark.slow
def test_layout_notebook():
    s, outputs = _run("layout_llama70b.ipynb")
    assert any("image/png" in o.get("data", {}) for o in outputs)
    rows = s["table"]
    assert len(rows) == s["n_layouts"] == 19 and s["n_fit"] >= 1
    best = s["best_fit"]
    fits = [r for r in rows if r["fits"]]
    assert best["memory_GiB"] <= 80.0
    assert best["iteration_s"] == min(r["iteration_s"] for r in fits)
    for r in rows:
        assert r["tp"] * r["pp"] * r["dp"] == 256
    # larger TP exposes more TP communication; deeper pipelines have a larger bubble
    tp = s["exposed_tp_by_tp"]
    assert tp["2"] < tp["4"] < tp["8"]
    pp = s["bubble_by_pp"]
    assert pp["2"] < pp["4"] < pp["8"]
    print(f"best layout that fits: {best}")
