"""The Saved results page's folder (``filterlens app --results DIR``, ``FL_RESULTS_DIR`` on a server): the ``.flr``
files a notebook or a page saved there (``result.save(path)``), newest first, each loaded once per version
(``fl_core.load_result``, under the session's path policy) and named by its analysis family and models."""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fl_core.families import FAMILIES
from fl_core.io.paths import check_readable, path_policy
from fl_core.io.resultfiles import load_result
from fl_core.results import MODEL_COLUMNS, Result
from fl_ui.memo import memoize

SUFFIX = ".flr"
"""What ``result.save(path)`` is named by convention, and what the page lists."""
MAX_LISTED = 500
"""The most files the page lists (the newest)."""


@dataclass(frozen=True)
class SavedFile:
    """One ``.flr`` file of the folder: its path, its name relative to the folder, size and modification time."""

    path: Path
    name: str
    size: int
    modified: float


def saved_files(folder: Path) -> list[SavedFile]:
    """The ``.flr`` files under ``folder`` (subfolders included) that this session may read, newest first, at most
    :data:`MAX_LISTED`; the folder itself is checked against the path policy first."""
    folder = check_readable(folder)
    found = []
    for path in folder.rglob(f"*{SUFFIX}"):
        if path.is_file() and path_policy().error(path) is None:
            stat = path.stat()
            found.append(SavedFile(path, path.relative_to(folder).as_posix(), stat.st_size, stat.st_mtime))
    return sorted(found, key=lambda file: (-file.modified, file.name))[:MAX_LISTED]


@memoize(max_entries=8)
def _loaded(path: str, size: int, modified: float) -> Result:
    return load_result(path)


def saved_result(file: SavedFile) -> Result:
    """The result in ``file``, loaded once per version of it (path, size, modification time)."""
    check_readable(file.path)
    return _loaded(str(file.path), file.size, file.modified)


def family_of(result: Result) -> str:
    """The analysis family whose result ``result`` is (its registered name, ``energy``), else its class name."""
    name = f"{type(result).__module__}:{type(result).__name__}"
    return next((family for family, entry in FAMILIES.items() if entry.result == name), type(result).__name__)


def models_of(result: Result) -> list[str]:
    """The models a result describes, ``label (spec)`` each: from its table's model columns, else its own ``label``
    and ``spec``."""
    frame = result.to_frame()
    if set(MODEL_COLUMNS) <= set(frame.columns):
        pairs = frame[list(MODEL_COLUMNS)].drop_duplicates().itertuples(index=False)
    else:
        pairs = [(getattr(result, "label", None), getattr(result, "spec", None))]
    return [f"{label} ({spec})" if label and spec and label != spec else str(label or spec)
            for label, spec in pairs if label or spec]


def files_frame(files: list[SavedFile]) -> pd.DataFrame:
    """The folder's listing: file, size in KB, modification time."""
    return pd.DataFrame({"file": [file.name for file in files], "KB": [round(file.size / 1024, 1) for file in files],
                         "saved": pd.to_datetime([file.modified for file in files], unit="s").strftime(
                             "%Y-%m-%d %H:%M")})


def figure_explanation(result: Result, kind: str) -> str:
    """What a figure of ``result`` shows: the first paragraph of its figure function's docstring, as Markdown."""
    module, function = type(result)._figures[kind].split(":")
    text = (inspect.getdoc(getattr(importlib.import_module(module), function)) or "").split("\n\n")[0]
    return re.sub(r":\w+:`~?([^`]+)`", r"`\1`", " ".join(text.split())).replace("``", "`")
