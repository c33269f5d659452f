"""Figures of the filter norms (:class:`~fl_core.filternorms.analysis.FilterNormsResult`)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from fl_core.figures import color, log_axis, readable
from fl_core.filternorms.analysis import FilterNormsResult


def norms_figure(result: FilterNormsResult) -> go.Figure:
    """A box of filter norms per convolution, in forward order, on a log axis."""
    fig = go.Figure()
    for index, (layer, norms) in enumerate(zip(result.layers, result.norms)):
        fig.add_trace(go.Box(x=norms, name=layer, marker_color=color(index % 10), boxpoints=False,
                             showlegend=False))
    positive = np.concatenate(result.norms)
    fig.update_xaxes(title_text="filter norm ‖w‖", **log_axis(positive[positive > 0]))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_layout(title=f"{result.label}: filter norms per convolution",
                      height=max(320, 110 + 18 * len(result.layers)))
    return readable(fig)


def near_zero_figure(result: FilterNormsResult) -> go.Figure:
    """The share of near-zero filters of each convolution."""
    shares = [float(zero.mean()) for zero in result.near_zero()]
    fig = go.Figure(go.Bar(x=shares, y=list(result.layers), orientation="h", marker_color=color(1)))
    fig.update_xaxes(title_text=f"share of filters with ‖w‖ ≤ {result.zero_tol:g} · max", range=[0, 1])
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_layout(title=f"{result.label}: near-zero filters per convolution",
                      height=max(320, 110 + 18 * len(result.layers)))
    return readable(fig)
