"""Browser sessions as the engine sees them: which one runs the calling thread's script, and whether one is still open.

A heavy job belongs to the sessions that watch it (:class:`fl_ui.engine.Job`'s owners): the one that asked for it and
every one that asked for the same request since. A session is open while its browser tab is connected (on any page of
the app); closing the tab, or losing the connection, closes it for the engine, which cancels a job once every owner has
been closed for a grace period (:meth:`fl_ui.engine.Engine.cancel_abandoned`).
"""

from __future__ import annotations


def current_session() -> str | None:
    """The id of the browser session whose script runs in this thread; ``None`` outside a session's script (the
    server's own warm-up, a command-line tool, a test)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    context = get_script_run_ctx(suppress_warning=True)
    return None if context is None else context.session_id


def session_is_open(session_id: str) -> bool:
    """Whether the session ``session_id`` is connected to this server (always, where no server runs: an AppTest)."""
    from streamlit.runtime import Runtime

    return not Runtime.exists() or Runtime.instance().is_active_session(session_id)
