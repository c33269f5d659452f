"""Heavy work on Dask distributed, so that the server that draws the pages never waits behind it.

A Streamlit server is one process: every session's script runs in a thread of it, next to the event loop that
answers ``/_stcore/health`` and the browsers' websockets. Long computations (re-scoring, channel analyses, training
runs, reports, patch statistics of large folders) run instead as tasks of a Dask cluster, the **engine**:

* by default an embedded one (:mod:`fl_ui.cluster`): a scheduler and ``FL_HEAVY_JOBS`` worker processes on
  loopback, started with the server (nothing else to run), ``nice``-lowered so that pages and health checks win;
* with ``FL_SCHEDULER=tcp://host:8786``, a running cluster whose workers may be other machines with GPUs
  (``dask worker tcp://host:8786 --nthreads 1 --preload fl_ui.worker``, ``--resources GPU=1`` on a GPU machine).

A job is a top-level function of an importable module called on a worker as ``function(request, progress=...)``,
where ``request`` is a frozen dataclass saying what to compute (:mod:`fl_ui.jobs`). :meth:`Engine.submit` returns a
:class:`Job`: its :meth:`~Job.status` (queued with its place among this server's waiting jobs, running with the
worker's last progress report, or finished), :meth:`~Job.wait`, :meth:`~Job.published` live values and
:meth:`~Job.cancel`. Jobs wait in the scheduler's queue by :class:`Lane` (a page's view before the server's warm-up,
both before training runs and survey rows), in the order they came within a lane, and start as workers free up; on a
cluster with GPU workers a job on a CUDA device asks for a ``GPU`` resource, so the scheduler sends it to one.
Cancelling drops a waiting job; a running one is asked to stop (:mod:`fl_ui.worker`: it raises at its next progress
report, or a ``graceful`` job ends itself and keeps what it did) and, if it is still running :data:`HARD_CANCEL_AFTER_S`
later (:data:`GRACEFUL_STOP_S` for a graceful one), its worker process is ended. A worker that dies (killed, out of
memory, or ended so) fails only its job, with a message that says so, and its nanny starts a fresh one. Results come
back over the engine's connections, never through shared memory.

**Jobs belong to the sessions that watch them** (:mod:`fl_ui.sessions`): the browser session that submitted a job and
every session that asked for the same request since (:meth:`Job.watch`). A session may own at most
:func:`session_job_limit` unfinished jobs (:class:`TooManyJobs` names the limit and how to cancel). A job whose every
owner has closed its tab is cancelled :data:`ABANDONED_AFTER_S` later (a reload or a reconnecting tab finds it still
running), or :data:`ABANDONED_WHILE_OTHERS_WAIT_S` later while it or another job waits for a worker; a job asked for
outside any session (the server's warm-up, whose result is kept for everyone) belongs to the server and is never
abandoned.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import logging
import math
import os
import pickle
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fl_core.backend import Progress, report
from fl_core.errors import FilterLensError
from fl_ui import internals, sessions
from fl_ui.worker import JobCancelled, exit_worker, job_payload, progress_name, published_name, run_job, stop_name

log = logging.getLogger("filterlens")

SCHEDULER_ENV = "FL_SCHEDULER"
"""The address of a running Dask scheduler to use instead of the embedded cluster."""
HARD_CANCEL_AFTER_S = 3.0
"""A cancelled job still running this long after its stop was asked has its worker process ended (and restarted)."""
GRACEFUL_STOP_S = 30.0
"""The same for a graceful job, which first finishes its step and saves what it did."""
ABANDONED_AFTER_S = 30.0
"""A job whose every owning session has closed is cancelled this long after the last one closed."""
ABANDONED_WHILE_OTHERS_WAIT_S = 2.0
"""... or this long after, when another job (not abandoned itself) waits for a worker."""
REAP_INTERVAL_S = 0.5
"""How often the engine looks for abandoned jobs."""
SESSION_JOBS_ENV = "FL_SESSION_JOBS"
"""The most unfinished (running or waiting) jobs one browser session may own; default :data:`SESSION_JOBS`."""
SESSION_JOBS = 4
STATUS_TTL_S = 0.2
"""A job's progress is asked of the scheduler at most this often (many sessions may follow one job)."""
CONNECT_TIMEOUT_S = 60
GPU_RESOURCE = "GPU"
"""The worker resource a CUDA job asks for (``dask worker --resources GPU=1``)."""


