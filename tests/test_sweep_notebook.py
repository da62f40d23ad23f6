"""docs/notebooks/sweep.ipynb executes top to bottom (it runs a sweep on a LocalCluster and
asserts on the parquet it reads back)."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("dask.distributed")

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "notebooks" / "sweep.ipynb"


@pytest.mark.slow
def test_sweep_notebook_executes():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any failure
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the Pareto plot
    last = nb.cells[-1]["outputs"][-1]["data"]["text/plain"]
    assert last == "(0, 15)"  # the rerun computed nothing and reused all 15 points
