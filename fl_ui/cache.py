"""Cached wrappers around fl_core for the pages.

Models are cached with ``st.cache_resource`` (shared across sessions and threads, never mutated: analyses that
change weights work on ``LoadedModel.copy_model()``). Results are memoized by :func:`memoize`, keyed by the
selection; unlike ``st.cache_data`` it lets the computation draw a progress bar (passed as ``progress``, which is not
part of the key). Results are frozen dataclasses shared between sessions: pages only read them.
"""

from __future__ import annotations

import functools
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import streamlit as st

from fl_core.backend import Progress
from fl_core.energy import EnergyResult, analyze_energy
from fl_core.images import ImageSet, open_images
from fl_core.models import LoadedModel, ModelSpec, load_model
from fl_core.whitening import WhiteningResult, analyze_whitening


def memoize(max_entries: int) -> Callable[[Callable], Callable]:
    """A thread-safe LRU cache over hashable positional arguments; the ``progress`` keyword is not part of the key."""

    def decorate(func: Callable) -> Callable:
        entries: OrderedDict[tuple, object] = OrderedDict()
        lock = threading.Lock()

        @functools.wraps(func)
        def wrapper(*args, progress: Progress | None = None):
            with lock:
                if args in entries:
                    entries.move_to_end(args)
                    return entries[args]
            value = func(*args, progress=progress)
            with lock:
                entries[args] = value
                while len(entries) > max_entries:
                    entries.popitem(last=False)
            return value

        wrapper.clear = entries.clear
        return wrapper

    return decorate


def _file_stamp(spec: str) -> str:
    """Modification time and size of a spec's file, so an edited server-side file is reloaded."""
    path = ModelSpec.parse(spec).path
    if path and Path(path).is_file():
        stat = os.stat(path)
        return f"{stat.st_mtime_ns}:{stat.st_size}"
    return ""


@st.cache_resource(show_spinner=False, max_entries=24)
def _cached_model(spec: str, overrides: tuple, stamp: str) -> LoadedModel:
    return load_model(spec, input_overrides=dict(overrides))


def get_model(spec: str, overrides: tuple = ()) -> LoadedModel:
    """The loaded model for a spec (shared, read-only)."""
    return _cached_model(spec, overrides, _file_stamp(spec))


@st.cache_resource(show_spinner=False, max_entries=8)
def get_images(source: str, limit: int | None = None) -> ImageSet:
    """An image source (bundled photos or a folder), listed once per server."""
    return open_images(source, limit)


@memoize(max_entries=32)
def energy_result(models: tuple[tuple[str, tuple], ...], images: str, layer: str | None, subtract_init: bool,
                  seeds: int, device: str, progress: Progress | None = None) -> EnergyResult:
    """:func:`fl_core.energy.analyze_energy` for ``(spec, overrides)`` pairs."""
    loaded = [get_model(spec, overrides) for spec, overrides in models]
    inits = {m.spec: get_model(m.init_spec) for m in loaded if subtract_init and m.init_spec}
    return analyze_energy(loaded, get_images(images), layer=layer, inits=inits, seeds=range(seeds),
                          device=device, progress=progress)


@memoize(max_entries=32)
def whitening_result(models: tuple[tuple[str, tuple], ...], images: str, max_distance: int, seeds: int,
                     device: str, progress: Progress | None = None) -> WhiteningResult:
    """:func:`fl_core.whitening.analyze_whitening` for ``(spec, overrides)`` pairs."""
    loaded = [get_model(spec, overrides) for spec, overrides in models]
    return analyze_whitening(loaded, get_images(images), max_distance=max_distance, seeds=range(seeds),
                             device=device, progress=progress)
