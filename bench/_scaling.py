"""How a benchmark's costs grow with its work: one table row per amount of work, and the fitted growth exponent of
every cost as the last row, so "linear" (1) or "quadratic" (2) reads off the table instead of one point.

Each time is the minimum of a few repeats: the machine may be shared, other work only ever adds time, so the minimum
is the least disturbed run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

T = TypeVar("T")
Cell = float | int | str | None


def best_time(fn: Callable[[], T], repeats: int, device: torch.device | str = "cpu") -> tuple[float, T]:
    """(the least wall time in seconds of ``repeats`` calls of ``fn``, the last call's result); CUDA work is waited
    for before each clock read."""
    cuda = torch.device(device).type == "cuda"
    best, result = math.inf, None
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        result = fn()
        if cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best, result


def growth_exponent(work: Sequence[float], cost: Sequence[float]) -> float:
    """Least-squares slope b of log cost = a + b·log work over the points with positive cost (NaN under two)."""
    points = [(w, c) for w, c in zip(work, cost, strict=True) if c is not None and c > 0]
    if len({w for w, _ in points}) < 2:
        return math.nan
    x, y = np.log([w for w, _ in points]), np.log([c for _, c in points])
    return float(np.polyfit(x, y, 1)[0])


@dataclass(frozen=True)
class Column:
    """One table column: its title, the format of its numbers and whether its growth exponent is fitted."""

    title: str
    fmt: str = ".3f"
    cost: bool = False

    @property
    def width(self) -> int:
        return max(len(self.title), 8)

    def cell(self, value: Cell) -> str:
        text = "-" if value is None else value if isinstance(value, str) else format(value, self.fmt)
        return f"{text:>{self.width}}"


def scaling_table(columns: Sequence[Column], rows: Sequence[Sequence[Cell]]) -> str:
    """The rows under a header (the first column is the work) and a last row with the growth exponent of every cost
    column against the work."""
    work, *cells = zip(*rows, strict=True)  # the columns of the table
    exponents = ["exponent"] + [_exponent_text(work, column_cells) if column.cost else ""
                                for column, column_cells in zip(columns[1:], cells, strict=True)]
    lines = [" ".join(c.cell(c.title) for c in columns)]
    lines += [" ".join(c.cell(v) for c, v in zip(columns, row, strict=True)) for row in rows]
    lines.append(" ".join(f"{text:>{c.width}}" for c, text in zip(columns, exponents, strict=True)))
    return "\n".join(lines)


def _exponent_text(work: Sequence[float], cost: Sequence[Cell]) -> str:
    exponent = growth_exponent(work, cost)
    return "-" if math.isnan(exponent) else f"{exponent:.2f}"


def scaling_note(repeats: int, work: str) -> str:
    """The line that says how the table was measured."""
    return (f"times: the least of {repeats} repeat(s) per point (a shared machine only adds time); exponent: "
            f"least-squares slope of log cost vs log {work} (0 = flat, 1 = linear, 2 = quadratic)")
