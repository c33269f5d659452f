"""The repository cites only itself: no file points at reference documents outside it (``shared/``, DESIGN.md); the
definitions live in docs/methods.md. The only ``shared/`` path left is where the real test fixtures are found."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SUFFIXES = {".py", ".md", ".ipynb", ".toml", ".txt", ".yml", ".yaml", ".cfg"}
SKIPPED = {".venv", ".git", "build", "test-artifacts", "__pycache__"}


def repository_files() -> list[Path]:
    return [p for p in REPO.rglob("*") if p.suffix in SUFFIXES and p.is_file()
            and not SKIPPED & set(p.relative_to(REPO).parts)]


@pytest.mark.slow
def test_no_file_cites_documents_outside_the_repository():
    outside = re.compile(r"shared/(?!fixtures)|DESIGN\.md")
    offenders = [f"{p.relative_to(REPO)}:{n}" for p in repository_files()
                 for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), start=1)
                 if outside.search(line) and p.name != Path(__file__).name]
    assert offenders == []


def test_methods_define_what_the_code_cites():
    methods = (REPO / "docs" / "methods.md").read_text(encoding="utf-8")
    for mark in ("§1", "§3", "§5", "§6", "§7", "B.1", "B.3", "B.5", "B.6", "theory share", "Recovery protocol",
                 "Fitting methods A–D2", "Calibration and evaluation sets", "Where a channel lives"):
        assert mark in methods, mark
