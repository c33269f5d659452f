"""How the documentation site is made from the repository (a MkDocs hook and a griffe extension, see mkdocs.yml).

* The API reference page ``api.md`` is generated from :data:`fl_core.PUBLIC_API`, so it lists exactly the public
  names, grouped by task (:data:`TASKS`: analyses, results, models and data, settings, errors), with the types public
  functions return and the bases public classes inherit from without being public themselves, each result's plot
  kinds listed under it, and follows the API as it changes.
* The home page ``index.md`` is the README.
* A link from a page to a repository file outside ``docs/`` (the README aside) becomes the file's path in code: the
  site does not hold it.
* Docstrings cite with Sphinx roles (``:class:`~fl_core.io.models.LoadedModel```): a cited public name becomes a link
  to its entry, anything else its name in code; an entry documenting several names (``a, b: text``) becomes one per
  name.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

from griffe import Extension
from mkdocs.structure.files import File

import fl_core

REPO = Path(__file__).resolve().parent.parent
DOCUMENTED = {f"{module}.{name}": f"{module}.{name}" for module, names in fl_core.PUBLIC_API.items() for name in names}
"""Identifier of each entry of the API page (its module path)."""
DOCUMENTED |= {f"fl_core.{name}": target for target in list(DOCUMENTED) for name in [target.rsplit(".", 1)[1]]}
ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|obj|exc):`(~?)([\w.]+)`")
SECTION = re.compile(r"^\s*(Args|Attributes):\s*$")
SHARED_ENTRY = re.compile(r"^(\s*)(\w+(?:,\s*\w+)+):\s*(.*)$")
LINK = re.compile(r"(\[[^\]]*\])\(([^)#\s]+)(#[^)\s]*)?\)")


TASKS = {
    "Analyses": "Each analysis family's entry point, in the one call shape `analyze_<family>(models_or_model, "
                "data=None, settings=None, *, device=None, progress=None, **setting_overrides)`, and the functions "
                "that compute one part of an analysis on their own.",
    "Results": "What the analyses return: frozen dataclasses with `to_frame()`, `to_dict()`, `plot(kind)` and "
               "`save(path)` (the shared `Result` base), each with the figures it draws; `load_result` reads a saved "
               "one back.",
    "Models and data": "Models (a spec string, a `LoadedModel` or an `nn.Module`), their convolutions and "
                       "preprocessing, and the images and labelled sets the analyses read.",
    "Settings": "Every analysis takes one frozen settings object; its fields are also keyword overrides of the call "
                "(`analyze_master_keys(model, k=4)`), and out-of-range or mistyped values raise an `ArgumentError`.",
    "Errors": "Every error FilterLens raises on purpose is a `FilterLensError`, its message saying what to do.",
}
"""The groups of the API page, in order, with the sentence that opens each."""


def public_objects() -> list[object]:
    """The public names' objects, in :data:`fl_core.PUBLIC_API` order."""
    return [getattr(importlib.import_module(module), name) for module, names in fl_core.PUBLIC_API.items()
            for name in names]


def shared_bases() -> list[type]:
    """The classes of ``fl_core`` that public classes derive from without being public themselves (the ``Result``
    mixin, settings shared by two families): their fields and methods are documented there."""
    public = {id(obj) for obj in public_objects()}
    bases = [base for obj in public_objects() if inspect.isclass(obj) for base in obj.__mro__[1:]
             if base.__module__.startswith("fl_core.") and id(base) not in public]
    return list(dict.fromkeys(bases))


def returned_types() -> list[type]:
    """The classes of ``fl_core`` that public functions return without being public themselves
    (``conv_inventory``'s ``ConvLayer``, ``depthwise_bank``'s ``DepthwiseBank``, ...)."""
    public = {id(obj) for obj in public_objects()}
    found = []
    for function in map(inspect.unwrap, filter(callable, public_objects())):
        if not inspect.isfunction(function):
            continue
        annotation = str(inspect.signature(function).return_annotation)
        for name in re.findall(r"[A-Z]\w+", annotation):
            value = function.__globals__.get(name)
            if inspect.isclass(value) and value.__module__.startswith("fl_core.") and id(value) not in public:
                found.append(value)
    return list(dict.fromkeys(found))


def task(obj: object, name: str) -> str:
    """The group of :data:`TASKS` a documented object belongs to."""
    from fl_core.results import Result
    from fl_core.settings import Settings

    if inspect.isclass(obj):
        if issubclass(obj, Exception):
            return "Errors"
        return "Settings" if issubclass(obj, Settings) else "Results" if issubclass(obj, Result) else "Models and data"
    obj = inspect.unwrap(obj) if callable(obj) else obj  # (functools.cache wraps some)
    if not inspect.isfunction(obj) or (name.startswith(("load_", "open_")) and name != "load_result"):
        return "Models and data"
    if name == "load_result" or next(iter(inspect.signature(obj).parameters), "") in ("report", "result"):
        return "Results"
    returned = re.findall(r"[A-Z]\w+", str(inspect.signature(obj).return_annotation))
    results = [obj.__globals__.get(word) for word in returned]
    return "Analyses" if any(inspect.isclass(r) and issubclass(r, Result) for r in results) else "Models and data"


