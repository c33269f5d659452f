"""Figures of the first-layer analyses: energy profiles (:class:`~fl_core.firstlayer.energy.EnergyResult`), whitening
curves (:class:`~fl_core.firstlayer.whitening.WhiteningResult`) and activation maps."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from fl_core.figures import (
    NARROW_FIGURE_PX,
    REFERENCE_COLORS,
    color,
    heatmap_figure,
    log_axis,
    readable,
    square_pixels,
    tiles_figure,
    trace_values,
)
from fl_core.firstlayer.energy import EnergyResult, ModelEnergy
from fl_core.firstlayer.whitening import REFERENCE_NAMES, WhiteningResult

ACTIVATION_MAPS_WIDTH = NARROW_FIGURE_PX
"""The width (px) activation-map figures are laid out for: their height follows the image's aspect ratio."""
LOG_FLOOR = 1e-3
"""On a log axis the fitted curve a + b·θ is drawn no lower than this (an affine map can reach 0 or below)."""


def profile_figure(result: EnergyResult, log_y: bool = True, show_theory: bool = True,
                   show_random: bool = True) -> go.Figure:
    """e_i against component index for every model, with each model's fitted theory (the least-squares affine map
    a + b·θ that its r measures; on a log axis clipped at :data:`LOG_FLOOR`, said in the legend when it is) and
    the random-init band."""
    fig = go.Figure()
    for i, m in enumerate(result.models):
        x = np.arange(1, len(m.profile) + 1)
        name = _legend_name(m)
        if show_random and i == 0:
            band = m.random_init
            lower = np.maximum(band.profile_mean - band.profile_sd, 1e-6)
            fig.add_trace(go.Scatter(x=np.r_[x, x[::-1]], y=np.r_[band.profile_mean + band.profile_sd, lower[::-1]],
                                     fill="toself", line=dict(width=0), fillcolor="rgba(150,150,150,0.25)",
                                     name=f"random init (mean ± sd, {len(band.seeds)} seeds)", hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=x, y=m.profile, mode="lines+markers", name=name, line=dict(color=color(i)),
                                 marker=dict(size=4),
                                 hovertemplate="component %{x}<br>e = %{y:.3f}<extra>" + m.label + "</extra>"))
        if show_theory:
            fig.add_trace(_theory_trace(m, x, color(i), log_y))
    fig.update_layout(title="Energy profile: RMS projection of the filters on each patch PCA component",
                      xaxis_title="PCA component (1 = largest variance, smoothest)",
                      yaxis_title="energy e_i (max-normalized)", height=460,
                      margin=dict(l=10, r=10, t=50, b=10))
    if log_y:
        fig.update_yaxes(**log_axis(trace_values(fig)))
    return readable(fig)


def _theory_trace(m: ModelEnergy, x: np.ndarray, line_color: str, log_y: bool) -> go.Scatter:
    """The dashed a + b·θ of one model, named with r and r on log values."""
    fit = m.theory.profile
    clipped = log_y and bool((fit < LOG_FLOOR).any())
    r_log = f"{m.theory.r_log:.2f}" if np.isfinite(m.theory.r_log) else "—"
    name = (f"theory fit {m.theory.affine.a:.2f} + {m.theory.affine.b:.2f}·θ to {m.label} (r = {m.theory.r:.2f}, "
            f"r on logs = {r_log})" + (f"; drawn at {LOG_FLOOR:g} where below" if clipped else ""))
    return go.Scatter(x=x, y=np.maximum(fit, LOG_FLOOR) if log_y else fit, mode="lines",
                      line=dict(color=line_color, dash="dash"), name=name, customdata=fit,
                      hovertemplate="component %{x}<br>a + b·θ = %{customdata:.3f}<extra></extra>")


def _legend_name(m: ModelEnergy) -> str:
    parts = [m.label]
    if m.init_subtracted:
        parts.append("minus init")
    if m.beyond_paper:
        parts.append(f"@ {m.layer} (beyond the paper)")
    return " ".join(parts)


