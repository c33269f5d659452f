"""Figures of the whitening analysis (:class:`~fl_core.whitening.WhiteningResult`) and activation maps."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from fl_core.plots import REFERENCE_COLORS, color
from fl_core.whitening import WhiteningResult

REFERENCE_NAMES = {"rgb": "RGB input", "random": "random-init filters", "zca": "ideal ZCA whitening bank"}


def autocorrelation_figure(result: WhiteningResult) -> go.Figure:
    """C(δ)/C(0) against distance for RGB, random init (± sd), ZCA and each model's learned filters."""
    fig = go.Figure()
    d = result.distances
    mean, sd = result.curves["random"], result.curves_sd["random"]
    fig.add_trace(go.Scatter(x=np.r_[d, d[::-1]], y=np.r_[mean + sd, (mean - sd)[::-1]], fill="toself",
                             line=dict(width=0), fillcolor="rgba(150,150,150,0.25)", hoverinfo="skip",
                             name=f"random init ± sd ({len(result.seeds)} seeds)"))
    for name, dash in (("rgb", "solid"), ("random", "dot"), ("zca", "dash")):
        fig.add_trace(go.Scatter(x=d, y=result.curves[name], mode="lines", name=REFERENCE_NAMES[name],
                                 line=dict(color=REFERENCE_COLORS[name], dash=dash)))
    for i, (spec, label) in enumerate(result.labels.items()):
        fig.add_trace(go.Scatter(x=d, y=result.curves[spec], mode="lines+markers", marker=dict(size=5),
                                 name=f"learned: {label}", line=dict(color=color(i))))
    fig.update_layout(title="Spatial autocorrelation of the first-layer responses",
                      xaxis_title="distance δ (pixels)", yaxis_title="C(δ) / C(0)", height=460,
                      legend=dict(orientation="h", y=-0.2), margin=dict(l=10, r=10, t=50, b=10))
    return fig


def activation_maps_figure(image: np.ndarray, maps: np.ndarray, title: str, count: int = 16) -> go.Figure:
    """The input image and the first ``count`` linear response maps (K, H, W), each on its own symmetric scale."""
    count = min(count, len(maps))
    cols = min(count + 1, 6)
    rows = int(np.ceil((count + 1) / cols))
    fig = make_subplots(rows=rows, cols=cols, horizontal_spacing=0.01, vertical_spacing=0.03,
                        subplot_titles=["input", *[f"filter {k}" for k in range(count)]])
    fig.add_trace(go.Image(z=image), row=1, col=1)
    for k in range(count):
        r, c = divmod(k + 1, cols)
        limit = float(np.abs(maps[k]).max()) or 1.0
        fig.add_trace(go.Heatmap(z=maps[k], colorscale="RdBu_r", zmin=-limit, zmax=limit, showscale=False,
                                 hovertemplate="%{z:.3f}<extra></extra>"), row=r + 1, col=c + 1)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False, autorange="reversed")
    fig.update_layout(title=title, height=180 * rows + 60, margin=dict(l=10, r=10, t=60, b=10))
    return fig
