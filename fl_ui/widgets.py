"""Small Streamlit building blocks used by every page: errors, progress, downloads, plot + explanation."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from fl_core.compute.progress import Progress
from fl_core.errors import FilterLensError
from fl_core.figures import figure_html, filter_zoom_figure
from fl_core.io.models import LoadedModel
from fl_core.results import Result, csv_text
from fl_ui.forms import setting_widget
from fl_ui.glossary import explain_symbols
from fl_ui.messages import literal, show
from fl_ui.state import set_url_param, url_setting, value_field

T = TypeVar("T")
CARDS_PER_ROW = 4
MISSING_CELL = "—"

log = logging.getLogger("filterlens")


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Show FilterLens errors as ``st.error`` with their advice; anything else briefly (traceback in the log)."""
    try:
        yield
    except FilterLensError as err:
        show(st.error, "{}", err)
    except Exception as err:  # the page must keep serving; details go to the log
        log.exception("unexpected error")
        st.error(f"Something went wrong ({type(err).__name__}). The details are in the server log; try another "
                 "model or fewer images, and report the problem if it persists.")


@contextlib.contextmanager
def progress_bar(label: str, container: Any = st) -> Iterator[Progress]:
    """A ``progress(fraction, message)`` callback drawing an ``st.progress`` bar in ``container`` (default: here) that
    disappears when done."""
    slot = container.empty()
    bar = slot.progress(0.0, text=label)

    def progress(fraction: float, message: str) -> None:
        bar.progress(min(max(fraction, 0.0), 1.0), text=f"{label}: {literal(message)}")

    try:
        yield progress
    finally:
        slot.empty()


def job_status_area() -> Any:
    """The place under a page's title where the job the page asked for shows its stage, progress, queue place and
    Cancel (:func:`heavy_result`): in the first screen of a 1024×768 projector however far down its result goes,
    and empty (no space, no button) when nothing runs."""
    return st.container()


def heavy_result(label: str, compute: Callable, *args: object, status: Any = None) -> object:
    """The result of a :func:`fl_ui.memo.pooled` computation; while it waits or runs, its progress (the queue place,
    then the stage) and a Cancel button in one box in ``status`` (the page's :func:`job_status_area`; default: here).

    Cancelling says this session no longer wants it (the job stops unless another session, or the server's warm-up,
    still does) and stops this page's automatic start of it until the user presses "Run again".
    """
    where = st.container() if status is None else status
    key = f"heavy-{slug(label)}"
    if st.session_state.get(f"{key}-cancelled") == args:
        where.info(f"{label} was cancelled.")
        if not where.button("▶ Run again", key=f"{key}-again"):
            st.stop()
        st.session_state.pop(f"{key}-cancelled")
    if compute.cached(*args):
        return compute(*args)

    def cancel() -> None:
        compute.abandon(*args)
        st.session_state[f"{key}-cancelled"] = args

    slot = where.empty()
    box = slot.container(border=True)
    bar, stop = box.columns([5, 1], vertical_alignment="center")
    stop.button("■ Cancel", key=f"{key}-cancel", on_click=cancel, help="Stop this computation (it runs in a "
                "worker process, so the rest of the app stays responsive).")
    try:
        with progress_bar(label, bar) as progress:
            return compute(*args, progress=progress)
    finally:
        slot.empty()  # also when the job failed: no Cancel button is left under its error


def preprocessing_caption(models: Sequence[LoadedModel], container: Any = st) -> None:
    """Every page that feeds images to models says, in one caption, how each model sees them, where that came from
    (:meth:`~fl_core.io.models.LoadedModel.preprocessing_text`: registry config, checkpoint family or FilterLens's
    default, what the user set) and where to change it."""
    lines = " ".join(f"**{literal(loaded.label)}**: {literal(loaded.preprocessing_text())}." for loaded in models)
    change = ("A file trained or converted elsewhere may expect other values (MobileNetV2 converted from TensorFlow: "
              "mean and std 0.5): set them under *⚙ Preprocessing of uploaded weights* in the sidebar."
              if any(loaded.user_file for loaded in models) else
              "Registry and demo models use their own; a checkpoint file's can be set in the sidebar.")
    container.caption(f"Preprocessing of {lines} {change}")


