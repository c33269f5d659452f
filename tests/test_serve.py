"""The warm start: ``streamlit run app.py``, ``python -m fl_ui.serve`` and ``filterlens app`` serve the same ASGI app
whose lifespan imports before the server answers and warms up once it listens; its health check says whether heavy
jobs can run; the background warm-up of the heavy pages' first views never takes the server down; the upload limit
follows the checkpoint limit."""

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
    assert (
        "app = st.App(DASHBOARD, lifespan=warm_start, routes=routes(), middleware=[Middleware(BrowserCookie)])"
        in script.read_text()
    )


def test_serve_runs_streamlit_on_the_served_app_with_the_options_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.web import cli

    seen = []
    monkeypatch.setattr(cli, "main", lambda: seen.append(list(sys.argv)) or 0)
    monkeypatch.setattr(sys, "argv", ["fl_ui.serve", "--server.address=0.0.0.0"])
    monkeypatch.delenv(serve.UPLOAD_MB_ENV, raising=False)
    monkeypatch.delenv("FL_MAX_CHECKPOINT_MB", raising=False)
    assert serve.main() == 0 and serve.main(["--server.port", "8502"]) == 0
    limit = ["--server.maxUploadSize", "1024"]  # before the caller's options, which win
    assert seen == [["streamlit", "run", str(serve.SERVED_APP), *limit, "--server.address=0.0.0.0"],
                    ["streamlit", "run", str(serve.SERVED_APP), *limit, "--server.port", "8502"]]


def test_the_upload_limit_follows_the_checkpoint_limit_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from fl_core.io.checkpoints import max_checkpoint_bytes

    monkeypatch.delenv(serve.UPLOAD_MB_ENV, raising=False)
    monkeypatch.setenv("FL_MAX_CHECKPOINT_MB", "300")
    assert serve.max_upload_mb() == 300 and max_checkpoint_bytes() == 300 * 2**20
    monkeypatch.setenv(serve.UPLOAD_MB_ENV, "2048")
    assert serve.server_options() == ["--server.maxUploadSize", "2048"]
    monkeypatch.setenv(serve.UPLOAD_MB_ENV, "lots")
    with pytest.raises(SystemExit, match="FL_MAX_UPLOAD_MB='lots': give the largest upload as a number of MB"):
        serve.max_upload_mb()


def test_the_package_config_is_the_shared_servers_and_a_clone_links_to_it() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads(serve.SERVER_CONFIG.read_text())
    assert config["server"]["address"] == "127.0.0.1" and config["server"]["fileWatcherType"] == "none"
    assert config["client"] == {"showErrorDetails": "none", "toolbarMode": "viewer"}
    assert serve.SERVER_CONFIG.parent == serve.SERVED_APP.parent / ".streamlit"  # beside the served script
    assert (REPO / ".streamlit" / "config.toml").resolve() == serve.SERVER_CONFIG  # `streamlit run app.py`


def test_the_warm_start_imports_in_a_thread_before_the_app_serves_and_warms_up_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ran = []
    warmed = threading.Event()
    monkeypatch.setattr(serve, "preload", lambda: ran.append(threading.current_thread()))
    monkeypatch.setattr(serve, "warm_up", lambda: warmed.wait(5) or ran.append("warm-up"))

    async def serving() -> list:
        async with serve.warm_start():
            return list(ran)

    # in a thread of its own, as the server runs it: a test before this one may leave an event loop in this thread
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        preloaded = pool.submit(asyncio.run, serving()).result()
    assert len(preloaded) == 1 and preloaded[0] is not threading.main_thread()  # served before the warm-up ended
    warmed.set()


def test_the_health_check_answers_ok_only_when_warm_and_heavy_jobs_can_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from fl_ui import engine

    def answer() -> tuple[int, str]:
        response = asyncio.run(serve.health(None))
        return response.status_code, response.body.decode()

    monkeypatch.setattr(serve, "_WARM", threading.Event())
    assert answer() == (503, "starting: the engine's workers and the pages' first views are being prepared")
    serve._WARM.set()
    monkeypatch.setattr(engine, "engine_problem", lambda: "the compute engine cannot reach its scheduler")
    assert answer() == (503, "the compute engine cannot reach its scheduler")
    monkeypatch.setattr(engine, "engine_problem", lambda: None)
    assert answer() == (200, "ok")
    assert [route.path for route in serve.routes()] == [serve.HEALTH_PATH]


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
