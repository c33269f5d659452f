"""``filterlens app``: the dashboard of the installed package, started by the command line from any folder."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from fl_core import extras
from fl_core.cli import app, main

from .streamlit_server import REPO, free_port, health, running_server, server_env


def test_without_streamlit_the_command_names_the_extra_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(extras, "find_spec", lambda name, *a: None if name == "streamlit" else real(name))
    assert main(["app"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'filterlens[app]'" in err and "streamlit" in err


def test_data_roots_are_existing_folders_resolved(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert app.data_roots([tmp_path / "a", tmp_path / "b" / ".." / "b"]) == os.pathsep.join(
        [str((tmp_path / "a").resolve()), str((tmp_path / "b").resolve())])
    assert main(["app", "--data-root", str(tmp_path / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        main(["app", "--port", "70000"])
    assert refused.value.code == 2 and "--port must be at least 1 and at most 65,535" in capsys.readouterr().err


@pytest.mark.slow
def test_the_app_command_serves_the_dashboard_from_another_folder(tmp_path: Path) -> None:
    port = free_port()
    env = server_env(port, HOME=str(tmp_path), FL_UPLOAD_DIR=str(tmp_path / "uploads"), FL_WARM_WORKER_VIEWS="0",
                     FL_HEAVY_JOBS="1", STREAMLIT_SERVER_HEADLESS="true", PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "fl_core", "app", "--port", str(port), "--data-root", str(tmp_path)]
    with running_server(command, port, env, tmp_path / "app.log", timeout=600, cwd=tmp_path) as server:
        assert health(port) == "ok" and server.poll() is None