def slug(text: str) -> str:
    """A file-name-safe version of a label."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:80] or "filterlens"


def result_file(result: Result) -> bytes:
    """``result`` as the bytes of a ``.flr`` file (``result.save``: what ``fl_core.load_result`` and the Saved results
    page read back)."""
    with tempfile.TemporaryDirectory() as folder:
        return result.save(Path(folder) / "result.flr").read_bytes()


def json_text(numbers: dict | Result) -> str:
    """A dict, or a result's ``to_dict()``, as indented JSON."""
    return json.dumps(numbers.to_dict() if isinstance(numbers, Result) else numbers, indent=2, allow_nan=False)


def downloads(name: str, *, figure: go.Figure | None = None, frame: pd.DataFrame | None = None,
              data: dict | None = None, result: Result | None = None) -> None:
    """Download buttons for a figure (HTML), a table (CSV: :func:`fl_core.results.csv_text`, no cell a spreadsheet
    runs) and a result, side by side: its numbers (JSON: ``data``, or the ``result``'s ``to_dict()``) and the whole
    ``result`` as a ``.flr`` file (:func:`result_file`), which ``fl_core.load_result`` and the Saved results page
    (``filterlens app --results DIR``) open.

    Each file is rendered only when its button is clicked (Streamlit's deferred ``data`` callable): a figure's HTML
    inlines plotly.js (~5 MB), and building it on every rerun of every session kept the shared server busy.
    """
    items = [(figure, "HTML figure", "html", "text/html", figure_html),
             (frame, "CSV table", "csv", "text/csv", csv_text),
             (data if data is not None else result, "JSON", "json", "application/json", json_text),
             (result, "Result (.flr)", "flr", "application/zip", result_file)]
    present = [item for item in items if item[0] is not None]
    columns = st.columns(len(present) or 1)
    for column, (payload, label, ext, mime, render) in zip(columns, present):
        column.download_button(f"⬇ {label}", functools.partial(render, payload), file_name=f"{slug(name)}.{ext}",
                               mime=mime, key=f"dl-{slug(name)}-{ext}", on_click="ignore")


def plot_with_explanation(figure: go.Figure, explanation: str, name: str, *, frame: pd.DataFrame | None = None,
                          data: dict | None = None, result: Result | None = None, symbols: Sequence[str] = ()
                          ) -> None:
    """A figure the page's width, a student-level explanation below it, what its ``symbols`` mean
    (:func:`fl_ui.glossary.explain_symbols`) and its downloads. (Beside it, on a 1024-px projector the figure had
    420 px and the explanation a 135-px column of one or two words a line.)"""
    st.plotly_chart(figure, width="stretch", key=f"plot-{slug(name)}")
    st.markdown(explanation)
    if symbols:
        explain_symbols(symbols)
    downloads(name, figure=figure, frame=frame, data=data, result=result)


