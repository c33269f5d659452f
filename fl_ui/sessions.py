"""Browser sessions as the engine sees them: which one runs the calling thread's script, whether one is still open,
and which browser it belongs to.

A heavy job belongs to the sessions that watch it (:class:`fl_ui.engine.Job`'s owners): the one that asked for it and
every one that asked for the same request since. A session is open while its browser tab is connected (on any page of
the app); closing the tab, or losing the connection, closes it for the engine, which cancels a job once every owner has
been closed for a grace period (:meth:`fl_ui.engine.Engine.cancel_abandoned`).

**A browser is known by a secret the server gave it**: :class:`BrowserCookie`, the served app's middleware, sets an
HttpOnly cookie of 256 random bits on every page it serves to a browser that has none (and renews its expiry), and the
session reads it from its websocket's handshake (``st.context.cookies``). Nothing in a URL says whose a session is:
the browser's tabs share the secret, a link opened in another browser does not carry it, and the page's scripts
cannot read it. It is the unit of the engine's fair share (:func:`current_visitor`) and what the Training Lab's runs
folder is bound to (:func:`fl_ui.lab.session_token`).
"""

from __future__ import annotations

import hashlib
import re
import secrets

BROWSER_COOKIE = "filterlens_browser"
"""The name of the cookie that holds a browser's secret."""
BROWSER_COOKIE_DAYS = 30
"""A browser's secret is kept this many days after its last visit to a page (then it gets a new one)."""
BROWSER_SECRET = re.compile(r"[A-Za-z0-9_-]{43}")
"""A browser's secret: 32 random bytes, URL-safe base64 (``secrets.token_urlsafe(32)``)."""


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


def browser_secret() -> str | None:
    """The secret of the browser whose session runs in this thread (:class:`BrowserCookie`); ``None`` outside a
    session, and where the browser sent none (a client that keeps no cookies, an AppTest)."""
    if current_session() is None:
        return None
    import streamlit as st

    secret = st.context.cookies.get(BROWSER_COOKIE)
    return secret if isinstance(secret, str) and BROWSER_SECRET.fullmatch(secret) else None


def current_visitor() -> str | None:
    """Who asked, for the engine's fair share and limits: the browser (a digest of its secret, never the secret) or,
    where it is unknown, the session alone; ``None`` outside a session (the server itself)."""
    session = current_session()
    if session is None:
        return None
    secret = browser_secret()
    return session if secret is None else "browser-" + hashlib.sha256(secret.encode()).hexdigest()[:16]


class BrowserCookie:
    """ASGI middleware of the served app: every HTML page it serves sets :data:`BROWSER_COOKIE` (the browser's own
    secret, or a new one where it sent none) with ``HttpOnly`` (page scripts cannot read it), ``SameSite=Lax`` (a link
    followed from another site still carries it; another site's requests do not) and ``Secure`` on HTTPS, for
    :data:`BROWSER_COOKIE_DAYS` days."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        secret = _request_cookie(scope, BROWSER_COOKIE)
        cookie = browser_cookie(secret if BROWSER_SECRET.fullmatch(secret) else secrets.token_urlsafe(32),
                                secure=scope.get("scheme") == "https")

        async def send_with_cookie(message) -> None:
            if message["type"] == "http.response.start" and _is_html(message.get("headers", [])):
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie.encode())]}
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def browser_cookie(secret: str, secure: bool) -> str:
    """The ``Set-Cookie`` value that gives a browser ``secret`` (:class:`BrowserCookie`)."""
    return "; ".join([f"{BROWSER_COOKIE}={secret}", "Path=/", f"Max-Age={BROWSER_COOKIE_DAYS * 86400}", "HttpOnly",
                      "SameSite=Lax", *(["Secure"] if secure else [])])


def _request_cookie(scope, name: str) -> str:
    """The value of cookie ``name`` in an ASGI request's headers ("" when absent)."""
    for header, value in scope.get("headers", []):
        if header == b"cookie":
            for part in value.decode("latin-1").split(";"):
                key, _, text = part.strip().partition("=")
                if key == name:
                    return text
    return ""


def _is_html(headers) -> bool:
    return any(name.lower() == b"content-type" and value.startswith(b"text/html") for name, value in headers)
