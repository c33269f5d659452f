"""The one module that reaches into private internals: Streamlit's session manager, sessions and upload buffers, and
the standard library's ``threading._register_atexit``.

Streamlit offers no public way to list the sessions it stores for a reconnect, to expire them, to tell whether a
session's script still runs, to clear a closed session's state or to list the sessions holding upload buffers; the
janitor needs each of those to release closed sessions' memory (:func:`fl_ui.memory.release_closed_sessions`).
Nothing else in FilterLens touches a private name of Streamlit or of ``threading``
(``tests/test_internals.py`` scans for them), so an upgrade that moves one breaks here and only here.

Written for Streamlit :data:`STREAMLIT_VERSIONS` (what ``requirements.txt`` pins). ``tests/test_internals.py`` checks
every internal below on a real Streamlit runtime with a connected session and fails, naming the internal, on an upgrade
that moved one, and fails on an installed version outside the range: re-run it on the new version, then widen the
range. At run time, a missing internal is logged once and less memory is released, never a live session's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("filterlens")

STREAMLIT_VERSIONS = ((1, 67), (1, 68))
"""The Streamlit versions these internals were written for and checked on: from 1.67 up to, not including, 1.68."""
INTERNALS = (
    "Runtime._session_mgr", "WebsocketSessionManager._session_storage", "WebsocketSessionManager._storage_lock",
    "MemorySessionStorage._cache (a TTLCache with expire())", "AppSession._scriptrunner", "AppSession._session_state",
    "MemoryUploadedFileManager.file_storage", "threading._register_atexit",
)
"""Every private name this module reaches (what the test checks on real objects)."""

_missing_logged: set[str] = set()


def version_supported(version: str) -> bool:
    """Whether Streamlit ``version`` (``"1.67.0"``) lies in :data:`STREAMLIT_VERSIONS`."""
    major_minor = tuple(int(part) for part in version.split(".")[:2])
    low, high = STREAMLIT_VERSIONS
    return low <= major_minor < high


def _missing(name: str) -> None:
    """Log once that the internal ``name`` is not where this module expects it."""
    if name not in _missing_logged:
        _missing_logged.add(name)
        import streamlit

        log.warning("Streamlit %s has no %s (fl_ui.internals was written for %s): closed sessions' memory is released "
                    "only in part", streamlit.__version__, name, versions_text())


def versions_text() -> str:
    """:data:`STREAMLIT_VERSIONS` as ``>=1.67,<1.68``."""
    (low_major, low_minor), (high_major, high_minor) = STREAMLIT_VERSIONS
    return f">={low_major}.{low_minor},<{high_major}.{high_minor}"


def session_manager(runtime: Any) -> Any:
    """The runtime's session manager (``Runtime._session_mgr``)."""
    return runtime._session_mgr


def listed_sessions(runtime: Any) -> tuple[dict[str, Any], list[Any]]:
    """The sessions Streamlit lists by id (connected, or stored for a reconnect), and those its store has just dropped
    for having been stored longer than ``server.disconnectedSessionTTL`` (expired now, under the lock a session moving
    from connected to stored holds)."""
    manager = session_manager(runtime)
    storage = getattr(manager, "_session_storage", None)
    stored = getattr(storage, "_cache", None)
    lock = getattr(manager, "_storage_lock", None)
    if lock is None:
        _missing("WebsocketSessionManager._storage_lock")
    if not hasattr(stored, "expire"):
        _missing("MemorySessionStorage._cache.expire")
    with lock or threading.Lock():
        dropped = [info.session for _, info in stored.expire()] if hasattr(stored, "expire") else []
        return {info.session.id: info.session for info in manager.list_sessions()}, dropped


def script_running(session: Any) -> bool:
    """Whether the session's script runner still exists (``AppSession._scriptrunner``: its script has not stopped)."""
    return getattr(session, "_scriptrunner", None) is not None


def clear_session_state(session: Any) -> None:
    """Empty a shut-down session's state (``AppSession._session_state``: the widgets' values, uploads among them)."""
    session._session_state.clear()


def sessions_with_uploads(uploads: Any) -> list[str]:
    """The ids of the sessions whose uploaded files the upload manager holds
    (``MemoryUploadedFileManager.file_storage``)."""
    storage = getattr(uploads, "file_storage", None)
    if storage is None:
        _missing("MemoryUploadedFileManager.file_storage")
        return []
    return list(storage)


def missing_internals(runtime: Any, session: Any) -> list[str]:
    """Which of :data:`INTERNALS` a real runtime and one of its sessions lack (empty: every one is where this module
    reaches it)."""
    manager = getattr(runtime, "_session_mgr", None)
    stored = getattr(getattr(manager, "_session_storage", None), "_cache", None)
    present = {
        "Runtime._session_mgr": manager is not None,
        "WebsocketSessionManager._session_storage": hasattr(manager, "_session_storage"),
        "WebsocketSessionManager._storage_lock": hasattr(manager, "_storage_lock"),
        "MemorySessionStorage._cache (a TTLCache with expire())": callable(getattr(stored, "expire", None)),
        "AppSession._scriptrunner": hasattr(session, "_scriptrunner"),
        "AppSession._session_state": callable(getattr(getattr(session, "_session_state", None), "clear", None)),
        "MemoryUploadedFileManager.file_storage": isinstance(getattr(runtime.uploaded_file_mgr, "file_storage",
                                                                     None), dict),
        "threading._register_atexit": callable(getattr(threading, "_register_atexit", None)),
    }
    return [name for name in INTERNALS if not present[name]]


def call_before_thread_shutdown(callback: Callable[[], None]) -> None:
    """Call ``callback`` when the interpreter begins to exit, before Python joins its threads and shuts the thread
    pools down (``threading._register_atexit``; :mod:`atexit` runs after that, too late for a client whose callbacks
    run in those pools)."""
    threading._register_atexit(callback)  # type: ignore[attr-defined]
