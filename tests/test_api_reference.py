"""The API reference (mkdocs.yml, generated from the docstrings by docs/reference.py): every public function
documents each of its parameters and every public dataclass each of its fields, in the sections the reference
renders; the site builds with warnings as errors and has an entry for every public ``analyze_*`` function."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys

import pytest

import fl_core
from tests.script_modules import REPO, script_module

griffe = pytest.importorskip("griffe")


with script_module("docs/reference.py") as reference:
    PUBLIC = reference.public_objects() + reference.shared_bases() + reference.returned_types()
    markdown_docstring = reference.markdown_docstring
    API_PAGE = reference.api_page()


def documented(obj: object, kind: str) -> set[str]:
    """The names the ``kind`` sections (``parameters``: Args, ``attributes``: Attributes) of ``obj``'s docstring
    document, as the reference renders them."""
    sections = griffe.Docstring(markdown_docstring(inspect.getdoc(obj) or ""), parser="google").parse()
    return {item.name.lstrip("*") for section in sections if section.kind.value == kind for item in section.value}


def test_every_public_function_documents_its_parameters() -> None:
    functions = [obj for obj in PUBLIC if inspect.isfunction(obj)]
    assert {"analyze_energy", "analyze_channels", "analyze_rescore", "build_report"} <= {f.__name__ for f in functions}
    missing = {f.__name__: sorted(set(inspect.signature(f).parameters) - documented(f, "parameters"))
               for f in functions}
    assert {name: names for name, names in missing.items() if names} == {}


def test_every_public_settings_and_result_class_documents_its_fields() -> None:
    classes = [obj for obj in PUBLIC if inspect.isclass(obj) and dataclasses.is_dataclass(obj)]
    assert {"EnergySettings", "ChannelAxesResult", "RescoreSettings"} <= {c.__name__ for c in classes}
    missing = {}
    for cls in classes:
        described = set().union(*(documented(base, "attributes") for base in cls.__mro__
                                  if base.__module__.startswith("fl_core")))
        missing[cls.__name__] = sorted({f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")}
                                       - described)
    assert {name: names for name, names in missing.items() if names} == {}


def test_the_reference_is_grouped_by_task_with_every_returned_type_and_each_results_plot_kinds() -> None:
    headings = [line[3:] for line in API_PAGE.splitlines() if line.startswith("## ")]
    assert headings == ["Analyses", "Results", "Models and data", "Settings", "Errors"]
    sections = dict(zip(headings, API_PAGE.split("\n## ")[1:]))
    assert "fl_core.channelaxes.analysis.analyze_channels" in sections["Analyses"]
    assert "fl_core.results.Result\n" in sections["Results"] and "ChannelsEstimate" in sections["Results"]
    assert "fl_core.io.layers.ConvLayer" in sections["Models and data"]  # conv_inventory's items
    assert "fl_core.errors.InstallError" in sections["Errors"]
    for obj in PUBLIC:
        if inspect.isclass(obj) and issubclass(obj, fl_core.results.Result) and obj.figure_kinds():
            listed = API_PAGE.split(f"**Plot kinds** of `{obj.__name__}`")[1].split("\n\n")[1]
            assert [line.split("`")[1] for line in listed.splitlines()] == list(obj.figure_kinds()), obj
    assert "`members`: Best-fitting members of one cluster (numbered from 1" in API_PAGE


def test_the_result_base_is_written_for_users() -> None:
    text = inspect.getdoc(fl_core.results.Result)
    assert "_private_fields" not in text and "_figures" not in text
    for method in ("to_frame()", "to_dict()", "plot(kind)", "plot_kinds()", "save(path)", "load_result"):
        assert method in text, method


@pytest.mark.slow
def test_the_reference_builds_strictly_and_names_every_analysis(tmp_path) -> None:
    pytest.importorskip("mkdocstrings_handlers.python")
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                           cwd=REPO, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    page = (tmp_path / "api" / "index.html").read_text(encoding="utf-8")
    analyses = [name for name in fl_core.__all__ if name.startswith("analyze_")]
    assert len(analyses) >= 5
    for name in analyses:
        module = fl_core.__getattr__(name).__module__
        assert f'id="{module}.{name}"' in page, name
    assert (tmp_path / "index.html").read_text(encoding="utf-8").count("FilterLens") > 1  # the README
