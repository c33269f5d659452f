"""Browser end-to-end fixtures: one real server (the image's command) for the session, and a new browser session per
test in the one Chromium of its module (``browser``, tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..streamlit_server import REPO, free_port, running_server, server_env

ARTIFACTS = REPO / "test-artifacts" / "browser"


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def upload_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("uploads")


@pytest.fixture(scope="session")
def app_url(chromium: Path, artifacts: Path, upload_dir: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[str]:
    """The image's server (``python -m fl_ui.serve``: ``streamlit run app.py`` warmed, computing the heavy pages'
    default views as soon as it listens) on a free localhost port, shared by every browser test; its Saved results
    page shows a folder holding one saved energy result."""
    import fl_core

    results = tmp_path_factory.mktemp("results")
    fl_core.analyze_energy("demo:tiny_vgg", seeds=2, progress=False).save(results / "tiny_vgg_energy.flr")
    port = free_port()
    env = server_env(port, FL_UPLOAD_DIR=str(upload_dir), HOME=str(tmp_path_factory.mktemp("home")),
                     FL_RESULTS_DIR=str(results))
    command = ["python", "-m", "fl_ui.serve", "--server.address=127.0.0.1", "--server.headless=true"]
    with running_server(command, port, env, artifacts / "server.log"):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def page(browser, app_url: str):
    """A new browser session (its own Streamlit session) with downloads enabled and a tall viewport."""
    context = browser.new_context(viewport={"width": 1440, "height": 1800}, accept_downloads=True)
    context.set_default_timeout(60_000)
    tab = context.new_page()
    yield tab
    context.close()
