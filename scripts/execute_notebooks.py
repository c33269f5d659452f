"""Execute the example notebooks and store them with their outputs (run from the repository root, with
requirements-dev.txt installed and Chromium at ``FL_CHROMIUM``, default /usr/bin/chromium).

    python scripts/execute_notebooks.py [examples/NAME.ipynb ...]     (default: every examples/*.ipynb)

Each figure is stored twice: as plotly's own output (interactive in Jupyter) and as a PNG (plotly's static export,
kaleido driving the Chromium), so that a repository page and ``jupyter nbconvert --to html`` show it. The notebooks
themselves draw with the reader's default renderer: the PNGs come from this kernel's set-up, not from their code.
The kernel runs on the CPU (``FL_DEVICE=cpu``), so the stored numbers are the CPU's. What goes to stderr (warnings
naming local paths, progress bars) depends on the machine and is not stored. tests/test_examples.py executes the
notebooks the same way and fails when a stored output is stale.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
CHROMIUM = os.environ.get("FL_CHROMIUM", "/usr/bin/chromium")
KERNEL_SETUP = ("import warnings, kaleido, plotly.io as pio; "
                "pio.renderers.default = 'plotly_mimetype+png'; "
                "warnings.filterwarnings('ignore', message='The kopts argument is ignored'); "
                "kaleido.start_sync_server(silence_warnings=True)")
"""Run in the kernel before the first cell: every figure shown gets a PNG, drawn by one Chromium kept open."""
TIMEOUT_S = 900
"""Per cell."""


def execute(path: Path) -> nbformat.NotebookNode:
    """The notebook at ``path`` executed from its folder, every figure with a PNG, without stderr outputs."""
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=TIMEOUT_S, kernel_name="python3", record_timing=False,
                   extra_arguments=[f"--InteractiveShellApp.exec_lines={KERNEL_SETUP}"],
                   resources={"metadata": {"path": str(path.parent)}}
                   ).execute(env={**os.environ, "FL_DEVICE": "cpu", "BROWSER_PATH": CHROMIUM})
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if not (o.output_type == "stream" and o.name == "stderr")]
    return notebook


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, default=sorted(EXAMPLES.glob("*.ipynb")))
    for path in parser.parse_args().notebooks:
        nbformat.write(execute(path.resolve()), path)
        print(f"{path}: executed and stored", file=sys.stderr)


if __name__ == "__main__":
    main()
