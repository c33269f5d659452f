"""Heavy work in worker processes, so that the server that draws the pages never waits behind it.

A Streamlit server is one process: every session's script runs in a thread of it, next to the event loop that
answers ``/_stcore/health`` and the browsers' websockets. Long computations there (re-scoring, channel analyses,
training runs, patch statistics of large folders) hold the GIL in their Python parts and oversubscribe the cores
with torch's thread pools. They run instead in a :class:`WorkerPool`: a ``concurrent.futures.ProcessPoolExecutor``
(spawned processes, ``os.nice``-lowered so interactive work wins the CPU) with ``FL_HEAVY_JOBS`` workers — the
per-server limit on concurrent heavy jobs; more jobs wait in its queue, in order.

A job is a top-level function called in a worker as ``function(*args, progress=..., **kwargs)``. Its progress
reports travel back through a ``multiprocessing`` manager, and so do the live values it :func:`publish`-es (the
Training Lab's snapshots). Results and live values cross as plain pickles (tensors copied into the bytes), never
through torch's shared-memory tensor passing, which a container's small ``/dev/shm`` cannot hold.
:meth:`Job.cancel` drops a queued job; a running one gets :class:`JobCancelled` raised from its next progress
report, or, for a ``graceful`` job, sees :func:`stop_requested` turn true and ends itself (keeping what it did).
Jobs load models themselves through :func:`worker_model`, a small per-process cache.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing
import os
import pickle
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from concurrent import futures
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from functools import lru_cache
from multiprocessing.managers import SyncManager
from typing import Any

from fl_core.backend import Progress, report
from fl_core.errors import FilterLensError

log = logging.getLogger("filterlens")

PROGRESS_INTERVAL_S = 0.2
"""A worker sends at most one progress report (and checks for a cancel) per this many seconds."""
PARENT_CHECK_S = 0.5
"""How often workers check that the server that started them is still there."""
WORKER_NICENESS = 10
"""How much lower than the server the workers run (``os.nice``): the pages and health checks come first."""


class JobCancelled(FilterLensError):
    """The user cancelled the job."""


def heavy_job_slots() -> int:
    """How many heavy jobs run at once per server: ``FL_HEAVY_JOBS``, default one per two cores (at least 1)."""
    default = max(1, (os.cpu_count() or 2) // 2)
    return max(1, int(os.environ.get("FL_HEAVY_JOBS", default)))


@dataclass(frozen=True)
class JobState:
    """What a job is doing, for display.

    Attributes:
        state: ``queued``, ``running``, ``done``, ``cancelled`` or ``failed``.
        fraction, message: its last progress report.
        position: 1-based place in the queue while queued (``None`` otherwise).
        error: the message for the user when failed.
    """

    state: str
    fraction: float = 0.0
    message: str = ""
    position: int | None = None
    error: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in ("done", "cancelled", "failed")


class Job:
    """A heavy job submitted to a :class:`WorkerPool`: poll :meth:`status`, :meth:`wait` for it, :meth:`cancel`."""

    def __init__(self, pool: WorkerPool, job_id: int, future: Future) -> None:
        self.id, self._pool, self._future = job_id, pool, future

    def status(self) -> JobState:
        """Its state now (one round trip to the manager while it is unfinished)."""
        if self._future.done():
            return self._finished_state()
        board = self._pool.board_entry(self.id)
        if board is None:
            return JobState("queued", 0.0, "waiting for a free worker", position=self._pool.queue_position(self.id))
        return JobState("running", *board)

    def _finished_state(self) -> JobState:
        if self._future.cancelled():
            return JobState("cancelled", 0.0, "cancelled before it started")
        error = self._future.exception()
        if error is None:
            return JobState("done", 1.0, "done")
        if isinstance(error, JobCancelled):
            return JobState("cancelled", 0.0, str(error))
        return JobState("failed", 0.0, "failed", error=_user_message(error))

    def cancel(self) -> None:
        """Drop it if still queued; otherwise ask it to stop (see the module docstring)."""
        if not self._future.cancel():
            self._pool.request_stop(self.id)

    def published(self, name: str, default: Any = None) -> Any:
        """The latest value the job published under ``name`` (:func:`publish`)."""
        return self._pool.published(self.id, name, default)

    def result(self, timeout: float | None = None) -> Any:
        """Its return value; raises what it raised (:class:`JobCancelled` when cancelled)."""
        try:
            return pickle.loads(self._future.result(timeout))
        except CancelledError as err:
            raise JobCancelled("The job was cancelled before it started. Start it again when you need it.") from err
        except BrokenProcessPool as err:
            raise FilterLensError("The worker process running this job stopped (out of memory?). Try fewer images "
                                  "or a smaller model; the server keeps running.") from err

    def join(self, timeout: float | None = None) -> JobState:
        """Wait until it has finished (or ``timeout`` seconds passed) and return its state; never raises."""
        futures.wait([self._future], timeout)
        return self.status()

    def wait(self, progress: Progress | None = None, poll_s: float = 0.25) -> Any:
        """Wait for the result, reporting the queue position and the job's progress through ``progress``."""
        while not self._future.done():
            state = self.status()
            if state.position is not None:
                report(progress, 0.0, f"waiting for a free worker ({_ordinal(state.position)} in the queue)")
            else:
                report(progress, state.fraction, state.message)
            futures.wait([self._future], timeout=poll_s)
        return self.result()


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _user_message(error: BaseException) -> str:
    if isinstance(error, FilterLensError):
        return str(error)
    return (f"The job failed ({type(error).__name__}: {error}). Details are in the server log; try fewer images or "
            "another model.")


