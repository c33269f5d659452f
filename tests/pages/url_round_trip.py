"""A shared link restores the whole view: set every widget of a page, reload the page from the query parameters it
wrote, and find the same widgets with the same values and the same figures."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from streamlit.testing.v1 import AppTest

from fl_ui.testing import page_app, shown

WIDGET_KINDS = ("selectbox", "multiselect", "checkbox", "toggle", "slider", "select_slider", "number_input",
                "text_input", "radio", "button_group")


def widgets(app: AppTest) -> dict[str, Any]:
    """Every widget of the page (the sidebar's are the selection, restored by its own codec), by key: its value."""
    found = {}
    for kind in WIDGET_KINDS:
        for widget in getattr(app.main, kind):
            assert widget.key is not None, f"a {kind} without a key: {widget.label!r}"
            found[widget.key] = tuple(widget.value) if isinstance(widget.value, list) else widget.value
    return found


def figure_titles(app: AppTest) -> list[str]:
    """Each figure's own title (``layout.title.text``; not the first "title" of the JSON, a colour bar's or an
    axis's)."""
    def title(spec: str) -> str:
        layout_title = json.loads(spec).get("layout", {}).get("title", "")
        return layout_title.get("text", "") if isinstance(layout_title, dict) else str(layout_title)

    return [title(chart.proto.spec) for chart in app.get("plotly_chart")]


def assert_clean(app: AppTest) -> None:
    assert not app.exception, [e.value for e in app.exception]
    assert not app.error, [shown(e) for e in app.error]


def assert_round_trip(page: str, changes: Mapping[str, Any], fixed: frozenset[str] = frozenset(),
                      **query: str) -> AppTest:
    """Open ``page`` (with ``query``), give each widget named in ``changes`` its new value (one run each, in order),
    reload the page from the resulting query parameters, and check it shows the same: every widget but those in
    ``fixed`` (which cannot change here) must have been changed, and each comes back with its value, as do the
    figures' titles. Returns the reloaded app."""
    app = page_app(page, **query)
    app.run()
    assert_clean(app)
    for key, value in changes.items():
        app.get_by_key(key).set_value(value)
        app.run()
        assert_clean(app)
        assert widgets(app)[key] == value, (key, widgets(app)[key], value)
    shown = widgets(app)
    assert set(shown) - fixed <= set(changes), f"widgets the test leaves unset: {set(shown) - fixed - set(changes)}"
    params = {key: app.query_params[key] for key in app.query_params}
    again = page_app(page, **params)
    again.run()
    assert_clean(again)
    assert widgets(again) == shown
    assert figure_titles(again) == figure_titles(app)
    return again
