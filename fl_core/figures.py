"""Figures as pure functions of results (plotly ``go.Figure``): testable without a browser, reusable in reports.

This module holds the pieces every family of figures shares: filter tiles, heatmaps, the palette, HTML export.
Each family holds its own figures beside its analyses (``fl_core.firstlayer.plots``, ``fl_core.masterkeys.plots``, ...
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22")
REFERENCE_COLORS = {"rgb": "#444444", "zca": "#000000", "random": "#999999", "theory": "#000000"}


def color(index: int) -> str:
    """The i-th series colour."""
    return PALETTE[index % len(PALETTE)]


SUPERSCRIPTS = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
PLAIN_DECADES = range(-3, 5)
"""Log-axis ticks from 0.001 to 90 000 are written as plain decimals; outside, as m×10ⁿ."""
TICK_MANTISSAS = ((1,), (1, 2, 5), (1, 2, 3, 5), (1, 2, 3, 4, 5, 6, 7, 8, 9))
"""Tick sets within a decade, coarsest first: the first that puts :data:`MIN_LOG_TICKS` ticks on the data is used."""
MIN_LOG_TICKS = 3
MAX_LOG_TICKS = 8


def log_tick_text(value: float) -> str:
    """A log-axis tick label that reads as a number (3 significant digits): ``0.02``, ``1``, ``500``, ``2.5`` for
    10⁻³ ≤ value < 10⁵, else ``10⁻⁵`` or ``2×10⁶`` (value = m·10ⁿ)."""
    value = float(f"{value:.3g}")
    exponent = int(np.floor(np.log10(value)))
    if exponent in PLAIN_DECADES:
        return np.format_float_positional(value, trim="-")
    mantissa = float(f"{value / 10.0 ** exponent:.3g}")
    power = f"10{str(exponent).translate(SUPERSCRIPTS)}"
    return power if mantissa == 1 else f"{mantissa:g}×{power}"


def _nice_step(span: float, count: int) -> float:
    """The 1-2-5 × 10ⁿ step that divides ``span`` into about ``count`` parts."""
    raw = span / count
    power = 10.0 ** np.floor(np.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def log_ticks(low: float, high: float) -> list[float]:
    """Tick values of a log axis showing [low, high] (both > 0): every decade 10ⁿ, thinned to at most
    :data:`MAX_LOG_TICKS` over wide spans, or, where the span holds fewer than :data:`MIN_LOG_TICKS` decades, the
    first of :data:`TICK_MANTISSAS` (1-2-5, 1-2-3-5, 1…9 × 10ⁿ) that puts that many on it; a span narrower than
    that (less than about ×3) gets evenly spaced 1-2-5 steps. Values just outside [low, high] are kept (they fall
    in the axis' padding or off it)."""
    first, last = int(np.floor(np.log10(low))), int(np.ceil(np.log10(high)))
    decades = np.arange(first, last + 1)
    if len(decades) > MAX_LOG_TICKS + 1:
        step = int(np.ceil(len(decades) / MAX_LOG_TICKS))
        return [10.0 ** e for e in decades if e % step == 0]
    for mantissas in TICK_MANTISSAS:
        ticks = [float(f"{m * 10.0 ** e:.1g}") for e in decades for m in mantissas]
        if sum(low <= t <= high for t in ticks) >= MIN_LOG_TICKS:
            return ticks
    step = _nice_step(high - low, MIN_LOG_TICKS)
    return [float(f"{k * step:.12g}") for k in range(int(np.floor(low / step)), int(np.ceil(high / step)) + 1)
            if k > 0]


def log_axis(values: ArrayLike, **axis: object) -> dict:
    """Layout of a log axis for ``values`` (its data, or its fixed bounds; non-positive and non-finite ones ignored):
    ``type="log"`` with explicit :func:`log_ticks` labelled by :func:`log_tick_text` — plotly's own log ticks label
    the 2s and 5s between decades with bare digits ("5 2 1 5 2 0.1"). ``axis`` adds further axis properties.

    Use it for every log axis: ``fig.update_yaxes(**log_axis(y))``.
    """
    values = np.asarray(values, dtype=float).ravel()
    shown = values[np.isfinite(values) & (values > 0)]
    low, high = (float(shown.min()), float(shown.max())) if shown.size else (1.0, 10.0)
    ticks = log_ticks(low, high)
    return dict(type="log", tickmode="array", tickvals=ticks, ticktext=[log_tick_text(t) for t in ticks], **axis)


def trace_values(fig: go.Figure, axis: str = "y") -> np.ndarray:
    """Every number a figure's traces put on their ``x`` or ``y`` coordinate (what a one-axis figure's
    :func:`log_axis` spans)."""
    arrays = [np.asarray(getattr(trace, axis), dtype=float).ravel() for trace in fig.data
              if getattr(trace, axis, None) is not None]
    return np.concatenate(arrays) if arrays else np.empty(0)


def square_pixels(fig: go.Figure) -> None:
    """Give every subplot of ``fig`` square data units (each y axis anchored to its x axis, shrunk within its cell),
    hide the axes and put row 0 at the top: images and heatmaps keep their aspect ratio whatever the cell's shape."""
    for name in [n for n in fig.layout if n.startswith("yaxis")]:
        fig.layout[name].update(scaleanchor=f"x{name[5:]}", constrain="domain", autorange="reversed", visible=False)
    fig.update_xaxes(constrain="domain", visible=False)


def diverging_rgb(values: np.ndarray) -> np.ndarray:
    """Map values in [-1, 1] to RGB in [0, 1]: blue (negative), white (0), red (positive)."""
    v = np.clip(values, -1, 1)[..., None]
    white, red, blue = np.ones(3), np.array([0.70, 0.09, 0.17]), np.array([0.13, 0.40, 0.67])
    return np.where(v >= 0, white + v * (red - white), white - v * (blue - white))


def filter_rgb(filt: np.ndarray) -> np.ndarray:
    """One filter (C, kh, kw) as an (kh, kw, 3) image in [0, 1], symmetric around 0.

    Three channels are shown as colour (0 -> grey 0.5); any other count as a blue-white-red map of the
    channel mean.
    """
    scale = float(np.abs(filt).max()) or 1.0
    if filt.shape[0] == 3:
        return np.transpose(0.5 + 0.5 * filt / scale, (1, 2, 0))
    return diverging_rgb(filt.mean(axis=0) / (float(np.abs(filt.mean(axis=0)).max()) or 1.0))


def tile_mosaic(filters: np.ndarray, ncols: int | None = None, pad: int = 1, upsample: int = 1) -> np.ndarray:
    """Filters (N, C, kh, kw) -> one (H, W, 3) uint8 mosaic, each tile normalized on its own, white gaps."""
    filters = np.asarray(filters, dtype=np.float64)
    n, _, kh, kw = filters.shape
    ncols = ncols or int(np.ceil(np.sqrt(n)))
    nrows = int(np.ceil(n / ncols))
    th, tw = kh * upsample, kw * upsample
    mosaic = np.ones((nrows * (th + pad) + pad, ncols * (tw + pad) + pad, 3))
    for i, filt in enumerate(filters):
        r, c = divmod(i, ncols)
        tile = np.kron(filter_rgb(filt), np.ones((upsample, upsample, 1)))
        mosaic[pad + r * (th + pad): pad + r * (th + pad) + th, pad + c * (tw + pad): pad + c * (tw + pad) + tw] = tile
    return (np.clip(mosaic, 0, 1) * 255).round().astype(np.uint8)


def tiles_figure(filters: np.ndarray, title: str, ncols: int | None = None, height: int = 360) -> go.Figure:
    """A figure showing filters as image tiles (upsampled so small kernels stay visible)."""
    kernel = max(filters.shape[-2:])
    upsample = max(1, 24 // kernel)
    fig = go.Figure(go.Image(z=tile_mosaic(filters, ncols=ncols, upsample=upsample), hoverinfo="skip"))
    fig.update_layout(title=title, height=height, margin=dict(l=10, r=10, t=40, b=10))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def heatmap_figure(matrix: np.ndarray, labels: Sequence[str], title: str, zmin: float = -1.0, zmax: float = 1.0,
                   colorscale: str = "RdBu_r") -> go.Figure:
    """An annotated square heatmap (e.g. a correlation matrix); NaN cells are left blank."""
    text = [["" if not np.isfinite(v) else f"{v:.2f}" for v in row] for row in matrix]
    fig = go.Figure(go.Heatmap(z=matrix, x=list(labels), y=list(labels), zmin=zmin, zmax=zmax,
                               colorscale=colorscale, text=text, texttemplate="%{text}",
                               hovertemplate="%{y}<br>%{x}<br>r = %{z:.3f}<extra></extra>"))
    fig.update_layout(title=title, height=max(300, 80 + 60 * len(labels)), margin=dict(l=10, r=10, t=40, b=10))
    fig.update_yaxes(autorange="reversed")
    return fig


def figure_html(fig: go.Figure) -> str:
    """A self-contained HTML file of a figure (plotly.js inlined, works offline)."""
    return fig.to_html(include_plotlyjs=True, full_html=True)