def plot_kinds_text(cls: type) -> str:
    """The figures a result class draws (``result.plot(kind)``), the default first, each with its figure function's
    first sentence."""
    kinds = []
    for index, kind in enumerate(cls.figure_kinds()):
        if kind in cls._figures:
            module, function = cls._figures[kind].split(":")
            doc = (inspect.getdoc(getattr(importlib.import_module(module), function)) or "").split("\n\n")[0]
            shown = ROLE.sub(lambda match: f"`{match.group(2).rsplit('.', 1)[-1]}`", " ".join(doc.split()))
        else:  # a report's kinds are its sections
            shown = f"the default figure of the {kind} section's result"
        kinds.append(f"- `{kind}`{' (the default)' if index == 0 else ''}: {shown.replace('``', '`')}")
    return "\n".join([f"**Plot kinds** of `{cls.__name__}` (`result.plot(kind)`; `result.plot_kinds()` lists those a "
                      "result can draw):", "", *kinds, ""]) if kinds else ""


def api_page() -> str:
    """The API reference: one section per task of :data:`TASKS`, an entry per public name (the returned types and
    shared bases with them), each result's plot kinds under its entry."""
    lines = ["# Python API", "",
             "Every public name of `fl_core` (`fl_core.__all__`), importable from the package itself "
             "(`from fl_core import analyze_energy`), documented from its docstring and grouped by task. Every "
             "analysis has one call shape, `analyze_<family>(models_or_model, data=None, settings=None, *, "
             "device=None, progress=None, **setting_overrides)`; a keyword named like a settings field overrides it.",
             ""]
    entries = [(f"{cls.__module__}.{cls.__qualname__}", cls, cls.__name__) for cls in shared_bases()]
    entries += [(f"{module}.{name}", getattr(importlib.import_module(module), name), name)
                for module, names in fl_core.PUBLIC_API.items() for name in names]
    entries += [(f"{cls.__module__}.{cls.__qualname__}", cls, cls.__name__) for cls in returned_types()]
    for title, intro in TASKS.items():
        lines += [f"## {title}", "", intro, ""]
        for path, obj, name in entries:
            if task(obj, name) == title:
                lines += [f"::: {path}", ""]
                if inspect.isclass(obj) and hasattr(obj, "figure_kinds") and obj.figure_kinds():
                    lines += [plot_kinds_text(obj)]
    return "\n".join(lines)


def on_files(files, config):
    """Add the generated pages: the README as ``index.md``, the API reference as ``api.md``."""
    files.append(File.generated(config, "index.md", content=(REPO / "README.md").read_text(encoding="utf-8")))
    files.append(File.generated(config, "api.md", content=api_page()))
    return files


def on_page_markdown(markdown, page, config, files):
    """Links are written for the repository: point those to docs/ or the README into the site, show others as paths."""
    folder = REPO / ("docs" if page.file.src_uri != "index.md" else "")

    def relink(match: re.Match) -> str:
        text, target, anchor = match.group(1), match.group(2), match.group(3) or ""
        if "://" in target or target.startswith("mailto:"):
            return match.group(0)
        path = (folder / target).resolve()
        if path.is_relative_to(REPO / "docs"):
            return f"{text}({path.relative_to(REPO / 'docs').as_posix()}{anchor})"
        if path == REPO / "README.md":
            return f"{text}(index.md{anchor})"
        return f"{text[1:-1]} (`{path.relative_to(REPO).as_posix()}`)"

    return LINK.sub(relink, markdown)


def cited(match: re.Match) -> str:
    """A Sphinx role as Markdown: a link to a public name's entry, else the name in code."""
    short, name = match.group(1), match.group(2)
    shown = name.rsplit(".", 1)[-1] if short else name
    target = DOCUMENTED.get(name)
    return f"[`{shown}`][{target}]" if target else f"`{shown}`"


def one_entry_per_name(docstring: str) -> str:
    """``a, b: text`` in an Args or Attributes section (the docstrings' way to document several names at once, as
    :func:`fl_core.settings.attribute_help` reads it) as one entry per name, each with the whole text: the Google
    parser would take ``b`` for the type of ``a,``."""
    lines, out, entry_indent = docstring.splitlines(), [], None
    index = 0
    while index < len(lines):
        line = lines[index]
        depth = len(line) - len(line.lstrip())
        if SECTION.match(line):
            entry_indent = None
        elif line.strip() and entry_indent is None and out and SECTION.match(out[-1]):
            entry_indent = depth
        shared = SHARED_ENTRY.match(line) if depth == entry_indent else None
        if shared is None:
            out.append(line)
            index += 1
            continue
        following = index + 1
        while following < len(lines) and (not lines[following].strip() or
                                          len(lines[following]) - len(lines[following].lstrip()) > depth):
            following += 1
        for name in shared.group(2).split(","):
            out += [f"{shared.group(1)}{name.strip()}: {shared.group(3)}", *lines[index + 1:following]]
        index = following
    return "\n".join(out)


def markdown_docstring(docstring: str) -> str:
    """A docstring as the reference renders it: Sphinx roles as Markdown, one entry per documented name."""
    return one_entry_per_name(ROLE.sub(cited, docstring))


class SphinxRoles(Extension):
    """Rewrite every docstring with :func:`markdown_docstring` before it is parsed."""

    def on_instance(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_docstring(obj.docstring.value)