class WorkerPool:
    """A process pool for heavy jobs with progress, live values, a visible queue and cancel (module docstring)."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or heavy_job_slots()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._queued: dict[int, Future] = {}
        self._context = multiprocessing.get_context("spawn")
        self._manager = SyncManager(ctx=self._context)
        with _without_main_script():
            self._manager.start(_exit_with_parent, (os.getpid(),))
        self._board = self._manager.dict()
        self._stops = self._manager.dict()
        self._executor = self._new_executor()
        threading._register_atexit(self._stop_everything)  # before concurrent.futures joins the workers (LIFO)

    def _stop_everything(self) -> None:
        """At server exit: drop queued jobs and ask running ones to stop, so the exit does not wait for them."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            running = list(self._queued)
        for job_id in running:
            self.request_stop(job_id)

    def _new_executor(self) -> ProcessPoolExecutor:
        threads = max(1, (os.cpu_count() or 1) // self.workers)
        return ProcessPoolExecutor(self.workers, mp_context=self._context, initializer=_initialize_worker,
                                   initargs=(self._board, self._stops, threads, os.getpid()))

    def submit(self, function: Callable[..., Any], *args: Any, graceful: bool = False, **kwargs: Any) -> Job:
        """Queue ``function(*args, progress=..., **kwargs)``; ``graceful`` jobs stop via :func:`stop_requested`."""
        with self._lock:
            job_id = next(self._ids)
            try:
                future = self._start(_run_job, job_id, graceful, function, args, kwargs)
            except BrokenProcessPool:  # a worker died (killed, out of memory): start a fresh pool
                log.warning("heavy-job pool was broken; starting a new one")
                self._executor = self._new_executor()
                future = self._start(_run_job, job_id, graceful, function, args, kwargs)
            self._queued[job_id] = future
        future.add_done_callback(lambda _f: self._forget(job_id))
        return Job(self, job_id, future)

    def _forget(self, job_id: int) -> None:
        with self._lock:
            self._queued.pop(job_id, None)
        try:
            self._stops.pop(job_id, None)
            self._board.pop(job_id, None)
            self._board.pop(("published", job_id), None)
        except (OSError, EOFError, BrokenPipeError):  # the manager is gone at interpreter exit
            return

    def board_entry(self, job_id: int) -> tuple[float, str] | None:
        """``(fraction, message)`` of a started job, ``None`` while queued."""
        return self._board.get(job_id)

    def queue_position(self, job_id: int) -> int:
        """1-based place of a queued job among the jobs that have not started yet."""
        board = self._board.copy()  # one call to the manager: dict(proxy) read key by key while jobs left the board
        with self._lock:
            waiting = [j for j, future in self._queued.items() if j not in board and not future.done()]
        return waiting.index(job_id) + 1 if job_id in waiting else 1

    def request_stop(self, job_id: int) -> None:
        self._stops[job_id] = True

    def published(self, job_id: int, name: str, default: Any = None) -> Any:
        value = self._board.get(("published", job_id), {}).get(name)
        return default if value is None else pickle.loads(value)

    def warm_up(self) -> None:
        """Start every worker and import the jobs' modules in it, so the first real job does not wait for that."""
        for _ in range(self.workers):
            self._start(_import_jobs)

    def _start(self, *call: Any) -> Future:
        """Hand a call to the executor, which may start a worker process for it."""
        with _without_main_script():
            return self._executor.submit(*call)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._manager.shutdown()


_MAIN_LOCK = threading.Lock()


@contextlib.contextmanager
def _without_main_script() -> Iterator[None]:
    """While processes start: hide ``__main__`` from them. A spawned child re-imports its parent's main module, and
    under ``streamlit run`` that is the app script, which must never run in a worker (it would draw pages in bare
    mode and start workers of its own). Jobs are top-level functions of importable modules, so nothing is lost."""
    with _MAIN_LOCK:
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = main


_POOL: WorkerPool | None = None
_POOL_LOCK = threading.Lock()


def heavy_pool() -> WorkerPool:
    """The server's pool of heavy-job workers (started on first use, one per process)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = WorkerPool()
        return _POOL


# ----------------------------------------------------------------------------------------------- in the workers


@dataclass
class _WorkerContext:
    board: Any
    stops: Any
    job_id: int = 0
    graceful: bool = False
    last_report: float = 0.0
    published: dict[str, bytes] = field(default_factory=dict)


_WORKER: _WorkerContext | None = None


def _exit_with_parent(parent: int) -> None:
    """In a worker or the manager: end this process as soon as the server that started it is gone (killed, or
    exited while a job was running), so that no orphan keeps computing."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_S)
        os._exit(0)

    threading.Thread(target=watch, name="filterlens-parent-watch", daemon=True).start()


def _initialize_worker(board: Any, stops: Any, threads: int, parent: int) -> None:
    global _WORKER
    import torch

    _exit_with_parent(parent)
    _WORKER = _WorkerContext(board, stops)
    torch.set_num_threads(threads)
    with contextlib.suppress(OSError):  # not permitted here: run at the server's priority
        os.nice(WORKER_NICENESS)


def _import_jobs() -> None:
    import fl_ui.jobs  # noqa: F401  (the imports every job needs, done once per worker)


def _run_job(job_id: int, graceful: bool, function: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    context = _WORKER
    context.job_id, context.graceful, context.last_report, context.published = job_id, graceful, 0.0, {}
    if context.stops.get(job_id):
        raise JobCancelled("Cancelled before it started.")
    context.board[job_id] = (0.0, "started")
    try:
        return pickle.dumps(function(*args, progress=_worker_progress, **kwargs))
    except FilterLensError:
        raise
    except Exception:
        log.exception("heavy job %s failed", getattr(function, "__name__", function))
        raise


def _worker_progress(fraction: float, message: str) -> None:
    context = _WORKER
    now = time.monotonic()
    if now - context.last_report < PROGRESS_INTERVAL_S and fraction < 1.0:
        return
    context.last_report = now
    context.board[context.job_id] = (float(fraction), str(message))
    if not context.graceful and context.stops.get(context.job_id):
        raise JobCancelled("Cancelled. Start it again when you need it.")


def stop_requested() -> bool:
    """In a graceful job: whether the user asked it to stop (``False`` outside a worker)."""
    context = _WORKER
    return bool(context and context.stops.get(context.job_id))


def publish(name: str, value: Any) -> None:
    """In a job: make ``value`` the latest live value ``name`` (:meth:`Job.published`); a no-op outside a worker."""
    context = _WORKER
    if context is not None:
        context.published[name] = pickle.dumps(value)
        context.board[("published", context.job_id)] = dict(context.published)


@lru_cache(maxsize=4)
def _cached_model(spec: str, overrides: tuple, stamp: str):
    from fl_core.io.models import load_model

    return load_model(spec, input_overrides=dict(overrides))


def worker_model(spec: str, overrides: tuple = ()):
    """A loaded model in a worker process (kept for the next job; reloaded when its file changes)."""
    from fl_core.io.models import spec_file_stamp

    return _cached_model(spec, overrides, spec_file_stamp(spec))
