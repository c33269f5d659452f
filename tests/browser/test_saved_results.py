"""``filterlens app --results DIR``: the Saved results page of a served dashboard lists the ``.flr`` files of DIR and
shows the newest with its figures, as a reader sees it in Chromium at 1024×768 and 1440 px."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import fl_core

from ..streamlit_server import REPO, free_port, running_server, server_env
from .test_app_in_browser import assert_no_failure, drawn_plots, settle

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_the_app_command_serves_the_saved_results_of_its_folder(browser, artifacts, tmp_path: Path) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    photos = fl_core.open_images("bundled").subset(range(3))
    energy = fl_core.analyze_energy("demo:tiny_vgg", photos, seeds=2, progress=False)
    energy.save(folder / "tiny_vgg_energy.flr")
    port = free_port()
    env = server_env(port, HOME=str(tmp_path), FL_UPLOAD_DIR=str(tmp_path / "uploads"), FL_WARM_WORKER_VIEWS="0",
                     FL_HEAVY_JOBS="1", STREAMLIT_SERVER_HEADLESS="true", PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "fl_core", "app", "--results", str(folder), "--port", str(port)]
    with running_server(command, port, env, artifacts / "server-saved-results.log", timeout=600, cwd=tmp_path):
        for width, height in ((1024, 768), (1440, 1800)):
            context = browser.new_context(viewport={"width": width, "height": height})
            context.set_default_timeout(120_000)
            page = context.new_page()
            page.goto(f"http://127.0.0.1:{port}/results")
            settle(page, 300_000)
            main = page.locator('[data-testid="stMain"]')
            main.get_by_text("tiny_vgg (demo:tiny_vgg)", exact=False).first.wait_for()
            plots = drawn_plots(page, at_least=len(energy.plot_kinds()), timeout_ms=120_000)
            assert_no_failure(page, f"/results at {width} px")
            text = main.inner_text()
            page.screenshot(path=str(artifacts / f"saved-results-{width}.png"), full_page=True)
            context.close()
            assert "tiny_vgg_energy.flr" in text and "The energy analysis of tiny_vgg (demo:tiny_vgg)." in text
            assert len(plots) == len(energy.plot_kinds())
