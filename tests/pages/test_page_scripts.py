"""Page scripts are read by Streamlit's "magic": a statement that is only an expression (a string meant as a comment,
a bare name) is drawn on the page with ``st.write``. No page script may have one besides its docstrings."""

from __future__ import annotations

import ast

import pytest

from ..app_pages import APP, app_pages

SILENT = (ast.Call, ast.Await, ast.Yield, ast.YieldFrom)
"""Expressions magic leaves alone (a call is shown only as a notebook's last line, which the config does not set)."""
DOCSTRING_OWNERS = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def magic_writes(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every statement Streamlit's magic would draw: an expression statement that is neither a
    call nor the docstring of the module, a function or a class (``ast.walk`` reaches every nested body: with, if,
    for, try, functions, as magic does)."""
    found = []
    for owner in ast.walk(ast.parse(source)):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(owner, field, None)
            for index, node in enumerate(body if isinstance(body, list) else ()):
                if not isinstance(node, ast.Expr) or isinstance(node.value, SILENT):
                    continue
                docstring = (field == "body" and index == 0 and isinstance(owner, DOCSTRING_OWNERS)
                             and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str))
                if not docstring:
                    found.append((node.lineno, ast.unparse(node)[:80]))
    return sorted(found)


def test_the_finder_flags_what_magic_draws_and_spares_docstrings() -> None:
    source = ('"""Module."""\nX = 1\n"""a comment as a string"""\nwith open("f") as f:\n    X\n'
              'def g():\n    """Doc."""\n    "inside"\n    print(1)\nclass C:\n    """Doc."""\n')
    assert [line for line, _ in magic_writes(source)] == [3, 5, 8]


@pytest.mark.parametrize("script", [APP.name, *(entry.path for entry in app_pages())])
def test_no_page_script_draws_a_stray_expression(script: str) -> None:
    assert magic_writes((APP.parent / script).read_text(encoding="utf-8")) == [], script
