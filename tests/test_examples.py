"""The example notebooks: stored executed (scripts/execute_notebooks.py), every figure with a static rendering that a
repository page and ``nbconvert --to html`` show, and executed again here: a stored output that the notebook no
longer computes fails (its structure and text are compared, numbers to their printed precision, not PNG bytes)."""

from __future__ import annotations

import concurrent.futures
import math
import re
from pathlib import Path

import pytest

from tests.script_modules import REPO, script_module

nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = sorted((REPO / "examples").glob("*.ipynb"))
STATIC = {"image/png", "image/svg+xml", "text/html"}
"""What a repository page or nbconvert shows of a figure (they drop plotly's own output)."""
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def notebook(path: Path):
    """``path`` as a test parameter, named by its file."""
    return pytest.param(path, id=path.name)


def code_cells(path: Path) -> list:
    return [cell for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]


def shown_text(output) -> str:
    """What an output says in text: a stream's text, else the plain-text form of its data."""
    return output.get("text", "") if output.output_type == "stream" else output.get("data", {}).get("text/plain", "")


def outline(cells: list) -> list[list[tuple]]:
    """Per code cell, per output: its kind, its mime types and its text with every number taken out (and runs of
    spaces, which tables widen or narrow with their numbers)."""
    return [[(o.output_type, o.get("name"), sorted(o.get("data", {})),
              re.sub(r"\s+", " ", NUMBER.sub("#", shown_text(o)))) for o in cell.outputs] for cell in cells]


def number_agrees(stored: str, fresh: str) -> bool:
    """Integers exactly; other numbers to two units of the last digit printed, or 1 %."""
    if re.fullmatch(r"[-+]?\d+", stored):
        return stored == fresh
    decimals = re.match(r"[-+]?\d*\.?(\d*)", stored).group(1)
    shown = 0.0 if "e" in stored.lower() else 2 * 10.0 ** -len(decimals)
    return math.isclose(float(stored), float(fresh), rel_tol=1e-2, abs_tol=shown)


@pytest.mark.parametrize("path", [notebook(p) for p in NOTEBOOKS])
def test_the_notebook_is_stored_executed_with_static_figures(path: Path) -> None:
    cells = code_cells(path)
    assert [cell.execution_count for cell in cells] == list(range(1, len(cells) + 1)), "run every cell in order"
    assert not [o for cell in cells for o in cell.outputs if o.output_type == "error"]
    plots = [cell for cell in cells if ".plot(" in cell.source]
    assert plots
    for cell in plots:
        assert any(STATIC & set(o.get("data", {})) for o in cell.outputs), cell.source


def test_the_examples_tour_the_library_and_a_users_own_model() -> None:
    assert [p.name for p in NOTEBOOKS] == ["quickstart.ipynb", "your_model.ipynb"]
    own = "\n".join(cell.source for cell in code_cells(REPO / "examples" / "your_model.ipynb"))
    for call in ("LoadedModel.from_module(", "open_images(str(", "=PATH", "weights:", "analyze_channels(", "device=",
                 "progress=", ".save(", "load_result("):
        assert call.replace("=PATH", "={checkpoint}") in own, call


@pytest.mark.slow
@pytest.mark.parametrize("path", [notebook(p) for p in NOTEBOOKS])
def test_the_stored_outputs_are_what_the_notebook_computes(path: Path, chromium: Path) -> None:
    pytest.importorskip("nbclient")
    pytest.importorskip("kaleido")
    stored = code_cells(path)
    # in a thread of its own: the kernel client's event loop stays there, not in the tests' main thread
    with script_module("scripts/execute_notebooks.py") as script, concurrent.futures.ThreadPoolExecutor(1) as thread:
        fresh = [cell for cell in thread.submit(script.execute, path).result().cells if cell.cell_type == "code"]
    assert outline(fresh) == outline(stored), f"stale outputs: run python scripts/execute_notebooks.py {path.name}"
    for old, new in zip(stored, fresh):
        for a, b in zip(old.outputs, new.outputs):
            numbers = zip(NUMBER.findall(shown_text(a)), NUMBER.findall(shown_text(b)), strict=True)
            assert all(number_agrees(x, y) for x, y in numbers), (old.source, shown_text(a), shown_text(b))
