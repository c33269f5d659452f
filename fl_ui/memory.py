"""Memory back to idle: what the server holds for its sessions is released once they are gone.

* **Models** (:class:`ModelCache`: the app's :data:`fl_ui.cache.MODELS`, each worker's own): loaded once for every
  session, kept while used; at most ``FL_MODEL_CACHE_MB`` of weights (the least recently used leave first) and none
  unused for :data:`MODEL_IDLE_S`.
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
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fl_core.compute import allocator
from fl_ui import internals

if TYPE_CHECKING:
    from fl_core.io.models import LoadedModel

log = logging.getLogger("filterlens")

MODEL_CACHE_ENV = "FL_MODEL_CACHE_MB"
DEFAULT_MODEL_CACHE_MB = 2048
MODEL_IDLE_S = 90.0
"""A model nobody asked for this long is released (a page asks for its models on every run)."""
JANITOR_INTERVAL_S = 15.0


def model_bytes(loaded: LoadedModel) -> int:
    """The memory a loaded model's tensors take (each storage once: the state dict shares the model's)."""
    tensors = [*loaded.state_dict.values()]
    if loaded.model is not None:
        tensors += [*loaded.model.parameters(), *loaded.model.buffers()]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def model_cache_bytes() -> int:
    """The most bytes of weights the app keeps loaded: ``FL_MODEL_CACHE_MB`` (default
    :data:`DEFAULT_MODEL_CACHE_MB`)."""
    return int(float(os.environ.get(MODEL_CACHE_ENV) or DEFAULT_MODEL_CACHE_MB) * 2**20)


def load_spec(spec: str, overrides: tuple, stamp: str) -> LoadedModel:
    """:func:`fl_core.io.models.load_model` of a cache key (``stamp``, the file's, only keys it: an edited file is
    loaded again)."""
    from fl_core.io.models import load_model

    return load_model(spec, input_overrides=dict(overrides))


@dataclass
class _Kept:
    model: LoadedModel
    size: int
    last_used: float


class ModelCache:
    """Loaded models by key (``(spec, overrides, file stamp)``: :func:`load_spec`), shared read-only by every session
    and thread: each key loaded once at a time (others asking meanwhile wait for it), the least recently used
    released past ``max_bytes()`` (one model larger than that is still kept alone), and :meth:`release_idle` releases
    those unused for ``idle_s``."""

    def __init__(self, load: Callable[..., LoadedModel] = load_spec, max_bytes: Callable[[], int] = model_cache_bytes,
                 idle_s: float = MODEL_IDLE_S) -> None:
        self._load, self._max_bytes, self.idle_s = load, max_bytes, idle_s
        self._lock = threading.Lock()
        self._kept: OrderedDict[Hashable, _Kept] = OrderedDict()
        self._loading: dict[Hashable, threading.Lock] = {}

    def get(self, *key: Hashable) -> LoadedModel:
        """The model of ``key`` (``load(*key)`` unless it is kept)."""
        with self._lock:
            if (found := self._used(key)) is not None:
                return found
            loading = self._loading.setdefault(key, threading.Lock())
        with loading:
            with self._lock:
                if (found := self._used(key)) is not None:
                    return found
            model = None
            try:
                model = self._load(*key)
            finally:
                with self._lock:  # kept before it is no longer loading: nobody in between loads it again
                    self._loading.pop(key, None)
                    if model is not None:
                        self._kept[key] = _Kept(model, model_bytes(model), time.monotonic())
                        self._release_over(self._max_bytes())
        return model

    def _used(self, key: Hashable) -> LoadedModel | None:
        kept = self._kept.get(key)
        if kept is None:
            return None
        kept.last_used = time.monotonic()
        self._kept.move_to_end(key)
        return kept.model

    def _release_over(self, max_bytes: int) -> None:
        while len(self._kept) > 1 and self.size > max_bytes:
            self._kept.popitem(last=False)

    @property
    def size(self) -> int:
        """Bytes of the models kept."""
        return sum(kept.size for kept in self._kept.values())

    def release_idle(self) -> int:
        """Release the models unused for :attr:`idle_s`; the bytes released."""
        now = time.monotonic()
        with self._lock:
            idle = [key for key, kept in self._kept.items() if now - kept.last_used > self.idle_s]
            return sum(self._kept.pop(key).size for key in idle)


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
