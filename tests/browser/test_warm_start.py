"""The README's dashboard command is warm (issue 36, bar ``classroom2``): with ``streamlit run app.py`` on a fresh
server, Channel Axes shows its default result within two minutes of the first health answer, its progress naming a
stage all along, and Swap & Re-score's default re-score (warmed beside it) is there by then too."""

from __future__ import annotations

import time

import pytest

from ..streamlit_server import free_port, running_server, server_env
from .test_app_in_browser import drawn_plots

pytestmark = [pytest.mark.browser, pytest.mark.slow]

FIRST_VISIT_S = 120
"""The bar: Channel Axes' default result this long after the fresh server's first health answer (goal: 60 s on 2
quiet cores)."""
PROGRESS_JS = """() => Array.from(document.querySelectorAll('[data-testid="stProgress"]')).map(p => p.innerText)"""


def test_the_readmes_command_shows_channel_axes_soon_after_the_first_health_answer(browser, artifacts,
                                                                                   tmp_path) -> None:
    port = free_port()
    env = server_env(port, FL_UPLOAD_DIR=str(tmp_path / "uploads"), FL_RUNS_DIR=str(tmp_path / "runs"),
                     HOME=str(tmp_path))
    with running_server(["streamlit", "run", "app.py"], port, env, artifacts / "server-warm-start.log", timeout=600):
        healthy = time.monotonic()
        context = browser.new_context(viewport={"width": 1440, "height": 1800})
        page = context.new_page()
        page.goto(f"http://localhost:{port}/channel-axes", timeout=60_000)
        stages = set()
        while not page.evaluate("() => document.querySelectorAll('.js-plotly-plot').length >= 3"):
            assert time.monotonic() - healthy < FIRST_VISIT_S, f"no result yet; progress seen: {sorted(stages)}"
            stages.update(page.evaluate(PROGRESS_JS))
            page.wait_for_timeout(500)
        drawn_plots(page, at_least=3)
        shown = time.monotonic() - healthy
        page.screenshot(path=str(artifacts / "warm-start-channel-axes.png"), full_page=True)
        page.goto(f"http://localhost:{port}/swap-rescore", timeout=60_000)
        page.get_by_text("Original vs each swap").wait_for(timeout=(FIRST_VISIT_S - (time.monotonic() - healthy))
                                                           * 1000)
        rescored = time.monotonic() - healthy
        page.screenshot(path=str(artifacts / "warm-start-swap-rescore.png"), full_page=True)
        context.close()
    print(f"Channel Axes' result {shown:.0f} s and Swap & Re-score's {rescored:.0f} s after the first health answer; "
          f"progress seen: {sorted(stages)}")
    assert not any(text.rstrip().endswith(("started", ": ")) for text in stages), stages
