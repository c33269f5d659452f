"""What runs inside an engine worker: the job runner, its progress and live values, the stop flag, the model cache,
and the worker's set-up.

Every heavy job reaches a worker as :func:`run_job` of a :func:`job_payload` ``(function, request, graceful, path
policy)`` (:mod:`fl_ui.engine` submits it; the request's files are opened under the policy of the session that
submitted it). The job's state lives on the scheduler, named by its key: a Dask ``Variable``
``<key>/progress`` holding ``[fraction, message, worker address]`` (empty until it starts), a ``Variable``
``<key>/published`` holding the live values the job :func:`publish`-es (name → pickled value: the Training Lab's
snapshots), and a Dask ``Event`` ``<key>/stop`` that :meth:`fl_ui.engine.Job.cancel` sets. At each progress report
(at most one per :data:`PROGRESS_INTERVAL_S`) the worker stores the progress and checks the stop flag, and whether
the scheduler has dropped the task (which Dask cannot interrupt): a job then raises :class:`JobCancelled`, while a
``graceful`` one sees :func:`stop_requested` turn true and ends itself, keeping what it did. Results go back through
the engine as pickles over its connections, never through shared memory.

:func:`dask_setup` prepares a worker process (``dask worker --preload fl_ui.worker``; the embedded cluster passes
the same preload): lower CPU priority (:data:`WORKER_NICENESS`), torch's thread count (``FL_TORCH_THREADS``, default
the cores divided among the worker's threads) and the imports every job needs.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import pickle
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fl_core.compute import allocator
from fl_core.errors import FilterLensError
from fl_core.io.paths import path_policy, reading_for
from fl_ui.memory import start_janitor
from fl_ui.model_cache import ModelCache

log = logging.getLogger("filterlens")

PROGRESS_INTERVAL_S = 0.2
"""A job sends at most one progress report (and checks its stop flag) per this many seconds."""
WORKER_NICENESS = 10
"""How much lower than the server the workers run (``os.nice``): the pages and health checks come first."""
HARD_CANCEL_EXIT_STATUS = 75
"""The exit status of a worker ended by a hard cancel (:func:`exit_worker`)."""
WARM_IMPORTS = ("torch", "torchvision", "timm", "fl_core.channelaxes.analysis", "fl_core.masterkeys.rescore",
                "fl_core.masterkeys.layersweep", "fl_core.report.build", "fl_core.lab.runs")
"""Imported when a worker starts, before it takes jobs, so that its first job does not wait for them."""


class JobCancelled(FilterLensError):
    """The user cancelled the job."""


def progress_name(key: str) -> str:
    return f"{key}/progress"


def published_name(key: str) -> str:
    return f"{key}/published"


def stop_name(key: str) -> str:
    return f"{key}/stop"


def torch_threads(worker_threads: int) -> int:
    """Threads for torch in one job: ``FL_TORCH_THREADS``, else this machine's cores divided among the jobs this
    worker runs at once (start one worker per machine or per GPU, or set the variable)."""
    return max(1, int(os.environ.get("FL_TORCH_THREADS") or (os.cpu_count() or 1) // max(1, worker_threads)))


def dask_setup(worker) -> None:
    """Dask's preload hook, before the worker joins: nice it, set malloc for torch
    (:func:`fl_core.compute.allocator.tune`, for a worker started without
    :data:`~fl_core.survey.engine.WORKER_PROCESS_CONFIG`), size torch's thread pool,
    import the jobs' libraries (here, not in a background thread: a job importing the same packages meanwhile could
    see them half-initialized)."""
    import torch

    allocator.tune()
    with contextlib.suppress(OSError):  # not permitted here: run at the server's priority
        os.nice(WORKER_NICENESS)
    torch.set_num_threads(torch_threads(worker.state.nthreads))
    logging.getLogger("distributed.worker").addFilter(_not_a_cancel)
    for name in WARM_IMPORTS:
        importlib.import_module(name)
    start_janitor(WORKER_MODELS.release_idle)


def _not_a_cancel(record: logging.LogRecord) -> bool:
    """A cancelled job is no failure: keep Dask's "Compute Failed" report of :class:`JobCancelled` out of the log."""
    return "JobCancelled(" not in record.getMessage()


