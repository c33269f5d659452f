"""Results memoized for the pages, keyed by the selection: :func:`memoize` (computed in the session's thread) and
:func:`pooled` (heavy: computed by a worker of the engine, :mod:`fl_ui.engine`). Unlike ``st.cache_data`` both let the
computation draw a progress bar (passed as ``progress``, which is not part of the key), and sessions asking for a
result that is being computed wait for that computation instead of starting their own."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field

from fl_core.compute.progress import Progress, report
from fl_core.errors import FilterLensError
from fl_ui import sessions
from fl_ui.engine import Job, Lane, engine_started, heavy_engine

WAIT_POLL_S = 0.25
"""How often a session waiting for another session's computation redraws its progress bar."""
PAGE_COMPUTE_SLOTS = threading.BoundedSemaphore(max(1, (os.cpu_count() or 1) // 4))
"""How many :func:`memoize` computations run at once in the server process (one per four cores, at least one).
Every extra thread computing in the server competes for the GIL with the event loop that answers the browsers and
the health check; torch's thread pool already uses every core for the one computing."""
_HOLDS_SLOT = threading.local()


class _Results:
    """A thread-safe LRU of finished results by key."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries, self.lock = max_entries, threading.RLock()
        self._entries: OrderedDict[Hashable, object] = OrderedDict()

    def get(self, key: Hashable) -> tuple[bool, object]:
        with self.lock:
            if key not in self._entries:
                return False, None
            self._entries.move_to_end(key)
            return True, self._entries[key]

    def put(self, key: Hashable, value: object) -> None:
        with self.lock:
            self._entries[key] = value
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self.lock:
            self._entries.clear()


@dataclass
class _InFlight:
    """A computation running in one session's thread that other sessions wait for: what it is, since when, how far
    along, and how many sessions wait for it."""

    name: str = "computation"
    done: threading.Event = field(default_factory=threading.Event)
    fraction: float = 0.0
    message: str = "computing for another session"
    value: object = None
    ok: bool = False
    error: BaseException | None = None
    started: float = field(default_factory=time.monotonic)
    waiters: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def progress(self, fraction: float, message: str) -> None:
        self.fraction, self.message = fraction, message

    def owner_message(self, message: str) -> str:
        """The computing session's progress text, saying who else waits for it."""
        return f"{message} ({self.waiters} other session{'s' * (self.waiters != 1)} waiting)" if self.waiters else \
            message

    def waiter_message(self) -> str:
        """A waiting session's progress text: whose computation, for how long, and how to stop waiting."""
        return (f"another session's {self.name} ({self.message}; running {time.monotonic() - self.started:.0f} s, "
                f"{self.waiters} session{'s' * (self.waiters != 1)} waiting): press any button to stop waiting")

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Count the caller among the waiters while inside (a Streamlit rerun abandons the wait at the next poll)."""
        with self.lock:
            self.waiters += 1
        try:
            yield
        finally:
            with self.lock:
                self.waiters -= 1


def _takes_progress(func: Callable) -> bool:
    return "progress" in inspect.signature(func).parameters


@contextlib.contextmanager
def _compute_slot(flight: _InFlight, progress: Progress | None) -> Iterator[None]:
    """Hold one of :data:`PAGE_COMPUTE_SLOTS` (re-entrant: a memoized function calling another holds one slot)."""
    if getattr(_HOLDS_SLOT, "held", False):
        yield
        return
    while not PAGE_COMPUTE_SLOTS.acquire(timeout=WAIT_POLL_S):
        flight.progress(0.0, "waiting for another session's computation")
        report(progress, 0.0, "waiting for another session's computation")
    _HOLDS_SLOT.held = True
    try:
        yield
    finally:
        _HOLDS_SLOT.held = False
        PAGE_COMPUTE_SLOTS.release()


def memoize(max_entries: int) -> Callable[[Callable], Callable]:
    """A thread-safe LRU cache over hashable positional arguments, computed in the caller's thread.

    ``progress`` is not part of the key, and is passed on only to functions that take it. While one session computes
    a key, other sessions asking for it wait and see its progress; if the computing session is interrupted (its user
    clicked something), the next one asking computes it. Computations of different keys take turns
    (:data:`PAGE_COMPUTE_SLOTS`).
    """

    def decorate(func: Callable) -> Callable:
        results, running = _Results(max_entries), {}
        forwards_progress = _takes_progress(func)
        name = (getattr(func, "__name__", None) or func.func.__name__).strip("_").replace("_", " ")  # partial: .func

        @functools.wraps(func)
        def wrapper(*args, progress: Progress | None = None):
            while True:
                found, value = results.get(args)
                if found:
                    return value
                with results.lock:
                    flight, owner = running.get(args), args not in running
                    if owner:
                        flight = running[args] = _InFlight(name=name)
                if owner:
                    return _compute(args, flight, progress)
                with flight.waiting():
                    while not flight.done.wait(WAIT_POLL_S):
                        report(progress, flight.fraction, flight.waiter_message())
                if flight.error is not None:
                    raise flight.error
                if flight.ok:
                    return flight.value
                # the computing session was interrupted: the next caller computes it

        def _compute(args: tuple, flight: _InFlight, progress: Progress | None):
            def to_both(fraction: float, message: str) -> None:
                flight.progress(fraction, message)
                report(progress, fraction, flight.owner_message(message))

            try:
                with _compute_slot(flight, progress):
                    value = func(*args, progress=to_both) if forwards_progress else func(*args)
                results.put(args, value)
                flight.value, flight.ok = value, True
                return value
            except FilterLensError as err:
                flight.error = err
                raise
            finally:
                with results.lock:
                    running.pop(args, None)
                flight.done.set()

        wrapper.clear = results.clear
        return wrapper

    return decorate


def pooled(job: Callable, max_entries: int, lane: Lane = Lane.INTERACTIVE) -> Callable:
    """Memoize a heavy job of :mod:`fl_ui.jobs` by its request, computed by an engine worker in ``lane``.

    Each request runs at most once at a time on the server: every session asking for it follows the same
    :class:`~fl_ui.engine.Job` (queue position, then progress) and owns it with the others
    (:meth:`~fl_ui.engine.Job.watch`); a session interrupted while waiting (its user clicked something, or went to
    another page) takes up the same job again on its next run, and the result is kept as soon as the job ends, whether
    or not a session is waiting. ``wrapper.abandon(request)`` says the calling session no longer wants it (its user
    pressed Cancel, or applied another request): cancelled at once unless another session (or the server's warm-up)
    still wants it; ``wrapper.cached(request)`` says whether its result is at hand; ``wrapper.start(request)`` submits
    it without waiting (several requests then run side by side on the workers) and returns its job.
    """
    results, running = _Results(max_entries), {}

    def keep(request: Hashable, handle: Job) -> None:
        """When a job ends: keep its result (it stays in the engine only until then), drop the handle."""
        if handle.status().state == "done":
            results.put(request, handle.result())
        with results.lock:
            if running.get(request) is handle:
                del running[request]

    def start(request: Hashable) -> Job | None:
        """The job computing ``request``, watched by the calling session (submitted now unless one is running), or
        ``None`` when its result is kept."""
        if results.get(request)[0]:
            return None
        engine = heavy_engine()  # outside the lock: the first call starts the engine
        with results.lock:
            if results.get(request)[0]:
                return None
            handle = running.get(request)
            if handle is None or handle.status().state in ("cancelled", "failed"):
                handle = running[request] = engine.submit(job, request, device=getattr(request, "device", None),
                                                          lane=lane)
                handle.on_finish(functools.partial(keep, request))
            else:
                handle.watch(sessions.current_session())
        return handle

    @functools.wraps(job)
    def wrapper(request: Hashable, progress: Progress | None = None):
        while True:
            found, value = results.get(request)
            if found:
                return value
            if not engine_started():
                report(progress, 0.0, "starting the engine: its worker processes load torch (the first job of this "
                                      "server waits for them)")
            if (handle := start(request)) is not None:
                return handle.wait(progress)

    def abandon(request: Hashable) -> None:
        with results.lock:
            handle = running.get(request)
        if handle is not None:
            handle.unwatch(sessions.current_session())

    def cached(request: Hashable) -> bool:
        return results.get(request)[0]

    wrapper.start, wrapper.abandon = start, abandon
    wrapper.cached, wrapper.clear = cached, results.clear
    return wrapper
