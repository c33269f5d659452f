"""Figures of swaps and re-scoring (:class:`~fl_core.swap.FilterSwap`, :class:`~fl_core.evaluate.RescoreResult`,
:class:`~fl_core.layersweep.LayerSweepResult`)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from fl_core.evaluate import RescoreResult
from fl_core.layersweep import LayerSweepResult
from fl_core.plots import REFERENCE_COLORS, color
from fl_core.swap import FilterSwap


def _percent_labels(values, digits: int = 1) -> list[str]:
    return ["" if v is None or v != v else f"{v:.{digits}%}" for v in values]


def scores_figure(result: RescoreResult) -> go.Figure:
    """Top-1 and top-5 of the original and every swap (labelled images), else top-1 agreement with the original;
    after recovery, each swap's recovered top-1 (agreement) beside it."""
    frame = result.to_frame()
    labelled = result.top1 is not None
    held_out = " held-out" if result.recovery is not None else ""
    fig = go.Figure()
    if labelled:
        fig.add_trace(go.Bar(x=frame["method"], y=frame["top1"], name="top-1", marker_color=color(0),
                             text=_percent_labels(frame["top1"]), textposition="outside"))
        if result.recovery is not None:
            fig.add_trace(go.Bar(x=frame["method"], y=frame["recovered_top1"], name="top-1 after recovery",
                                 marker_color=color(4), text=_percent_labels(frame["recovered_top1"]),
                                 textposition="outside"))
        fig.add_trace(go.Bar(x=frame["method"], y=frame["top5"], name="top-5", marker_color=color(2),
                             opacity=0.6))
        fig.add_hline(y=result.top1, line=dict(color=REFERENCE_COLORS["rgb"], dash="dot"),
                      annotation_text=f"original top-1 {result.top1:.1%}")
        title, axis = f"Accuracy on {result.n_images}{held_out} images, original vs swapped filters", "accuracy"
    else:
        fig.add_trace(go.Bar(x=frame["method"], y=frame["agreement"], name="agreement", marker_color=color(0),
                             text=_percent_labels(frame["agreement"], 0), textposition="outside"))
        if result.recovery is not None:
            fig.add_trace(go.Bar(x=frame["method"], y=frame["recovered_agreement"], name="agreement after recovery",
                                 marker_color=color(4), text=_percent_labels(frame["recovered_agreement"], 0),
                                 textposition="outside"))
        title, axis = (f"Same top-1 class as the original model ({result.n_images}{held_out} unlabelled images)",
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


def layer_sweep_figure(sweep: LayerSweepResult) -> go.Figure:
    """How much of this network is theory: per depthwise layer (forward order), the top-1 (else the agreement with
    the original) with only that layer zeroed, only that layer swapped, and swapped then recovered."""
    frame = sweep.to_frame()
    labelled = sweep.top1 is not None
    column = "top1" if labelled else "agreement"
    series = [("zeroed", "layer zeroed (lesion control)", REFERENCE_COLORS["random"]),
              ("swapped", f"layer swapped by {sweep.replacement}", color(0))]
    if sweep.recovery is not None:
        series.append(("swapped_recovered", f"swapped by {sweep.replacement}, recovered", color(4)))
    fig = go.Figure()
    for prefix, name, colour in series:
        fig.add_trace(go.Bar(x=frame["layer"], y=frame[f"{prefix}_{column}"], name=name, marker_color=colour,
                             customdata=frame["theory_share"],
                             hovertemplate="%{x}<br>%{y:.1%}<br>theory share %{customdata:.2f}<extra>" + name
                                           + "</extra>"))
    reference = sweep.top1 if labelled else 1.0
    fig.add_hline(y=reference, line=dict(color=REFERENCE_COLORS["rgb"], dash="dot"),
                  annotation_text=f"original {reference:.1%}" if labelled else "original (agreement 100 %)")
    what = f"top-1 on {sweep.n_images}{' held-out' if sweep.recovery else ''} images" if labelled else \
        f"same top-1 class as the original ({sweep.n_images} unlabelled images)"
    fig.update_layout(title=f"One depthwise layer at a time: {what}", yaxis_title="top-1" if labelled else
                      "top-1 agreement", yaxis_tickformat=".0%", yaxis_range=[0, 1.05], barmode="group", height=440,
                      margin=dict(l=10, r=10, t=50, b=10), legend=dict(orientation="h", y=-0.35))
    return fig
