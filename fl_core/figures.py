"""Figures as pure functions of results (plotly ``go.Figure``): testable without a browser, reusable in reports.

This module holds the pieces every family of figures shares: the layout rule for a 1024×768 projector
(:func:`readable`, which every figure function ends in), log axes with readable ticks (:func:`log_axis`), filter tiles
and one filter zoomed, heatmaps, the palette, HTML export.
Each family holds its own figures beside its analyses (``fl_core.firstlayer.plots``, ``fl_core.masterkeys.plots``, ...
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike
from plotly.subplots import make_subplots

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22")
REFERENCE_COLORS = {"rgb": "#444444", "zca": "#000000", "random": "#999999", "theory": "#000000"}

TEXT_COLOR = "#31333f"
"""Every text of a figure (titles, tick labels, legend, annotations): Streamlit's text colour, 12.6:1 on the white
figure background (WCAG AA asks 4.5:1; the dashboard's own chart theme wrote ticks in #808495, 3.7:1)."""
TICK_FONT_PX = 14
"""Tick labels, legend entries, annotations and hover text: legible from the back of a classroom."""
AXIS_TITLE_PX = 16
TITLE_PX = 18
"""Axis and colour-bar titles, and the figure's title."""
FIGURE_BACKGROUND = "white"
"""Behind the text, in the dashboard (whose chart theme draws on a transparent paper) and in files."""

NARROW_FIGURE_PX = 560
"""The narrowest a figure is drawn: the page's width on a 1024×768 projector with the sidebar open (measured in
Chromium: 564 px). Titles wrap, legends and tiles are sized for it; a wider screen only adds room."""
TITLE_CHARS = 54
"""Characters of a title line (:data:`TITLE_PX` font) on a :data:`NARROW_FIGURE_PX` figure."""
TITLE_LINE_PX = 26
TOOLBAR_PX = 32
"""Height above a figure's title kept free for plotly's toolbar, which appears at the figure's top right on hover
(over the end of a title drawn at the top)."""
LEGEND_ROW_PX = 26
LEGEND_CHAR_PX = 8.4
LEGEND_SYMBOL_PX = 50
TICK_CHAR_PX = 8.2
"""Estimated widths (:data:`TICK_FONT_PX` font) from which :func:`readable` sizes legends and tick labels, rounded
up."""
LEGEND_FREE = ("heatmap", "image", "contour", "surface")
"""Trace types plotly leaves out of the legend unless asked."""
MIN_TILE_PX = 48
"""Filter tiles are at least this wide on a :data:`NARROW_FIGURE_PX` figure: a 3×3 kernel's weights are 16-px
squares."""
TILE_GAP = 0.15
"""Gap between tiles, as a fraction of a tile."""
HEATMAP_TILE_CELLS = 10
"""Cells per tile side, at least, of a heatmap mosaic (a kernel's weights subdivided, so the gaps can be thin)."""
COLORBAR_PX = 80
"""Width a vertical colour bar takes beside tiles."""
PICTURE_MARGIN_PX = 10
"""Margin on each side of a picture of tiles or cells."""
TILE_FIGURE_MARGIN_PX = 70
"""Height a tile figure adds to its picture (title and margins, before :func:`readable` wraps the title)."""
CELL_TEXT_PX = 11
"""Font size of the numbers written in heatmap cells."""
DIGIT_PX, POINT_PX = 6.0, 3.0
"""Widths of a digit and of a point or minus sign in a cell's number (:data:`CELL_TEXT_PX` font), rounded up."""
CELL_PADDING_PX = 4
"""A cell holds its number when it is at least as wide as the number and this padding."""
MAX_CELL_PX = 48
"""The largest a zoomed filter's cells are drawn (a 3×3 kernel need not fill the page)."""
MAX_ZOOM_ROWS = 2
"""Rows of channel panels of a zoomed filter, at most: more channels than fit share a row at a smaller size."""


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
    if not high > low:  # one value (a run cancelled after its first snapshot): a tick on it
        return [low]
    step = _nice_step(high - low, MIN_LOG_TICKS)
    return [float(f"{k * step:.12g}") for k in range(int(np.floor(low / step)), int(np.ceil(high / step)) + 1)
            if k > 0]


def log_axis(values: ArrayLike, **axis: object) -> dict:
    """Layout of a log axis for ``values`` (its data, or its fixed bounds; non-positive and non-finite ones ignored):
    ``type="log"`` with explicit :func:`log_ticks` labelled by :func:`log_tick_text` — plotly's own log ticks label
    the 2s and 5s between decades with bare digits ("5 2 1 5 2 0.1"); of the ticks outside the values only the nearest
    on each side are kept (a whole decade of unseen 1…9 ticks turned the labels to 45°). ``axis`` adds further axis
    properties.

    Use it for every log axis: ``fig.update_yaxes(**log_axis(y))``.
    """
    values = np.asarray(values, dtype=float).ravel()
    shown = values[np.isfinite(values) & (values > 0)]
    low, high = (float(shown.min()), float(shown.max())) if shown.size else (1.0, 10.0)
    ticks = log_ticks(low, high)
    ticks = [t for t in ticks if t < low][-1:] + [t for t in ticks if low <= t <= high] + [t for t in ticks
                                                                                           if t > high][:1]
    return dict(type="log", tickmode="array", tickvals=ticks, ticktext=[log_tick_text(t) for t in ticks], **axis)


def title_lines(text: str, chars: int = TITLE_CHARS) -> list[str]:
    """A title as lines of at most ``chars`` characters (its own ``<br>`` breaks kept), broken between words only
    ("held-out" stays whole): plotly cuts a long title at the figure's edge instead of wrapping it."""
    return [line for part in text.split("<br>")
            for line in (textwrap.wrap(part, chars, break_on_hyphens=False, break_long_words=False) or [""])]


def legend_entries(fig: go.Figure) -> list[str]:
    """The names plotly lists in the figure's legend (none when it draws no legend)."""
    names = [trace.name or "" for trace in fig.data if trace.type not in ("image",) and (
        trace.showlegend is True or (trace.showlegend is None and trace.type not in LEGEND_FREE))]
    shown = fig.layout.showlegend is True or (fig.layout.showlegend is None and len(names) >= 2)
    return names if shown else []


def legend_px(fig: go.Figure, width: int = NARROW_FIGURE_PX) -> int:
    """Height of the figure's horizontal legend in ``width`` pixels: plotly wraps a legend that does not fit on one
    row into columns as wide as its widest entry; legend groups add a gap."""
    names = legend_entries(fig)
    if not names:
        return 0
    widths = [LEGEND_SYMBOL_PX + LEGEND_CHAR_PX * len(name) for name in names]
    columns = len(names) if sum(widths) <= width else max(1, int(width // max(widths)))
    groups = len({trace.legendgroup for trace in fig.data if trace.legendgroup})
    return math.ceil(len(names) / columns) * LEGEND_ROW_PX + 10 * max(groups - 1, 0) + 10


def x_axis_px(fig: go.Figure, width: int = NARROW_FIGURE_PX) -> int:
    """Height below the plot that the x axes' tick labels and title take. Category labels that do not fit side by
    side in ``width`` are turned to 45° (set here, so the estimate holds whatever plotly would choose)."""
    shown = [axis for name, axis in fig.layout.to_plotly_json().items() if name.startswith("xaxis")
             and axis.get("visible", True) and axis.get("showticklabels", True)]
    if fig.data and not shown and not any(name.startswith("xaxis") for name in fig.layout.to_plotly_json()):
        shown = [{}]
    if not shown:
        return 0
    categories = {str(v) for trace in fig.data if trace.type not in LEGEND_FREE and trace.x is not None
                  for v in trace.x if isinstance(v, str)} | {str(v) for axis in shown for v in axis.get("ticktext", ())}
    longest = max(map(len, categories), default=4)
    angle = max((abs(axis.get("tickangle", 0) or 0) for axis in shown), default=0)
    if not angle and categories and len(categories) * (longest + 1) * TICK_CHAR_PX > width:
        angle = 45
        fig.update_xaxes(tickangle=-45)
    ticks = 24 + longest * TICK_CHAR_PX * math.sin(math.radians(angle))
    titled = any((axis.get("title") or {}).get("text") for axis in shown)
    return round(ticks + (30 if titled else 0) + 6)


def subplot_titles_px(fig: go.Figure) -> int:
    """Height the top row's subplot titles (annotations at the top of the plot area) take above it."""
    top = [a for a in fig.layout.annotations if a.yref == "paper" and (a.y or 0) >= 0.98 and a.yanchor == "bottom"]
    return max((((a.text or "").count("<br>") + 1) * round(1.35 * (a.font.size or 16)) for a in top), default=0)


def projector_theme(fig: go.Figure) -> go.Figure:
    """The one figure theme, for the dashboard and the report alike: every text in :data:`TEXT_COLOR` on a
    :data:`FIGURE_BACKGROUND` figure, tick labels, legend and annotations at :data:`TICK_FONT_PX`, axis and colour-bar
    titles at :data:`AXIS_TITLE_PX`, the title at :data:`TITLE_PX`. Set on the figure itself, so it wins over any
    template (the dashboard's chart theme, plotly's for files)."""
    text = dict(color=TEXT_COLOR)
    fig.update_layout(font=dict(size=TICK_FONT_PX, **text), title_font=dict(size=TITLE_PX, **text),
                      legend_font=dict(size=TICK_FONT_PX, **text), hoverlabel_font_size=TICK_FONT_PX,
                      paper_bgcolor=FIGURE_BACKGROUND)
    axis = dict(tickfont=dict(size=TICK_FONT_PX, **text), title_font=dict(size=AXIS_TITLE_PX, **text))
    fig.update_xaxes(**axis)
    fig.update_yaxes(**axis)
    fig.update_annotations(font_color=TEXT_COLOR)
    fig.for_each_annotation(lambda note: note.update(font_size=max(note.font.size or 0, TICK_FONT_PX)))
    bar = dict(tickfont=dict(size=TICK_FONT_PX, **text), title_font=dict(size=AXIS_TITLE_PX, **text))
    fig.for_each_trace(lambda trace: trace.update(colorbar=bar), selector=lambda trace: "colorbar" in trace)
    fig.for_each_trace(lambda trace: trace.update(marker_colorbar=bar),
                       selector=lambda trace: "marker" in trace and "showscale" in trace.marker
                       and bool(trace.marker.showscale))  # a box's or a violin's marker has no colour scale
    return fig


def readable(fig: go.Figure, width: int = NARROW_FIGURE_PX) -> go.Figure:
    """Lay ``fig`` out for a ``width``-px projector column (default: the page) in the :func:`projector_theme` and
    return it: the title wrapped into
    :func:`title_lines` at the top, below the room plotly's toolbar takes on hover (:data:`TOOLBAR_PX`), the legend
    horizontal below the x axis' labels and title (above the plot when a slider or buttons sit below it), and the
    figure made taller by what these need, so that the plot area keeps the height the figure asked for (its height
    less its margins) however many models the legend lists.

    Every figure function ends with it; applying it twice changes nothing.
    """
    projector_theme(fig)
    layout = fig.layout
    top, bottom = (layout.margin.t if layout.margin.t is not None else 100,
                   layout.margin.b if layout.margin.b is not None else 80)
    plot_px = max((layout.height or 450) - top - bottom, 100)
    lines = title_lines(layout.title.text or "", TITLE_CHARS * width // NARROW_FIGURE_PX)
    title_px = (TITLE_LINE_PX * len(lines) + TOOLBAR_PX + 10 if any(lines) else 10) + subplot_titles_px(fig)
    entries_px = legend_px(fig, width)
    if layout.sliders or layout.updatemenus:
        top = title_px + entries_px
        height = top + plot_px + bottom
        legend_top = height - title_px + subplot_titles_px(fig)
    else:
        axis_px = x_axis_px(fig, width)
        top, bottom = title_px, max(axis_px + entries_px + 10, 10)
        height = top + plot_px + bottom
        legend_top = bottom - axis_px
    fig.update_layout(title=dict(text="<br>".join(lines), y=1, yref="container", yanchor="top",
                                 pad=dict(t=TOOLBAR_PX)),
                      height=height, margin=dict(t=top, b=bottom))
    if entries_px:  # placed in pixels from the figure's bottom: a legend taller than estimated never shrinks the plot
        fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", yref="container", y=legend_top / height,
                                      yanchor="top"))
    return fig


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


def _mosaic(tiles: np.ndarray, ncols: int, pad: int, fill: float) -> np.ndarray:
    """Tiles (N, th, tw, D) placed row by row in ``ncols`` columns with ``pad`` pixels of ``fill`` around each."""
    n, th, tw, depth = tiles.shape
    nrows = int(np.ceil(n / ncols))
    mosaic = np.full((nrows * (th + pad) + pad, ncols * (tw + pad) + pad, depth), fill, dtype=np.float64)
    for i, tile in enumerate(tiles):
        r, c = divmod(i, ncols)
        mosaic[pad + r * (th + pad): pad + r * (th + pad) + th, pad + c * (tw + pad): pad + c * (tw + pad) + tw] = tile
    return mosaic


def _upsampled(tiles: np.ndarray, upsample: int) -> np.ndarray:
    return np.kron(tiles, np.ones((1, upsample, upsample, 1)))


def tile_mosaic(filters: np.ndarray, ncols: int | None = None, pad: int = 1, upsample: int = 1) -> np.ndarray:
    """Filters (N, C, kh, kw) -> one (H, W, 3) uint8 mosaic (:func:`filter_rgb` of each, so each tile is normalized
    on its own), white gaps of ``pad`` pixels."""
    filters = np.asarray(filters, dtype=np.float64)
    ncols = ncols or int(np.ceil(np.sqrt(len(filters))))
    tiles = _upsampled(np.stack([filter_rgb(f) for f in filters]), upsample)
    return (np.clip(_mosaic(tiles, ncols, pad, 1.0), 0, 1) * 255).round().astype(np.uint8)


def tile_values(filters: np.ndarray, ncols: int, pad: int = 1, upsample: int = 1) -> np.ndarray:
    """Filters (N, C, kh, kw) -> one (H, W) float mosaic of each filter's channel mean divided by its largest
    |value| (so in [-1, 1]), NaN in the gaps (drawn blank by a heatmap)."""
    means = np.asarray(filters, dtype=np.float64).mean(axis=1)
    scale = np.abs(means).reshape(len(means), -1).max(axis=1)
    tiles = _upsampled((means / np.where(scale > 0, scale, 1.0)[:, None, None])[..., None], upsample)
    return _mosaic(tiles, ncols, pad, np.nan)[..., 0]


def tile_columns(count: int, width: int = NARROW_FIGURE_PX) -> int:
    """How many tiles of at least :data:`MIN_TILE_PX` (and their gaps) fit side by side in a ``width``-px figure (its
    picture: ``width`` less the margins)."""
    return int(min(count, max(1, (width - 2 * PICTURE_MARGIN_PX) // (MIN_TILE_PX * (1 + TILE_GAP)))))


def picture_extent(fig: go.Figure, height: int, width: int) -> None:
    """Axes of a one-picture figure spanning exactly its ``height`` × ``width`` pixels (row 0 at the top): plotly pads
    an axis for the markers of a scatter drawn over the picture, which shrank the tiles by the markers' size."""
    fig.update_xaxes(range=[-0.5, width - 0.5], autorange=False)
    fig.update_yaxes(range=[height - 0.5, -0.5], autorange=False)


def tiles_figure(filters: np.ndarray, title: str, ncols: int | None = None, labels: Sequence[str] | None = None,
                 width: int = NARROW_FIGURE_PX) -> go.Figure:
    """Filters (N, C, kh, kw) as a grid of tiles at least :data:`MIN_TILE_PX` wide on a ``width``-px figure, with
    gaps of :data:`TILE_GAP` of a tile, each normalized to its own largest |w|: 3-channel filters as colour
    (:func:`filter_rgb`, grey = 0), others as their channel mean in blue-white-red with a colour bar
    (:func:`tile_values`). Hovering a tile names it (``labels``, default "filter i"); tiles run row by row."""
    filters = np.asarray(filters, dtype=np.float64)
    n, channels, kh, kw = filters.shape
    rgb = channels == 3
    shown = width - (0 if rgb else COLORBAR_PX)
    ncols = ncols or tile_columns(n, shown)
    upsample = int(np.ceil(MIN_TILE_PX / max(kh, kw))) if rgb else int(np.ceil(HEATMAP_TILE_CELLS / max(kh, kw)))
    pad = max(1, round(TILE_GAP * max(kh, kw) * upsample))
    if rgb:
        mosaic = tile_mosaic(filters, ncols=ncols, pad=pad, upsample=upsample)
        picture = go.Image(z=mosaic, hoverinfo="skip")
    else:
        mosaic = tile_values(filters, ncols, pad, upsample)
        picture = go.Heatmap(z=mosaic, zmin=-1, zmax=1, colorscale="RdBu_r", hoverinfo="skip",
                             colorbar=dict(title=dict(text="w / max |w|", side="right"), thickness=12))
    th, tw = kh * upsample, kw * upsample
    rows, cols = np.divmod(np.arange(n), ncols)
    names = list(labels) if labels is not None else [f"filter {i}" for i in range(n)]
    centres = go.Scatter(x=pad + cols * (tw + pad) + (tw - 1) / 2, y=pad + rows * (th + pad) + (th - 1) / 2,
                         mode="markers", marker=dict(size=max(tw, th), opacity=0, symbol="square"), text=names,
                         hovertemplate="%{text}<extra></extra>", showlegend=False)
    fig = go.Figure([picture, centres])
    square_pixels(fig)
    picture_extent(fig, *mosaic.shape[:2])
    picture_px = shown - 2 * PICTURE_MARGIN_PX
    fig.update_layout(title=title, height=round(TILE_FIGURE_MARGIN_PX + picture_px * mosaic.shape[0] / mosaic.shape[1]),
                      margin=dict(l=PICTURE_MARGIN_PX, r=PICTURE_MARGIN_PX, t=50, b=10), plot_bgcolor="white")
    return readable(fig, width)


def cell_text(values: np.ndarray, bound: float) -> np.ndarray:
    """Weights as the numbers written in their cells: two significant digits of the largest |value| ``bound``
    (``0.52``, ``-0.087``, ``13``; a value that rounds to zero is ``0.00``)."""
    decimals = int(np.clip(1 - np.floor(np.log10(bound)), 0, 4)) if bound > 0 else 2
    return np.vectorize(lambda v: f"{v:.{decimals}f}")(np.round(values, decimals) + 0.0)  # + 0.0: no "-0.00"


def cell_text_px(text: np.ndarray) -> float:
    """The width a cell needs to hold the longest of ``text``."""
    return max((sum(POINT_PX if ch in ".-" else DIGIT_PX for ch in t) for t in np.ravel(text)),
               default=0) + CELL_PADDING_PX


def zoom_columns(channels: int, side: int, text_px: float, width: float) -> int:
    """Channel panels per row of a zoomed filter: as many as keep ``side`` cells wide enough for their numbers
    (``text_px``) in ``width`` pixels, and at least enough for :data:`MAX_ZOOM_ROWS` rows."""
    fitting = int(width // (side * text_px))
    return int(min(channels, max(fitting, 1, math.ceil(channels / MAX_ZOOM_ROWS))))


def filter_zoom_figure(filt: np.ndarray, title: str, width: int = NARROW_FIGURE_PX) -> go.Figure:
    """One filter (C, kh, kw) large on a ``width``-px figure: each channel as a heatmap of its weights (R, G, B for
    colour filters; at most 8 channels) on one symmetric colour scale with its colour bar (weights as stored), the
    panels in rows of as many as keep the cells wide enough to hold their numbers (:func:`zoom_columns`, at most
    :data:`MAX_CELL_PX`), which are written in the cells when they fit."""
    filt = np.asarray(filt, dtype=np.float64)
    names = ["red", "green", "blue"] if len(filt) == 3 else [f"channel {c}" for c in range(len(filt))] if len(
        filt) > 1 else [""]
    shown = filt[:8]
    bound = float(np.abs(shown).max()) or 1.0
    text = cell_text(shown, bound)
    side = max(filt.shape[-2:])
    room = width - COLORBAR_PX - 2 * PICTURE_MARGIN_PX
    columns = zoom_columns(len(shown), side, cell_text_px(text), room)
    rows = math.ceil(len(shown) / columns)
    panel_px = min(room / columns, side * MAX_CELL_PX)
    write = panel_px / side >= cell_text_px(text)
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=names[:8], horizontal_spacing=0.03,
                        vertical_spacing=0.08 / rows)
    for c, channel in enumerate(shown):
        fig.add_trace(go.Heatmap(z=channel, zmin=-bound, zmax=bound, colorscale="RdBu_r", showscale=c == 0,
                                 colorbar=dict(title=dict(text="weight", side="right"), thickness=12),
                                 text=text[c] if write else None, texttemplate="%{text}" if write else None,
                                 textfont=dict(size=CELL_TEXT_PX),
                                 hovertemplate="row %{y}, col %{x}: %{z:.4f}<extra>" + names[c] + "</extra>"),
                      row=c // columns + 1, col=c % columns + 1)
    square_pixels(fig)
    fig.update_layout(title=title, height=round(TILE_FIGURE_MARGIN_PX + rows * (panel_px * filt.shape[-2] / side + 30)),
                      margin=dict(l=PICTURE_MARGIN_PX, r=PICTURE_MARGIN_PX, t=60, b=10), plot_bgcolor="white")
    return readable(fig, width)


def heatmap_figure(matrix: np.ndarray, labels: Sequence[str], title: str, zmin: float = -1.0, zmax: float = 1.0,
                   colorscale: str = "RdBu_r", width: int = NARROW_FIGURE_PX) -> go.Figure:
    """An annotated square heatmap (e.g. a correlation matrix) on a ``width``-px figure: each cell's value written in
    it at :data:`CELL_TEXT_PX` when the cells, beside the row labels and the colour bar, are wide enough to hold it
    (else on hover only); NaN cells are left blank."""
    text = np.array([["" if not np.isfinite(v) else f"{v:.2f}" for v in row] for row in matrix], dtype=object)
    label_px = TICK_CHAR_PX * max(map(len, labels), default=0)
    cell_px = (width - label_px - COLORBAR_PX) / max(len(labels), 1)
    write = cell_px >= cell_text_px(text)
    turned = label_px if label_px > cell_px else 0  # x labels wider than their cells turn and take their length below
    fig = go.Figure(go.Heatmap(z=matrix, x=list(labels), y=list(labels), zmin=zmin, zmax=zmax,
                               colorscale=colorscale, text=text.tolist() if write else None,
                               texttemplate="%{text}" if write else None, textfont=dict(size=CELL_TEXT_PX),
                               hovertemplate="%{y}<br>%{x}<br>r = %{z:.3f}<extra></extra>"))
    fig.update_layout(title=title, height=max(300, 80 + 60 * len(labels)) + turned,
                      margin=dict(l=10, r=10, t=40, b=10))
    fig.update_yaxes(autorange="reversed")
    return readable(fig, width)


def count_axis(largest: float) -> dict:
    """Layout of an axis of counts up to ``largest``: whole numbers from 0 in 1-2-5 steps of at least 1 (plotly's own
    ticks on a small range wrote 0.2, 0.4, ... as "0 0 0 1 1 1" under an integer format)."""
    step = max(1.0, _nice_step(max(float(largest), 1.0), 4))
    return dict(tickmode="linear", tick0=0, dtick=step, rangemode="tozero", tickformat="d")


EXPORT_TEMPLATE = "plotly"
"""The look of a figure saved as a file of its own. Importing Streamlit makes its own template plotly's default, so a
figure built in the dashboard carries it: colours the app replaces in the browser and no automargin, which cut the
y tick labels at the left edge of every exported figure (".5", "02") under their axis title."""


def standalone(fig: go.Figure) -> go.Figure:
    """A copy of ``fig`` in :data:`EXPORT_TEMPLATE`, whatever template it was built with: for files and reports."""
    copy = go.Figure(fig)
    copy.layout.template = EXPORT_TEMPLATE
    return copy


def figure_html(fig: go.Figure) -> str:
    """A self-contained HTML file of a figure (:func:`standalone`, plotly.js inlined, works offline)."""
    return standalone(fig).to_html(include_plotlyjs=True, full_html=True)
