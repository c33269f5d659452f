"""Start a real ``streamlit run`` server (or another process group: a Dask scheduler, a worker) on a free localhost port
for a test, wait until it answers, and stop it afterwards."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port nobody listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get_text(url: str, timeout: float = 5.0) -> str | None:
    """The body of a ``GET`` of ``url`` when it answers 200, ``None`` otherwise (nothing listens, an error status)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return answer.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def health(port: int, timeout: float = 2.0) -> str | None:
    """The body of ``/_stcore/health`` ("ok" when the server is up), or ``None`` when nothing answers."""
    return get_text(f"http://127.0.0.1:{port}/_stcore/health", timeout)


def ready(port: int, timeout: float = 2.0) -> str | None:
    """The body of the served app's own health check, ``/api/health`` (:data:`fl_ui.serve.HEALTH_PATH`): "ok" once its
    warm-up is done and while heavy jobs can run, ``None`` otherwise."""
    return get_text(f"http://127.0.0.1:{port}/api/health", timeout)


def wait_for(condition, timeout: float, what: str, poll: float = 0.5) -> None:
    """Poll ``condition()`` until it is true; ``TimeoutError`` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:.0f} s")
        time.sleep(poll)


@contextlib.contextmanager
def process_group(command: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """Run a command in its own process group (a dask worker is a nanny and its worker process) and stop the group."""
    with open(log, "wb") as output:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            yield process
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def server_env(port: int, **extra: str) -> dict[str, str]:
    """The environment of a test server: this interpreter's scripts first on PATH, the port, and ``extra``."""
    scripts = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}",
            "STREAMLIT_SERVER_PORT": str(port), "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false",
            "PYTHONUNBUFFERED": "1", **extra}


@contextlib.contextmanager
def running_server(command: Sequence[str], port: int, env: dict[str, str], log: Path, timeout: float = 300.0,
                   cwd: Path = REPO, until: Callable[[int], str | None] = ready) -> Iterator[subprocess.Popen]:
    """Run ``command`` in ``cwd`` (the repository) until ``until(port)`` answers "ok" (default :func:`ready`: the
    served app's warm-up done, its engine's workers up; :func:`health`: it answers at all); stop it (and only it) on
    exit. The dashboard's commands answer ``/_stcore/health`` once they have imported torch and the analyses, and
    are ready once the engine's workers and Home's first view are (about 20 s on 2 quiet cores; ``timeout`` leaves
    room for a busy machine)."""
    with open(log, "wb") as output:
        process = subprocess.Popen(list(command), cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while until(port) != "ok":
                if process.poll() is not None:
                    raise RuntimeError(f"the server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no health answer within {timeout:.0f} s:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