class Lane(enum.IntEnum):
    """Where a job waits for a worker (its task's Dask priority): a free worker takes a waiting job of the highest lane
    first, in the order they came within a lane. A running job is never interrupted for another."""

    LONG = 0
    """Training runs and survey rows: minutes or more each, and many at once."""
    WARM_UP = 1
    """A page's view asked for outside any session: the server's warm-up of the pages' first views."""
    INTERACTIVE = 2
    """A page's view that a visitor waits for."""


class TooManyJobs(FilterLensError):
    """A session asked for a job while it owns :func:`session_job_limit` unfinished ones."""


def session_job_limit() -> int:
    """The most unfinished jobs one session may own: ``FL_SESSION_JOBS``, default :data:`SESSION_JOBS`."""
    return max(1, int(os.environ.get(SESSION_JOBS_ENV) or SESSION_JOBS))


def heavy_job_slots() -> int:
    """How many heavy jobs the embedded engine runs at once: ``FL_HEAVY_JOBS``, default one per two cores."""
    default = max(1, (os.cpu_count() or 2) // 2)
    return max(1, int(os.environ.get("FL_HEAVY_JOBS", default)))


@dataclass(frozen=True)
class JobState:
    """What a job is doing, for display.

    Attributes:
        state: ``queued``, ``running``, ``done``, ``cancelled`` or ``failed``.
        fraction, message: its last progress report.
        position: 1-based place among this server's waiting jobs while queued (``None`` otherwise).
        error: the message for the user when failed.
        worker: the address of the worker running it (once started).
    """

    state: str
    fraction: float = 0.0
    message: str = ""
    position: int | None = None
    error: str | None = None
    worker: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in ("done", "cancelled", "failed")


class Job:
    """A heavy job on the engine: poll :meth:`status`, :meth:`wait` for it, :meth:`cancel` it; :meth:`watch` and
    :meth:`unwatch` it from browser sessions (module docstring)."""

    def __init__(self, engine: Engine, future: Any, graceful: bool, gpu: bool = False, lane: Lane = Lane.INTERACTIVE,
                 owner: str | None = None) -> None:
        from distributed import Event, Variable

        self.key, self.graceful, self.gpu, self.lane = future.key, graceful, gpu, lane
        self.owners: set[str] = set() if owner is None else {owner}
        self.shared = owner is None  # asked for outside any session: the server's, never abandoned
        self.abandoned_since: float | None = None  # since when every owner has been closed
        self._engine, self._future = engine, future
        self._progress_var = Variable(progress_name(self.key), client=engine.client)
        self._published_var = Variable(published_name(self.key), client=engine.client)
        self._stop = Event(stop_name(self.key), client=engine.client)
        self._lock = threading.Lock()  # the flags below; held for no round trip, so cancel() never waits
        self._fetch_lock = threading.Lock()  # reads of the job's variables, and their deletion at the end
        self._progress: list = []
        self._asked = -float("inf")
        self._cancel_asked: float | None = None
        self._closed = False
        self._done = threading.Event()
        self._on_finish: list[Callable[[Job], None]] | None = []  # None once they have been called
        self._result_lock = threading.Lock()
        self._outcome: tuple[bool, Any] | None = None  # (True, value) or (False, the exception to raise)
        self._final: JobState | None = None

    def _latest_progress(self) -> list:
        """``[fraction, message, worker]`` of the last report (empty before the job started)."""
        with self._fetch_lock:
            now = time.monotonic()
            if not self._closed and not self._future.done() and now - self._asked >= STATUS_TTL_S:
                with contextlib.suppress(OSError, TimeoutError):
                    self._progress = list(self._progress_var.get(timeout=CONNECT_TIMEOUT_S))
                self._asked = now
            return self._progress

    @property
    def done(self) -> bool:
        """Whether it has finished and its result (or error) is at hand; asks nothing of the scheduler."""
        return self._done.is_set()

    @property
    def cancelling(self) -> bool:
        """Whether it was asked to stop (it may still be finishing its step)."""
        return self._cancel_asked is not None

    def watch(self, session: str | None) -> None:
        """Count ``session`` among its owners (``None``, outside any session: the server keeps it for everyone)."""
        with self._lock:
            if session is None:
                self.shared = True
            else:
                self.owners.add(session)

    def unwatch(self, session: str | None) -> None:
        """``session`` no longer wants it (it asked for another request instead): cancelled at once when nobody
        else does."""
        with self._lock:
            self.owners.discard(session)
            unwanted = not (self.owners or self.shared)
        if unwanted:
            self.cancel()

    def abandoned(self, now: float) -> float:
        """Seconds since every owner closed its session (0 while one is open, or for the server's own job)."""
        with self._lock:
            owners, shared = list(self.owners), self.shared
        if shared or not owners or any(sessions.session_is_open(owner) for owner in owners):
            self.abandoned_since = None
            return 0.0
        if self.abandoned_since is None:
            self.abandoned_since = now
        return now - self.abandoned_since

    def status(self) -> JobState:
        """Its state now (one round trip to the scheduler per :data:`STATUS_TTL_S` while it is unfinished)."""
        if self._final is not None:
            return self._final
        if self._future.done():
            return self._finished_state()
        progress = self._latest_progress()
        if not progress:
            position = self._engine.queue_position(self)
            wanted = "a GPU worker" if self.gpu else "a worker"
            return JobState("queued", 0.0, f"waiting for {wanted} ({_ordinal(position)} in this server's queue)",
                            position=position)
        fraction, message, worker = progress
        if self._cancel_asked is not None:
            message = "stopping after the current step" if self.graceful else "cancelling"
        return JobState("running", fraction, message, worker=worker)

    def _finished_state(self) -> JobState:
        worker = self._progress[2] if self._progress else None
        if self._future.status == "cancelled":
            return JobState("cancelled", 0.0, "cancelled", worker=worker)
        if self._future.status == "finished":
            return JobState("done", 1.0, "done", worker=worker)
        error = self._future.exception()
        if isinstance(error, JobCancelled) or (self._cancel_asked is not None and _worker_died(error)):
            return JobState("cancelled", 0.0, str(error) if isinstance(error, JobCancelled) else "cancelled",
                            worker=worker)
        return JobState("failed", 0.0, "failed", error=_user_message(error), worker=worker)

    def cancel(self) -> None:
        """Drop it if it waits; otherwise ask it to stop, and end its worker process (its nanny starts a fresh one) if
        it has not stopped :data:`HARD_CANCEL_AFTER_S` later (:data:`GRACEFUL_STOP_S` for a ``graceful`` job, which
        ends itself keeping what it did). Returns at once."""
        with self._lock:
            if self._cancel_asked is not None or self._future.done():
                return
            self._cancel_asked = time.monotonic()
        threading.Thread(target=self._stop_it, name=f"cancel-{self.key}", daemon=True).start()

    def _stop_it(self) -> None:
        self._stop.set()
        worker = self._engine.worker_of(self.key)
        if worker is None:  # still queued: dropped (a job its worker has taken runs on, so it must see the flag)
            self._future.cancel()
            return
        if self._done.wait(GRACEFUL_STOP_S if self.graceful else HARD_CANCEL_AFTER_S):
            return
        if not self._future.done():
            log.warning("job %s did not stop within %.0f s: restarting its worker %s", self.key,
                        HARD_CANCEL_AFTER_S, worker)
            # the job holds the worker until the scheduler sees it gone, so no other job is sent to it meanwhile
            self._engine.client.run(exit_worker, workers=[worker], wait=False)
            if not self._done.wait(CONNECT_TIMEOUT_S):
                self._future.cancel()

    def published(self, name: str, default: Any = None) -> Any:
        """The latest value the job published under ``name`` (:func:`fl_ui.worker.publish`) while it runs."""
        with self._fetch_lock:
            if self._closed or self._future.done():
                return default
            try:
                values = self._published_var.get(timeout=CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError):
                return default
        return pickle.loads(values[name]) if name in values else default

    def result(self, timeout: float | None = None) -> Any:
        """Its return value (fetched from its worker once); raises what it raised (:class:`JobCancelled` when
        cancelled, a :class:`FilterLensError` saying so when its worker died)."""
        with self._result_lock:
            if self._outcome is None:
                self._outcome = self._fetch(timeout)
        succeeded, payload = self._outcome
        if succeeded:
            return payload
        raise payload

    def _fetch(self, timeout: float | None) -> tuple[bool, Any]:
        from distributed import CancelledError

        try:
            return True, self._future.result(timeout)
        except TimeoutError:
            raise
        except CancelledError:
            return False, JobCancelled("The job was cancelled. Start it again when you need it.")
        except Exception as err:
            if not _worker_died(err):
                return False, err
            if self._cancel_asked is not None:
                return False, JobCancelled("The job was cancelled. Start it again when you need it.")
            return False, FilterLensError(_user_message(err))

    def on_finish(self, callback: Callable[[Job], None]) -> None:
        """Call ``callback(job)`` once it has finished (in another thread; at once if it has)."""
        with self._lock:
            if self._on_finish is not None:
                self._on_finish.append(callback)
                return
        callback(self)

    def join(self, timeout: float | None = None) -> JobState:
        """Wait until it has finished (or ``timeout`` seconds passed) and return its state; never raises."""
        self._done.wait(timeout)
        return self.status()

    def wait(self, progress: Progress | None = None, poll_s: float = 0.25) -> Any:
        """Wait for the result, reporting the queue position and the job's progress through ``progress``."""
        while not self._done.is_set():
            state = self.status()
            report(progress, state.fraction, state.message)
            self._done.wait(poll_s)
        return self.result()

    def _finish(self) -> None:
        """When it has finished: fetch its result, release it in the engine (a finished job whose worker dies later
        must not run again), drop its progress, live values and stop flag from the scheduler, tell the
        :meth:`on_finish` callbacks, and only then wake whoever waits (so they find what the callbacks kept)."""
        with contextlib.suppress(Exception):  # its last report says which worker ran it
            self._progress = list(self._progress_var.get(timeout=CONNECT_TIMEOUT_S))
        state = self._finished_state()
        with contextlib.suppress(Exception):
            self.result()
        self._final = state
        self._future.release()
        with self._fetch_lock:
            self._closed = True
            with contextlib.suppress(Exception):  # the engine may be closing
                self._progress_var.delete()
                self._published_var.delete()
                self._stop.clear()
        with self._lock:
            callbacks, self._on_finish = self._on_finish, None
        for callback in callbacks:
            try:
                callback(self)
            except Exception:
                log.exception("a callback of job %s failed", self.key)
        self._done.set()


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _worker_died(error: BaseException | None) -> bool:
    from distributed.scheduler import KilledWorker

    return isinstance(error, KilledWorker)


def _user_message(error: BaseException) -> str:
    if _worker_died(error):
        return ("The worker process running this job stopped (killed, or out of memory?). The server keeps running: "
                "try again, with fewer images or a smaller model if it happens again.")
    if isinstance(error, FilterLensError):
        return str(error)
    return (f"The job failed ({type(error).__name__}: {error}). Details are in the worker's log; try fewer images or "
            "another model.")


class Engine:
    """A client of the scheduler at ``address``, or of an embedded cluster of ``workers`` processes (module
    docstring)."""

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        from distributed import Client

        self.workers = workers or heavy_job_slots()
        self._helper: subprocess.Popen | None = None
        if address is None:
            from fl_ui.cluster import start_embedded_cluster

            self._helper, address = start_embedded_cluster(self.workers)
        self.address = address
        self.client = Client(address, set_as_default=False, timeout=CONNECT_TIMEOUT_S)
        self._lock = threading.Lock()
        self._order = itertools.count()
        self._jobs: dict[str, tuple[int, Job]] = {}
        self._closing = threading.Event()
        threading.Thread(target=self._watch_sessions, name="filterlens-abandoned-jobs", daemon=True).start()
        # closed when the interpreter begins to exit, before Python shuts down the thread pools: the client then
        # still runs the callbacks of the jobs it cancels (after atexit, each would log a traceback instead)
        internals.call_before_thread_shutdown(self.close)

    @property
    def embedded(self) -> bool:
        return self._helper is not None

    def submit(self, function: Callable[..., Any], request: Any, *, graceful: bool = False,
               device: str | None = None, lane: Lane = Lane.INTERACTIVE) -> Job:
        """Queue ``function(request, progress=...)`` in ``lane`` (a page's view asked for outside any session waits
        in :attr:`Lane.WARM_UP`), owned by the calling thread's session (:func:`fl_ui.sessions.current_session`);
        ``graceful`` jobs stop via :func:`fl_ui.worker.stop_requested`; a CUDA ``device`` asks for a GPU worker.

        Raises:
            TooManyJobs: the session owns :func:`session_job_limit` unfinished jobs already.
        """
        from dask.task_spec import Task
        from distributed import Variable

        owner = sessions.current_session()
        if owner is None and lane is Lane.INTERACTIVE:
            lane = Lane.WARM_UP
        self.check_session_limit(owner)
        key = f"fl-{getattr(function, '__name__', 'job')}-{uuid.uuid4().hex}"
        # its progress and live values exist (empty) before the job does, so a reader never waits for them
        Variable(progress_name(key), client=self.client).set([])
        Variable(published_name(key), client=self.client).set({})
        # a "data producer" task waits in the scheduler's queue until a worker thread is free, in submission order
        task = Task(key, run_job, job_payload(function, request, graceful), _data_producer=True)
        resources = self.resources(device)
        future = self.client.get({key: task}, key, sync=False, resources=resources, fifo_timeout="0 ms",
                                 priority=int(lane))
        job = Job(self, future, graceful, gpu=bool(resources), lane=lane, owner=owner)
        with self._lock:
            self._jobs[key] = (next(self._order), job)
        future.add_done_callback(lambda _future: self._finished(key))
        return job

    def resources(self, device: str | None) -> dict[str, int] | None:
        """What a job on ``device`` asks of its worker: a GPU when the device is CUDA (or ``auto``) and the cluster
        has GPU workers (``dask worker --resources GPU=1``), nothing otherwise (the embedded cluster's workers share
        this machine's devices)."""
        wanted = str(device or "auto")
        if (wanted.startswith("cuda") or wanted == "auto") and self._cluster_has_gpus():
            return {GPU_RESOURCE: 1}
        return None

    def worker_of(self, key: str) -> str | None:
        """The address of the worker the scheduler has sent the job ``key`` to, ``None`` while it waits (asked of the
        scheduler, not of the job's progress reports, which start only once its worker has begun it)."""
        def processing_on(dask_scheduler=None) -> str | None:  # pickled by value: the scheduler imports nothing here
            task = dask_scheduler.tasks.get(key)
            return None if task is None or task.processing_on is None else task.processing_on.address

        return self.client.run_on_scheduler(processing_on)

    def _cluster_has_gpus(self) -> bool:
        workers = self.client.scheduler_info(n_workers=-1).get("workers", {}).values()
        return any(info.get("resources", {}).get(GPU_RESOURCE) for info in workers)

    def _finished(self, key: str) -> None:
        with self._lock:
            _, job = self._jobs.pop(key, (None, None))
        if job is not None:
            job._finish()

    def queue_position(self, job: Job) -> int:
        """1-based place of a waiting job among this server's jobs that have not started yet (by lane, then in the
        order they came)."""
        with self._lock:
            ahead = [other for _, other in sorted(self._jobs.values(), key=lambda entry: (-entry[1].lane, entry[0]))]
        waiting = [other for other in ahead if other is job or not (other._progress or other._future.done())]
        return waiting.index(job) + 1 if job in waiting else 1

    def session_jobs(self, session: str) -> list[Job]:
        """The unfinished jobs ``session`` owns."""
        with self._lock:
            return [job for _, job in self._jobs.values() if session in job.owners and not job.done]

    def free_job_slots(self, session: str | None) -> float:
        """How many more jobs ``session`` may own now (no limit outside a session)."""
        return math.inf if session is None else session_job_limit() - len(self.session_jobs(session))

    def check_session_limit(self, session: str | None) -> None:
        """Refuse a new job of ``session`` when it owns :func:`session_job_limit` unfinished jobs already."""
        limit = session_job_limit()
        if self.free_job_slots(session) <= 0:
            raise TooManyJobs(f"You have {limit} jobs running or waiting on this server, the most one session may "
                              f"have ({SESSION_JOBS_ENV}={limit}). Press ■ Cancel under one of their progress bars, "
                              "or wait until one finishes, then try again.")

    def cancel_abandoned(self) -> list[Job]:
        """Cancel every job abandoned (:meth:`Job.abandoned`) for :data:`ABANDONED_AFTER_S`, or for
        :data:`ABANDONED_WHILE_OTHERS_WAIT_S` when it still waits for a worker itself or a job nobody abandoned does;
        returns them."""
        now = time.monotonic()
        with self._lock:
            unfinished = [job for _, job in self._jobs.values() if not job.done]
        idle = {job: job.abandoned(now) for job in unfinished if not job.cancelling}
        candidates = [job for job, seconds in idle.items() if seconds >= ABANDONED_WHILE_OTHERS_WAIT_S]
        if not candidates:
            return []
        waiting = set(self.waiting_keys([job.key for job in idle]))
        others_wait = any(job.key in waiting for job, seconds in idle.items() if not seconds)
        stale = [job for job in candidates if others_wait or job.key in waiting or idle[job] >= ABANDONED_AFTER_S]
        for job in stale:
            log.info("cancelling job %s: every session that watched it closed %.0f s ago", job.key, idle[job])
            job.cancel()
        return stale

    def waiting_keys(self, keys: list[str]) -> list[str]:
        """Those of ``keys`` whose tasks wait in the scheduler for a worker (one round trip)."""
        def waiting(dask_scheduler=None) -> list[str]:  # pickled by value: the scheduler imports nothing here
            tasks = (dask_scheduler.tasks.get(key) for key in keys)
            return [task.key for task in tasks if task is not None and task.state in ("queued", "no-worker")]

        return self.client.run_on_scheduler(waiting) if keys else []

    def _watch_sessions(self) -> None:
        """Every :data:`REAP_INTERVAL_S`, :meth:`cancel_abandoned` (until the engine closes)."""
        while not self._closing.wait(REAP_INTERVAL_S):
            try:
                self.cancel_abandoned()
            except Exception:  # the scheduler may be restarting: try again at the next pass
                log.debug("looking for abandoned jobs failed", exc_info=True)

    def wait_for_workers(self, timeout: float = 600) -> None:
        """Block until the embedded cluster's workers (or at least one of a cluster's) have joined."""
        self.client.wait_for_workers(self.workers if self.embedded else 1, timeout=timeout)

    def close(self) -> None:
        """Disconnect (the scheduler drops this server's jobs) and stop the embedded cluster."""
        self._closing.set()
        with contextlib.suppress(Exception):
            self.client.close(timeout=10)
        if self._helper is not None and self._helper.poll() is None:
            self._helper.terminate()
            try:
                self._helper.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._helper.kill()
                self._helper.wait()


_ENGINE: Engine | None = None
_ENGINE_LOCK = threading.Lock()


def engine_started() -> bool:
    """Whether this process's engine is connected (:func:`heavy_engine` returns at once)."""
    return _ENGINE is not None


def heavy_engine() -> Engine:
    """The server's engine (connected or started on first use, one per process): ``FL_SCHEDULER`` or embedded."""
    global _ENGINE
    with _ENGINE_LOCK:
        if _ENGINE is None:
            _ENGINE = Engine(os.environ.get(SCHEDULER_ENV) or None)
        return _ENGINE
