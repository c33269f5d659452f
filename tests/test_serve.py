"""The warm start: ``streamlit run app.py``, ``python -m fl_ui.serve`` and ``filterlens app`` serve the same ASGI app
whose lifespan preloads before the server answers; the background warm-up of the heavy pages' first views never takes
the server down."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import sys
import threading

import pytest
from streamlit.web.server.app_discovery import discover_asgi_app

from fl_ui import channels, masterkeys, serve

from .conftest import REPO


@pytest.mark.parametrize("script", [REPO / "app.py", serve.SERVED_APP], ids=["app.py", "fl_ui/asgi.py"])
def test_every_dashboard_command_serves_the_dashboard_with_the_warm_start(script) -> None:
    """Streamlit finds the ASGI app in the script it is given and serves it with uvicorn (its lifespan first), every
    page giving the browser its secret (:class:`fl_ui.sessions.BrowserCookie`)."""
    found = discover_asgi_app(script)
    assert found.is_asgi_app and found.app_name == "app"
    assert "app = st.App(DASHBOARD, lifespan=warm_start, middleware=[Middleware(BrowserCookie)])" in script.read_text()


def test_serve_runs_streamlit_on_the_served_app_with_the_options_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.web import cli

    seen = []
    monkeypatch.setattr(cli, "main", lambda: seen.append(list(sys.argv)) or 0)
    monkeypatch.setattr(sys, "argv", ["fl_ui.serve", "--server.address=0.0.0.0"])
    assert serve.main() == 0 and serve.main(["--server.port", "8502"]) == 0
    assert seen == [["streamlit", "run", str(serve.SERVED_APP), "--server.address=0.0.0.0"],
                    ["streamlit", "run", str(serve.SERVED_APP), "--server.port", "8502"]]


def test_the_warm_start_preloads_in_a_thread_before_the_app_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    ran = []
    monkeypatch.setattr(serve, "preload", lambda: ran.append(threading.current_thread()))

    async def serving() -> list:
        async with serve.warm_start():
            return list(ran)

    # in a thread of its own, as the server runs it: a test before this one may leave an event loop in this thread
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        preloaded = pool.submit(asyncio.run, serving()).result()
    assert len(preloaded) == 1 and preloaded[0] is not threading.main_thread()


def test_a_warm_up_that_stops_is_logged_in_one_line_and_the_next_one_runs(monkeypatch: pytest.MonkeyPatch,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """The server shutting down cancels the warm-up's job; its thread must not print a traceback into the log."""
    ran = []

    def cancelled() -> None:
        raise RuntimeError("Cancelled. Start it again when you need it.")

    monkeypatch.setattr(channels, "warm_default_result", cancelled)
    monkeypatch.setattr(masterkeys, "warm_default_rescore", lambda: ran.append("rescore"))
    with caplog.at_level(logging.WARNING, logger=serve.__name__):
        serve.warm_worker_views()
    assert ran == ["rescore"]
    assert [r.getMessage() for r in caplog.records] == ["cancelled did not finish: Cancelled. Start it again when "
                                                        "you need it."]
    assert not any(r.exc_info for r in caplog.records)
