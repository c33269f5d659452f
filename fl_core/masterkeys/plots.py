"""Figures of the master-key family: clustering (:class:`~fl_core.masterkeys.clustering.MasterKeyResult`) and small
filter sets, the idealized scale-space models and their σ fits (:class:`~fl_core.masterkeys.fitting.ScaleSpaceResult`),
swaps and re-scoring (:class:`~fl_core.masterkeys.swap.FilterSwap`, :class:`~fl_core.masterkeys.rescore.RescoreResult`,
:class:`~fl_core.masterkeys.layersweep.LayerSweepResult`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from fl_core.figures import (
    NARROW_FIGURE_PX,
    REFERENCE_COLORS,
    color,
    readable,
    square_pixels,
    tiles_figure,
)

if TYPE_CHECKING:  # annotations only: the re-scoring modules import torch_pruning, hence timm and its progress bars
    from fl_core.masterkeys.assignment import PublishedAssignment
    from fl_core.masterkeys.clustering import MasterKeyResult
    from fl_core.masterkeys.fitting import ScaleSpaceResult
    from fl_core.masterkeys.kmeans import ClusterSweep
    from fl_core.masterkeys.layersweep import LayerSweepResult
    from fl_core.masterkeys.rescore import RescoreResult
    from fl_core.masterkeys.swap import FilterSwap

KEY_NAMES = ("1 δy+ T", "2 δx− T", "3 δy− T", "4 δx+ T", "5 δx T", "6 δy T", "7 (δ − α∇²) T", "8 T")
"""Short names of the 8 master keys by their idealized model (docs/methods.md B.2): half-pixel differences δx±, δy±
(1–4), centred differences δx, δy (5–6), impulse minus α·Laplacian (7) and the discrete Gaussian T itself (8). The
signs sit on the line, not as subscripts, so the names read at the 14-px size of subplot titles."""
GRID_TITLE_PX = 14
COLORBAR_BELOW_PX = 50
GRID_COLUMNS = 4
"""Filter grids put at most this many filters in a row: on a 560-px projector page each is ~130 px (the colour bar
lies below them), so a 15-character title fits above each."""


def filter_grid_figure(filters: np.ndarray, titles: Sequence[str], title: str,
                       columns: int = GRID_COLUMNS) -> go.Figure:
    """Small k×k filters as heatmaps (red positive, blue negative, white 0), row 0 at the top as stored, ``columns``
    to a row with gaps and one colour bar: each filter divided by its own largest |w| (the bar reads w / max |w|).
    Hover shows the stored value."""
    filters = np.asarray(filters, dtype=float)
    columns = min(columns, len(filters))
    rows = int(np.ceil(len(filters) / columns))
    largest = np.abs(filters).reshape(len(filters), -1).max(axis=1)
    bounds = np.where(largest > 0, largest, 1.0)
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=list(titles), horizontal_spacing=0.06,
                        vertical_spacing=0.35 / rows)
    bar = dict(title=dict(text="w / max |w|", side="right"), thickness=10,
               orientation="h", len=0.6, x=0.5, xanchor="center", y=-0.02, yanchor="top")
    for i, filt in enumerate(filters):
        fig.add_trace(go.Heatmap(z=filt / bounds[i], zmin=-1, zmax=1, zmid=0,
                                 customdata=filt, colorscale="RdBu_r", showscale=i == 0, colorbar=bar,
                                 hovertemplate="row %{y}, col %{x}<br>%{customdata:.4f}<extra>" + titles[i]
                                               + "</extra>"),
                      row=i // columns + 1, col=i % columns + 1)
    square_pixels(fig)
    fig.update_annotations(font_size=GRID_TITLE_PX)
    cell = NARROW_FIGURE_PX / columns
    fig.update_layout(title=title, height=round(60 + COLORBAR_BELOW_PX + rows * (cell + 3.5 * GRID_TITLE_PX)),
                      margin=dict(l=10, r=10, t=60, b=10 + COLORBAR_BELOW_PX), plot_bgcolor="white")
    return readable(fig)


def key_filters_figure(filters: Mapping[int, np.ndarray] | np.ndarray,
                       title: str = "The 8 published master key filters") -> go.Figure:
    """Master key filters titled with their model names: an (8, k, k) array or a mapping key (1..8) -> filter."""
    keyed = filters if isinstance(filters, Mapping) else {i + 1: f for i, f in enumerate(filters)}
    return filter_grid_figure(np.stack(list(keyed.values())), [KEY_NAMES[i - 1] for i in keyed], title)


CLOSE_MATCH = 0.7
"""|cos| from which a centroid is written as "≈ key k": below, its key is only the nearest of the 8 (a cosine near 0
is no likeness)."""


def match_title(key: int, cosine: float | None) -> str:
    """How a centroid's nearest key is named: "≈ key 4 (+0.93)" for a close match, "nearest: key 4 (−0.11)" else."""
    cosine = cosine or 0.0
    return f"{'≈' if abs(cosine) >= CLOSE_MATCH else 'nearest:'} key {key} ({cosine:+.2f})"