@dataclass
class _JobContext:
    """The running job of this worker thread."""

    key: str
    worker: Any
    graceful: bool
    progress: Any
    published: Any
    stop: Any
    values: dict[str, bytes] = field(default_factory=dict)
    last_report: float = 0.0
    stop_checked: float = 0.0
    stopping: bool = False

    @property
    def address(self) -> str:
        return self.worker.address

    def stop_set(self) -> bool:
        """Whether the job should stop: its stop flag (asked of the scheduler at most once per
        :data:`PROGRESS_INTERVAL_S`) is set, or nobody wants its result any more: the scheduler dropped its task (a
        cancel that found it still queued as its worker took it, a server gone), which Dask cannot interrupt."""
        now = time.monotonic()
        if not self.stopping and now - self.stop_checked >= PROGRESS_INTERVAL_S:
            self.stop_checked, self.stopping = now, self.dropped() or self.stop.is_set()
        return self.stopping

    def dropped(self) -> bool:
        """The scheduler has released this task: the worker's record of it is gone or says ``cancelled``."""
        task = self.worker.state.tasks.get(self.key)
        return task is None or task.state == "cancelled"


_CURRENT = threading.local()


def _current() -> _JobContext | None:
    return getattr(_CURRENT, "job", None)


def job_payload(function: Callable[..., Any], request: Any, graceful: bool) -> bytes:
    """What a job's task carries, pickled here so that the scheduler (which unpickles task graphs) never imports the
    job's module and its libraries: only the workers do. With it goes the path policy in force where it is submitted
    (:func:`fl_core.io.paths.path_policy`: the session's), under which the worker opens the request's files."""
    return pickle.dumps((function, request, graceful, path_policy()), protocol=pickle.HIGHEST_PROTOCOL)


def run_job(payload: bytes) -> Any:
    """The engine task: ``function(request, progress=...)`` of a :func:`job_payload`, with this job's progress, stop
    flag and live values, its files opened under the payload's path policy."""
    from distributed import Event, Variable, get_worker
    from distributed.core import Status

    closing = (Status.closing, Status.closing_gracefully, Status.stopping, Status.stopped, Status.closed)

    function, request, graceful, policy = pickle.loads(payload)

    worker = get_worker()
    key = str(worker.get_current_task())
    context = _JobContext(key, worker, graceful, Variable(progress_name(key)), Variable(published_name(key)),
                          Event(stop_name(key)))
    if context.stop_set():
        raise JobCancelled("Cancelled before it started.")
    context.progress.set([0.0, "started on a worker", context.address])
    _CURRENT.job = context
    try:
        with reading_for(policy):
            return function(request, progress=_report)
    except FilterLensError:
        raise
    except Exception:
        if worker.status not in closing:  # cut short by its worker closing (the engine shutting down) is no bug
            log.exception("heavy job %s failed", getattr(function, "__name__", function))
        raise
    finally:
        _CURRENT.job = None
        allocator.release_freed_memory()  # an idle worker holds only what it keeps


def _report(fraction: float, message: str) -> None:
    context = _current()
    now = time.monotonic()
    if now - context.last_report < PROGRESS_INTERVAL_S and fraction < 1.0:
        return
    context.last_report = now
    context.progress.set([float(fraction), str(message), context.address])
    if not context.graceful and context.stop_set():
        raise JobCancelled("Cancelled. Start it again when you need it.")


def current_worker() -> str:
    """The address of the worker running the current job (``local`` outside a job)."""
    context = _current()
    return context.address if context is not None else "local"


def stop_requested() -> bool:
    """In a graceful job: whether the user asked it to stop (``False`` outside a job)."""
    context = _current()
    return bool(context and context.stop_set())


def publish(name: str, value: Any) -> None:
    """In a job: make ``value`` the latest live value ``name`` (:meth:`fl_ui.engine.Job.published`); a no-op
    outside a job."""
    context = _current()
    if context is not None:
        context.values[name] = pickle.dumps(value)
        context.published.set(dict(context.values))


async def exit_worker() -> None:
    """End this worker process at once (a coroutine: the engine runs it on the worker's event loop, without waiting,
    to hard-cancel a job that does not stop); its nanny starts a fresh worker, as after a crash."""
    log.warning("ending this worker process: its job was cancelled and did not stop")
    os._exit(HARD_CANCEL_EXIT_STATUS)


WORKER_MODELS = ModelCache()
"""This worker's models (:class:`fl_ui.model_cache.ModelCache`: bounded in bytes, released when unused)."""


def worker_model(spec: str, overrides: tuple = ()):
    """A loaded model in a worker process (kept for the next job while used; reloaded when its file changes)."""
    from fl_core.io.specs import spec_file_stamp

    return WORKER_MODELS.get(spec, overrides, spec_file_stamp(spec))
