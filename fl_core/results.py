"""Shared behaviour of analysis results: frozen dataclasses with ``to_dict()`` (JSON-safe), ``to_frame()``,
``to_csv()`` (the one CSV writer of every table export: :func:`csv_text`), ``plot(kind)`` (a plotly figure drawn by
the family's own figure function, plotly imported on first use), and ``save(path)`` / ``load(path)`` (one file of JSON
and numpy arrays, no pickle: :mod:`fl_core.io.resultfiles`)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import numbers
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

import numpy as np
import torch

from fl_core.errors import AnalysisError, ArgumentError

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

R = TypeVar("R", bound="Result")


def jsonable(value: Any) -> Any:
    """Convert arrays, tensors, numpy scalars, dataclasses and non-finite floats into plain JSON values.

    NaN and ±inf become ``None`` (JSON has no such numbers).
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if hasattr(value, "to_dict"):
            return value.to_dict()
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


MODEL_COLUMNS = ("model", "spec")
"""The first columns of every family's table (:meth:`Result.to_frame`): the model's short label (``LoadedModel.label``,
the same in every family) and its spec beside it, so tables of several models and families stack in one long shape."""


def with_model_columns(frame: pd.DataFrame, label: str, spec: str, **columns: Any) -> pd.DataFrame:
    """``frame`` with :data:`MODEL_COLUMNS` first (``label`` and ``spec`` on every row), then ``columns`` (name →
    one value for every row, e.g. ``layer=``); its columns of numbers as numbers (:func:`numbers_as_numbers`)."""
    import pandas as pd

    first = pd.DataFrame({"model": label, "spec": spec, **columns}, index=frame.index)
    return numbers_as_numbers(pd.concat([first, frame.drop(columns=list(first.columns), errors="ignore")], axis=1))


def numbers_as_numbers(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each column of Python objects that holds numbers and missing values only (``None`` where a
    score does not apply) as a float column, missing values NaN."""
    mixed = [column for column in frame.columns[frame.dtypes.map(lambda dtype: dtype.kind == "O")]
             if (values := frame[column].dropna()).size and all(_is_number(value) for value in values)]
    return frame.astype(dict.fromkeys(mixed, float)) if mixed else frame


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""First characters that make a spreadsheet read a cell as a formula (OWASP, "CSV Injection")."""
NUMBER_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
"""Text that is only a number (``-0.5``, ``+3e-4``): a spreadsheet reads it as that number, never as a formula."""


def spreadsheet_safe(value: Any) -> Any:
    """A table cell as a spreadsheet shows it without running it: text (anything but a number) that starts with one
    of :data:`FORMULA_STARTS` gets a leading single quote, as OWASP recommends (a state-dict key
    ``=cmd|' -c calc'!A0.weight`` becomes ``'=cmd|' -c calc'!A0.weight``); numbers, missing values and text that is
    only a number (a negative number stays a number) are returned as they are."""
    if value is None or isinstance(value, numbers.Number | np.generic):
        return value
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) and not NUMBER_TEXT.fullmatch(text) else value


def csv_text(frame: pd.DataFrame) -> str:
    """``frame`` as CSV text (no index) with every header and text cell :func:`spreadsheet_safe`: the one writer of
    every table export (:meth:`Result.to_csv`, the command line's ``--csv``, the dashboard's "⬇ CSV" downloads).
    Numeric columns are written as they are. Rows end in CRLF (RFC 4180), so a cell holding a carriage return is
    quoted (with LF endings Python's csv writer leaves it bare, and a spreadsheet would start a row, and a formula,
    inside the cell)."""
    safe = frame.copy()
    safe.columns = [spreadsheet_safe(column) for column in frame.columns]
    for i in range(safe.shape[1]):
        column = safe.iloc[:, i]
        if column.dtype.kind not in "biufcmM":
            safe.isetitem(i, column.astype(object).map(spreadsheet_safe))
    text: str = safe.to_csv(index=False, lineterminator="\r\n")
    return text