def spectrum_figure(result: EnergyResult) -> go.Figure:
    """Patch standard deviation λ_i per component (the input statistics the theory is built from)."""
    fig = go.Figure(go.Scatter(x=np.arange(1, len(result.lambdas) + 1), y=result.lambdas, mode="lines+markers",
                               line=dict(color=REFERENCE_COLORS["rgb"]), name="λ_i"))
    fig.update_layout(title="Patch spectrum: standard deviation along each PCA component", height=300,
                      xaxis_title="PCA component", yaxis_title="λ_i (patch std)", margin=dict(l=10, r=10, t=50, b=10))
    fig.update_yaxes(**log_axis(result.lambdas))
    return readable(fig)


def correlation_figure(result: EnergyResult) -> go.Figure:
    """Pearson correlation between the models' energy profiles."""
    return heatmap_figure(result.correlation, [m.label for m in result.models],
                          "Profile correlation between models (Pearson r)")


def components_figure(result: EnergyResult, key: str | None = None, count: int = 32) -> go.Figure:
    """The first ``count`` patch PCA components as image tiles (grey = 0)."""
    pca = result.pcas[key or result.models[0].pca_key]
    return tiles_figure(pca.component_images()[:count], f"First {min(count, pca.dim)} patch PCA components "
                        "(largest variance first)", labels=[f"component {i + 1}" for i in range(min(count, pca.dim))])


def filters_figure(model: ModelEnergy, count: int = 64) -> go.Figure:
    """A model's filters as image tiles (after init subtraction when it was applied)."""
    title = f"{model.label}: {model.n_filters} filters at {model.layer}" + (" minus init" if model.init_subtracted
                                                                              else "")
    return tiles_figure(model.filters[:count], title)


def autocorrelation_figure(result: WhiteningResult) -> go.Figure:
    """C(δ)/C(0) against distance for RGB, random init (± sd), ZCA and each model's first layer (trained or not: the
    legend does not call a random init 'learned')."""
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
                                 name=f"first layer: {label}", line=dict(color=color(i))))
    fig.update_layout(title="Spatial autocorrelation of the first-layer responses",
                      xaxis_title="distance δ (pixels)", yaxis_title="C(δ) / C(0)", height=460,
                      margin=dict(l=10, r=10, t=50, b=10))
    return readable(fig)


MAPS_SHOWN = 8
"""Response maps an activation-maps figure shows (the page computes only these): with the input, three rows of
:data:`MAPS_PER_ROW`."""
MAPS_PER_ROW = 3
"""Maps side by side: each about 180 px wide on a 1024-px projector (six to a row were 86×57 px)."""


def activation_maps_figure(image: np.ndarray, maps: np.ndarray, title: str, count: int = MAPS_SHOWN,
                           width: int = ACTIVATION_MAPS_WIDTH) -> go.Figure:
    """The input image and the first ``count`` linear response maps (K, H, W), each on its own symmetric scale
    ±(99th percentile of |y_k|: a few extreme pixels would leave the rest white), in cells shaped like the image
    (square pixels, row 0 at the top) for a figure about ``width`` px wide."""
    count = min(count, len(maps))
    cols = min(count + 1, MAPS_PER_ROW)
    rows = int(np.ceil((count + 1) / cols))
    fig = make_subplots(rows=rows, cols=cols, horizontal_spacing=0.01, vertical_spacing=0.3 / rows,
                        subplot_titles=["input", *[f"filter {k}" for k in range(count)]])
    fig.add_trace(go.Image(z=image), row=1, col=1)
    for k in range(count):
        r, c = divmod(k + 1, cols)
        limit = float(np.percentile(np.abs(maps[k]), 99)) or float(np.abs(maps[k]).max()) or 1.0
        fig.add_trace(go.Heatmap(z=maps[k], colorscale="RdBu_r", zmin=-limit, zmax=limit, showscale=False,
                                 hovertemplate="x %{x}, y %{y}: %{z:.3f}<extra>filter " + str(k) + "</extra>"),
                      row=r + 1, col=c + 1)
    square_pixels(fig)
    cell_height = width / cols * image.shape[0] / image.shape[1]
    fig.update_layout(title=title, height=round(rows * (cell_height + 30) + 70), margin=dict(l=10, r=10, t=60, b=10))
    return readable(fig)
