"""The example notebook: stored without outputs, and executed end to end by the test suite."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "examples" / "quickstart.ipynb"
PLOTLY = "application/vnd.plotly.v1+json"


def test_the_notebook_is_stored_without_outputs():
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert len(code) >= 10
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


@pytest.mark.slow
def test_the_quickstart_notebook_runs():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(notebook, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()  # raises on any error
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    figures = [o for o in outputs if PLOTLY in o.get("data", {})]
    assert len(figures) == 5  # energy, whitening, master keys, scale-space models, swap scores
    text = "\n".join(o.get("data", {}).get("text/plain", "") + o.get("text", "") for o in outputs)
    assert "filters per master key: [" in text and "squeezenet1_0 (random init)" in text