class Result:
    """What every analysis returns: a frozen dataclass of its numbers with the same methods in every family.

    * ``to_frame()``: the result's main table (pandas), the model's label and spec in the first columns;
    * ``to_dict()`` / ``to_json()``: every number, JSON-safe (what the command line's ``--json`` writes);
    * ``plot(kind)``: a plotly figure; ``plot_kinds()`` lists the kinds this result draws, the default first;
    * ``save(path)``: the whole result in one ``.flr`` file, which ``fl_core.load_result(path)`` reads back and the
      dashboard's Saved results page (``filterlens app --results DIR``) shows.

    Example::

        result = fl_core.analyze_energy("demo:squeezenet1_0")
        result.to_frame().head()
        for kind in result.plot_kinds():
            result.plot(kind).show()
        result.save("squeezenet.flr")
    """

    # For a family's author: fields not serialised by to_dict() (large arrays kept for figures), and the figures:
    # kind -> "module:function" of the family's plots module, the first the default, called with figure_inputs(kind)
    # and the keywords given to plot(); missing_figure(kind) says why a result cannot draw one of them.
    _private_fields: tuple[str, ...] = ()
    _figures: ClassVar[dict[str, str]] = {}

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict of every public field."""
        return {
            f.name: jsonable(getattr(self, f.name))
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if f.name not in self._private_fields
        }

    def to_json(self, indent: int | None = 2) -> str:
        """``to_dict()`` as a JSON string."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def to_frame(self) -> pd.DataFrame:
        """The result as a table: the serialised fields in one row (tabular results override this)."""
        import pandas as pd

        return pd.json_normalize(self.to_dict())

    def to_csv(self, path: str | Path | None = None) -> str:
        """:meth:`to_frame` as CSV text a spreadsheet opens without running any cell (:func:`csv_text`); with
        ``path``, also written there (where the path policy lets the library write, its folder created:
        :func:`fl_core.io.paths.file_to_write`)."""
        text = csv_text(self.to_frame())
        if path is not None:
            from fl_core.io.paths import file_to_write

            file_to_write(path).write_bytes(text.encode())
        return text

    def save(self, path: str | Path) -> Path:
        """Write the whole result, the arrays its figures draw included, to one file (JSON and ``.npy`` arrays in a
        zip, no pickle); :meth:`load` or ``fl_core.load_result(path)`` reads it back."""
        from fl_core.io.resultfiles import save_result

        return save_result(self, path)

    @classmethod
    def load(cls: type[R], path: str | Path) -> R:
        """The result :meth:`save` wrote to ``path``, equal in :meth:`to_dict` and drawn by :meth:`plot` as before;
        a file holding another class is refused."""
        from fl_core.io.resultfiles import load_result

        return cast(R, load_result(path, cls))

    @classmethod
    def figure_kinds(cls) -> tuple[str, ...]:
        """Every figure results of this class can draw, the default first (:meth:`plot_kinds`: those this one does)."""
        return tuple(cls._figures)

    def plot_kinds(self) -> tuple[str, ...]:
        """The figures :meth:`plot` draws of this result, each with no further argument, the default first; a figure
        of a part that was not computed (a sweep that did not run) is left out (:meth:`missing_figure` says why)."""
        return tuple(kind for kind in self.figure_kinds() if self.missing_figure(kind) is None)

    def missing_figure(self, kind: str) -> str | None:
        """Why this result cannot draw ``kind``, one of :meth:`figure_kinds` (``None``: it can)."""
        return None

    def figure_inputs(self, kind: str) -> tuple[Any, ...]:
        """The positional arguments of the figure function of ``kind`` (default: the result itself)."""
        return (self,)

    def plot(self, kind: str | None = None, **kwargs: Any) -> go.Figure:
        """A plotly figure of this result (``kind``: one of :meth:`plot_kinds`, default the first); ``kwargs`` go to
        the family's figure function (e.g. ``log_y=False`` for an energy profile)."""
        kinds = self.plot_kinds()
        if not self.figure_kinds():
            raise AnalysisError(f"{type(self).__name__} has no figure; its numbers are in to_frame() and to_dict().")
        kind = (kinds or self.figure_kinds())[0] if kind is None else kind
        if kind not in self.figure_kinds():
            raise ArgumentError(f"kind {kind!r}: {type(self).__name__} draws {', '.join(map(repr, kinds))}.")
        if (missing := self.missing_figure(kind)) is not None:
            raise AnalysisError(missing)
        module, function = self._figures[kind].split(":")
        return getattr(importlib.import_module(module), function)(*self.figure_inputs(kind), **kwargs)
