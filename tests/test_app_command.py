"""``filterlens app``: the dashboard of the installed package, started by the command line from any folder, on the
loopback unless told otherwise, its warm-up of the heavy views asked for, its configuration the package's wherever it
starts."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
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


def test_the_server_listens_on_the_loopback_unless_an_address_is_given_and_says_so(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from fl_ui import serve

    started = []
    monkeypatch.setattr(serve, "main", lambda args: started.append((args, os.environ[app.WARM_ENV])) or 0)
    monkeypatch.delenv(app.DATA_ROOTS_ENV, raising=False)
    monkeypatch.setenv(app.WARM_ENV, "1")  # the command's own default wins over an inherited variable
    assert main(["app", "--port", "8600"]) == 0
    assert started[-1] == (["--server.address", "127.0.0.1", "--server.port", "8600"], "0")
    assert capsys.readouterr().err == ""
    assert main(["app", "--address", "0.0.0.0", "--warm"]) == 0
    assert started[-1] == (["--server.address", "0.0.0.0"], "1")
    notice = capsys.readouterr().err
    assert notice.startswith("Serving on every interface of this machine: anyone who can reach this port")
    assert "opens no server folder (--data-root DIR allows one)" in notice
    assert [app.reach(address) for address in ("127.0.0.1", "::1", "localhost")] == [None] * 3


def test_the_config_beside_the_served_script_wins_over_the_users_and_the_working_folders(tmp_path: Path) -> None:
    from fl_ui import serve

    for folder in (tmp_path, tmp_path / "home"):
        (folder / ".streamlit").mkdir(parents=True)
        (folder / ".streamlit" / "config.toml").write_text(
            '[server]\naddress = "0.0.0.0"\nfileWatcherType = "auto"\n[client]\nshowErrorDetails = "full"\n'
            'toolbarMode = "developer"\n')
    code = ("import json, sys\n"
            "from streamlit import config\n"
            "config._main_script_path = sys.argv[1]  # as `streamlit run` sets it before reading the configuration\n"
            "options = config.get_config_options(force_reparse=True)\n"
            "print(json.dumps({name: options[name].value for name in sys.argv[2:]}))\n")
    names = ["server.address", "server.fileWatcherType", "server.headless", "client.showErrorDetails",
             "client.toolbarMode", "server.maxUploadSize"]
    env = {key: value for key, value in os.environ.items() if not key.startswith("STREAMLIT_")}
    shown = subprocess.run([sys.executable, "-c", code, str(serve.SERVED_APP), *names], cwd=tmp_path, check=True,
                           env={**env, "HOME": str(tmp_path / "home")}, capture_output=True, text=True, timeout=120)
    assert json.loads(shown.stdout) == {"server.address": "127.0.0.1", "server.fileWatcherType": "none",
                                        "server.headless": True, "client.showErrorDetails": "none",
                                        "client.toolbarMode": "viewer", "server.maxUploadSize": 1024}


@pytest.mark.slow
def test_the_app_command_serves_the_dashboard_from_another_folder(tmp_path: Path) -> None:
    port = free_port()
    env = server_env(port, HOME=str(tmp_path), FL_UPLOAD_DIR=str(tmp_path / "uploads"), FL_HEAVY_JOBS="1",
                     PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "fl_core", "app", "--port", str(port), "--data-root", str(tmp_path)]
    with running_server(command, port, env, tmp_path / "app.log", timeout=600, cwd=tmp_path) as server:
        assert health(port) == "ok" and server.poll() is None
