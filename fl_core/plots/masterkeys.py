"""Figures of master-key clustering (:class:`~fl_core.masterkeys.MasterKeyResult`) and of small filter sets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from fl_core.masterkeys import ClusterSweep, MasterKeyResult, PublishedAssignment
from fl_core.plots import color, tiles_figure

KEY_NAMES = ("1 δy₊T", "2 δx₋T", "3 δy₋T", "4 δx₊T", "5 δxT", "6 δyT", "7 δ−α∇²T", "8 T")
"""Short names of the 8 master keys by their idealized model (master_keys.md B.2)."""


def filter_grid_figure(filters: np.ndarray, titles: Sequence[str], title: str, rows: int = 1,
                       height: int | None = None, shared_scale: bool = False) -> go.Figure:
    """Small k×k filters as heatmaps (red positive, blue negative, white 0), row 0 at the top as stored.

    Each filter has its own symmetric colour scale, or one common scale with ``shared_scale``.
    """
    filters = np.asarray(filters, dtype=float)
    common = float(np.abs(filters).max()) or 1.0
    cols = int(np.ceil(len(filters) / rows))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=list(titles), horizontal_spacing=0.02,
                        vertical_spacing=0.12)
    for i, filt in enumerate(filters):
        bound = common if shared_scale else (float(np.abs(filt).max()) or 1.0)
        fig.add_trace(go.Heatmap(z=filt, zmin=-bound, zmax=bound, zmid=0, colorscale="RdBu_r", showscale=False,
                                 hovertemplate="row %{y}, col %{x}<br>%{z:.4f}<extra>" + titles[i] + "</extra>"),
                      row=i // cols + 1, col=i % cols + 1)
    fig.update_yaxes(autorange="reversed", scaleanchor="x", constrain="domain", showticklabels=False,
                     showgrid=False, zeroline=False)
    fig.update_xaxes(constrain="domain", showticklabels=False, showgrid=False, zeroline=False)
    for axis in range(2, rows * cols + 1):
        fig.layout[f"yaxis{axis}"].scaleanchor = f"x{axis}"
    fig.update_annotations(font_size=11)
    fig.update_layout(title=title, height=height or 60 + 170 * rows, margin=dict(l=10, r=10, t=70, b=10),
                      plot_bgcolor="white")
    return fig


def key_filters_figure(filters: Mapping[int, np.ndarray] | np.ndarray,
                       title: str = "The 8 published master key filters") -> go.Figure:
    """Master key filters titled with their model names: an (8, k, k) array or a mapping key (1..8) -> filter."""
    keyed = filters if isinstance(filters, Mapping) else {i + 1: f for i, f in enumerate(filters)}
    return filter_grid_figure(np.stack(list(keyed.values())), [KEY_NAMES[i - 1] for i in keyed], title)


def centroids_vs_keys_figure(result: MasterKeyResult) -> go.Figure:
    """Top row: the cluster centroids; bottom row: the most similar master key, flipped to the centroid's sign."""
    centroids = np.stack([c.centroid for c in result.clusters])
    matched = np.stack([np.sign(c.master_key_cosine or 1.0) * result.templates[c.master_key - 1]
                        for c in result.clusters])
    titles = [f"cluster {i + 1} ({c.share:.0%})" for i, c in enumerate(result.clusters)]
    titles += [f"key {c.master_key}, cos {c.master_key_cosine:+.2f}" for c in result.clusters]
    return filter_grid_figure(np.concatenate([centroids, matched]), titles,
                              f"{result.label}: {result.k} cluster centroids (top) and the nearest master key "
                              "(bottom)", rows=2)


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
                      margin=dict(l=10, r=10, t=50, b=10), legend=dict(orientation="h", y=-0.15))
    return fig


def assignment_comparison_figure(assignments: Mapping[str, PublishedAssignment]) -> go.Figure:
    """Share of each bank's filters nearest to each master key (grouped bars, one colour per bank; the legend gives
    its median best |cos| to the 8 keys; hover shows counts)."""
    fig = go.Figure()
    for index, (label, assignment) in enumerate(assignments.items()):
        counts = assignment.counts
        fig.add_trace(go.Bar(x=list(KEY_NAMES), y=counts / max(int(counts.sum()), 1), customdata=counts,
                             name=f"{label}: {int(counts.sum()):,} filters, median |cos| "
                                  f"{assignment.median_abs_cosine:.2f}", marker_color=color(index),
                             hovertemplate="%{x}: %{y:.1%} (%{customdata} filters)<extra>" + label + "</extra>"))
    fig.add_hline(y=1 / len(KEY_NAMES), line=dict(color="#999999", dash="dot"), annotation_text="1/8")
    fig.update_layout(barmode="group", title="Which master key the filters are closest to, bank by bank",
                      yaxis_title="share of the bank's filters", yaxis_tickformat=".0%", height=420,
                      margin=dict(l=10, r=10, t=50, b=10), legend=dict(orientation="h", y=-0.15))
    return fig


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
    return fig


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
    return fig


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
                      margin=dict(l=10, r=10, t=50, b=10), legend=dict(orientation="h", y=-0.2))
    return fig


def members_figure(result: MasterKeyResult, cluster: int, count: int = 48) -> go.Figure:
    """Best-fitting members of one cluster (0-based), flipped to the centroid's sign."""
    members = result.members(cluster, count)
    return tiles_figure(members[:, None], f"Cluster {cluster + 1}: {len(members)} of its "
                        f"{result.clusters[cluster].size} filters (best fitting first, sign aligned)",
                        ncols=min(16, max(len(members), 1)), height=300)

