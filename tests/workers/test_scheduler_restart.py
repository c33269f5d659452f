"""The engine survives its scheduler: a loopback ``dask scheduler`` and ``dask worker`` killed and started again while
an engine and an app server (``python -m fl_ui.serve`` with ``FL_SCHEDULER``) use them. The running job fails naming
the cause, new jobs are refused at once while the scheduler is away, the app's health check fails meanwhile (so Docker
would restart it), and both recover by themselves, with a new client, within a minute of the scheduler's return."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from fl_core.survey.engine import WORKER_PROCESS_CONFIG
from fl_ui.cluster import SCHEDULER_CONFIG, dask_environment
from fl_ui.engine import LOST_JOB, Engine, EngineRestarted
from fl_ui.serve import HEALTH_PATH

from ..streamlit_server import REPO, free_port, get_text, health, process_group, running_server, server_env, wait_for
from . import sample_jobs as jobs

STARTUP_S = 300
RECOVERY_S = 60
"""The target: the app recovers by itself within a minute of its scheduler coming back."""


def health_answer(port: int) -> tuple[int, str]:
    """The status and body of the app's own health check."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{HEALTH_PATH}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_engine_and_the_app_recover_by_themselves_when_their_scheduler_restarts(tmp_path: Path) -> None:
    port, dashboard, app_port = free_port(), free_port(), free_port()
    address = f"tcp://127.0.0.1:{port}"
    scripts = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(REPO),
           "FL_TORCH_THREADS": "1", **dask_environment(SCHEDULER_CONFIG), **dask_environment(WORKER_PROCESS_CONFIG)}

    def scheduler(run: int):
        return process_group(["dask", "scheduler", "--host", "127.0.0.1", "--port", str(port), "--dashboard-address",
                              f"127.0.0.1:{dashboard}"], env, tmp_path / f"scheduler{run}.log")

    def worker(run: int):  # no preload: the sample jobs need no torch, and the engine's client is what is tested
        return process_group(["dask", "worker", address, "--nthreads", "1", "--host", "127.0.0.1",
                              "--local-directory", str(tmp_path / f"worker{run}")], env, tmp_path / f"worker{run}.log")

    def scheduler_up() -> bool:
        return get_text(f"http://127.0.0.1:{dashboard}/health") == "ok"

    with contextlib.ExitStack() as stack:
        processes = [stack.enter_context(scheduler(0))]
        wait_for(scheduler_up, STARTUP_S, "scheduler")
        processes.append(stack.enter_context(worker(0)))
        app_env = server_env(app_port, **{key: value for key, value in env.items() if key.startswith(("FL_", "DASK_"))}
                             | {"FL_SCHEDULER": address, "FL_WARM_WORKER_VIEWS": "0", "HOME": str(tmp_path),
                                "PYTHONPATH": str(REPO)})
        stack.enter_context(running_server([sys.executable, "-m", "fl_ui.serve", "--server.address=127.0.0.1"],
                                           app_port, app_env, tmp_path / "app.log", timeout=STARTUP_S))
        engine = Engine(address)
        stack.callback(engine.close)
        engine.wait_for_workers(timeout=STARTUP_S)
        assert engine.submit(jobs.counting, 2).result(timeout=STARTUP_S) != os.getpid()
        running = engine.submit(jobs.counting, 100_000)
        wait_for(lambda: running.status().state == "running", STARTUP_S, "running job")
        held = engine.submit(jobs.counting, 1)  # waits in the engine for the one worker (fair share)
        assert not held.dispatched and held.status().state == "queued"
        first_client = engine.client

        for process in processes:  # the scheduler and its worker killed, as a host restarting them does
            os.killpg(process.pid, signal.SIGKILL)
        for job in (running, held):  # the waiting one too: its variables went with the scheduler
            state = job.join(timeout=30)
            assert (state.state, state.error) == ("failed", LOST_JOB)  # the cause, not "try fewer images"
            with pytest.raises(EngineRestarted, match="press Run again"):
                job.result()
        wait_for(lambda: engine.problem() is not None, 30, "engine reporting its lost scheduler")
        asked = time.monotonic()
        with pytest.raises(EngineRestarted, match=r"^The compute engine is restarting \(the compute engine cannot "
                                                  r"reach its scheduler( for \d+ s)?\), so no job can start now"):
            engine.submit(jobs.counting, 1)
        assert time.monotonic() - asked < 5  # refused at once, not after a connection timeout
        wait_for(lambda: health_answer(app_port)[0] == 503, 30, "app health check failing")
        assert "cannot reach its scheduler" in health_answer(app_port)[1]
        assert health(app_port) == "ok"  # Streamlit's own: the server itself still serves

        stack.enter_context(scheduler(1))
        wait_for(scheduler_up, STARTUP_S, "scheduler back")
        back = time.monotonic()
        stack.enter_context(worker(1))
        wait_for(lambda: engine.problem() is None, RECOVERY_S, "engine reconnected")
        assert engine.client is not first_client  # a new client of the new scheduler
        wait_for(lambda: health_answer(app_port) == (200, "ok"), RECOVERY_S, "app healthy again")
        recovered = time.monotonic() - back
        print(f"engine and app healthy {recovered:.1f} s after the scheduler came back")  # docs/results.md
        assert recovered < RECOVERY_S
        assert engine.submit(jobs.counting, 2).result(timeout=STARTUP_S) != os.getpid()  # on the fresh worker
