"""A new analysis family reaches every door from its package and one registration (issue 41's bar).

The test copies the repository (its tracked files and those not ignored, as they are in the working tree) into a
temporary folder, adds the filter-norm family of ``tests/data/filternorms/`` as an author adds one
(docs/DEVELOPING.md, "Adding an analysis family": the package, the command module, one ``register_family`` call
appended to ``fl_core/families.py``, then ``python scripts/api_types.py``, which writes the type checker's view from
the registry), and checks in that copy, each door in a subprocess: the public API and ``mypy --strict`` on a user's
script, the command line, the survey, the report (JSON and HTML), the API reference, the app's family-keyed dicts,
private internals and the core modules' types.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.test_contract import MYPY_CONFIG
from tests.test_internals import modules_reaching_private_internals

TOY = REPO / "tests" / "data" / "filternorms"
PACKAGE_FILES = ("__init__.py", "settings.py", "analysis.py", "plots.py")
TIMEOUT_S = 600


def repository_files(root: Path) -> list[str]:
    """The repository's files as a clone of the working tree holds them: tracked ones and untracked ones git does not
    ignore (deleted ones left out)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.decode().split("\0")
    return [name for name in listed if name and (root / name).is_file()]


def copy_repository(destination: Path) -> Path:
    for name in repository_files(REPO):
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    return destination


def add_toy_family(clone: Path) -> None:
    """What the author of the filter-norm family writes: its package, its command and one registration."""
    package = clone / "fl_core" / "filternorms"
    package.mkdir()
    for name in PACKAGE_FILES:
        shutil.copy2(TOY / name, package / name)
    shutil.copy2(TOY / "command.py", clone / "fl_core" / "cli" / "filternorms.py")
    families = clone / "fl_core" / "families.py"
    families.write_text(families.read_text(encoding="utf-8") + (TOY / "registration.py").read_text(encoding="utf-8"),
                        encoding="utf-8")


