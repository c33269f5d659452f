"""Heavy jobs on the engine (Dask distributed): progress, queue order and position, cancel (graceful, cooperative
and hard), errors, a killed worker, live values, one job per key, and the processes it starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fl_core.compute.progress import report
from fl_core.errors import DataError, FilterLensError
from fl_ui import memo as memo_module
from fl_ui.engine import HARD_CANCEL_AFTER_S
from fl_ui.memo import memoize, pooled
from fl_ui.worker import JobCancelled

from ..conftest import REPO
from ..test_concurrency import run_together
from . import sample_jobs as jobs
from .conftest import wait_until


@pytest.mark.slow
def test_a_job_runs_in_another_process_and_reports_progress(engine) -> None:
    seen: list[tuple[float, str]] = []
    pid = engine.submit(jobs.counting, 20).wait(lambda fraction, message: seen.append((fraction, message)))
    assert pid != os.getpid()
    fractions = [f for f, m in seen if m.startswith("step")]
    assert fractions == sorted(fractions) and 0 < max(fractions) < 1


@pytest.mark.slow
def test_workers_keep_freed_large_tensors_for_the_next_pass(engine) -> None:
    from fl_core.compute import allocator

    seen = engine.submit(jobs.freed_block_kept, 100).wait()
    assert seen["environment"] == allocator.ENVIRONMENT  # glibc's settings from the worker's start (not Dask's)
    assert seen["kept"] > 90  # no fresh zero-filled pages for the next tensor of that size


def test_jobs_queue_in_order_and_cancel(engine) -> None:
    first, second, third = (engine.submit(jobs.counting, 400) for _ in range(3))
    wait_until(lambda: first.status().state == "running")
    assert (second.status().state, second.status().position) == ("queued", 1)
    assert third.status().position == 2 and "2nd in this server's queue" in third.status().message
    third.cancel()
    second.cancel()
    first.cancel()  # running: stopped at its next progress report
    for job in (first, second, third):
        assert job.join(timeout=60).state == "cancelled"
        with pytest.raises(JobCancelled):
            job.result()
    assert engine.submit(jobs.counting, 1).result(timeout=60) != os.getpid()  # the worker is free again


def test_a_graceful_job_ends_itself_and_keeps_its_result(engine) -> None:
    job = engine.submit(jobs.graceful, 5000, graceful=True)
    wait_until(lambda: job.status().state == "running")
    time.sleep(0.3)
    job.cancel()
    assert job.result(timeout=60).startswith("stopped after")
    assert job.status().state == "done"


def test_a_job_cancelled_as_its_worker_takes_it_still_stops(engine) -> None:
    """Whether a job has been taken is asked of the scheduler, not read from its first progress report: cancelled
    then, it sees its stop flag and frees the worker (dropping it from the queue instead left a 100,000-step run
    holding the worker for minutes, every later job waiting behind it)."""
    job = engine.submit(jobs.graceful, 100_000, graceful=True)
    wait_until(lambda: engine.worker_of(job.key) is not None, poll=0.001)
    job.cancel()
    ended = job.join(timeout=60)  # cancelled before its function began, or stopped by itself at its first check
    assert ended.state == "cancelled" or (ended.state == "done" and job.result().startswith("stopped after"))
    assert engine.submit(jobs.counting, 1).result(timeout=60) != os.getpid()  # the worker is free again


def test_a_running_job_whose_task_the_scheduler_dropped_stops(engine) -> None:
    """A cancel can reach the scheduler as the job's worker takes it, and the job's stop flag is gone with its
    future: the job stops because the scheduler no longer wants its task (a cancelled 100,000-step Training Lab run
    otherwise held the only worker of the test process for minutes, every later page job waiting behind it)."""
    job = engine.submit(jobs.graceful, 100_000, graceful=True)
    wait_until(lambda: job.status().state == "running")
    job._future.cancel()  # no stop flag: only the scheduler forgets the task
    started = time.monotonic()
    assert engine.submit(jobs.counting, 1).result(timeout=60) != os.getpid()
    assert time.monotonic() - started < 10  # 100,000 steps of 10 ms would hold the worker for 17 minutes


def test_errors_reach_the_caller_with_their_message(engine) -> None:
    with pytest.raises(DataError, match="holds no images"):
        engine.submit(jobs.failing, "user").result(timeout=60)
    job = engine.submit(jobs.failing, "bug")
    assert job.join(timeout=60).state == "failed"
    assert "ValueError" in job.status().error and "log" in job.status().error
    with pytest.raises(ValueError):
        job.result()


@pytest.mark.slow
def test_published_values_are_live(engine) -> None:
    job = engine.submit(jobs.publishing, 3)
    wait_until(lambda: len(job.published("snapshots") or {}) == 3)
    assert job.published("snapshots")[2] == [2, 2] and job.published("missing", "none") == "none"
    assert job.result(timeout=60) == 3
    assert job.published("snapshots", "gone") == "gone"  # dropped from the scheduler once the job ended


@pytest.mark.slow
def test_a_job_that_never_reports_is_stopped_by_restarting_its_worker(engine) -> None:
    job = engine.submit(jobs.silent, 600)
    wait_until(lambda: job.published("pid") is not None)
    pid = job.published("pid")
    began = time.monotonic()
    job.cancel()
    assert job.status().message == "cancelling"  # at once, before anything reached the scheduler
    assert job.join(timeout=60).state == "cancelled"
    assert HARD_CANCEL_AFTER_S <= time.monotonic() - began < HARD_CANCEL_AFTER_S + 10
    wait_until(lambda: not _alive(pid), timeout=30)  # the worker process really stopped
    assert engine.submit(jobs.counting, 1).result(timeout=120) not in (pid, os.getpid())  # its fresh successor


@pytest.mark.slow
def test_jobs_start_in_order_as_workers_free_up(pair) -> None:
    """One long job, then short ones: they all run on the free worker, in the order they came."""
    began = time.time()
    long, *short = (pair.submit(jobs.timed, seconds) for seconds in (4.0, 0.3, 0.3, 0.3, 0.3))
    runs = [job.result(timeout=120) for job in short]
    starts = [start for start, _, _ in runs]
    assert starts == sorted(starts) and len({pid for _, _, pid in runs}) == 1
    long_start, long_end, long_pid = long.result(timeout=120)
    assert long_pid != runs[0][2] and starts[-1] < long_end and long_start - began < 30


@pytest.mark.slow
def test_a_killed_worker_fails_only_its_job_and_the_next_jobs_run(pair) -> None:
    victim, other = pair.submit(jobs.reporting_pid, 60), pair.submit(jobs.reporting_pid, 3)
    wait_until(lambda: victim.published("pid") is not None and other.published("pid") is not None)
    os.kill(victim.published("pid"), signal.SIGKILL)
    state = victim.join(timeout=60)
    assert state.state == "failed" and "worker process running this job stopped" in state.error
    with pytest.raises(FilterLensError, match="server keeps running"):
        victim.result()
    assert other.result(timeout=60) == other.result()  # the other worker's job finished
    pair.wait_for_workers()
    pids = {job.result(timeout=120)[2] for job in [pair.submit(jobs.timed, 1.0) for _ in range(2)]}
    assert len(pids) == 2  # both workers take jobs again, the restarted one included


@pytest.mark.slow
def test_the_embedded_cluster_refuses_a_client_without_its_credentials(engine) -> None:
    """Another user of the machine cannot connect to the embedded scheduler (and so cannot run code in it or its
    workers with ``Client(address).run_on_scheduler``): it speaks TLS only, to clients holding this server's
    certificate; the server's own jobs run."""
    from distributed import Client
    from distributed.security import Security

    assert engine.address.startswith("tls://127.0.0.1:")
    plain = engine.address.replace("tls://", "tcp://", 1)
    for address, security in ((plain, None), (engine.address, Security.temporary())):  # no TLS; TLS, another CA
        with pytest.raises((OSError, TimeoutError)):
            Client(address, security=security, timeout=10, set_as_default=False)
    assert engine.submit(jobs.counting, 1).result(timeout=60) != os.getpid()


