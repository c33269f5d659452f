"""A link to a page works for the very first visitor of a fresh server: the page comes with the shared sidebar and
the app's navigation (a page folder Streamlit auto-discovers used to run the linked page's script alone)."""

from __future__ import annotations

import pytest

from ..app_pages import app_pages
from ..streamlit_server import free_port, running_server, server_env
from .test_app_in_browser import settle, sidebar

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_first_visit_of_a_fresh_server_at_a_page_link_gets_the_whole_app(browser, artifacts, tmp_path) -> None:
    port = free_port()
    env = server_env(port, FL_UPLOAD_DIR=str(tmp_path / "uploads"), HOME=str(tmp_path))
    command = ["streamlit", "run", "app.py", "--server.address=127.0.0.1", "--server.headless=true"]
    with running_server(command, port, env, artifacts / "server-deep-link.log"):
        context = browser.new_context(viewport={"width": 1440, "height": 1800})
        context.set_default_timeout(60_000)
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{port}/report?models=demo:tiny_vgg")
        settle(page)
        links = sidebar(page).locator('[data-testid="stSidebarNavLink"]').all_inner_texts()
        models = sidebar(page).locator('[data-testid="stMultiSelect"]').first.inner_text()
        context.close()
    assert [link.split("\n")[-1] for link in links] == [entry.title for entry in app_pages()]
    assert "tiny_vgg (demo)" in models
