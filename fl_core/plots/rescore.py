"""Figures of swaps and re-scoring (:class:`~fl_core.swap.FilterSwap`, :class:`~fl_core.evaluate.RescoreResult`)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from fl_core.evaluate import RescoreResult
from fl_core.plots import REFERENCE_COLORS, color
from fl_core.swap import FilterSwap


def scores_figure(result: RescoreResult) -> go.Figure:
    """Top-1 and top-5 of the original and every swap (labelled images), else top-1 agreement with the original."""
    frame = result.to_frame()
    labelled = result.top1 is not None
    fig = go.Figure()
    if labelled:
        fig.add_trace(go.Bar(x=frame["method"], y=frame["top1"], name="top-1", marker_color=color(0),
                             text=[f"{v:.1%}" for v in frame["top1"]], textposition="outside"))
        fig.add_trace(go.Bar(x=frame["method"], y=frame["top5"], name="top-5", marker_color=color(2),
                             opacity=0.6))
        fig.add_hline(y=result.top1, line=dict(color=REFERENCE_COLORS["rgb"], dash="dot"),
                      annotation_text=f"original top-1 {result.top1:.1%}")
        title, axis = f"Accuracy on {result.n_images} images, original vs swapped filters", "accuracy"
    else:
        fig.add_trace(go.Bar(x=frame["method"], y=frame["agreement"], name="agreement", marker_color=color(0),
                             text=[f"{v:.0%}" for v in frame["agreement"]], textposition="outside"))
        title, axis = (f"Same top-1 class as the original model ({result.n_images} unlabelled images)",
                       "top-1 agreement")
    fig.update_layout(title=title, yaxis_title=axis, yaxis_tickformat=".0%", yaxis_range=[0, 1.08], barmode="group",
                      height=420, margin=dict(l=10, r=10, t=50, b=10), legend=dict(orientation="h", y=-0.2))
    return fig


def reconstruction_figure(swaps: Sequence[FilterSwap]) -> go.Figure:
    """Per-layer relative reconstruction error ‖W − Ŵ‖/‖W‖ of each swap, layers in forward order."""
    fig = go.Figure()
    for i, swap in enumerate(swaps):
        fig.add_trace(go.Scatter(x=[layer.layer for layer in swap.layers],
                                 y=[layer.relative_error for layer in swap.layers], mode="lines+markers",
                                 name=f"{swap.replacement} (all: {swap.relative_error:.2f})",
                                 line=dict(color=color(i)),
                                 hovertemplate="%{x}<br>‖W−Ŵ‖/‖W‖ = %{y:.3f}<extra>" + swap.replacement + "</extra>"))
    fig.update_layout(title="How much each layer's filters change (depthwise layers in forward order)",
                      yaxis_title="relative error ‖W − Ŵ‖ / ‖W‖", height=400, margin=dict(l=10, r=10, t=50, b=10),
                      legend=dict(orientation="h", y=-0.35))
    return fig