def test_a_gpu_job_asks_for_a_gpu_worker_where_the_cluster_has_them(engine, monkeypatch) -> None:
    assert engine.resources("cuda:1") is None and engine.resources("auto") is None  # no GPU worker: any worker
    monkeypatch.setattr(engine, "_cluster_has_gpus", lambda: True)  # a cluster with `dask worker --resources GPU=1`
    assert engine.resources("cuda:1") == engine.resources("auto") == {"GPU": 1} and engine.resources("cpu") is None
    job = engine.submit(jobs.counting, 1, device="cuda")
    time.sleep(1.0)  # this cluster's worker offers no GPU: the job waits for one
    assert job.status().state == "queued" and "waiting for a GPU worker" in job.status().message
    job.cancel()
    assert job.join(timeout=30).state == "cancelled"


def test_one_job_per_key_for_every_session(engine, monkeypatch) -> None:
    submitted = []
    original = engine.submit

    def counting_submit(*args, **kwargs):
        submitted.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(engine, "submit", counting_submit)
    monkeypatch.setattr(memo_module, "heavy_engine", lambda: engine)
    shared = pooled(jobs.counting, max_entries=4)
    pids = run_together([lambda: shared(10) for _ in range(4)])
    assert len(set(pids)) == 1 and len(submitted) == 1
    assert shared.cached(10) and shared(10) == pids[0] and len(submitted) == 1


