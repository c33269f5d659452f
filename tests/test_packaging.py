"""FilterLens as an installed library: a wheel built from the checkout and imported from outside it has its demo
models, shipped runs, bundled photos, dashboard, console script, licence files and type marker, and its ``app`` command
serves the dashboard there, as the same server as anywhere (the package's configuration, this machine only unless told
otherwise); its plain requirements are the library's (the dashboard and the Dask engine are extras)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from fl_core.errors import MissingExtraError
from fl_core.extras import require_extra
from fl_core.survey.engine import survey_client

from .streamlit_server import free_port, health, running_server, server_env

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "NOTICE", "fl_core", "fl_ui")
"""What the wheel is built from (copied, so the build leaves nothing in the checkout)."""
EXTRA_ONLY = {"streamlit", "dask", "distributed", "cryptography", "bokeh", "scikit-image", "scikit-learn", "matplotlib"}
"""Never a plain requirement: the dashboard, the engine, and what only tests and scripts use."""


def test_dependencies_have_lower_bounds_that_the_pins_satisfy():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = dict(line.split("==") for line in (REPO / "requirements.txt").read_text(encoding="utf-8").splitlines()
                if "==" in line and not line.startswith("#"))
    extras = project["optional-dependencies"]
    declared = [r for r in project["dependencies"] + extras["app"] + extras["cluster"] if ">=" in r]
    assert "filterlens[cluster]" in extras["app"]  # the dashboard's heavy jobs run on the engine
    for requirement in declared:
        name, bound = requirement.split(">=")
        assert name in pins, f"{name} is declared but not pinned in requirements.txt"
        pinned = tuple(int(part) for part in pins[name].split(".")[:2])
        assert pinned >= tuple(int(part) for part in bound.split(".")[:2]), requirement
    assert {name.lower() for name in pins} == {r.split(">=")[0].lower() for r in declared}
    assert project["scripts"]["filterlens"] == "fl_core.cli:main"


def test_the_readme_gives_the_dashboards_cpu_install_beside_the_default_with_their_sizes():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("The dashboard, in the browser"):readme.index("From an installed package")]
    pins = dict(line.split("==") for line in (REPO / "requirements.txt").read_text(encoding="utf-8").splitlines()
                if "==" in line and not line.startswith("#"))
    default, cpu = section.split("# without a GPU")
    assert "pip install -r requirements.txt && streamlit run app.py" in default and "GB)" in default
    assert "GB)" in cpu and "--index-url https://download.pytorch.org/whl/cpu" in cpu
    assert f"torch=={pins['torch']} torchvision=={pins['torchvision']}" in cpu  # the versions the pins keep
    assert "pip install -r requirements.txt && streamlit run app.py" in cpu


@pytest.mark.slow
def test_the_wheel_works_outside_the_checkout(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                            if (REPO / name).is_dir() else {}))
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)], check=True,
                   cwd=tmp_path, timeout=600)
    wheel = next(wheels.glob("filterlens-*.whl"))
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    assert "fl_core/py.typed" in names and "fl_core/assets/demo/manifest.json" in names
    assert {"fl_ui/dashboard.py", "fl_ui/views/home.py", "fl_core/assets/photos/coffee.png"} <= set(names)
    assert "fl_ui/.streamlit/config.toml" in names  # the server's configuration, beside the script it serves
    metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    plain = {re.split(r"[<>=\[;! ]", line.split(":", 1)[1].strip())[0].lower()
             for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line}
    assert "torch" in plain and not plain & EXTRA_ONLY
    licences = {Path(n).name for n in names if ".dist-info/licenses/" in n}
    assert {"LICENSE", "NOTICE", "ATTRIBUTION.md"} <= licences
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True, timeout=600)

    env = {**os.environ, "PYTHONPATH": str(site)}
    code = ("import fl_core, sys\n"
            "print(fl_core.__file__)\n"
            "m = fl_core.load_model('demo:squeezenet1_0')\n"
            "print(m.label, len(m.conv_layers))\n"
            "from fl_core.lab.runs import SHIPPED_RUNS_DIR, list_runs, load_run\n"
            "runs = list_runs(SHIPPED_RUNS_DIR)\n"
            "print(len(runs), load_run(runs[0]).name)\n"
            "from fl_core.io.images import bundled_images\n"
            "print(len(bundled_images()), bundled_images().image(0).size)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=True, timeout=600).stdout.splitlines()
    assert Path(out[0]).is_relative_to(site)
    assert out[1].startswith("squeezenet1_0") and int(out[1].split()[-1]) == 26
    assert int(out[2].split()[0]) >= 10 and out[2].split()[1].startswith("lab_")  # the shipped Training Lab runs
    assert out[3] == "11 (512, 512)"  # the bundled photos, from the package's own files
    script = site / "bin" / "filterlens"
    assert script.exists()
    shown = subprocess.run([sys.executable, str(script), "scalespace", "--method", "B", "--json", "-", "--quiet"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True, timeout=600)
    assert '"method": "B"' in shown.stdout

    app = [sys.executable, "-m", "fl_core", "app"]
    usage = subprocess.run([*app, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
                           timeout=600).stdout
    assert "--address ADDRESS" in usage and "default: 127.0.0.1" in usage and "--warm, --no-warm" in usage

    # the dashboard from the installed wheel, outside the checkout (the app's packages installed), with a user's and a
    # working folder's Streamlit configuration that would serve every interface: the package's own applies
    for folder in (tmp_path, tmp_path / "home"):
        (folder / ".streamlit").mkdir(parents=True)
        (folder / ".streamlit" / "config.toml").write_text('[server]\naddress = "0.0.0.0"\nheadless = false\n')
    port = free_port()
    app_env = server_env(port, PYTHONPATH=str(site), HOME=str(tmp_path / "home"), FL_UPLOAD_DIR=str(tmp_path / "up"),
                         FL_HEAVY_JOBS="1")
    app_env.pop("STREAMLIT_SERVER_HEADLESS", None)
    started = time.monotonic()
    with running_server([*app, "--port", str(port), "--data-root", str(tmp_path)], port, app_env, tmp_path / "app.log",
                        timeout=240, cwd=tmp_path) as server:
        assert health(port) == "ok" and server.poll() is None and time.monotonic() - started < 240
        assert listening_addresses(server.pid, port) == {"127.0.0.1"}  # the loopback only
    log = (tmp_path / "app.log").read_text()
    assert f"URL: http://127.0.0.1:{port}" in log and "Network URL" not in log


def listening_addresses(pid: int, port: int) -> set[str]:
    """The addresses the process ``pid`` (or one it started) listens on at ``port``."""
    import psutil

    server = psutil.Process(pid)
    return {connection.laddr.ip for process in (server, *server.children(recursive=True))
            for connection in process.net_connections("inet")
            if connection.status == psutil.CONN_LISTEN and connection.laddr.port == port}


def test_a_missing_extra_is_one_line_naming_what_to_install(monkeypatch):
    monkeypatch.setattr("fl_core.extras.find_spec", lambda name: None if name == "distributed" else object())
    with pytest.raises(MissingExtraError, match=r"^The dashboard needs distributed \(not installed\): "
                                                r"pip install 'filterlens\[app\]'$"):
        require_extra("app", "The dashboard")
    with pytest.raises(MissingExtraError, match=r"filterlens\[cluster\]"), survey_client(None, 1):
        pass
