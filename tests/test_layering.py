"""fl_core is the science: it imports neither Streamlit nor the job engine (Dask), and the app's engine modules
import each other one way only."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

APP_ONLY = ("streamlit", "distributed", "dask")
"""Top-level packages the library may never import when it is imported."""


def _imports(path: Path) -> list[tuple[str, bool]]:
    """Every module a file imports, with whether the import is at module level (not inside a function)."""
    tree = ast.parse(path.read_text())
    nested = {id(node) for func in ast.walk(tree) if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef))
              for node in ast.walk(func)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) not in nested) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append((node.module or "", id(node) not in nested))
    return found


@pytest.mark.slow
def test_the_library_never_imports_streamlit_and_imports_the_engine_only_inside_a_command() -> None:
    """The app too: only ``filterlens app`` starts it, inside its command (fl_ui.serve.main)."""
    for path in sorted((REPO / "fl_core").rglob("*.py")):
        for module, top_level in _imports(path):
            root = module.split(".")[0]
            assert root != "streamlit", f"{path} imports {module}"
            assert not (root in APP_ONLY and top_level), f"{path} imports {module} at import time"
            app_command = path == REPO / "fl_core" / "cli" / "app.py" and module == "fl_ui.serve" and not top_level
            assert root != "fl_ui" or app_command, f"{path} imports the app ({module})"


@pytest.mark.slow
def test_importing_every_library_module_pulls_in_neither_streamlit_nor_the_engine() -> None:
    code = ("import importlib, pkgutil, sys, fl_core\n"
            "for m in pkgutil.walk_packages(fl_core.__path__, 'fl_core.'):\n"
            "    if m.name != 'fl_core.__main__':\n"
            "        importlib.import_module(m.name)\n"
            f"print(sorted({{n.split('.')[0] for n in sys.modules}} & {set(APP_ONLY)!r}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_the_engine_modules_import_each_other_one_way() -> None:
    """worker ← engine ← memo ← cache, jobs ← cache: the worker side never imports the client side or the jobs (the
    model cache and the janitor, of both sides, import no app module)."""
    def app_imports(name: str) -> set[str]:
        return {m for m, _ in _imports(REPO / "fl_ui" / f"{name}.py") if m.startswith("fl_ui.")}

    assert app_imports("memory") == app_imports("model_cache") == set()
    assert app_imports("worker") <= {"fl_ui.memory", "fl_ui.model_cache"}
    assert app_imports("cluster") == set()
    assert app_imports("engine") <= {"fl_ui.worker", "fl_ui.cluster"}
    assert app_imports("memo") <= {"fl_ui.engine", "fl_ui.sessions"}
    assert "fl_ui.jobs" not in app_imports("engine") and "fl_ui.cache" not in app_imports("jobs")


HEAVY = ("torch", "torchvision", "timm", "numpy", "pandas", "scipy", "plotly")
"""What the settings classes never need: the command line parses and checks options before any of them loads."""
LIGHT_MODULES = ("fl_core", "fl_core.settings", *sorted(
    ".".join(path.relative_to(REPO).with_suffix("").parts) for path in (REPO / "fl_core").rglob("settings.py")))


def test_every_settings_module_imports_without_torch() -> None:
    code = (f"import importlib, sys\nfor m in {LIGHT_MODULES!r}:\n    importlib.import_module(m)\n"
            f"print(sorted({{n.split('.')[0] for n in sys.modules}} & {set(HEAVY)!r}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]" and len(LIGHT_MODULES) >= 8, (done.stdout, LIGHT_MODULES)
