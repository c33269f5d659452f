"""Headless runs of the dashboard with Streamlit's AppTest (page tests and the dashboard benchmark).

AppTest does not re-execute an ``st.navigation`` entry point after ``switch_page``, so a page is run the way
the dashboard (:data:`fl_ui.DASHBOARD`) runs it: the shared sidebar first, then the page script.
"""

from __future__ import annotations

import re

from streamlit.testing.v1 import AppTest

from fl_ui import DASHBOARD
from fl_ui.messages import MARKDOWN_SPECIALS, WORD_JOINER

ESCAPED = re.compile(r"\\" + MARKDOWN_SPECIALS.pattern)


def _page_with_sidebar(page: str) -> None:
    import runpy

    from fl_ui.paths import users_paths
    from fl_ui.sidebar import render_sidebar
    from fl_ui.state import url_notices_above

    with users_paths():
        render_sidebar()
        with url_notices_above():
            runpy.run_path(page, run_name="__main__")


def page_app(page: str, timeout: float = 300, **query: str) -> AppTest:
    """An AppTest of ``page`` (e.g. ``"views/home.py"``, relative to the dashboard's folder) behind the real sidebar,
    with URL query parameters.

    Not yet run: call ``.run()``; widget interactions rerun the sidebar and the page.
    """
    app = AppTest.from_function(_page_with_sidebar, args=(str(DASHBOARD.parent / page),), default_timeout=timeout)
    for key, value in query.items():
        app.query_params[key] = value
    return app


def shown(element) -> str:
    """The text an AppTest element's Markdown body shows: its value with the backslash escapes and word joiners of
    :func:`fl_ui.messages.literal` resolved."""
    return ESCAPED.sub(r"\1", str(element.value)).replace(WORD_JOINER, "")
