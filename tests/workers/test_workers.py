"""Heavy jobs in worker processes: progress, queue position, cancel, errors, live values, and one job per key."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fl_core.backend import report
from fl_core.errors import DataError, FilterLensError
from fl_ui import cache as cache_module
from fl_ui.cache import memoize, pooled
from fl_ui.pool import JobCancelled, WorkerPool, publish, stop_requested

from ..conftest import REPO
from ..test_concurrency import run_together


def counting(steps: int, progress=None) -> int:
    """A job: ``steps`` progress reports 50 ms apart; returns the worker's process id."""
    for step in range(steps):
        report(progress, step / steps, f"step {step}")
        time.sleep(0.05)
    return os.getpid()


def graceful(progress=None) -> str:
    """A graceful job: runs until asked to stop, then returns what it did."""
    steps = 0
    while not stop_requested() and steps < 2000:
        steps += 1
        report(progress, 0.5, "working")
        time.sleep(0.01)
    return f"stopped after {steps} steps"


def publishing(progress=None) -> int:
    for step in range(3):
        publish("snapshots", {i: np.full(2, i) for i in range(step + 1)})
    time.sleep(1.0)
    return 3


def failing(kind: str, progress=None) -> None:
    if kind == "user":
        raise DataError("The folder holds no images. Pick another folder.")
    raise ValueError("an internal bug")


@pytest.fixture(scope="module")
def pool():
    """One worker: jobs queue behind each other."""
    started = WorkerPool(workers=1)
    yield started
    started.shutdown()


@pytest.mark.slow
def test_a_job_runs_in_another_process_and_reports_progress(pool) -> None:
    seen: list[tuple[float, str]] = []
    pid = pool.submit(counting, 20).wait(lambda fraction, message: seen.append((fraction, message)))
    assert pid != os.getpid()
    assert any(message.startswith("step") for _, message in seen)
    fractions = [f for f, m in seen if m.startswith("step")]
    assert fractions == sorted(fractions) and 0 < max(fractions) < 1


def test_jobs_queue_in_order_and_cancel(pool) -> None:
    first, second, third = (pool.submit(counting, 400) for _ in range(3))
    deadline = time.monotonic() + 60
    while first.status().state != "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert first.status().state == "running"
    assert (second.status().state, second.status().position) == ("queued", 1)
    assert third.status().position == 2
    third.cancel()
    second.cancel()
    first.cancel()  # running: stopped at its next progress report
    for job in (first, second, third):
        with pytest.raises(JobCancelled):
            job.result(timeout=60)
        assert job.status().state == "cancelled"
    assert pool.submit(counting, 1).result(timeout=60) != os.getpid()  # the worker is free again


def test_a_graceful_job_ends_itself_and_keeps_its_result(pool) -> None:
    job = pool.submit(graceful, graceful=True)
    while job.status().state != "running":
        time.sleep(0.05)
    time.sleep(0.3)
    job.cancel()
    assert job.result(timeout=60).startswith("stopped after")
    assert job.status().state == "done"


def test_errors_reach_the_caller_with_their_message(pool) -> None:
    with pytest.raises(DataError, match="holds no images"):
        pool.submit(failing, "user").result(timeout=60)
    job = pool.submit(failing, "bug")
    assert job.join(timeout=60).state == "failed"
    assert "ValueError" in job.status().error and "server log" in job.status().error
    with pytest.raises(ValueError):
        job.result()


@pytest.mark.slow
def test_published_values_are_live(pool) -> None:
    job = pool.submit(publishing)
    deadline = time.monotonic() + 60
    while job.published("snapshots") is None or len(job.published("snapshots")) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert sorted(job.published("snapshots")) == [0, 1, 2] and job.published("missing", "none") == "none"
    assert job.result(timeout=60) == 3


def test_one_job_per_key_for_every_session(pool, monkeypatch) -> None:
    submitted = []
    original = pool.submit

    def counting_submit(*args, **kwargs):
        submitted.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(pool, "submit", counting_submit)
    monkeypatch.setattr(cache_module, "heavy_pool", lambda: pool)
    shared = pooled(counting, max_entries=4)
    pids = run_together([lambda: shared(10) for _ in range(4)])
    assert len(set(pids)) == 1 and len(submitted) == 1
    assert shared.cached(10) and shared(10) == pids[0] and len(submitted) == 1


class PageRerun(Exception):
    """Stands in for Streamlit stopping a page's run: raised from the progress callback of the wait."""


