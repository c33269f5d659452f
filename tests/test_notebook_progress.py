"""Progress in a notebook without ipywidgets (this environment has none): FilterLens's bars are plain text, model
loading is one of their messages, and no library prints tqdm's "IProgress not found" warning into the notebook (timm
loads huggingface_hub, which imports ``tqdm.auto``)."""

from __future__ import annotations

import importlib.util
import os

import pytest

from tests.script_modules import REPO

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

CELLS = ("import fl_core\nenergy = fl_core.analyze_energy('demo:tiny_vgg', progress=True)",
         "keys = fl_core.analyze_scale_space('timm:convnext_atto', progress=True)\nprint(len(keys.filters))")


@pytest.mark.slow
def test_a_notebook_without_ipywidgets_shows_text_progress_with_the_model_loading_and_no_warning(tmp_path) -> None:
    assert importlib.util.find_spec("ipywidgets") is None, "this test is about an environment without ipywidgets"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute(
        env={**os.environ, "PYTHONPATH": str(REPO), "FL_DEVICE": "cpu"})
    streams = [(output.name, output.text) for cell in notebook.cells for output in cell.outputs
               if output.output_type == "stream"]
    errors = "".join(text for name, text in streams if name == "stderr")
    assert "IProgress" not in errors and "TqdmWarning" not in errors, errors[-2000:]
    assert "loading demo:tiny_vgg" in errors and "loading timm:convnext_atto" in errors, errors[-2000:]
    assert [text.strip() for name, text in streams if name == "stdout"] == ["8"]