def centroids_vs_keys_figure(result: MasterKeyResult) -> go.Figure:
    """Each cluster centroid (largest cluster first) beside the most similar master key, flipped to the centroid's
    sign, with their cosine (:func:`match_title`: "≈" only for a close match): two pairs to a row."""
    pairs, titles = [], []
    for i, c in enumerate(result.clusters):
        pairs += [c.centroid, np.sign(c.master_key_cosine or 1.0) * result.templates[c.master_key - 1]]
        titles += [f"cluster {i + 1} ({c.share:.0%})", match_title(c.master_key, c.master_key_cosine)]
    return filter_grid_figure(np.stack(pairs), titles, f"{result.label}: each of the {result.k} cluster centroids "
                              "beside its nearest master key")


def stage_counts_figure(assignment: PublishedAssignment) -> go.Figure:
    """Share of each stage's filters assigned to each master key (stacked bars; hover shows counts)."""
    counts = assignment.counts_per_stage
    shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    fig = go.Figure()
    for key in range(counts.shape[1]):
        fig.add_trace(go.Bar(x=list(assignment.stages), y=shares[:, key], name=KEY_NAMES[key],
                             marker_color=color(key), customdata=counts[:, key],
                             hovertemplate="%{x}<br>%{y:.1%} (%{customdata} filters)<extra>" + KEY_NAMES[key]
                             + "</extra>"))
    fig.update_layout(barmode="stack", title="Which master key the filters of each stage are closest to",
                      yaxis_title="share of the stage's filters", yaxis_tickformat=".0%", height=420,
                      margin=dict(l=10, r=10, t=50, b=10))
    return readable(fig)


def assignment_comparison_figure(assignments: Mapping[str, PublishedAssignment]) -> go.Figure:
    """Share of each bank's filters nearest to each master key (grouped bars, one colour per bank, the same for a
    bank whatever the order or the other banks' order: by its label's rank; the legend gives its median best |cos|
    to the 8 keys; hover shows counts)."""
    colors = {label: color(i) for i, label in enumerate(sorted(assignments))}  # by bank, whatever the order
    fig = go.Figure()
    for label, assignment in assignments.items():
        counts = assignment.counts
        fig.add_trace(go.Bar(x=list(KEY_NAMES), y=counts / max(int(counts.sum()), 1), customdata=counts,
                             name=f"{label}: {int(counts.sum()):,} filters, median |cos| "
                                  f"{assignment.median_abs_cosine:.2f}", marker_color=colors[label],
                             hovertemplate="%{x}: %{y:.1%} (%{customdata} filters)<extra>" + label + "</extra>"))
    fig.add_hline(y=1 / len(KEY_NAMES), line=dict(color="#999999", dash="dot"), annotation_text="1/8")
    fig.update_layout(barmode="group", title="Which master key the filters are closest to, bank by bank",
                      yaxis_title="share of the bank's filters", yaxis_tickformat=".0%", height=420,
                      margin=dict(l=10, r=10, t=50, b=10))
    return readable(fig)