def run_in(clone: Path, *command: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """``command`` with the clone's code first on the path (``python`` is this interpreter; ``filterlens`` the
    installed command, else ``python -m fl_core``)."""
    if command[0] == "filterlens":
        installed = shutil.which("filterlens", path=str(Path(sys.executable).parent))
        command = (installed, *command[1:]) if installed else ("python", "-m", "fl_core", *command[1:])
    argv = [sys.executable if command[0] == "python" else command[0], *command[1:]]
    env = {**os.environ, "PYTHONPATH": str(clone), "FL_DEVICE": "cpu", "MPLBACKEND": "Agg"}
    done = subprocess.run(argv, cwd=cwd or clone, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert not check or done.returncode == 0, (command, done.stdout[-3000:], done.stderr[-3000:])
    return done


def mypy_strict(clone: Path, script: Path, folder: Path) -> subprocess.CompletedProcess:
    """``mypy --strict`` on a user's script, fl_core's modules followed from the clone (as on an installed wheel)."""
    (folder / "mypy.ini").write_text(MYPY_CONFIG)
    shutil.copy2(script, folder / "script.py")
    env = {**os.environ, "MYPYPATH": str(clone)}
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir",
                           str(folder / "cache"), "script.py"], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def dicts_keyed_by_families(root: Path, families: set[str]) -> list[tuple[str, int, set[str]]]:
    """``(module, line, keys)`` of every dict in ``fl_ui`` whose keys name three or more of ``families``."""
    found = []
    for path in sorted(root.glob("fl_ui/**/*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict):
                keys = {key.value for key in node.keys if isinstance(key, ast.Constant) and isinstance(key.value, str)}
            elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "dict":
                keys = {keyword.arg for keyword in node.keywords if keyword.arg}
            else:
                continue
            if len(keys & families) >= 3:
                found.append((path.relative_to(root).as_posix(), node.lineno, keys & families))
    return found


@pytest.mark.slow
def test_a_new_family_reaches_every_door_from_its_registration(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    pytest.importorskip("mkdocstrings_handlers.python")
    clone = copy_repository(tmp_path / "clone")
    add_toy_family(clone)
    run_in(clone, "python", "scripts/api_types.py")  # the type checker's view, from the registry
    changed = subprocess.run(["git", "diff", "--no-index", "--stat", str(REPO / "fl_core" / "__init__.py"),
                              str(clone / "fl_core" / "__init__.py")], capture_output=True, text=True).stdout
    assert "3 insertions(+)" in changed and "deletion" not in changed  # entry point, settings, result

    # the public API: in __all__, and it runs
    api = run_in(clone, "python", "-c", (
        "import fl_core, json; r = fl_core.analyze_filter_norms('demo:tiny_vgg', progress=False); "
        "f = r.to_frame(); print(json.dumps(['analyze_filter_norms' in fl_core.__all__, len(f), list(f.columns[:2]), "
        "r.plot_kinds()]))"))
    in_all, rows, first, kinds = json.loads(api.stdout.splitlines()[-1])
    assert in_all and rows == 416 and first == ["model", "spec"] and kinds == ["norms", "zeros"]

    # the type checker sees the family's own signature
    checked = tmp_path / "mypy"
    checked.mkdir()
    correct = mypy_strict(clone, TOY / "script.py", checked)
    assert correct.returncode == 0, correct.stdout
    wrong = mypy_strict(clone, TOY / "script_wrong.py", checked)
    assert wrong.returncode == 1 and '"zero_tol" to "analyze_filter_norms" has incompatible type "str"' in wrong.stdout

    # the command line
    out = tmp_path / "out"
    out.mkdir()
    run_in(clone, "filterlens", "filternorms", "--model", "demo:squeezenet1_0", "--json",
           str(out / "norms.json"), "--quiet")
    norms = json.loads((out / "norms.json").read_text())
    assert norms["spec"] == "demo:squeezenet1_0" and len(norms["layers"]) == 26

    # the survey: its measure, over two models
    run_in(clone, "filterlens", "survey", "--family", "filternorms", "--model", "demo:tiny_vgg",
           "--model", "demo:squeezenet1_0", "--workers", "1", "--set", "zero_tol=0.5", "--json",
           str(out / "survey.json"), "--quiet")
    survey = json.loads((out / "survey.json").read_text())
    assert [row["spec"] for row in survey["rows"]] == ["demo:tiny_vgg", "demo:squeezenet1_0"]
    for row in survey["rows"]:
        assert row["error"] is None and set(row["values"]) == {"filters", "near_zero_share", "median_norm"}, row
        assert row["values"]["filters"] > 0 and row["values"]["median_norm"] > 0
    assert survey["settings"]["family_settings"]["zero_tol"] == 0.5
    help_text = run_in(clone, "filterlens", "survey", "--help").stdout
    assert "filternorms (filter norms)" in " ".join(help_text.split())

    # the report: its section in the JSON and the HTML
    run_in(clone, "filterlens", "report", "--model", "demo:tiny_vgg", "--max-images", "2", "--seeds",
           "2", "--json", str(out / "report.json"), "--html", str(out / "report.html"), "--quiet")
    report = json.loads((out / "report.json").read_text())
    assert report["filternorms"]["spec"] == "demo:tiny_vgg" and "filternorms" not in report["skipped"]
    page = (out / "report.html").read_text(encoding="utf-8")
    assert '<section id="filternorms"><h2>Filter norms</h2>' in page and "Near-zero filters pass" in page

    # the dashboard's Report page shows the section (its AppTest, which checks every registered family's section)
    run_in(clone, "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "", "tests/pages/test_report.py::"
           "test_the_selected_model_is_reported_with_a_preview_and_its_downloads")

    # the app: no dict keyed by three or more families lacks the new one
    families = set(json.loads(run_in(clone, "python", "-c", (
        "import json; from fl_core.families import FAMILIES; print(json.dumps(list(FAMILIES)))")).stdout))
    assert "filternorms" in families
    assert [found for found in dicts_keyed_by_families(clone, families) if "filternorms" not in found[2]] == []

    # the API reference names the entry point
    run_in(clone, "python", "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site"))
    assert 'id="fl_core.filternorms.analysis.analyze_filter_norms"' in (
        tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")

    # private Streamlit and threading internals from one module; the core modules strictly typed
    assert set(modules_reaching_private_internals(clone)) == {"fl_ui/internals.py"}
    run_in(clone, "python", "-m", "mypy")  # [tool.mypy] of pyproject.toml: the core modules, --strict
