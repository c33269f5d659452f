"""Progress of an analysis: one rule for every entry point's ``progress=`` (:func:`progress_callback`), a tqdm bar where
a person is watching, nothing elsewhere; and the stages' share of one bar (:func:`sub_progress`)."""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Callable

from fl_core.errors import ArgumentError, value_text

Progress = Callable[[float, str], None]
"""``progress(fraction_done, message)``: pages map it to ``st.progress``; the default is a tqdm bar
(:func:`progress_callback`)."""
ProgressLike = Progress | bool | None
"""What an analysis's ``progress=`` takes: a callback, ``None`` (a bar where a person is watching), ``False`` (none) or
``True`` (a bar)."""


def report(progress: Progress | None, fraction: float, message: str) -> None:
    """Call ``progress`` if given, clamping the fraction to [0, 1]."""
    if progress is not None:
        progress(min(max(float(fraction), 0.0), 1.0), message)


def sub_progress(progress: Progress | None, start: float, stop: float) -> Progress | None:
    """A progress callback that maps [0, 1] onto [start, stop] of ``progress`` (for nested steps)."""
    if progress is None:
        return None

    def scaled(fraction: float, message: str) -> None:
        report(progress, start + (stop - start) * fraction, message)

    return scaled


def progress_callback(progress: ProgressLike) -> Progress:
    """What an analysis reports its progress to, the one rule of every entry point: a callable as it is; ``None`` (the
    default) a tqdm bar where a person is watching (:func:`watched`), else nothing; ``False`` nothing; ``True`` a
    bar. Nested analyses get a callable (:func:`sub_progress`), so they never draw a bar of their own."""
    if callable(progress):
        return progress
    if progress is True or (progress is None and watched()):
        return progress_bar()
    if progress is None or progress is False:
        return silent
    raise ArgumentError(f"progress must be a callable progress(fraction, message), True, False or None, not "
                        f"{value_text(progress)}.")


def silent(fraction: float, message: str) -> None:
    """A progress callback that shows nothing."""


def watched() -> bool:
    """A person is watching this call: it runs in the main thread of a Jupyter kernel, or of a process whose standard
    error is a terminal (not in a dashboard's or a worker's thread, not with output redirected to a file)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    return "ipykernel" in sys.modules or sys.stderr.isatty()


def progress_bar() -> Progress:
    """A ``progress(fraction, message)`` drawing a tqdm bar: a widget in a notebook with ipywidgets, text on standard
    error otherwise; it closes when the fraction reaches 1."""
    if "ipykernel" in sys.modules and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.notebook import tqdm
    else:  # a terminal, or a notebook without ipywidgets (tqdm.auto would warn there): text on standard error
        from tqdm import tqdm
    bars: list = []

    def progress(fraction: float, message: str) -> None:
        if not bars:
            bars.append(tqdm(total=1000, file=sys.stderr, leave=False,
                             bar_format="{l_bar}{bar}| {elapsed}<{remaining}"))
        bar = bars[0]
        bar.n = int(fraction * 1000)
        bar.set_description(message[:60], refresh=False)
        bar.refresh()
        if fraction >= 1.0:
            bar.close()
            bars.clear()

    return progress
