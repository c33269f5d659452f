"""Memory back to idle: what the server holds for its sessions is released once they are gone.

* **Models** are kept by :class:`fl_ui.model_cache.ModelCache` (bounded in bytes, released when unused);
  :func:`start_janitor` releases its idle ones.
* **Upload buffers.** Streamlit keeps the bytes of every uploaded file per session until the session shuts down; a
  tab that closes leaves its session stored for reconnection (``server.disconnectedSessionTTL``), and Streamlit then
  drops it without shutting it down, so its uploads stayed for good, and the last session its main loop served stays
  referenced with its state (the uploader's file among it). :func:`release_closed_sessions` shuts such sessions down,
  clears their state and drops the uploads of sessions that no longer exist; :func:`release_upload` drops a file's
  bytes as soon as the upload store holds it.
* What was freed goes back to the system (:func:`fl_core.compute.allocator.release_freed_memory`).

:func:`start_janitor` does the releasing every :data:`JANITOR_INTERVAL_S` in a thread of the server (started by the
dashboard's script) and of each engine worker (for the worker's own models, :mod:`fl_ui.worker`). Streamlit is imported
only by the functions that need it: workers never import it.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
import weakref
from collections.abc import Callable

from fl_core.compute import allocator
from fl_ui import internals

log = logging.getLogger("filterlens")

JANITOR_INTERVAL_S = 15.0


def release_upload(key: str) -> None:
    """Drop the bytes of the files the file uploader ``key`` holds, once the upload store has them (in a widget's
    callback: the uploader shows its file until the user picks another, which it reads again)."""
    import streamlit as st
    from streamlit.runtime import Runtime
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    uploaded = st.session_state.pop(key, None)
    context = get_script_run_ctx()
    if uploaded is None or context is None or not Runtime.exists():
        return
    for file in uploaded if isinstance(uploaded, list) else [uploaded]:
        Runtime.instance().uploaded_file_mgr.remove_file(context.session_id, file.file_id)


_SESSIONS: weakref.WeakSet = weakref.WeakSet()
"""The sessions :func:`release_closed_sessions` has seen (weakly: one nothing else holds leaves by itself)."""


def release_closed_sessions() -> int:
    """Release what closed sessions still hold; how many sessions' memory was released.

    Streamlit drops a closed tab's session from its store (after ``server.disconnectedSessionTTL``) without shutting
    it down, so its uploads stayed; and its main loop keeps the last session it sent messages to in a local variable
    (``Runtime._loop_coroutine``'s ``active_session_info``) until it sends to another, so that session's state (the
    file an uploader holds among it) stayed too. So the store's expired sessions are dropped now, every session gone
    from the list (dropped now, or seen listed before) is shut down and its state cleared, and the uploads of
    sessions no longer listed are dropped. (Streamlit's internals this needs are reached through
    :mod:`fl_ui.internals`: where they differ, less is released, never a live session's memory.)"""
    from streamlit.runtime import Runtime

    if not Runtime.exists():
        return 0
    runtime = Runtime.instance()
    live, dropped = internals.listed_sessions(runtime)
    _SESSIONS.update(dropped)
    released = [session for session in list(_SESSIONS) if session.id not in live and _release_session(session)]
    _SESSIONS.update(live.values())
    return len(released) + _drop_orphan_uploads(runtime.uploaded_file_mgr, live)


def _release_session(session) -> bool:
    """Shut a session down (nothing when it already is) and, once its script has stopped, clear its state; whether
    it was cleared (otherwise the next call tries again)."""
    session.shutdown()
    if internals.script_running(session):
        return False
    internals.clear_session_state(session)
    _SESSIONS.discard(session)
    return True


def _drop_orphan_uploads(uploads, live: dict) -> int:
    """Drop the uploaded files of sessions not in ``live``; how many sessions had some."""
    orphans = [session for session in internals.sessions_with_uploads(uploads) if session not in live]
    for session in orphans:
        uploads.remove_session_files(session)
    return len(orphans)


_JANITOR = threading.Lock()
_janitor_started = False


def start_janitor(*releases: Callable[[], int]) -> None:
    """Every :data:`JANITOR_INTERVAL_S`, in a thread of this process (the first call starts it, later ones do
    nothing), call each of ``releases`` (each returns how much it released: :meth:`ModelCache.release_idle`,
    :func:`release_closed_sessions`); when one released anything, collect the garbage (sessions and modules hold
    reference cycles) and hand the freed memory back to the system."""
    global _janitor_started
    with _JANITOR:
        if _janitor_started:
            return
        _janitor_started = True

    def janitor() -> None:
        while True:
            time.sleep(JANITOR_INTERVAL_S)
            try:
                released = {release.__name__: release() for release in releases}
                if any(released.values()):
                    gc.collect()
                    allocator.release_freed_memory()
                    log.info("released unused memory: %s", released)
            except Exception:  # the janitor never takes its process down
                log.exception("releasing unused memory failed")

    threading.Thread(target=janitor, name="filterlens-janitor", daemon=True).start()
