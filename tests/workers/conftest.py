"""The engine the worker tests share, and browser sessions stood in for by threads."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest

from fl_ui import sessions
from fl_ui.engine import Engine


def finish(*started) -> None:
    """Cancel the jobs ``started``, then wait for each to end (a minute at most)."""
    for job in started:
        job.cancel()
    for job in started:
        job.join(timeout=60)


def wait_until(condition, timeout: float = 120.0, poll: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(poll)


def running_engine(workers: int) -> Iterator[Engine]:
    """An embedded engine of ``workers`` processes, its workers up, closed afterwards (a fixture's body)."""
    started = Engine(workers=workers)
    started.wait_for_workers()
    yield started
    started.close()


@pytest.fixture(scope="package")
def engine():
    """One worker: jobs queue behind each other."""
    yield from running_engine(1)


@pytest.fixture(scope="module")
def pair():
    """Two workers (a module's own)."""
    yield from running_engine(2)


class BrowserSessions:
    """Sessions stood in for by threads: inside :meth:`tab` the calling thread runs that session's script (its tab is
    open), in ``browser`` if given (the secret of its cookie); :meth:`close` closes the tab."""

    def __init__(self) -> None:
        self.open: set[str] = set()
        self._local = threading.local()

    def current(self) -> str | None:
        return getattr(self._local, "session", None)

    def browser(self) -> str | None:
        return getattr(self._local, "browser", None)

    @contextlib.contextmanager
    def tab(self, session: str, browser: str | None = None) -> Iterator[None]:
        self.open.add(session)
        previous = self.current(), self.browser()
        self._local.session, self._local.browser = session, browser
        try:
            yield
        finally:
            self._local.session, self._local.browser = previous

    def close(self, session: str) -> None:
        self.open.discard(session)


@pytest.fixture
def browser_sessions(monkeypatch: pytest.MonkeyPatch) -> BrowserSessions:
    """:mod:`fl_ui.sessions` answered by a :class:`BrowserSessions`."""
    tabs = BrowserSessions()
    monkeypatch.setattr(sessions, "current_session", tabs.current)
    monkeypatch.setattr(sessions, "browser_secret", tabs.browser)
    monkeypatch.setattr(sessions, "session_is_open", lambda session: session in tabs.open)
    return tabs