def _cell_text(value: Any) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return MISSING_CELL
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def dashed(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` for ``st.dataframe`` with its missing values written "—": Streamlit's grid draws a missing cell as
    "None" (which reads as a value) whatever a Styler says, so the columns that have any become text, cell by cell
    (numbers to 6 significant digits); the others are left as they are."""
    missing = [column for column in frame.columns if frame[column].isna().any()]
    return frame.assign(**{column: frame[column].map(_cell_text) for column in missing}) if missing else frame


def screen_columns(frame: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    """The columns of ``frame`` named in ``names`` that hold a value, in that order and in those words, numbers to
    three decimals or, below 0.1, three significant digits (0.000213, not 0): the screen's version of a table
    (:func:`table_with_download`'s ``shown``)."""
    present = [column for column in names if column in frame and frame[column].notna().any()]
    shown = frame[present].rename(columns=names)
    decimals = [column for column in shown if pd.api.types.is_float_dtype(shown[column])]
    return shown.assign(**{column: shown[column].map(readable_number) for column in decimals})


def readable_number(value: float) -> float:
    """``value`` to three decimals, or to three significant digits when that keeps more of a small one."""
    if not np.isfinite(value) or value == 0:
        return value
    return round(value, max(3, 2 - int(np.floor(np.log10(abs(value))))))


def table_with_download(frame: pd.DataFrame, name: str, *, shown: pd.DataFrame | None = None, wrap: bool = False,
                        data: dict | None = None, result: Result | None = None) -> None:
    """A table (missing values "—": :func:`dashed`) and the downloads of ``frame`` (CSV) and ``data`` (JSON, when
    given). On the page ``shown`` when given: the screen's version of the table, with the columns a reader needs under
    names in words, so that it fits a 1024-px projector (every column stays in the CSV); with ``wrap`` a static table
    whose long texts wrap (the interactive grid cuts a cell at its column's width)."""
    table = dashed(frame if shown is None else shown)
    if wrap:
        st.table(table, hide_index=True)
    else:
        st.dataframe(table, width="stretch", hide_index=True)
    downloads(name, frame=frame, data=data, result=result)


def url_widget(label: str, default: T, *, key: str, param: str | None = None, choices: Sequence[Any] | None = None,
               minimum: float | None = None, maximum: float | None = None, container: Any = st, slider: bool = False,
               omit_default: bool = False, **options: Any) -> T:
    """A widget for a value like ``default`` — a checkbox (bool), a select box over ``choices`` (a multiselect for a
    tuple), a number input or, with ``slider``, a slider within ``[minimum, maximum]``, or a text input — that starts
    from the query parameter ``param`` (default: the widget's ``key``; checked like the widget's value, an invalid one
    falls back to ``default`` with a notice) and writes its value back there, so a shared link restores it. With
    ``omit_default`` the parameter is dropped while the value is the default (for a default computed from the data,
    such as a fitted σ, that a link should not freeze). ``options`` go to the widget."""
    param = param or key
    field = value_field(param, default, choices=choices, minimum=minimum, maximum=maximum)
    value = setting_widget(field, label, key=key, value=url_setting(param, field, default), container=container,
                           slider=slider, **options)
    if omit_default and value == default:
        st.query_params.pop(param, None)
    else:
        set_url_param(param, value)
    return value


def card_rows(count: int, per_row: int = CARDS_PER_ROW) -> Iterator[Any]:
    """``count`` columns for cards, ``per_row`` to a row and as many rows as needed (a projector fits about 4)."""
    for start in range(0, count, per_row):
        yield from st.columns(per_row)[:min(per_row, count - start)]


def zoomable_tiles(figure: go.Figure, filters: np.ndarray, labels: Sequence[str], caption: str, *, name: str,
                   key: str) -> None:
    """A figure of filter tiles (:func:`fl_core.figures.tiles_figure`) with its caption and download (``name``), and
    below it one filter of ``filters`` (N, C, kh, kw), chosen by ``labels``, drawn large with its weights across the
    page (:func:`fl_core.figures.filter_zoom_figure`: beside the picker its numbers were too small to read); the
    choice is the widget and query parameter ``key``."""
    st.plotly_chart(figure, width="stretch", key=f"plot-{slug(name)}")
    st.caption(caption + " Hover a tile for its name; choose one below to see its weights.")
    downloads(name, figure=figure)
    picker, _ = st.columns([1, 2])
    index = url_widget("Zoom in on", 0, key=key, choices=range(len(filters)), container=picker,
                       format_func=lambda i: labels[i])
    st.plotly_chart(filter_zoom_figure(filters[index], labels[index]), width="stretch", key=f"plot-{key}")
