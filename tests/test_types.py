"""Names and types a maintainer can trust: ``mypy --strict`` stays clean on the modules of pyproject.toml's
``[tool.mypy]`` ratchet (the core modules at least), and no module of the app imports a name from a module that only
imported it itself (an implicit re-export: ``from fl_core.firstlayer.energy import EnergySettings`` reached the
settings class through the analysis module, which breaks when that module stops importing it)."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

CORE = ("fl_core/errors.py", "fl_core/families.py", "fl_core/results.py", "fl_core/settings.py",
        "fl_core/arguments.py")
"""The modules the ratchet holds at least."""


def test_the_ratchet_holds_the_core_modules() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert config["strict"] is True and set(CORE) <= set(config["files"])


@pytest.mark.slow
def test_mypy_strict_is_clean_on_the_ratchets_modules() -> None:
    pytest.importorskip("mypy")
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]


def module_file(root: Path, module: str) -> Path | None:
    base = root / module.replace(".", "/")
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def exported_names(path: Path) -> tuple[set[str], set[str]]:
    """``(names the module defines or re-exports explicitly, names it merely imports)`` at its top level (``if``
    blocks, ``TYPE_CHECKING`` among them, included)."""
    own: set[str] = set()
    imported: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                own.update(name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name))
                if any(getattr(target, "id", "") == "__all__" for target in targets) and isinstance(
                        node.value, ast.List | ast.Tuple):
                    own.update(item.value for item in node.value.elts if isinstance(item, ast.Constant))
            elif isinstance(node, ast.Import | ast.ImportFrom):
                for alias in node.names:
                    name = alias.asname or alias.name.split(".")[0]
                    (own if alias.asname == alias.name else imported).add(name)  # `import x as x`: explicit
            elif isinstance(node, ast.If | ast.Try):
                visit(node.body)
                visit(node.orelse)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return own, imported - own


def implicit_reexports(root: Path, paths: list[Path]) -> list[str]:
    """``path:line: name from module`` of each import of a FilterLens name from a module that only imported it."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and node.module.split(".")[0] in ("fl_core", "fl_ui")):
                continue
            source = module_file(root, node.module)
            if source is None:
                continue
            own, imported = exported_names(source)
            found += [f"{path.relative_to(root)}:{node.lineno}: {alias.name} from {node.module}"
                      for alias in node.names if alias.name in imported and alias.name not in own
                      and module_file(root, f"{node.module}.{alias.name}") is None]
    return found


@pytest.mark.slow
def test_no_module_of_the_app_uses_an_implicit_reexport() -> None:
    paths = sorted([*REPO.glob("fl_core/**/*.py"), *REPO.glob("fl_ui/**/*.py"), REPO / "app.py"])
    assert implicit_reexports(REPO, paths) == []


def test_an_implicit_reexport_is_found(tmp_path: Path) -> None:
    (tmp_path / "fl_core").mkdir()
    (tmp_path / "fl_core" / "__init__.py").write_text("")
    (tmp_path / "fl_core" / "settings.py").write_text("class EnergySettings: ...\n")
    (tmp_path / "fl_core" / "energy.py").write_text("from fl_core.settings import EnergySettings\ndef f(): ...\n")
    user = tmp_path / "fl_core" / "user.py"
    user.write_text("from fl_core.energy import EnergySettings, f\nfrom fl_core import settings\n")
    assert implicit_reexports(tmp_path, [user]) == ["fl_core/user.py:1: EnergySettings from fl_core.energy"]
