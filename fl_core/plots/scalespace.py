"""Figures of the idealized scale-space models and their σ fits (:class:`~fl_core.scalefit.ScaleSpaceResult`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import plotly.graph_objects as go

from fl_core.plots import color
from fl_core.plots.masterkeys import KEY_NAMES, filter_grid_figure
from fl_core.scalefit import ScaleSpaceResult


def models_figure(models: np.ndarray, result: ScaleSpaceResult) -> go.Figure:
    """The 8 idealized models (rows top to bottom, y up) at the σ of one fitting method."""
    titles = [f"{KEY_NAMES[fit.index - 1]}<br>σ=({fit.sigma_x:.2f}, {fit.sigma_y:.2f})"
              + (f" α={fit.alpha:.2f}" if fit.alpha is not None else "") for fit in result.filters]
    size = models.shape[-1]
    return filter_grid_figure(models, titles, f"Idealized models, method {result.method}, {size}×{size}",
                              height=260)


def sigma_by_method_figure(results: Mapping[str, ScaleSpaceResult]) -> go.Figure:
    """σx (filled) and σy (open) of each master key for each fitting method."""
    fig = go.Figure()
    methods = list(results)
    for m, method in enumerate(methods):
        fits = results[method].filters
        offset = (m - (len(methods) - 1) / 2) * 0.1
        x = np.array([fit.index for fit in fits]) + offset
        hover = [f"filter {fit.index}" + (f", α = {fit.alpha:.3f}" if fit.alpha is not None else "") for fit in fits]
        for axis, symbol in (("x", "circle"), ("y", "circle-open")):
            fig.add_trace(go.Scatter(
                x=x, y=[getattr(fit, f"sigma_{axis}") for fit in fits], mode="markers", text=hover,
                name=f"{method} σ{axis}", legendgroup=method, marker=dict(color=color(m), symbol=symbol, size=9),
                hovertemplate="%{text}<br>σ" + axis + " = %{y:.3f}<extra>" + method + "</extra>"))
    fig.update_xaxes(tickvals=list(range(1, 9)), ticktext=list(KEY_NAMES), title="master key")
    fig.update_layout(title="Fitted scale σ of each master key, by method (filled: σx, open: σy)",
                      yaxis_title="σ (pixels)", height=440, margin=dict(l=10, r=10, t=50, b=10),
                      legend=dict(orientation="h", y=-0.25))
    return fig


def model_vs_learned_figure(learned: np.ndarray, model: np.ndarray, title: str) -> go.Figure:
    """The normalised learned filter, the model and their difference, on one shared colour scale."""
    return filter_grid_figure(np.stack([learned, model, learned - model]),
                              ["learned (normalised)", "model", "learned − model"], title, height=300,
                              shared_scale=True)


def cross_section_figure(learned: np.ndarray, model: np.ndarray) -> go.Figure:
    """Centre row (along x) and centre column (along y, upward) of the learned filter and the model."""
    centre = learned.shape[-1] // 2
    positions = np.arange(learned.shape[-1]) - centre
    fig = go.Figure()
    for name, filt, dash in (("learned", learned, "solid"), ("model", model, "dash")):
        fig.add_trace(go.Scatter(x=positions, y=filt[centre], mode="lines+markers", name=f"{name}, along x",
                                 line=dict(color=color(0), dash=dash)))
        fig.add_trace(go.Scatter(x=positions, y=filt[::-1, centre], mode="lines+markers", name=f"{name}, along y",
                                 line=dict(color=color(1), dash=dash)))
    fig.update_layout(title="Cross-sections through the centre", xaxis_title="x or y (pixels, y upward)",
                      yaxis_title="value (normalised)", height=340, margin=dict(l=10, r=10, t=50, b=10),
                      legend=dict(orientation="h", y=-0.25))
    return fig
