"""A closed tab's upload does not stay in the server: Streamlit keeps a disconnected session for a reconnect
(``server.disconnectedSessionTTL``) and then drops it without shutting it down, so the bytes of a file it had chosen
stayed in memory for good, and its main loop still held the last session it served (state, chosen file and all); the
server's janitor (:mod:`fl_ui.memory`) shuts such sessions down and clears their state."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ..streamlit_server import free_port, running_server, server_env
from .test_app_in_browser import settle, sidebar

pytestmark = [pytest.mark.browser, pytest.mark.slow]

UPLOAD_MB = 300


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmRSS"))


def test_a_file_chosen_in_a_closed_tab_leaves_the_servers_memory(browser, artifacts, tmp_path) -> None:
    chosen = tmp_path / "chosen.safetensors"
    chosen.write_bytes(bytes(range(256)) * (UPLOAD_MB * 2**20 // 256))
    port = free_port()
    env = server_env(port, FL_UPLOAD_DIR=str(tmp_path / "uploads"), HOME=str(tmp_path),
                     STREAMLIT_SERVER_DISCONNECTED_SESSION_TTL="2", STREAMLIT_SERVER_MAX_UPLOAD_SIZE="1024")
    command = ["streamlit", "run", "app.py", "--server.address=127.0.0.1", "--server.headless=true"]
    with running_server(command, port, env, artifacts / "server-memory-after-close.log") as server:
        context = browser.new_context(viewport={"width": 1440, "height": 1800})
        context.set_default_timeout(120_000)
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{port}/?models=demo:tiny_vgg")
        settle(page)
        before = rss_mib(server.pid)
        sidebar(page).get_by_text("Upload a checkpoint").click()
        sidebar(page).locator("input[type=file]").first.set_input_files(str(chosen))
        holding = wait_for_rss(server.pid, lambda rss: rss > before + UPLOAD_MB * 0.8)  # the server holds it
        settle(page)
        context.close()  # the tab closes without "Add upload"
        after = wait_for_rss(server.pid, lambda rss: rss < before + UPLOAD_MB / 3)
    assert holding > before + UPLOAD_MB * 0.8, (before, holding)
    assert after < before + UPLOAD_MB / 3, (before, holding, after)


def wait_for_rss(pid: int, reached, timeout: float = 120) -> float:
    """The server's RSS once ``reached(rss)`` holds, or when ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while not reached(rss := rss_mib(pid)) and time.monotonic() < deadline:
        time.sleep(1)
    return rss
