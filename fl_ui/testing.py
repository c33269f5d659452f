"""Headless runs of the dashboard with Streamlit's AppTest (page tests and the dashboard benchmark).

AppTest does not re-execute an ``st.navigation`` entry point after ``switch_page``, so a page is run the way
``app.py`` runs it: the shared sidebar first, then the page script.
"""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parent.parent


def _page_with_sidebar(page: str) -> None:
    import runpy

    from fl_ui.sidebar import render_sidebar
    from fl_ui.state import url_notices_above

    render_sidebar()
    with url_notices_above():
        runpy.run_path(page, run_name="__main__")


def page_app(page: str, timeout: float = 300, **query: str) -> AppTest:
    """An AppTest of ``page`` (e.g. ``"views/home.py"``) behind the real sidebar, with URL query parameters.

    Not yet run: call ``.run()``; widget interactions rerun the sidebar and the page.
    """
    app = AppTest.from_function(_page_with_sidebar, args=(str(REPO / page),), default_timeout=timeout)
    for key, value in query.items():
        app.query_params[key] = value
    return app