def interrupted_after_first_report(fraction: float, message: str) -> None:
    raise PageRerun


def test_an_abandoned_job_is_cancelled_at_once_unless_another_session_waits(pool, monkeypatch) -> None:
    monkeypatch.setattr(cache_module, "heavy_pool", lambda: pool)
    shared = pooled(counting, max_entries=4)
    with pytest.raises(PageRerun):  # a page asked for 2000 steps (100 s), then its user changed a setting
        shared(2000, progress=interrupted_after_first_report)
    done = {}
    follower = threading.Thread(target=lambda: done.update(pid=shared(60)), daemon=True)
    follower.start()  # another session waits for a 3 s job, queued behind it (one worker)
    time.sleep(1.0)
    shared.abandon(60)  # kept: a session waits for it
    start = time.perf_counter()
    shared.abandon(2000)  # nobody waits: cancelled at once
    follower.join(timeout=60)
    assert "pid" in done and time.perf_counter() - start < 30  # nothing queued behind the abandoned job
    assert shared.cached(60) and not shared.cached(2000)


def test_memoize_computes_a_key_once_while_sessions_wait() -> None:
    calls = []
    gate = threading.Event()

    @memoize(max_entries=4)
    def slow(x: int, progress=None) -> int:
        calls.append(x)
        gate.wait(5)
        report(progress, 1.0, "done")
        return x * 2

    threading.Timer(0.5, gate.set).start()
    assert run_together([lambda: slow(3) for _ in range(4)]) == [6] * 4
    assert calls == [3]


def test_memoize_passes_progress_only_to_functions_that_take_it() -> None:
    @memoize(max_entries=2)
    def plain(x: int) -> int:
        return x + 1

    @memoize(max_entries=2)
    def reporting(x: int, progress=None) -> int:
        report(progress, 0.5, f"half of {x}")
        return x + 1

    seen = []
    assert plain(1, progress=lambda f, m: seen.append(m)) == 2 and not seen
    assert reporting(1, progress=lambda f, m: seen.append((f, m))) == 2 and seen == [(0.5, "half of 1")]
    assert reporting(1) == 2 and plain(1) == 2  # cached: progress is not part of the key


def test_memoize_does_not_keep_errors() -> None:
    attempts = []

    @memoize(max_entries=2)
    def flaky(x: int) -> int:
        attempts.append(x)
        if len(attempts) == 1:
            raise FilterLensError("try again")
        return x

    with pytest.raises(FilterLensError):
        flaky(5)
    assert flaky(5) == 5 and attempts == [5, 5]


def reporting_pid(progress=None) -> None:
    """A long job that publishes its process id."""
    publish("pid", os.getpid())
    for _ in range(6000):
        report(progress, 0.5, "working")
        time.sleep(0.01)


SERVER_SCRIPT = """
import sys, time
from fl_ui.pool import WorkerPool
from tests.workers.test_workers import reporting_pid

if __name__ == "__main__":
    job = WorkerPool(workers=1).submit(reporting_pid)
    while job.published("pid") is None:
        time.sleep(0.05)
    print(job.published("pid"), flush=True)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().split()[2] != "Z"


@pytest.mark.slow
def test_workers_end_when_the_server_is_killed(tmp_path) -> None:
    """kill -9 of the server leaves no orphan computing its job."""
    script = tmp_path / "server.py"
    script.write_text(SERVER_SCRIPT)
    server = subprocess.Popen([sys.executable, str(script)], cwd=REPO, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        worker = int(server.stdout.readline())
        assert _alive(worker)
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait()
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker), "the worker outlived the server"


MAIN_SCRIPT = """
import os, sys
from pathlib import Path
if __name__ != "__main__":  # imported again in a child, as the app script would be under `streamlit run`
    Path(os.environ["SENTINEL"]).write_text(__name__)
from fl_ui.pool import WorkerPool
from tests.workers.test_workers import counting

if __name__ == "__main__":
    print(WorkerPool(workers=1).submit(counting, 1).result(timeout=120))
"""


@pytest.mark.slow
def test_workers_never_run_the_main_script(tmp_path) -> None:
    """Under `streamlit run`, ``__main__`` is the app script: a worker must not import it again."""
    script, sentinel = tmp_path / "app_like.py", tmp_path / "main-ran-in-a-child"
    script.write_text(MAIN_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), "SENTINEL": str(sentinel)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) > 0 and not sentinel.exists()