def layer_counts_figure(assignment: PublishedAssignment) -> go.Figure:
    """Heatmap of the share of each layer's filters per master key (layers in forward order, top to bottom)."""
    counts = assignment.counts_per_layer
    shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    fig = go.Figure(go.Heatmap(z=shares, x=list(KEY_NAMES), y=list(assignment.layers), colorscale="Blues",
                               zmin=0, customdata=counts, colorbar=dict(title="share", tickformat=".0%"),
                               hovertemplate="%{y}<br>%{x}: %{z:.1%} (%{customdata})<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title="Master key shares per layer", height=max(300, 120 + 22 * len(assignment.layers)),
                      margin=dict(l=10, r=10, t=50, b=10))
    return readable(fig)


def composition_figure(result: MasterKeyResult) -> go.Figure:
    """Clusters (rows) against master keys (columns): how many members of each cluster each key claims."""
    composition = np.stack([c.composition for c in result.clusters])
    labels = [f"cluster {i + 1}" for i in range(len(result.clusters))]
    fig = go.Figure(go.Heatmap(z=composition, x=list(KEY_NAMES), y=labels, colorscale="Greens",
                               text=composition, texttemplate="%{text}",
                               hovertemplate="%{y} × %{x}: %{z} filters<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title="Cluster members by nearest master key", height=120 + 40 * len(labels),
                      margin=dict(l=10, r=10, t=50, b=10))
    return readable(fig)


def sweep_figure(sweep: ClusterSweep, chosen_k: int | None = None) -> go.Figure:
    """Elbow (mean |cos| to the centroid) and silhouette against the number of clusters."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=sweep.ks, y=sweep.mean_abs_cosine, mode="lines+markers", name="mean |cos| (elbow)",
                             line=dict(color=color(0))), secondary_y=False)
    fig.add_trace(go.Scatter(x=sweep.ks, y=sweep.silhouette, mode="lines+markers", name="silhouette",
                             line=dict(color=color(1), dash="dash")), secondary_y=True)
    if chosen_k is not None:
        fig.add_vline(x=chosen_k, line=dict(color="#999999", dash="dot"), annotation_text=f"k = {chosen_k}")
    fig.update_xaxes(title="number of clusters k", dtick=1)
    fig.update_yaxes(title="mean |cos| to centroid", secondary_y=False)
    fig.update_yaxes(title=f"silhouette ({sweep.sample_size} filters)", secondary_y=True)
    fig.update_layout(title="Choosing k: where the curve bends and the silhouette peaks", height=380,
                      margin=dict(l=10, r=10, t=50, b=10))
    return readable(fig)


def members_figure(result: MasterKeyResult, cluster: int = 1, count: int = 48) -> go.Figure:
    """Best-fitting members of one cluster (numbered from 1, largest first, as in ``result.to_frame()``), flipped to
    the centroid's sign."""
    members = result.members(cluster, count)
    return tiles_figure(members[:, None], f"Cluster {cluster}: {len(members)} of its "
                        f"{result.clusters[result.cluster_label(cluster)].size} filters (best fitting first, sign "
                        "aligned)",
                        labels=[f"member {i + 1}" for i in range(len(members))])


def models_figure(models: np.ndarray, result: ScaleSpaceResult) -> go.Figure:
    """The 8 idealized models (rows top to bottom, y up) at the σ of one fitting method."""
    titles = [f"{KEY_NAMES[fit.index - 1]}<br>" + (f"σ={fit.sigma_x:.2f}, α={fit.alpha:.2f}" if fit.alpha is not None
                                                   else f"σ=({fit.sigma_x:.2f}, {fit.sigma_y:.2f})")
              for fit in result.filters]
    size = models.shape[-1]
    return filter_grid_figure(models, titles, f"Idealized models, method {result.method}, {size}×{size}")


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
                      yaxis_title="σ (pixels)", height=440, margin=dict(l=10, r=10, t=50, b=10))
    return readable(fig)


def model_vs_learned_figure(learned: np.ndarray, model: np.ndarray, title: str) -> go.Figure:
    """The normalised learned filter, the model and their difference, each on its own colour scale with its largest
    |value| in its title: on one scale a model far flatter than the learned filter (peak 0.17 beside 0.95) was a blank
    panel. The cross-sections (:func:`cross_section_figure`) compare the heights."""
    panels = np.stack([learned, model, learned - model])
    peaks = np.abs(panels).reshape(len(panels), -1).max(axis=1)
    names = ("learned (normalised)", "model", "learned − model")
    return filter_grid_figure(panels, [f"{name}<br>largest |value| {peak:.2f}" for name, peak in zip(names, peaks)],
                              title, columns=3)


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
                      yaxis_title="value (normalised)", height=340, margin=dict(l=10, r=10, t=50, b=10))
    return readable(fig)


def _percent_labels(values, digits: int = 1) -> list[str]:
    return ["" if v is None or v != v else f"{v:.{digits}%}" for v in values]


def scores_figure(result: RescoreResult) -> go.Figure:
    """Top-1 and top-5 of the original and every swap (on the images of the model's classes, their count in the title
    when other images were left out), else top-1 agreement with the original; after recovery, each swap's recovered
    top-1 (agreement) beside it."""
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
        scored = result.n_labelled if result.n_labelled is not None else result.n_images
        share = f"{scored} of {result.n_images}" if scored != result.n_images else f"{scored}"
        title, axis = f"Accuracy on {share}{held_out} images, original vs swapped filters", "accuracy"
    else:
        fig.add_trace(go.Bar(x=frame["method"], y=frame["agreement"], name="agreement", marker_color=color(0),
                             text=_percent_labels(frame["agreement"], 0), textposition="outside"))
        if result.recovery is not None:
            fig.add_trace(go.Bar(x=frame["method"], y=frame["recovered_agreement"], name="agreement after recovery",
                                 marker_color=color(4), text=_percent_labels(frame["recovered_agreement"], 0),
                                 textposition="outside"))
        title, axis = (f"Same top-1 class as the original model ({result.n_images}{held_out} images, scored without "
                       "labels)", "top-1 agreement")
    fig.update_layout(title=title, yaxis_title=axis, yaxis_tickformat=".0%", yaxis_range=[0, 1.08], barmode="group",
                      height=420, margin=dict(l=10, r=10, t=50, b=10))
    return readable(fig)


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
                      yaxis_title="relative error ‖W − Ŵ‖ / ‖W‖", height=400, margin=dict(l=10, r=10, t=50, b=10))
    return readable(fig)


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
        f"same top-1 class as the original ({sweep.n_images} images, scored without labels)"
    fig.update_layout(title=f"One depthwise layer at a time: {what}", yaxis_title="top-1" if labelled else
                      "top-1 agreement", yaxis_tickformat=".0%", yaxis_range=[0, 1.05], barmode="group", height=440,
                      margin=dict(l=10, r=10, t=50, b=10))
    return readable(fig)
