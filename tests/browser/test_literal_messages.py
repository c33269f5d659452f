"""In a browser: Markdown in the link's values of a server with one data root (``images``, ``models=weights:``,
``models=timm:``, ``models=demo:``, ``device``, ``report_dir``, the energy ``seeds``) fetches no image and renders no
link; the page shows the text as typed."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from fl_ui.messages import WORD_JOINER

from ..pages.test_literal_messages import ECHO, HOSTILE
from ..streamlit_server import free_port, running_server, server_env
from .test_app_in_browser import settle

pytestmark = [pytest.mark.browser, pytest.mark.slow]

OUTSIDE = "127.0.0.1:9"
LINKS = (f"?images={quote(HOSTILE)}", f"?models=weights:{quote(HOSTILE)}", f"?models=timm:{quote(HOSTILE)}",
         f"?models=demo:{quote(HOSTILE)}", f"?models=demo:tiny_vgg&device={quote(HOSTILE)}",
         f"report?models=demo:tiny_vgg&report_dir={quote(HOSTILE)}",
         f"energy?models=demo:tiny_vgg&energy_seeds={quote(HOSTILE)}")


def test_markdown_in_link_values_fetches_nothing_and_links_nowhere(browser, artifacts, tmp_path) -> None:
    port = free_port()
    env = server_env(port, FL_UPLOAD_DIR=str(tmp_path / "uploads"), FL_DATA_ROOTS=str(tmp_path / "data"),
                     HOME=str(tmp_path))
    command = ["streamlit", "run", "app.py", "--server.address=127.0.0.1", "--server.headless=true"]
    fetched, found = [], {}
    with running_server(command, port, env, artifacts / "server-literal-messages.log"):
        context = browser.new_context(viewport={"width": 1440, "height": 1800})
        context.set_default_timeout(60_000)
        context.on("request", lambda request: fetched.append(request.url) if OUTSIDE in request.url else None)
        page = context.new_page()
        for link in LINKS:
            page.goto(f"http://127.0.0.1:{port}/{link}")
            settle(page)
            found[link] = (page.locator(f'a[href*="{OUTSIDE}"], img[src*="{OUTSIDE}"]').count(),
                           ECHO in page.locator('[data-testid="stApp"]').inner_text().replace(WORD_JOINER, ""))
        context.close()
    assert not fetched
    assert {link: counts for link, counts in found.items() if counts != (0, True)} == {}
