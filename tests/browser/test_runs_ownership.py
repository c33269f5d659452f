"""Ownership is never in a URL, on the served app: a browser's tabs share its Training Lab runs through a cookie the
server sets and page scripts cannot read; its link, opened in another browser, shows the run read-only."""

from __future__ import annotations

import shutil

import pytest

from fl_core.lab.runs import SHIPPED_RUNS_DIR
from fl_ui.lab import runs_token
from fl_ui.sessions import BROWSER_COOKIE

from ..streamlit_server import free_port, running_server, server_env
from .test_app_in_browser import assert_no_failure, drawn_plots, settle

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def main_text(page) -> str:
    return page.locator('[data-testid="stMain"]').inner_text()


def test_a_browsers_tabs_share_its_runs_and_its_link_shows_one_run_read_only(browser, artifacts, tmp_path) -> None:
    port, runs = free_port(), tmp_path / "runs"
    env = server_env(port, FL_UPLOAD_DIR=str(tmp_path / "uploads"), FL_RUNS_DIR=str(runs), HOME=str(tmp_path),
                     FL_WARM_WORKER_VIEWS="0")
    command = ["python", "-m", "fl_ui.serve", "--server.address=127.0.0.1", "--server.headless=true"]
    with running_server(command, port, env, artifacts / "server-runs-ownership.log"):
        url = f"http://127.0.0.1:{port}/training-lab?lab=yours"
        alice = browser.new_context(viewport={"width": 1440, "height": 1800})
        alice.set_default_timeout(120_000)
        first = alice.new_page()
        first.goto(url)
        settle(first)
        assert "No runs in this browser yet" in main_text(first)
        cookie = next(cookie for cookie in alice.cookies() if cookie["name"] == BROWSER_COOKIE)
        assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["expires"] > 0
        assert BROWSER_COOKIE not in first.evaluate("document.cookie")  # page scripts cannot read it
        shutil.copytree(SHIPPED_RUNS_DIR / "lab_vgg_true_s0", runs / "sessions" / runs_token(cookie["value"])
                        / "lab_vgg_true_s0")  # a run this browser trained

        second = alice.new_page()  # another tab of the same browser, with no token in its link
        second.goto(url)
        settle(second)
        assert_no_failure(second, "Alice's second tab")
        second.get_by_text("Theory fit r").first.wait_for()  # her run, drawn
        assert "shared with a link" not in main_text(second)
        link = second.url
        assert "run=lab_vgg_true_s0" in link and cookie["value"] not in link

        bob = browser.new_context(viewport={"width": 1440, "height": 1800})
        bob.set_default_timeout(120_000)
        shared = bob.new_page()
        shared.goto(link)  # Alice's link, in Bob's browser
        settle(shared)
        assert_no_failure(shared, "Bob on Alice's link")
        shared.get_by_text("Theory fit r").first.wait_for()  # the run, drawn
        assert "Run lab_vgg_true_s0, shared with a link" in main_text(shared)
        drawn_plots(shared, at_least=3)  # the run's figures
        shared.screenshot(path=str(artifacts / "runs-shared-link.png"), full_page=True)
        assert shared.get_by_role("combobox", name="Run").count() == 0  # no list of Alice's other runs
        shared.get_by_role("button", name="Show my runs").click()
        settle(shared)
        assert "No runs in this browser yet" in main_text(shared)
        bob_cookie = next(cookie for cookie in bob.cookies() if cookie["name"] == BROWSER_COOKIE)
        assert bob_cookie["value"] != cookie["value"] and runs_token(bob_cookie["value"]) in shared.url
        alice.close()
        bob.close()
