"""Figures as pure functions of results (plotly ``go.Figure``): testable without a browser, reusable in reports.

This module holds the pieces every family of figures shares: filter tiles, heatmaps, the palette, HTML export.
Each family holds its own figures beside its analyses (``fl_core.firstlayer.plots``, ``fl_core.masterkeys.plots``, ...
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22")
REFERENCE_COLORS = {"rgb": "#444444", "zca": "#000000", "random": "#999999", "theory": "#000000"}


def color(index: int) -> str:
    """The i-th series colour."""
    return PALETTE[index % len(PALETTE)]


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
