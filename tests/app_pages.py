"""The dashboard's page list, read from :data:`fl_ui.DASHBOARD`'s ``PAGES`` without running Streamlit, so tests cover
new pages automatically."""

from __future__ import annotations

import ast
from typing import NamedTuple

from fl_ui import DASHBOARD as APP


class AppPage(NamedTuple):
    """One ``PAGES`` entry: script path (relative to the dashboard's folder), title, icon, URL path (``""``: the root
    URL)."""

    path: str
    title: str
    icon: str
    url: str


def app_pages() -> list[AppPage]:
    """Every page of the dashboard's ``PAGES`` tuple, in order (the first is the default page)."""
    tree = ast.parse(APP.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PAGES" for t in node.targets):
            return [AppPage(*entry) for entry in ast.literal_eval(node.value)]
    raise AssertionError(f"{APP} defines no PAGES tuple")

