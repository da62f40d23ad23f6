"""docs/notebooks/nic_bandwidth.ipynb, layout_llama70b.ipynb and fabric_sensitivity.ipynb
execute top to bottom, and
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
    assert best["iteration_s"] == pytest.approx(min(r["iteration_s"] for r in fits), rel=1e-12)
    for r in rows:
        assert r["tp"] * r["pp"] * r["dp"] == 256
    # larger TP exposes more TP communication; deeper pipelines have a larger bubble
    tp = s["exposed_tp_by_tp"]
    assert tp["2"] < tp["4"] < tp["8"]
    pp = s["bubble_by_pp"]
    assert pp["2"] < pp["4"] < pp["8"]
    print(f"best layout that fits: {best}")


@pytest.mark.slow
def test_fabric_sensitivity_notebook():
    s, outputs = _run("fabric_sensitivity.ipynb")
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 3
    assert s["networks"] == ["flow"] and min(s["gpus"]) >= 1024
    it, dp = s["iteration_s"], s["exposed_dp_s"]
    for lay in ("PP-heavy", "DP-heavy"):
        sl = [it[f"{lay}|spine_leaf oversubscription|{o}"] for o in (1, 2, 4, 8)]
        rail = [it[f"{lay}|rail_optimized oversubscription|{o}"] for o in (1, 2, 4, 8)]
        nic = [it[f"{lay}|NIC Gb/s|{n}"] for n in (100, 200, 400, 800)]
        # oversubscription never helps; rails keep rings off the spine (within 1%)
        assert all(a <= b * (1 + 1e-9) for a, b in zip(sl, sl[1:], strict=False))
        assert max(rail) <= rail[0] * 1.01
        assert all(a > b for a, b in zip(nic, nic[1:], strict=False))  # a faster NIC is faster
        ecmp, adaptive = it[f"{lay}|routing|ecmp"], it[f"{lay}|routing|adaptive"]
        assert ecmp >= adaptive
        assert it[f"{lay}|rail_optimized routing|ecmp"] <= rail[0] * 1.01
    # the DP rings: a blocking spine (o = 8) and ECMP collisions slow them, 400 -> 200 Gb/s doubles them
    assert it["DP-heavy|spine_leaf oversubscription|8"] > 1.5 * it["DP-heavy|spine_leaf oversubscription|1"]
    assert it["DP-heavy|routing|ecmp"] > 2 * it["DP-heavy|routing|adaptive"]
    assert dp["DP-heavy|NIC Gb/s|200"] > 1.8 * dp["DP-heavy|NIC Gb/s|400"]
    # an NVL72 domain keeps most of a DP ring on NVLink
    nv8, nv72 = it["PP-heavy|NVLink domain|8 (144 x 8)"], it["PP-heavy|NVLink domain|72 (16 x NVL72)"]
    assert nv72 < nv8
    assert dp["PP-heavy|NVLink domain|72 (16 x NVL72)"] < dp["PP-heavy|NVLink domain|8 (144 x 8)"]
    print(f"DP-heavy: o=8 {it['DP-heavy|spine_leaf oversubscription|8']:.3f} s, "
          f"ecmp {it['DP-heavy|routing|ecmp']:.3f} s, adaptive {it['DP-heavy|routing|adaptive']:.3f} s")
