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
:meth:`~Job.cancel`. **Jobs take turns by visitor** (:func:`fair_order`): the engine keeps the waiting jobs and hands
one to the scheduler whenever a worker is free (:meth:`Engine.dispatch`): of the highest :class:`Lane` waiting (a
page's view before the server's warm-up, both before training runs and survey rows), the oldest job of the visitor
(:func:`fl_ui.sessions.current_visitor`: a browser, over all its tabs) with the fewest jobs running, visitors with
as many taking turns, so nobody's queue of jobs holds back another's first one. On a cluster with GPU workers a job
on a CUDA device asks for a ``GPU`` resource, so the scheduler sends it to one.
Cancelling drops a waiting job; a running one is asked to stop (:mod:`fl_ui.worker`: it raises at its next progress
report, or a ``graceful`` job ends itself and keeps what it did) and, if it is still running :data:`HARD_CANCEL_AFTER_S`
later (:data:`GRACEFUL_STOP_S` for a graceful one), its worker process is ended. A worker that dies (killed, out of
memory, or ended so) fails only its job, with a message that says so, and its nanny starts a fresh one. Results come
back over the engine's connections, never through shared memory.

**Jobs belong to the sessions that watch them** (:mod:`fl_ui.sessions`): the browser session that submitted a job and
every session that asked for the same request since (:meth:`Job.watch`). A session may own at most
:func:`session_job_limit` unfinished jobs, a browser over all its tabs :func:`browser_job_limit` (:class:`TooManyJobs`
names the limit and how to cancel). A job whose every owner has closed its tab is cancelled :data:`ABANDONED_AFTER_S`
later (a reload or a reconnecting tab finds it still running), or :data:`ABANDONED_WHILE_OTHERS_WAIT_S` later while it
or another job waits for a worker (:meth:`Engine.waiting_for_workers`); a job asked for outside any session (the
server's warm-up, whose result is kept for everyone) belongs to the server and is never abandoned.

**The engine survives its scheduler.** When the connection to the scheduler is lost (an external scheduler restarted,
the embedded cluster's helper died), the jobs it held, and those waiting in the engine (their progress and live
values were kept on it), fail with :class:`EngineRestarted` ("the compute engine restarted; press Run again") and a
new job is refused with the same cause, at once instead of after a timeout. A
thread of the engine connects a new client as soon as the scheduler answers again (a new embedded cluster when its
helper is gone), within :data:`CHECK_INTERVAL_S` plus the connection time. :meth:`Engine.problem` says why heavy jobs
cannot run now (``None`` when they can): the served app's health check (:mod:`fl_ui.serve`) fails while it is set, so
Docker or an orchestrator restarts a server that does not recover by itself.
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
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fl_core.compute.progress import Progress, report
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
BROWSER_JOBS_ENV = "FL_BROWSER_JOBS"
"""The most unfinished jobs one browser may own over all its tabs; default :data:`BROWSER_JOBS`."""
BROWSER_JOBS = 8
TURN_MEMORY_S = 600.0
"""A visitor's last turn (:func:`fair_order`) is remembered while it has jobs and this long after its last job
started: one who comes back later is a newcomer again."""
STATUS_TTL_S = 0.2
"""A job's progress is asked of the scheduler at most this often (many sessions may follow one job)."""
CONNECT_TIMEOUT_S = 60
GPU_RESOURCE = "GPU"
"""The worker resource a CUDA job asks for (``dask worker --resources GPU=1``)."""
CHECK_INTERVAL_S = 1.0
"""How often the engine checks its connection to the scheduler (and reconnects when it was lost)."""
RECONNECT_TIMEOUT_S = 5
"""How long one attempt to reach the scheduler again may take."""
WORKERLESS_AFTER_S = 120.0
"""An embedded engine without any worker this long (its nannies cannot start one) cannot run heavy jobs."""


class Lane(enum.IntEnum):
    """Where a job waits for a worker (also its task's Dask priority): a free worker takes a waiting job of the highest
    lane first (:func:`fair_order` within a lane). A running job is never interrupted for another."""

    LONG = 0
    """Training runs and survey rows: minutes or more each, and many at once."""
    WARM_UP = 1
    """A page's view asked for outside any session: the server's warm-up of the pages' first views."""
    INTERACTIVE = 2
    """A page's view that a visitor waits for."""


class TooManyJobs(FilterLensError):
    """A session asked for a job while it (or its browser) owns as many unfinished ones as it may
    (:func:`session_job_limit`, :func:`browser_job_limit`)."""


class EngineRestarted(FilterLensError):
    """The engine lost its scheduler: the jobs it held, and those waiting in the engine, are gone, and new ones are
    refused until it is reconnected."""


LOST_JOB = ("The compute engine restarted, and this job was lost with it; press Run again (or reload the page) to "
            "start it anew.")


def session_job_limit() -> int:
    """The most unfinished jobs one session may own: ``FL_SESSION_JOBS``, default :data:`SESSION_JOBS`."""
    return max(1, int(os.environ.get(SESSION_JOBS_ENV) or SESSION_JOBS))


def browser_job_limit() -> int:
    """The most unfinished jobs one browser may own over all its tabs: ``FL_BROWSER_JOBS``, default
    :data:`BROWSER_JOBS`."""
    return max(1, int(os.environ.get(BROWSER_JOBS_ENV) or BROWSER_JOBS))


def fair_order(waiting: Iterable[Job], running: Mapping, last_turn: Mapping) -> list[Job]:
    """The order in which ``waiting`` jobs start as workers free up, given how many jobs each visitor has ``running``
    and the ``last_turn`` each had (a number that grows with every job started; none: never). The next is always of
    the highest lane waiting and, within it, of the visitor with the fewest jobs running; among those, of the one whose
    last turn is the oldest (round robin), then of the one with the fewest jobs waiting (a newcomer's first job goes
    before the queues of others); and of that visitor, its oldest job. A job's ``lane``, ``visitor`` and ``order`` (of
    submission) decide; a job taken counts as running, and as its visitor's turn, for the next."""
    running, turns, line = Counter(running), dict(last_turn), list(waiting)
    left, turn = Counter(job.visitor for job in line), max(turns.values(), default=0)
    order = []
    while line:
        job = min(line, key=lambda job: (-job.lane, running[job.visitor], turns.get(job.visitor, 0),
                                         left[job.visitor], job.order))
        line.remove(job)
        order.append(job)
        running[job.visitor] += 1
        left[job.visitor] -= 1
        turn += 1
        turns[job.visitor] = turn
    return order


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
    :meth:`unwatch` it from browser sessions (module docstring). It waits in the engine until
    :meth:`Engine.dispatch` hands it to the scheduler (:attr:`dispatched`)."""

    def __init__(self, engine: Engine, key: str, payload: bytes, graceful: bool, resources: dict | None = None,
                 lane: Lane = Lane.INTERACTIVE, owner: str | None = None, visitor: str | None = None) -> None:
        from distributed import Event, Variable

        self.key, self.graceful, self.resources, self.lane = key, graceful, resources, lane
        self.gpu = bool(resources)
        self.owners: set[str] = set() if owner is None else {owner}
        self.visitor = visitor  # whose turn it takes (fair_order): its browser, or session; None: the server's
        self.order = 0  # its place in the engine's order of submission
        self.shared = owner is None  # asked for outside any session: the server's, never abandoned
        self.abandoned_since: float | None = None  # since when every owner has been closed
        self._engine, self._payload, self._client = engine, payload, engine.client
        self._future: Any = None  # its task's future, once dispatched
        self._placed = threading.Event()  # dispatched, or withdrawn before it was
        self._progress_var = Variable(progress_name(self.key), client=self._client)
        self._published_var = Variable(published_name(self.key), client=self._client)
        self._stop = Event(stop_name(self.key), client=self._client)
        # its progress and live values exist (empty) before the job does, so a reader never waits for them
        self._progress_var.set([])
        self._published_var.set({})
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

    @property
    def lost(self) -> bool:
        """Whether the client it was submitted through has lost its scheduler (the engine restarted): nothing of it
        can be asked any more."""
        return self._client is not self._engine.client or self._client.status != "running"

    def _latest_progress(self) -> list:
        """``[fraction, message, worker]`` of the last report (empty before the job started)."""
        with self._fetch_lock:
            now = time.monotonic()
            if (self.dispatched and not (self._closed or self._future.done() or self.lost)
                    and now - self._asked >= STATUS_TTL_S):
                with contextlib.suppress(OSError, TimeoutError):
                    self._progress = list(self._progress_var.get(timeout=CONNECT_TIMEOUT_S))
                self._asked = now
            return self._progress

    @property
    def done(self) -> bool:
        """Whether it has finished and its result (or error) is at hand; asks nothing of the scheduler."""
        return self._done.is_set()

    @property
    def dispatched(self) -> bool:
        """Whether the engine has handed it to the scheduler (it runs, or is about to)."""
        return self._future is not None

    def _dispatch(self, future: Any) -> None:
        """It was handed to the scheduler as ``future``."""
        self._future, self._payload = future, None
        self._placed.set()

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
        if self.dispatched and self._future.done():
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
        if not self.dispatched or self._future.status == "cancelled":
            if self._dropped_by_dask:
                return JobState("failed", 0.0, "failed", error=LOST_JOB, worker=worker)
            return JobState("cancelled", 0.0, "cancelled", worker=worker)
        if self._future.status == "finished":
            return JobState("done", 1.0, "done", worker=worker)
        error = self._future.exception()
        if isinstance(error, JobCancelled) or (self._cancel_asked is not None and _worker_died(error)):
            return JobState("cancelled", 0.0, str(error) if isinstance(error, JobCancelled) else "cancelled",
                            worker=worker)
        return JobState("failed", 0.0, "failed", error=_user_message(error), worker=worker)

    @property
    def _dropped_by_dask(self) -> bool:
        """Cancelled by nobody here: Dask cancels every job of a client that lost its scheduler."""
        return self._cancel_asked is None and not self._engine.closing

    def cancel(self) -> None:
        """Drop it if it waits; otherwise ask it to stop, and end its worker process (its nanny starts a fresh one) if
        it has not stopped :data:`HARD_CANCEL_AFTER_S` later (:data:`GRACEFUL_STOP_S` for a ``graceful`` job, which
        ends itself keeping what it did). Returns at once."""
        with self._lock:
            if self._cancel_asked is not None or self.done or (self.dispatched and self._future.done()):
                return
            self._cancel_asked = time.monotonic()
        threading.Thread(target=self._stop_it, name=f"cancel-{self.key}", daemon=True).start()

    def _stop_it(self) -> None:
        if self._engine.withdraw(self):  # it never reached the scheduler
            self._finish()
            return
        if self.lost:  # its scheduler is gone, and the job with it
            return
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
            if self._closed or not self.dispatched or self._future.done() or self.lost:
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

        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._placed.wait(timeout):
            raise TimeoutError(f"job {self.key} still waits for a worker")
        if not self.dispatched:  # withdrawn before it reached the scheduler
            if self._dropped_by_dask:
                return False, EngineRestarted(LOST_JOB)
            return False, JobCancelled("The job was cancelled. Start it again when you need it.")
        try:
            return True, self._future.result(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise
        except CancelledError:
            if self._dropped_by_dask:
                return False, EngineRestarted(LOST_JOB)
            return False, JobCancelled("The job was cancelled. Start it again when you need it.")
        except Exception as err:
            if self.lost and self._cancel_asked is None:
                return False, EngineRestarted(LOST_JOB)
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
        lost = self.lost  # then nothing is asked of its scheduler: it is gone
        if self.dispatched and not lost:
            with contextlib.suppress(Exception):  # its last report says which worker ran it
                self._progress = list(self._progress_var.get(timeout=CONNECT_TIMEOUT_S))
        state = self._finished_state()
        with contextlib.suppress(Exception):
            self.result()
        self._final = state
        if self.dispatched:
            self._future.release()
        with self._fetch_lock:
            self._closed = True
            if not lost:
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
        self.security = None  # a cluster's own: Dask's settings (DASK_DISTRIBUTED__COMM__TLS__..., docs/deploy.md)
        if address is None:
            from fl_ui.cluster import start_embedded_cluster, temporary_security

            self.security = temporary_security()
            self._helper, address = start_embedded_cluster(self.workers, self.security)
        self.address = address
        self.client = Client(address, set_as_default=False, timeout=CONNECT_TIMEOUT_S, security=self.security)
        self._lock = threading.Lock()
        self._dispatch_lock = threading.Lock()  # one dispatch at a time: held across its round trips
        self._order = itertools.count()
        self._jobs: dict[str, Job] = {}  # every unfinished job, in the order they came
        self._line: list[Job] | None = None  # the waiting ones in fair_order, until the jobs change
        self._turns = itertools.count(1)
        self._last_turn: dict[str | None, tuple[int, float]] = {}  # visitor -> (its last turn, when)
        self._closing = threading.Event()
        self._connection = threading.Lock()  # the client and the helper are replaced or closed under it
        self._lost_since: float | None = None  # since when the client has been without its scheduler
        self._workerless_since: float | None = None  # since when the embedded cluster has had no worker
        threading.Thread(target=self._watch_sessions, name="filterlens-abandoned-jobs", daemon=True).start()
        threading.Thread(target=self._keep_connected, name="filterlens-engine-connection", daemon=True).start()
        # closed when the interpreter begins to exit, before Python shuts down the thread pools: the client then
        # still runs the callbacks of the jobs it cancels (after atexit, each would log a traceback instead)
        internals.call_before_thread_shutdown(self.close)

    @property
    def embedded(self) -> bool:
        return self._helper is not None

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    def problem(self) -> str | None:
        """Why heavy jobs cannot run now, ``None`` when they can (asks nothing of the scheduler: the connection's
        state and what :meth:`_keep_connected` last saw; the scheduler's address is in the log, not here)."""
        now = time.monotonic()
        if self.closing:
            return "the compute engine is shutting down"
        if self._helper is not None and self._helper.poll() is not None:
            return f"the embedded compute engine stopped (exit status {self._helper.returncode}); starting a new one"
        if self.client.status != "running":
            since = f" for {now - self._lost_since:.0f} s" if self._lost_since is not None else ""
            return f"the compute engine cannot reach its scheduler{since}"
        if self._workerless_since is not None and now - self._workerless_since >= WORKERLESS_AFTER_S:
            return f"no worker process has joined the embedded compute engine for {now - self._workerless_since:.0f} s"
        return None

    def check_connected(self) -> None:
        """Refuse a new job at once while the scheduler cannot be reached (instead of after a connection timeout)."""
        if self.client.status != "running" or (self._helper is not None and self._helper.poll() is not None):
            raise EngineRestarted(f"The compute engine is restarting ({self.problem()}), so no job can start now: "
                                  "press Run again in a minute.")

    def submit(self, function: Callable[..., Any], request: Any, *, graceful: bool = False,
               device: str | None = None, lane: Lane = Lane.INTERACTIVE) -> Job:
        """Queue ``function(request, progress=...)`` in ``lane`` (a page's view asked for outside any session waits
        in :attr:`Lane.WARM_UP`), owned by the calling thread's session (:func:`fl_ui.sessions.current_session`) and
        taking the turns of its visitor (:func:`fl_ui.sessions.current_visitor`); ``graceful`` jobs stop via
        :func:`fl_ui.worker.stop_requested`; a CUDA ``device`` asks for a GPU worker.

        Raises:
            TooManyJobs: the session owns :func:`session_job_limit` unfinished jobs already, or its browser
                :func:`browser_job_limit`.
        """

        owner, visitor = sessions.current_session(), sessions.current_visitor()
        if owner is None and lane is Lane.INTERACTIVE:
            lane = Lane.WARM_UP
        self.check_connected()
        self.check_session_limit(owner, visitor)
        key = f"fl-{getattr(function, '__name__', 'job')}-{uuid.uuid4().hex}"
        job = Job(self, key, job_payload(function, request, graceful), graceful, self.resources(device), lane, owner,
                  visitor)
        with self._lock:
            job.order = next(self._order)
            self._jobs[key] = job
            self._line = None
        self._dispatch_now()
        return job

    def dispatch(self) -> list[Job]:
        """Hand waiting jobs to the scheduler while its workers have room (:meth:`free_workers`), in
        :func:`fair_order`; returns them. Called when a job is submitted, when one finishes and every
        :data:`REAP_INTERVAL_S` (a worker that joined)."""
        with self._dispatch_lock:
            for job in [job for job in self.waiting_line() if job.lost]:  # it waited for the scheduler that went
                if self._drop_waiting(job):
                    job._finish()
            if not self.waiting_line():
                return []
            started = self._next_to_start(*self.free_workers())
            for job in started:
                self._start(job)
            return started

    def _next_to_start(self, free: int, free_gpus: int) -> list[Job]:
        """The waiting jobs that start on ``free`` worker threads (``free_gpus`` GPUs among them): the first of the
        :meth:`waiting_line` that fit, a cancelled one skipped."""
        chosen = []
        for job in self.waiting_line():
            if free <= 0:
                break
            if job.cancelling or (job.gpu and free_gpus <= 0):
                continue
            chosen.append(job)
            free, free_gpus = free - 1, free_gpus - job.gpu
        return chosen

    def _dispatch_now(self) -> None:
        """:meth:`dispatch`, or leave it to the next pass of :meth:`_watch_sessions` when the scheduler does not
        answer (it may be restarting; the engine may be closing)."""
        try:
            self.dispatch()
        except Exception:
            log.debug("dispatching waiting jobs failed: the next pass tries again", exc_info=True)

    def _start(self, job: Job) -> None:
        """Submit ``job``'s task: a "data producer" task, which waits in the scheduler's queue until a worker thread
        is free (should two replicas of the app share the workers), by lane."""
        from dask.task_spec import Task

        task = Task(job.key, run_job, job._payload, _data_producer=True)
        future = job._client.get({job.key: task}, job.key, sync=False, resources=job.resources, fifo_timeout="0 ms",
                                 priority=int(job.lane))
        with self._lock:
            job._dispatch(future)
            self._last_turn[job.visitor] = (next(self._turns), time.monotonic())
            self._line = None
        future.add_done_callback(lambda _future: self._finished(job.key))

    def withdraw(self, job: Job) -> bool:
        """Drop ``job`` if it still waits in the engine (never dispatched); whether it did."""
        with self._dispatch_lock:
            return self._drop_waiting(job)

    def _drop_waiting(self, job: Job) -> bool:
        with self._lock:
            if job.dispatched or self._jobs.get(job.key) is not job:
                return False
            del self._jobs[job.key]
            self._line = None
            job._placed.set()
            return True

    def waiting_line(self) -> list[Job]:
        """The jobs waiting in the engine, in the order they will start (:func:`fair_order`)."""
        with self._lock:
            if self._line is None:
                jobs = list(self._jobs.values())
                running = Counter(job.visitor for job in jobs if job.dispatched)
                self._forget_turns({job.visitor for job in jobs})
                turns = {visitor: turn for visitor, (turn, _) in self._last_turn.items()}
                self._line = fair_order([job for job in jobs if not job.dispatched], running, turns)
            return self._line

    def _forget_turns(self, active: set[str | None]) -> None:
        """Forget the turns of visitors without jobs whose last job started over :data:`TURN_MEMORY_S` ago."""
        stale = time.monotonic() - TURN_MEMORY_S
        for visitor, (_, when) in list(self._last_turn.items()):
            if visitor not in active and when < stale:
                del self._last_turn[visitor]

    def free_workers(self) -> tuple[int, int]:
        """Worker threads, and GPUs, that no dispatched job of this engine holds (one round trip)."""
        workers = self.worker_info()
        threads = sum(info.get("nthreads", 1) for info in workers)
        gpus = sum(info.get("resources", {}).get(GPU_RESOURCE, 0) for info in workers)
        with self._lock:
            busy = [job for job in self._jobs.values() if job.dispatched]
        return threads - len(busy), gpus - sum(job.gpu for job in busy)

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
        return any(info.get("resources", {}).get(GPU_RESOURCE) for info in self.worker_info())

    def worker_info(self) -> list[dict]:
        """Each worker's information, asked of the scheduler now (one round trip). Not ``Client.scheduler_info``: it
        returns an attribute that the client's own periodic refresh overwrites with no worker listed, so a read between
        the two saw no worker free and a running warm-up was cancelled for a visitor's job that had a free worker."""
        identity = self.client.sync(self.client.scheduler.identity, n_workers=-1)
        return list(identity.get("workers", {}).values())

    def _finished(self, key: str) -> None:
        """A dispatched job ended: the next one starts on its worker, then it is finished."""
        with self._lock:
            job = self._jobs.pop(key, None)
            self._line = None
        if job is not None:
            self._dispatch_now()
            job._finish()

    def queue_position(self, job: Job) -> int:
        """1-based place of a waiting job among this server's jobs that have not started yet: those handed to the
        scheduler but not begun on a worker first (by lane, then in the order they came), then the engine's
        :meth:`waiting_line`."""
        with self._lock:
            jobs = list(self._jobs.values())
        taken = sorted((other for other in jobs if other.dispatched and not (other._progress or other._future.done())),
                       key=lambda other: (-other.lane, other.order))
        waiting = [*taken, *self.waiting_line()]
        return waiting.index(job) + 1 if job in waiting else 1

    def session_jobs(self, session: str) -> list[Job]:
        """The unfinished jobs ``session`` owns."""
        with self._lock:
            return [job for job in self._jobs.values() if session in job.owners and not job.done]

    def visitor_jobs(self, visitor: str) -> list[Job]:
        """The unfinished jobs ``visitor`` asked for (:func:`fl_ui.sessions.current_visitor`)."""
        with self._lock:
            return [job for job in self._jobs.values() if job.visitor == visitor and not job.done]

    def free_job_slots(self, session: str | None, visitor: str | None = None) -> float:
        """How many more jobs ``session`` (of ``visitor``, default: the calling thread's) may own now (no limit
        outside a session)."""
        if session is None:
            return math.inf
        visitor = visitor or sessions.current_visitor() or session
        return min(session_job_limit() - len(self.session_jobs(session)),
                   browser_job_limit() - len(self.visitor_jobs(visitor)) if visitor != session else math.inf)

    def check_session_limit(self, session: str | None, visitor: str | None = None) -> None:
        """Refuse a new job of ``session`` (of ``visitor``) when it owns :func:`session_job_limit` unfinished jobs
        already, or its browser :func:`browser_job_limit`."""
        if session is None:
            return
        limit = session_job_limit()
        if limit - len(self.session_jobs(session)) <= 0:
            raise TooManyJobs(f"You have {limit} jobs running or waiting on this server, the most one session may "
                              f"have ({SESSION_JOBS_ENV}={limit}). Press ■ Cancel under one of their progress bars, "
                              "or wait until one finishes, then try again.")
        if self.free_job_slots(session, visitor) <= 0:
            limit = browser_job_limit()
            raise TooManyJobs(f"This browser has {limit} jobs running or waiting on this server (in all its tabs), "
                              f"the most one browser may have ({BROWSER_JOBS_ENV}={limit}). Press ■ Cancel under one "
                              "of their progress bars, or wait until one finishes, then try again.")

    def cancel_abandoned(self) -> list[Job]:
        """Cancel every job abandoned (:meth:`Job.abandoned`) for :data:`ABANDONED_AFTER_S`, or for
        :data:`ABANDONED_WHILE_OTHERS_WAIT_S` when it still waits for a worker itself or a job nobody abandoned does;
        returns them."""
        now = time.monotonic()
        with self._lock:
            unfinished = [job for job in self._jobs.values() if not job.done]
        idle = {job: job.abandoned(now) for job in unfinished if not job.cancelling}
        candidates = [job for job, seconds in idle.items() if seconds >= ABANDONED_WHILE_OTHERS_WAIT_S]
        if not candidates:
            return []
        waiting = self.waiting_for_workers(list(idle))
        others_wait = any(job.key in waiting for job, seconds in idle.items() if not seconds)
        stale = [job for job in candidates if others_wait or job.key in waiting or idle[job] >= ABANDONED_AFTER_S]
        for job in stale:
            log.info("cancelling job %s: every session that watched it closed %.0f s ago", job.key, idle[job])
            job.cancel()
        return stale

    def waiting_for_workers(self, jobs: list[Job]) -> set[str]:
        """The keys of those of ``jobs`` that wait for a worker: held in the engine with no room for them (this server's
        jobs take the workers, or those free go to jobs ahead in the :meth:`waiting_line`), or handed to the scheduler
        and queued there (other servers' jobs take the workers). A job held while a worker is free for it does not wait:
        :meth:`dispatch` hands it over at once (it may be doing so now). One or two round trips."""
        with self._dispatch_lock:  # no dispatch under way: the room seen is the room the held jobs have
            held = [job for job in jobs if not (job.dispatched or job.lost)]  # a lost one fails at the next dispatch
            starting = set(self._next_to_start(*self.free_workers())) if held else set()
        waiting = {job.key for job in held if job not in starting}
        return waiting | set(self.waiting_keys([job.key for job in jobs if job.dispatched]))

    def waiting_keys(self, keys: list[str]) -> list[str]:
        """Those of ``keys`` whose tasks wait in the scheduler for a worker (one round trip)."""
        def waiting(dask_scheduler=None) -> list[str]:  # pickled by value: the scheduler imports nothing here
            tasks = (dask_scheduler.tasks.get(key) for key in keys)
            return [task.key for task in tasks if task is not None and task.state in ("queued", "no-worker")]

        return self.client.run_on_scheduler(waiting) if keys else []

    def _watch_sessions(self) -> None:
        """Every :data:`REAP_INTERVAL_S`, :meth:`cancel_abandoned`, :meth:`yield_warm_ups` and :meth:`dispatch` (until
        the engine closes)."""
        while not self._closing.wait(REAP_INTERVAL_S):
            for step in (self.cancel_abandoned, self.yield_warm_ups, self.dispatch):
                try:  # each on its own: dispatch also fails the waiting jobs of a lost scheduler
                    step()
                except Exception:  # the scheduler may be restarting: try again at the next pass
                    log.debug("%s failed", step.__name__, exc_info=True)

    def yield_warm_ups(self) -> list[Job]:
        """Cancel the running warm-up jobs that only the server wants while a visitor's job waits for a worker, so
        that a visitor's own job never waits behind a warm-up (the page computes that view when it is visited);
        returns them."""
        with self._lock:
            unfinished = [job for job in self._jobs.values() if not (job.done or job.cancelling)]
        warm_ups = [job for job in unfinished if job.lane is Lane.WARM_UP and not job.owners and job.dispatched]
        visitors = [job for job in unfinished if job.lane is Lane.INTERACTIVE and job.owners]
        if not (warm_ups and visitors and self.waiting_for_workers(visitors)):
            return []  # every visitor's job has its worker, or is about to
        running = [job for job in warm_ups if self.worker_of(job.key) is not None]
        for job in running:
            log.info("cancelling the warm-up job %s: a visitor's job waits for its worker", job.key)
            job.cancel()
        return running

    def _keep_connected(self) -> None:
        """Every :data:`CHECK_INTERVAL_S` (until the engine closes): a new embedded cluster when its helper died, a new
        client when the scheduler's connection was lost and the scheduler answers again, and the embedded cluster's
        worker count (:meth:`problem`)."""
        while not self._closing.wait(CHECK_INTERVAL_S):
            try:
                with self._connection:
                    if not self.closing:
                        self._check_connection()
            except Exception:  # still unreachable: try again at the next pass
                log.debug("reconnecting to the scheduler at %s failed", self.address, exc_info=True)

    def _check_connection(self) -> None:
        if self._helper is not None and self._helper.poll() is not None:
            from fl_ui.cluster import start_embedded_cluster

            log.warning("the embedded Dask cluster stopped (exit status %s): starting a new one",
                        self._helper.returncode)
            self._lost_since = self._lost_since or time.monotonic()
            self._helper, self.address = start_embedded_cluster(self.workers, self.security)
        if self.client.status != "running":
            self._reconnect()
        elif self.embedded:
            workers = self.client.scheduler_info(n_workers=0).get("n_workers", 0)
            self._workerless_since = None if workers else self._workerless_since or time.monotonic()

    def _reconnect(self) -> None:
        """Drop the client that lost its scheduler (Dask failed its jobs: :class:`EngineRestarted`) and connect a new
        one; raises ``OSError`` while the scheduler does not answer."""
        from distributed import Client

        if self._lost_since is None:
            self._lost_since = time.monotonic()
            log.warning("the compute engine lost its scheduler at %s: its jobs failed, and new ones are refused until "
                        "it answers again", self.address)
        if self.client.status not in ("closing", "closed"):  # it would keep trying to reconnect by itself
            threading.Thread(target=_close_quietly, args=(self.client,), name="filterlens-old-client",
                             daemon=True).start()
        client = Client(self.address, set_as_default=False, timeout=RECONNECT_TIMEOUT_S, security=self.security)
        self.client, lost_for, self._lost_since = client, time.monotonic() - self._lost_since, None
        log.warning("the compute engine reconnected to its scheduler at %s after %.0f s", self.address, lost_for)

    def wait_for_workers(self, timeout: float = 600) -> None:
        """Block until the embedded cluster's workers (or at least one of a cluster's) have joined."""
        self.client.wait_for_workers(self.workers if self.embedded else 1, timeout=timeout)

    def close(self) -> None:
        """Disconnect (the scheduler drops this server's jobs; those waiting in the engine are cancelled) and stop the
        embedded cluster."""
        self._closing.set()
        waiting = [job for job in self.waiting_line() if self.withdraw(job)]
        with self._connection, contextlib.suppress(Exception):
            self.client.close(timeout=10)
        for job in waiting:
            job._finish()
        if self._helper is not None and self._helper.poll() is None:
            self._helper.terminate()
            try:
                self._helper.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._helper.kill()
                self._helper.wait()


def _close_quietly(client: Any) -> None:
    """Close a client that lost its scheduler."""
    with contextlib.suppress(Exception):
        client.close(timeout=RECONNECT_TIMEOUT_S)


_ENGINE: Engine | None = None
_ENGINE_LOCK = threading.Lock()


def engine_started() -> bool:
    """Whether this process's engine is connected (:func:`heavy_engine` returns at once)."""
    return _ENGINE is not None


def engine_problem() -> str | None:
    """Why this process's engine cannot run heavy jobs now (:meth:`Engine.problem`), ``None`` when it can."""
    engine = _ENGINE
    return "the compute engine has not started yet" if engine is None else engine.problem()


def heavy_engine() -> Engine:
    """The server's engine (connected or started on first use, one per process): ``FL_SCHEDULER`` or embedded."""
    global _ENGINE
    with _ENGINE_LOCK:
        if _ENGINE is None:
            _ENGINE = Engine(os.environ.get(SCHEDULER_ENV) or None)
        return _ENGINE