@pytest.mark.slow
def test_a_result_is_kept_when_the_session_that_asked_has_gone(engine, monkeypatch) -> None:
    """A session interrupted while it waits (its user closed the tab): the job goes on, and its result is kept for
    the session that comes back, without computing it again."""
    monkeypatch.setattr(memo_module, "heavy_engine", lambda: engine)
    shared = pooled(jobs.counting, max_entries=4)

    class TabClosed(Exception):
        pass

    def leave(fraction: float, message: str) -> None:
        if message.startswith("step"):
            raise TabClosed

    with pytest.raises(TabClosed):
        shared(40, progress=leave)
    wait_until(lambda: shared.cached(40), timeout=60)
    assert shared(40) != os.getpid()


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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().split()[2] != "Z"


SERVER_SCRIPT = """
import time
from fl_ui.engine import Engine
from tests.workers.sample_jobs import reporting_pid

if __name__ == "__main__":
    job = Engine(workers=1).submit(reporting_pid, 600)
    while job.published("pid") is None:
        time.sleep(0.05)
    print(job.published("pid"), flush=True)
    time.sleep(600)
"""


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
    wait_until(lambda: not _alive(worker), timeout=15, poll=0.1)


MAIN_SCRIPT = """
import os, signal, sys, time, types
from pathlib import Path
if __name__ != "__main__":  # imported again in a child, as the app script would be under `streamlit run`
    Path(os.environ["SENTINEL"]).write_text(__name__)
from fl_ui.engine import Engine
from tests.workers.sample_jobs import counting, reporting_pid

if __name__ == "__main__":
    # what Streamlit's script runner does: the page script becomes __main__, and stays it after the run
    page = types.ModuleType("__main__")
    page.__file__ = __file__
    sys.modules["__main__"] = page
    engine = Engine(workers=1)
    job = engine.submit(reporting_pid, 600)
    while job.published("pid") is None:
        time.sleep(0.05)
    os.kill(job.published("pid"), signal.SIGKILL)  # the worker is started again while the page is __main__
    job.join(60)
    print(engine.submit(counting, 1).result(timeout=120))
"""


@pytest.mark.slow
def test_workers_never_run_the_main_script(tmp_path) -> None:
    """Under `streamlit run`, ``__main__`` is the app script: no worker, first or restarted, may import it."""
    script, sentinel = tmp_path / "app_like.py", tmp_path / "main-ran-in-a-child"
    script.write_text(MAIN_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), "SENTINEL": str(sentinel)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) > 0 and not sentinel.exists()
