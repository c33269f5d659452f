"""Loaded models, shared by every session and thread of a process (the app's :data:`fl_ui.cache.MODELS`, each
worker's own): loaded once, kept while used; at most ``FL_MODEL_CACHE_MB`` of weights (the least recently used leave
first) and none unused for :data:`MODEL_IDLE_S` (:func:`fl_ui.memory.start_janitor` releases them)."""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fl_core.io.models import LoadedModel

MODEL_CACHE_ENV = "FL_MODEL_CACHE_MB"
DEFAULT_MODEL_CACHE_MB = 2048
MODEL_IDLE_S = 90.0
"""A model nobody asked for this long is released (a page asks for its models on every run)."""


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
