"""Start a real ``streamlit run`` server on a free localhost port for a test, and stop it afterwards."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port nobody listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def health(port: int, timeout: float = 2.0) -> str | None:
    """The body of ``/_stcore/health`` ("ok" when the server is up), or ``None`` when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=timeout) as response:
            return response.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def server_env(port: int, **extra: str) -> dict[str, str]:
    """The environment of a test server: this interpreter's scripts first on PATH, the port, and ``extra``."""
    scripts = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}",
            "STREAMLIT_SERVER_PORT": str(port), "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false",
            "PYTHONUNBUFFERED": "1", **extra}


@contextlib.contextmanager
def running_server(command: Sequence[str], port: int, env: dict[str, str], log: Path,
                   timeout: float = 300.0, cwd: Path = REPO) -> Iterator[subprocess.Popen]:
    """Run ``command`` in ``cwd`` (the repository) until ``/_stcore/health`` answers "ok"; stop it (and only it)
    on exit. The dashboard's commands answer once their warm start has loaded torch, the analyses and the engine
    (about 20 s on 2 quiet cores; ``timeout`` leaves room for a busy machine)."""
    with open(log, "wb") as output:
        process = subprocess.Popen(list(command), cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while health(port) != "ok":
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
